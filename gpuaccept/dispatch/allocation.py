"""One Slurm allocation per pytest session: reused from salloc/sbatch, or made and released by us.

``salloc --no-shell`` grants the nodes and returns; every probe is then an ``srun --jobid`` step in
that allocation, so a 500-node run queues once. We cancel only what we created, and we cancel it on
every way out: session end, Ctrl-C, SIGTERM, and (backstop) interpreter exit.
"""

from __future__ import annotations

import atexit
import os
import re
import subprocess
from dataclasses import dataclass

from gpuaccept.dispatch.slurm_cli import SlurmError, expand_hostlist, slurm_cmd
from gpuaccept.settings import Settings

__all__ = ["Allocation", "acquire", "salloc_argv"]

_GRANTED = re.compile(r"(?:Granted job allocation|Pending job allocation|job allocation)\s+(\d+)")


@dataclass
class Allocation:
    """A job id, its nodes, and whether this session owns (and must cancel) it."""

    job_id: str
    nodes: list[str]
    owned: bool
    released: bool = False

    def release(self) -> None:
        """``scancel`` the allocation if we made it; idempotent."""
        if self.released or not self.owned:
            self.released = True
            return
        self.released = True
        try:
            slurm_cmd(["scancel", self.job_id], timeout_s=30)
        except SlurmError:
            pass


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
    argv.append("--exclusive")
    return argv


def acquire(settings: Settings, nodes: int, gpus_per_node: int, nodelist: tuple[str, ...], wait_s: float) -> Allocation:
    """Reuse ``$SLURM_JOB_ID`` or make a new allocation; raise ``SlurmError`` if none is granted."""
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        hostlist = os.environ.get("SLURM_JOB_NODELIST") or slurm_cmd(["squeue", "-h", "-j", job, "-o", "%N"]).strip()
        names = expand_hostlist(hostlist)
        if settings.nodelist:
            names = [n for n in names if n in settings.nodelist]
        names = [n for n in names if n not in settings.exclude]
        return Allocation(job, names, owned=False)
    argv = salloc_argv(settings, nodes, gpus_per_node, nodelist)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=wait_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        text = (exc.stderr or b"").decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        match = _GRANTED.search(text)
        if match:
            subprocess.run(["scancel", match.group(1)], capture_output=True, check=False)
        raise SlurmError(f"{' '.join(argv)}: not granted within {wait_s:g} s") from None
    match = _GRANTED.search(done.stderr + done.stdout)
    if done.returncode != 0 or not match:
        raise SlurmError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    job_id = match.group(1)
    allocation = Allocation(job_id, [], owned=True)
    atexit.register(allocation.release)
    try:
        hostlist = slurm_cmd(["squeue", "-h", "-j", job_id, "-o", "%N"]).strip()
        allocation.nodes = expand_hostlist(hostlist)
    except SlurmError:
        allocation.release()
        raise
    return allocation
