"""One Slurm allocation per pytest session: reused from salloc/sbatch, or made and released by us.

``salloc --no-shell`` grants the nodes and returns; every probe is then an ``srun --jobid`` step in
that allocation, so a 500-node run queues once. We cancel only what we created, and we cancel it on
every way out: session end, Ctrl-C, SIGTERM, and (backstop) interpreter exit.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable
from dataclasses import dataclass

from gpuaccept.dispatch.preflight import Plan, describe_partition
from gpuaccept.dispatch.salloc import cancel_job, request_allocation, to_stderr
from gpuaccept.dispatch.slurm_cli import SlurmError, expand_hostlist, slurm_cmd
from gpuaccept.settings import Settings

__all__ = ["Allocation", "acquire", "reuse", "salloc_argv"]


@dataclass
class Allocation:
    """A job id, its nodes, and whether this session owns (and must cancel) it."""

    job_id: str
    nodes: list[str]
    owned: bool
    released: bool = False

    def release(self) -> None:
        """``scancel`` the allocation if we made it; idempotent. A failed cancel is said, not swallowed:
        the nodes stay held until the time limit unless the operator cancels by hand."""
        if self.released or not self.owned:
            self.released = True
            return
        self.released = True
        problem = cancel_job(self.job_id, wait_s=0)
        if problem:
            to_stderr(f"gpuaccept: releasing the allocation: {problem}")


def salloc_argv(settings: Settings, nodes: int, gpus_per_node: int, nodelist: tuple[str, ...]) -> list[str]:
    """The salloc command for this session (also what a dry run prints)."""
    argv = ["salloc", "--no-shell", "--job-name=gpuaccept", f"--nodes={nodes}", f"--time={settings.time_limit}"]
    if settings.partition:
        argv.append(f"--partition={settings.partition}")
    if nodelist:
        argv.append(f"--nodelist={','.join(nodelist)}")
    if settings.exclude:
        argv.append(f"--exclude={','.join(settings.exclude)}")
    for flag, value in (
        ("--account", settings.account),
        ("--qos", settings.qos),
        ("--reservation", settings.reservation),
    ):
        if value:
            argv.append(f"{flag}={value}")
    if gpus_per_node:
        argv.append(f"--gres=gpu:{gpus_per_node}")
    # --no-kill: a node that fails is taken out of the allocation instead of ending it, so the other
    # nodes' tests go on (without it Slurm expires the whole job and every node's later steps fail).
    argv += ["--exclusive", "--no-kill"]
    return argv


def reuse(settings: Settings) -> Allocation:
    """The allocation we run inside (``$SLURM_JOB_ID`` from salloc/sbatch), narrowed by nodelist/exclude."""
    job = os.environ["SLURM_JOB_ID"]
    hostlist = os.environ.get("SLURM_JOB_NODELIST") or slurm_cmd(["squeue", "-h", "-j", job, "-o", "%N"]).strip()
    names = expand_hostlist(hostlist)
    if settings.nodelist:
        names = [n for n in names if n in settings.nodelist]
    names = [n for n in names if n not in settings.exclude]
    return Allocation(job, names, owned=False)


def _source(settings: Settings, name: str) -> str:
    source = settings.sources.get(name, "default")
    return f"--{name.replace('_', '-')} default" if source == "default" else source


def acquire(settings: Settings, plan: Plan, notify: Callable[[str], None] = to_stderr) -> Allocation:
    """Make the session's allocation as ``plan`` says; ``SlurmUnusable`` if Slurm does not grant it."""
    argv = salloc_argv(settings, plan.count, plan.gpus_per_node, plan.nodelist)
    job_id = request_allocation(
        argv,
        settings.alloc_wait,
        what=f"{plan.count} node(s) of partition {plan.partition}",
        wait_source=_source(settings, "alloc_wait"),
        notify=notify,
        describe_nodes=lambda: describe_partition(plan.partition),
    )
    allocation = Allocation(job_id, [], owned=True)
    atexit.register(allocation.release)
    try:
        hostlist = slurm_cmd(["squeue", "-h", "-j", job_id, "-o", "%N"]).strip()
        allocation.nodes = expand_hostlist(hostlist)
    except SlurmError:
        allocation.release()
        raise
    return allocation
