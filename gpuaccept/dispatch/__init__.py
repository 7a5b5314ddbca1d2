"""Dispatch: how probes reach nodes (Slurm steps in one allocation, or local subprocesses)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from gpuaccept.dispatch.allocation import Allocation, acquire, reuse
from gpuaccept.dispatch.container import ContainerUnusable, from_settings
from gpuaccept.dispatch.local import LocalLauncher
from gpuaccept.dispatch.preflight import SlurmUnusable, plan_allocation
from gpuaccept.dispatch.salloc import to_stderr
from gpuaccept.dispatch.slurm import SlurmLauncher
from gpuaccept.dispatch.slurm_cli import slurm_client_installed
from gpuaccept.dispatch.step import Launcher
from gpuaccept.settings import Settings

__all__ = ["SlurmUnusable", "choose_launcher", "make_launcher"]


def choose_launcher(settings: Settings) -> str:
    """``auto`` -> local only when no Slurm client is installed at all; otherwise slurm.

    A Slurm that is installed but failing (controller down, mistyped partition) must stop the run
    with Slurm's message, never quietly test the login host instead: that is ``make_launcher``'s
    preflight, which runs for every Slurm session that does not already sit inside an allocation.
    """
    if settings.launcher != "auto":
        return settings.launcher
    if os.environ.get("SLURM_JOB_ID") or slurm_client_installed():
        return "slurm"
    return "local"


def make_launcher(
    settings: Settings,
    kind: str,
    *,
    job: tuple[str, list[str]] | None = None,
    notify: Callable[[str], None] = to_stderr,
) -> Launcher:
    """Build the launcher; for Slurm, acquire (or, in a dry run, only describe) the allocation.

    ``job`` hands an xdist worker the controller's allocation (job id, nodes) so workers never
    allocate on their own. ``notify`` shows progress (the pending reason) on the terminal.
    Raises ``SlurmUnusable`` (a usage error) when Slurm cannot give the session its nodes.
    """
    if kind == "local":
        return LocalLauncher(gpus_per_node=settings.gpus_per_node)
    if job is not None:  # the controller checked and started the container already
        return SlurmLauncher(Allocation(job[0], job[1], owned=False), **_slurm_options(settings))
    options = _slurm_options(settings)  # a bad image or mount is refused before anything is allocated
    if os.environ.get("SLURM_JOB_ID"):
        return _started(SlurmLauncher(reuse(settings), **options), notify)
    try:
        plan = plan_allocation(settings)
    except SlurmUnusable as exc:
        if settings.launcher == "auto":
            found = ", ".join(slurm_client_installed())
            raise SlurmUnusable(
                f"{exc} [--launcher auto uses Slurm because its commands are installed here ({found}); "
                "--launcher local tests this machine alone]"
            ) from None
        raise
    if settings.dry_run:
        allocation = Allocation("$SLURM_JOB_ID", list(plan.candidates[: plan.count]), owned=False)
    else:
        allocation = acquire(settings, plan, notify)
    return _started(SlurmLauncher(allocation, **options), notify)


def _started(launcher: SlurmLauncher, notify: Callable[[str], None]) -> SlurmLauncher:
    """The launcher once its container (if any) starts on every node; else its allocation is released."""
    try:
        launcher.start_container(notify)
    except ContainerUnusable:
        launcher.close()
        raise
    return launcher


def _slurm_options(settings: Settings) -> dict[str, Any]:
    return {
        "srun_args": settings.srun_arg,
        "gpus_per_node": settings.gpus_per_node,
        "container": from_settings(settings),
        "timeout_rule": settings.probe_timeout,  # the container's start steps too, as every probe's
    }
