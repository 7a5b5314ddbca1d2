"""The NCCL probe's test-only faults (refused unless GPUACCEPT_SELFTEST=1): a slow node, a hung rank, a
rank whose results are corrupted. The selftests use them to prove the NCCL tests name the node or rank
at fault (tests/selftest/test_nccl_probe.py, test_faults_nccl.py); see gpuaccept/probes/nccl.py. The
knobs and their gate are registered in ``gpuaccept.selftest_hooks``.
"""

from __future__ import annotations

import sys
from typing import Any

from gpuaccept import selftest_hooks

__all__ = ["selftest_faults"]

_SLOW, _HANG, _CORRUPT = "GPUACCEPT_FAULT_SLOW_NODE", "GPUACCEPT_FAULT_HANG_RANK", "GPUACCEPT_FAULT_CORRUPT_RANK"


def _chosen(value: str | None, node: str, rank: int, local_rank: int) -> bool:
    """``<rank>`` (the step's rank) or ``<node>:<rank on that node>`` (one node of a fan-out step alone)."""
    if not value:
        return False
    where, _, which = value.rpartition(":")
    return which == str(local_rank) and where == node if where else which == str(rank)


def selftest_faults(node: str, rank: int, local_rank: int) -> dict[str, Any]:
    """The faults this rank must show; refused outside selftests so a production run can never be slowed
    on purpose."""
    try:
        slow, hang, corrupt = (selftest_hooks.gated(name) for name in (_SLOW, _HANG, _CORRUPT))
    except selftest_hooks.HookRefused as exc:
        sys.exit(f"gpuaccept.probes.nccl: {exc}")
    if not (slow or hang or corrupt):
        return {}
    return {
        "slow_s": float(selftest_hooks.value("GPUACCEPT_FAULT_SLOW_S") or "0.05") if slow == node else 0.0,
        "hang": _chosen(hang, node, rank, local_rank),
        "corrupt": _chosen(corrupt, node, rank, local_rank),
    }
