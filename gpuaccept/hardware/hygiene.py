"""Node hygiene: judge the ``hygiene`` probe's /dev/shm and ulimits, for the acceptance test and the node
check alike (``nodecheck.verdicts`` judges ``LIMITS`` and, on a node no other job runs on, the free
space in /dev/shm)."""

from __future__ import annotations

from typing import Any

from gpuaccept.contracts.judge import JudgeLike

__all__ = ["HYGIENE_METRICS", "LIMITS", "judge_hygiene"]

#: the job-step limits judged against the node's SKU, here and by the node check
LIMITS = ("dev_shm_gib", "nofile", "memlock_kib")
#: what ``judge_hygiene`` judges: its test's ``@pytest.mark.judges``
HYGIENE_METRICS = LIMITS


def judge_hygiene(data: dict[str, Any], judge: JudgeLike, node: str) -> None:
    """/dev/shm size, open files and locked memory as a job step sees them; swap and huge pages shown."""
    for metric in LIMITS:
        judge.check(metric, data[metric], node=node)
    judge.info("swap_total_gib", data["swap_total_gib"], node=node)
    judge.info("hugepages_total", data["hugepages_total"], node=node, page_kib=data["hugepage_size_kib"])
