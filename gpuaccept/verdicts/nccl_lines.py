"""The text operators read about NCCL runs: the sweep table, wrong results, metric names, medians.

Shared by the per-node, per-scale and bad-node tests so they word things the same way, and kept free of
pytest so the selftests can call it. Verdicts on groups and pairs are the NCCL area module's
(``gpuaccept.verdicts.nccl``).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from gpuaccept.contracts.nccl_sweep import GroupTable, format_bytes

__all__ = ["median_busbw", "metric_name", "sweep_lines", "wrong_lines"]


def metric_name(collective: str, multinode: bool) -> str:
    """``nccl_all_reduce_busbw_gbs`` (one node) or ``nccl_all_reduce_busbw_multinode_gbs``."""
    return f"nccl_{collective}_busbw{'_multinode' if multinode else ''}_gbs"


def wrong_lines(table: GroupTable, rank_label: Mapping[int, str]) -> list[str]:
    """One line per collective, size and rank that got a wrong result (the test fails naming them)."""
    out = []
    for collective, size, rank, count, first in table.wrong_results():
        where = rank_label.get(rank, f"rank {rank}")
        detail = ""
        if first:
            got, want = first["got"], first["want"]
            detail = f"; first at block {first['row']} element {first['index']}: {got:g} instead of {want:g}"
        out.append(f"WRONG RESULT {collective} {format_bytes(size)} on {where}: {count} wrong elements{detail}")
    return out


def sweep_lines(table: GroupTable, algorithms: Mapping[str, Mapping[str, str]] | None = None) -> list[str]:
    """The table an operator expects, nccl-tests style: size, time, algbw, busbw, #wrong (+ algo/proto)."""
    lines = [f"{'collective':>14} {'size':>10} {'time(us)':>11} {'algbw':>8} {'busbw':>8} {'#wrong':>7}  algo/proto"]
    for row in table.rows:
        algo = (algorithms or {}).get(row.collective, {}).get(str(row.size), "")
        lines.append(
            f"{row.collective:>14} {format_bytes(row.size):>10} {row.time_us:>11.1f} {row.algbw:>8.2f} "
            f"{row.busbw:>8.2f} {sum(row.wrong.values()):>7}  {algo}"
        )
    return lines


def median_busbw(tables: Sequence[GroupTable], collective: str = "all_reduce") -> float | None:
    values = [row.busbw for t in tables if (row := t.largest(collective)) is not None and row.busbw == row.busbw]
    return statistics.median(values) if values else None
