"""The 2 x H200 recording of the ``nccl`` probe (``fixtures/nccl/2xh200-precontract.nccl.out``, 2026-11-22) moved
into today's contract, so the sweep's selftests keep judging real H200 figures.

The recording predates the strict contract; each edit is named here and nothing else changes: the group's keys
move under ``communicator`` (``outcome: in_group``); each row's ``busbw_rank`` (a per-rank figure the probe no
longer writes) and the facts' ``net_plugin`` (no longer parsed) are dropped; ``rail`` (not written before rails)
is None, as without ``--rails``; ``local_rank`` (not written then) is the rank (both ran on one host); facts the
old parser did not write (``mnnvl``, ``nvls_available``, ``nvls_comm``, ``nics_by_plugin``, ``net``;
``algorithms`` of rank 1, which logged no TUNING) are None or empty, as the new parser writes them when the log
does not say. The 1-GPU re-recording is ``benchmarks/record_nccl.sh`` (fixtures/nccl/README.md).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gpuaccept.dispatch.result import parse_records

__all__ = ["PRECONTRACT_H200", "h200_records", "to_contract"]

PRECONTRACT_H200 = Path(__file__).resolve().parents[2] / "fixtures" / "nccl" / "2xh200-precontract.nccl.out"
_GROUP_KEYS = ("group", "rail", "group_nodes", "group_ranks", "results", "capped", "free_bytes")


def to_contract(old: dict[str, Any], rank: int) -> dict[str, Any]:
    """One rank's pre-contract data in the contract's shape (the edits the module docstring names)."""
    data = {k: v for k, v in old.items() if k not in _GROUP_KEYS}
    data["local_rank"] = rank
    comm = {k: old[k] for k in _GROUP_KEYS if k != "rail"}
    comm["rail"] = None
    comm["results"] = [{k: v for k, v in row.items() if k != "busbw_rank"} for row in old["results"]]
    data["communicator"] = {"outcome": "in_group", **comm}
    facts = {k: v for k, v in old["nccl"].items() if k != "net_plugin"}
    unwritten: dict[str, Any] = {
        "mnnvl": None,
        "nvls_available": None,
        "nvls_comm": False,
        "nics_by_plugin": {},
        "net": None,
    }
    data["nccl"] = {**unwritten, "algorithms": {}, **facts}
    return data


def h200_records() -> list[SimpleNamespace]:
    """The recording's two ranks in the contract's shape (``.rank``, ``.node``, ``.data``)."""
    records = parse_records("nccl", PRECONTRACT_H200.read_text(), 2, ("h200",))
    return [SimpleNamespace(rank=r.rank, node=r.node, data=to_contract(r.data, r.rank)) for r in records]
