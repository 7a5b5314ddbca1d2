"""Dispatch: how probes reach nodes (Slurm steps in one allocation, or local subprocesses)."""

from __future__ import annotations

import os
from typing import Any

from gpuaccept.dispatch.allocation import Allocation, acquire
from gpuaccept.dispatch.local import LocalLauncher
from gpuaccept.dispatch.slurm import SlurmLauncher
from gpuaccept.dispatch.slurm_cli import SlurmError, gres_gpus, partition_info, slurm_available, slurm_cmd
from gpuaccept.dispatch.step import Launcher, Step
from gpuaccept.settings import Settings

__all__ = ["Launcher", "LocalLauncher", "SlurmLauncher", "Step", "choose_launcher", "make_launcher"]


def choose_launcher(settings: Settings) -> str:
    """``auto`` -> slurm inside an allocation or when the partition answers; else local."""
    if settings.launcher != "auto":
        return settings.launcher
    if os.environ.get("SLURM_JOB_ID"):
        return "slurm"
    if not slurm_available():
        return "local"
    try:
        partition_info(settings.partition)
    except SlurmError:
        return "local"
    return "slurm"


def _candidate_nodes(settings: Settings) -> tuple[list[str], int]:
    """Nodes the session may use and how many it needs; ``--nodes all`` = every idle one."""
    part = settings.partition
    if settings.nodelist:
        names = list(settings.nodelist)
    else:
        argv = ["sinfo", "-h", "-N", "-o", "%N"]
        if settings.nodes == "all":
            argv += ["-t", "idle"]
        if part:
            argv += ["-p", part]
        names = list(dict.fromkeys(slurm_cmd(argv).split()))
    names = [n for n in names if n not in settings.exclude]
    wanted = len(names) if settings.nodes == "all" or settings.nodelist else int(settings.nodes)
    if wanted > len(names) or not names:
        raise SlurmError(
            f"{wanted} node(s) wanted ({settings.sources.get('nodes', 'default')}) but partition "
            f"{part or '(default)'} offers {len(names)}: {', '.join(names) or 'none'}"
        )
    return names, wanted


def _partition_gpus(settings: Settings) -> int:
    if settings.gpus_per_node is not None:
        return settings.gpus_per_node
    argv = ["sinfo", "-h", "-N", "-o", "%G"] + (["-p", settings.partition] if settings.partition else [])
    counts = [gres_gpus(g) for g in slurm_cmd(argv).split()]
    nonzero = [c for c in counts if c]
    return min(nonzero) if nonzero else 0


def make_launcher(settings: Settings, kind: str, *, job: tuple[str, list[str]] | None = None) -> Launcher:
    """Build the launcher; for Slurm, acquire (or, in a dry run, only describe) the allocation.

    ``job`` hands an xdist worker the controller's allocation (job id, nodes) so workers never
    allocate on their own.
    """
    if kind == "local":
        return LocalLauncher(gpus_per_node=settings.gpus_per_node)
    if job is not None:
        return SlurmLauncher(
            Allocation(job[0], job[1], owned=False), srun_args=settings.srun_arg, gpus_per_node=settings.gpus_per_node
        )
    if settings.dry_run and not os.environ.get("SLURM_JOB_ID"):
        names, wanted = _candidate_nodes(settings)
        allocation = Allocation("$SLURM_JOB_ID", names[:wanted], owned=False)
    else:
        gpus = 0 if os.environ.get("SLURM_JOB_ID") else _partition_gpus(settings)
        nodelist = settings.nodelist
        count: int
        if settings.nodes == "all":
            names, count = _candidate_nodes(settings)
            nodelist = tuple(names)
        else:
            count = len(nodelist) if nodelist else int(settings.nodes)
        wait_s = float(os.environ.get("GPUACCEPT_ALLOC_WAIT", "600"))
        allocation = acquire(settings, count, gpus, nodelist, wait_s)
    return SlurmLauncher(allocation, **_slurm_options(settings))


def _slurm_options(settings: Settings) -> dict[str, Any]:
    return {
        "srun_args": settings.srun_arg,
        "gpus_per_node": settings.gpus_per_node,
        "container_image": settings.container_image,
        "container_mounts": settings.container_mounts,
    }
