"""Node hygiene and the state a job inherits, its one home: /dev/shm (its size and what earlier jobs left
in it), the open-file and locked-memory limits a job step sees, and a wall clock that agrees with the login
host's. The acceptance tests (``test_hygiene``, ``test_node_state``) and the node check (``nodecheck.gate``:
the limits, and the free space in /dev/shm on a node no other job runs on) call the same judges here.

A node whose clock is off breaks time-checked credentials (MUNGE, Kerberos) and every cross-node log
timeline. The node reads its clock (``clock_unix_s``) once inside a step that the login host brackets
with its own clock, read ``before`` and ``after``: if both clocks agree, the node's reading lies in that
window, so the distance from the reading to the window is a lower bound on the offset that step start-up
time cannot inflate. A slow ``srun`` never makes a healthy node look skewed (no false failure), and a node
off by more than the window's width is always seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.contracts.node import HygienePayload

__all__ = [
    "HYGIENE_METRICS",
    "LIMITS",
    "judge_dev_shm_free",
    "judge_hygiene",
    "judge_limits",
    "judge_node_clocks",
    "offset_lower_bound_s",
]

#: the job-step limits judged against the node's SKU, here and by the node check
LIMITS: tuple[Literal["dev_shm_gib", "nofile", "memlock_kib"], ...] = ("dev_shm_gib", "nofile", "memlock_kib")
#: what ``judge_hygiene`` judges: its test's ``@pytest.mark.judges``
HYGIENE_METRICS = LIMITS


def judge_limits(data: HygienePayload, judge: JudgeLike, node: str) -> None:
    """/dev/shm size, open files and locked memory as a job step sees them."""
    for metric in LIMITS:
        judge.check(metric, data[metric], node=node)


def judge_hygiene(data: HygienePayload, judge: JudgeLike, node: str) -> None:
    """The limits; swap and huge pages shown."""
    judge_limits(data, judge, node)
    judge.info("swap_total_gib", data["swap_total_gib"], node=node)
    judge.info("hugepages_total", data["hugepages_total"], node=node, page_kib=data["hugepage_size_kib"])


def judge_dev_shm_free(data: HygienePayload, judge: JudgeLike, node: str) -> None:
    """Free space in /dev/shm, not only its size: NCCL's shared-memory transport and DataLoader workers
    fail on a node whose /dev/shm earlier jobs filled."""
    judge.check("dev_shm_free_gib", data["dev_shm_free_gib"], node=node)


def offset_lower_bound_s(node_clock: float, before: float, after: float) -> float:
    """The least the node's clock can be off: 0 inside ``[before, after]``, else the distance to it."""
    if node_clock < before:
        return round(before - node_clock, 3)
    if node_clock > after:
        return round(node_clock - after, 3)
    return 0.0


def judge_node_clocks(readings: Mapping[str, float], before: float, after: float, judge: JudgeLike) -> None:
    """Every node's clock reading (``clock_unix_s``, read in one step on all nodes) against the login host's
    window ``[before, after]`` around that step, each node judged and named alone."""
    for node, reading in readings.items():
        judge.check(
            "node_clock_offset_s",
            offset_lower_bound_s(reading, before, after),
            node=node,
            node_clock=round(reading, 3),
            window=[round(before, 3), round(after, 3)],
        )
