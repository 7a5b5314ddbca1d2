"""How many CPUs Slurm granted this task, from the step's environment (no Slurm: None).

The number a task's affinity mask is judged against: a mask of at least one CPU holds for any running
process, so "usable CPUs >= 1" cannot fail; "usable CPUs >= the CPUs the allocation granted this task"
can (a cgroup or binding that confines a task with ``--cpus-per-task=8`` to one core). Slurm's
srun(1) OUTPUT ENVIRONMENT VARIABLES: ``SLURM_CPUS_PER_TASK`` (when the step asked for it),
``SLURM_CPUS_ON_NODE`` (CPUs allocated on this node), ``SLURM_STEP_TASKS_PER_NODE`` (tasks of the
step per node, ``2(x3),1``) and ``SLURM_NODEID`` (this node's index in the step).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = ["granted_cpus", "tasks_on_node"]

_REPEAT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def tasks_on_node(spec: str, node_index: int) -> int | None:
    """``SLURM_STEP_TASKS_PER_NODE`` (``2(x3),1``) -> the task count of node ``node_index``."""
    counts: list[int] = []
    for part in spec.split(","):
        match = _REPEAT.match(part.strip())
        if match is None:
            return None
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts[node_index] if 0 <= node_index < len(counts) else None


def granted_cpus(env: Mapping[str, str] | None = None) -> int | None:
    """CPUs this task was granted: ``--cpus-per-task`` if given, else the node's allocated CPUs shared
    by the step's tasks on it; None outside a Slurm step or when the variables do not say."""
    env = os.environ if env is None else env
    if "SLURM_JOB_ID" not in env:
        return None
    try:
        if env.get("SLURM_CPUS_PER_TASK"):
            return int(env["SLURM_CPUS_PER_TASK"])
        on_node = int(env["SLURM_CPUS_ON_NODE"])
        tasks = tasks_on_node(env.get("SLURM_STEP_TASKS_PER_NODE", "1"), int(env.get("SLURM_NODEID", "0")))
    except (KeyError, ValueError):
        return None
    return max(1, on_node // tasks) if tasks else None
