"""Slurm's own checks, judged like every other area's: the tests (``tests/acceptance/test_slurm.py``) ask
the scheduler or run the ``visibility`` probe and hand what they got here; this module records the
checks on the test's judge and returns.

* ``judge_controller``: ``scontrol ping`` says the primary slurmctld is UP;
* ``judge_partition``, ``judge_node_state``: the partition is up, the node usable (not drained or down);
* ``judge_step``: a step lands on the node it was sent to and may run on every CPU it was granted
  (``judge_cpus_granted``, the one home of ``usable_cpus_granted``: the fingerprint's task is judged by it
  too, ``verdicts.environment``);
* ``judge_gpu_isolation``: one task per GPU, each sees exactly its GPU, the sets are disjoint and cover
  the node, no task opens another's GPU, the tasks' CPU sets do not overlap.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.contracts.node import VisibilityPayload

__all__ = [
    "GRANTED",
    "ISOLATION_METRICS",
    "cpus_granted_observed",
    "judge_controller",
    "judge_cpus_granted",
    "judge_gpu_isolation",
    "judge_node_state",
    "judge_partition",
    "judge_step",
]

#: what ``judge_gpu_isolation`` judges against limits (``test_gpu_isolation``'s judges mark)
ISOLATION_METRICS = ("gpu_foreign_devices_openable", "task_cpu_overlap_pairs")
_PRIMARY = "Slurmctld(primary) at "
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


def judge_controller(ping: str, judge: JudgeLike) -> None:
    """``scontrol ping``'s answer: the primary controller (named when the answer names it) is UP."""
    controller = ping.split(_PRIMARY)[-1].split()[0] if _PRIMARY in ping else "slurmctld"
    judge.expect("slurm_controller_ping", "UP" if "UP" in ping else ping.strip(), "UP", node=controller)


def judge_partition(name: str, available: str, judge: JudgeLike) -> None:
    """The partition's ``Avail`` state is ``up``."""
    judge.expect("slurm_partition_state", available, "up", node=name, partition=name)


def judge_node_state(node: str, usable: bool, state: str, reason: str | None, judge: JudgeLike) -> None:
    """The node takes jobs; else its state and Slurm's reason are the observed value."""
    observed = "usable" if usable else f"{state}" + (f" (reason: {reason})" if reason else "")
    judge.expect("slurm_node_state", observed, "usable", node=node, state=state)


def judge_step(ran_on: str, data: VisibilityPayload, judge: JudgeLike, node: str) -> None:
    """The step's task ran on ``node`` (``ran_on``: where its record came from) and may run on every CPU the
    allocation granted it."""
    judge.expect("slurm_step_node", ran_on, node, node=node)
    if data["granted_cpus"] is not None:  # under Slurm: the mask against the grant, with the binding
        judge_cpus_granted(
            judge, node, len(data["cpus"]), data["granted_cpus"], data["host_cpus"], cpu_bind=data["slurm_cpu_bind"]
        )


def judge_gpu_isolation(
    tasks: Mapping[int, VisibilityPayload], node_uuids: Iterable[str], judge: JudgeLike, node: str
) -> None:
    """One ``visibility`` task per declared GPU (``tasks``, by rank) against the GPUs the node's fingerprint
    lists (``node_uuids``)."""
    node_uuids = set(node_uuids)
    holders: dict[str, list[int]] = {}
    for rank, task in tasks.items():
        for uuid in task["visible_uuids"]:
            holders.setdefault(uuid, []).append(rank)
    for rank, task in tasks.items():
        where: dict[str, Any] = {"node": node, "rank": rank}
        uuids = task["visible_uuids"]
        judge.expect("gpu_task_visible_gpus", len(uuids), 1, **where, cuda_visible_devices=task["cuda_visible_devices"])
        others = sorted({r for uuid in uuids for r in holders[uuid] if r != rank})
        judge.expect("gpu_task_shares_gpu", ", ".join(f"rank {r}" for r in others) or "none", "none", **where)
        foreign = sorted(set(task["devices_openable"]) - set(task["own_minors"]))
        judge.check("gpu_foreign_devices_openable", len(foreign), **where, foreign=[f"/dev/nvidia{m}" for m in foreign])
    judge.expect(
        "gpu_unassigned", len(node_uuids - set(holders)), 0, node=node, missing=sorted(node_uuids - set(holders))
    )
    cpus = {rank: set(task["cpus"]) for rank, task in tasks.items()}
    overlapping = [(a, b) for a, b in itertools.combinations(sorted(cpus), 2) if cpus[a] & cpus[b]]
    judge.check(
        "task_cpu_overlap_pairs",
        len(overlapping),
        node=node,
        pairs=[f"ranks {a}+{b}" for a, b in overlapping],
        binding={rank: f"{min(c)}-{max(c)} ({len(c)} cpus)" if c else "none" for rank, c in cpus.items()},
        cpu_bind=next(iter(tasks.values()))["slurm_cpu_bind"] if tasks else None,
    )
