"""Group, scale and pair verdicts of NCCL measurements taken across several nodes.

A multi-node NCCL scale measures groups of nodes side by side. A group fails when a collective misses
its floor (the limit keyed by the group's node count first, ``metric@N``), when its all_reduce busbw
falls more than ``straggler_pct`` below the median group, when its scaling efficiency against the
smallest scale misses its limit, or when a result was wrong. The second pass (Google
cluster-health-scanner's) pairs each suspect with known-good nodes (``nccl.plan``, ``nccl.blame``). These rules use
the judging core's one comparison (``judge_value``) and the limits the judge declares; the judging
core itself knows nothing of NCCL.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gpuaccept.judging.judge import judge_value
from gpuaccept.nccl.formulas import COLLECTIVES
from gpuaccept.nccl.lines import metric_name
from gpuaccept.nccl.plan import Group
from gpuaccept.nccl.sweep import GroupTable, format_bytes

if TYPE_CHECKING:
    from gpuaccept.judging.judge import Judge
    from gpuaccept.thresholds.schema import Limit

__all__ = ["group_failures", "pair_verdict", "slow_groups"]


def slow_groups(
    values: Mapping[Group, float], *, floor: float | None = None, straggler_pct: float | None = None
) -> dict[Group, str]:
    """Groups that fail, with the reason: below ``floor``, or > ``straggler_pct``% below the median group.

    With two groups the median is their mean, so the slower one is flagged when the gap exceeds twice
    ``straggler_pct``; with one group there is nothing to compare.
    """
    out: dict[Group, str] = {}
    finite = {g: v for g, v in values.items() if v == v}
    median = statistics.median(finite.values()) if len(finite) >= 2 else None
    for group, value in values.items():
        reasons = []
        if value != value:
            reasons.append("no value")
        elif floor is not None and value < floor:
            reasons.append(f"{value:.3g} < min {floor:g}")
        if median is not None and straggler_pct is not None and value == value:
            if value < median * (1 - straggler_pct / 100):
                reasons.append(f"{value:.3g} is more than {straggler_pct:g}% below the median group {median:.3g}")
        if reasons:
            out[group] = "; ".join(reasons)
    return out


def group_failures(
    tables: Sequence[GroupTable],
    judge: Judge,
    *,
    multinode: bool,
    baseline: float | None = None,
) -> dict[tuple[str, ...], list[str]]:
    """Why each group fails (empty dict: all pass): floor misses, straggling, efficiency, wrong results.

    ``baseline`` is the median all_reduce busbw of the smallest multi-node scale; with it, each group's
    efficiency is judged against the SKU's ``nccl_scaling_efficiency_pct``. Limits are the ones in
    force for the group's first node at the group's node count. Nothing is recorded: the scale test
    records each figure through ``judge.check``; this decides which groups the second pass re-tests.
    """
    reasons: dict[tuple[str, ...], list[str]] = {}
    for table in tables:
        why = reasons.setdefault(table.nodes, [])
        scale = len(table.nodes)
        for collective in COLLECTIVES:
            row = table.largest(collective)
            if row is None:
                continue
            limit = judge.declared(metric_name(collective, multinode), table.nodes[0], scale)
            if limit is not None:
                ok, text = judge_value(row.busbw, limit)
                if not ok:
                    why.append(f"{collective} {format_bytes(row.size)} busbw {text}")
        if table.wrong_results():
            why.append(f"{len(table.wrong_results())} wrong result(s)")
        ar = table.largest("all_reduce")
        efficiency = judge.declared("nccl_scaling_efficiency_pct", table.nodes[0], scale)
        if baseline and ar is not None and efficiency is not None:
            ok, text = judge_value(100.0 * ar.busbw / baseline, efficiency)
            if not ok:
                why.append(f"scaling efficiency {text} % (vs {baseline:.3g} GB/s at the smallest scale)")
    values = {t.nodes: row.busbw if (row := t.largest("all_reduce")) is not None else float("nan") for t in tables}
    if len(values) >= 2:
        for group, text in slow_groups(values, straggler_pct=judge.setting("straggler_pct")).items():
            reasons[group].append(f"all_reduce busbw {text}")
    return {g: r for g, r in reasons.items() if r}


def pair_verdict(
    busbw: float,
    wrong: int,
    *,
    floor: Limit | None,
    reference: float | None,
    straggler_pct: float,
) -> tuple[bool, str]:
    """Second-pass verdict on one pair: the floor, then the first pass's passing median, then correctness."""
    if wrong:
        return False, f"{wrong} wrong element(s)"
    if floor is not None:
        ok, text = judge_value(busbw, floor)
        if not ok:
            return False, f"busbw {text}"
    if reference and busbw < reference * (1 - straggler_pct / 100):
        return False, f"{busbw:.3g} GB/s is more than {straggler_pct:g}% below the first pass median {reference:.3g}"
    return True, f"{busbw:.3g} GB/s"
