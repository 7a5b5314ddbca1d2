"""Judge a task's CPU mask against the CPUs Slurm granted it (``gpuaccept.probes._cpus``): the one home
of ``usable_cpus_granted``, judged on the fingerprint (``hardware.environment``) and on a Slurm step
(``verdicts.slurm``)."""

from __future__ import annotations

from typing import Any

from gpuaccept.contracts.judge import JudgeLike

__all__ = ["GRANTED", "cpus_granted_observed", "judge_cpus_granted"]

#: what the expectation ``usable_cpus_granted`` expects
GRANTED = "all granted"


def cpus_granted_observed(usable: int, granted: int, host_cpus: int | None = None) -> str:
    """``all granted`` when the task may run on at least the CPUs it was granted, else how many.

    A mask wider than the grant passes: without task binding (``TaskPlugin=task/none``) a task sees
    every CPU of the host; tasks sharing CPUs are ``task_cpu_overlap_pairs``' business. The grant is
    counted up to the CPUs the host has (``host_cpus``): slurmd refuses a node that declares more
    unless told to trust slurm.conf (``SlurmdParameters=config_overrides``, as the loopback cluster's
    nodes sharing one host do), and that is the node's declaration, not its tasks' masks.
    """
    due = min(granted, host_cpus) if host_cpus else granted
    return GRANTED if usable >= due else f"{usable} of {due} granted CPUs usable"


def judge_cpus_granted(
    judge: JudgeLike, node: str, usable: int, granted: int | None, host: int | None, **extra: Any
) -> None:
    """``usable_cpus_granted`` for one task; nothing outside Slurm (``granted`` None), where ">= 1 CPU"
    would hold for any process."""
    if granted is None:
        return
    observed = cpus_granted_observed(usable, granted, host)
    judge.expect(
        "usable_cpus_granted",
        observed,
        GRANTED,
        node=node,
        usable_cpus=usable,
        granted_cpus=granted,
        host_cpus=host,
        **extra,
    )
