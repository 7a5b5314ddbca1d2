"""Turning group tables into verdict lines: wrong results, group failures, and the text operators read.

Shared by the per-node, per-scale and bad-node tests so they word things the same way, and kept free of
pytest so the selftests can call it. Limits are looked up through a ``limit_of(metric, node)`` callable
(the thresholds in force for the node's SKU) and judged with the suite's own ``judge``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuaccept.nccl.bisect import slow_groups
from gpuaccept.nccl.formulas import COLLECTIVES
from gpuaccept.nccl.sweep import GroupTable, format_bytes

__all__ = ["group_failures", "median_busbw", "metric_name", "pair_verdict", "sweep_lines", "wrong_lines"]


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


def group_failures(
    tables: Sequence[GroupTable],
    *,
    multinode: bool,
    limit_of: Callable[[str, str, int], Any],
    judge: Callable[[Any, Any], tuple[bool, str]],
    straggler_pct: float | None,
    baseline: float | None = None,
    efficiency_limit: Any = None,
) -> dict[tuple[str, ...], list[str]]:
    """Why each group fails (empty dict: all pass): floor misses, straggling, efficiency, wrong results.

    ``baseline`` is the median all_reduce busbw of the smallest multi-node scale; with it, each group's
    efficiency is judged against ``efficiency_limit``. ``limit_of(metric, node, scale)`` gives the limit
    in force (``scale`` = nodes in the group, for limits keyed by scale).
    """
    reasons: dict[tuple[str, ...], list[str]] = {}
    for table in tables:
        why = reasons.setdefault(table.nodes, [])
        for collective in COLLECTIVES:
            row = table.largest(collective)
            if row is None:
                continue
            metric = metric_name(collective, multinode)
            limit = limit_of(metric, table.nodes[0], len(table.nodes))
            if limit is not None:
                ok, text = judge(row.busbw, limit)
                if not ok:
                    why.append(f"{collective} {format_bytes(row.size)} busbw {text}")
        if table.wrong_results():
            why.append(f"{len(table.wrong_results())} wrong result(s)")
        ar = table.largest("all_reduce")
        if baseline and ar is not None and efficiency_limit is not None:
            ok, text = judge(100.0 * ar.busbw / baseline, efficiency_limit)
            if not ok:
                why.append(f"scaling efficiency {text} % (vs {baseline:.3g} GB/s at the smallest scale)")
    values = {t.nodes: (t.largest("all_reduce").busbw if t.largest("all_reduce") else float("nan")) for t in tables}
    if len(values) >= 2:
        for group, text in slow_groups(values, straggler_pct=straggler_pct).items():
            reasons[group].append(f"all_reduce busbw {text}")
    return {g: r for g, r in reasons.items() if r}


def median_busbw(tables: Sequence[GroupTable], collective: str = "all_reduce") -> float | None:
    values = [row.busbw for t in tables if (row := t.largest(collective)) is not None and row.busbw == row.busbw]
    return statistics.median(values) if values else None


def pair_verdict(
    busbw: float,
    wrong: int,
    *,
    floor: Any,
    judge: Callable[[Any, Any], tuple[bool, str]],
    reference: float | None,
    straggler_pct: float,
) -> tuple[bool, str]:
    """Second-pass verdict on one pair: the floor, then the first pass's passing median, then correctness."""
    if wrong:
        return False, f"{wrong} wrong element(s)"
    if floor is not None:
        ok, text = judge(busbw, floor)
        if not ok:
            return False, f"busbw {text}"
    if reference and busbw < reference * (1 - straggler_pct / 100):
        return False, f"{busbw:.3g} GB/s is more than {straggler_pct:g}% below the first pass median {reference:.3g}"
    return True, f"{busbw:.3g} GB/s"
