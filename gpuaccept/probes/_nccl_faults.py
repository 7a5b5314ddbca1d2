"""The NCCL probe's test-only faults (refused unless GPUACCEPT_SELFTEST=1): a slow node, a hung rank, a
rank whose results are corrupted. The selftests use them to prove the NCCL tests name the node or rank
at fault (tests/selftest/test_nccl_probe.py, test_faults_nccl.py); see gpuaccept/probes/nccl.py.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["test_faults"]


def _chosen(value: str | None, node: str, rank: int, local_rank: int) -> bool:
    """``<rank>`` (the step's rank) or ``<node>:<rank on that node>`` (one node of a fan-out step alone)."""
    if not value:
        return False
    where, _, which = value.rpartition(":")
    return which == str(local_rank) and where == node if where else which == str(rank)


def test_faults(node: str, rank: int, local_rank: int) -> dict[str, Any]:
    """Test-only faults; refused outside selftests so a production run can never be slowed on purpose."""
    env = os.environ
    names = ("GPUACCEPT_FAULT_SLOW_NODE", "GPUACCEPT_FAULT_HANG_RANK", "GPUACCEPT_FAULT_CORRUPT_RANK")
    if not any(env.get(n) for n in names):
        return {}
    if env.get("GPUACCEPT_SELFTEST") != "1":
        sys.exit(f"gpuaccept.probes.nccl: {', '.join(n for n in names if env.get(n))} is for selftests only")
    return {
        "slow_s": float(env.get("GPUACCEPT_FAULT_SLOW_S", "0.05")) if env.get(names[0]) == node else 0.0,
        "hang": _chosen(env.get(names[1]), node, rank, local_rank),
        "corrupt": _chosen(env.get(names[2]), node, rank, local_rank),
    }
