"""Judge a task's CPU mask against the CPUs Slurm granted it (``gpuaccept.probes._cpus``)."""

from __future__ import annotations

__all__ = ["GRANTED", "cpus_granted_observed"]

#: what the expectation ``usable_cpus_granted`` expects
GRANTED = "all granted"


def cpus_granted_observed(usable: int, granted: int) -> str:
    """``all granted`` when the task may run on at least the CPUs it was granted, else how many.

    A mask wider than the grant passes: without task binding (``TaskPlugin=task/none``) a task sees
    every CPU of the host; tasks sharing CPUs are ``task_cpu_overlap_pairs``' business.
    """
    return GRANTED if usable >= granted else f"{usable} of {granted} granted CPUs usable"
