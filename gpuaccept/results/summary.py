"""The end of the terminal output: one line per node (verdict, metric closest to failing), then what
regressed against the baseline and what changed on the nodes since then."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import RunRecord

if TYPE_CHECKING:
    from gpuaccept.judging.baseline import Regression

__all__ = ["margin", "node_summary_lines", "not_run_notes", "regression_lines"]

_RANK = {"error": 3, "failed": 2, "passed": 1, "skipped": 0, "not run": 0}


def margin(m: MetricResult) -> float | None:
    """Relative distance to the limit (negative = missed by that fraction); None when unjudged."""
    if not isinstance(m.value, (int, float)) or isinstance(m.value, bool):
        return None
    value = float(m.value)
    candidates = []
    if m.min is not None and m.min != 0:
        candidates.append((value - m.min) / abs(m.min))
    if m.max is not None and m.max != 0:
        candidates.append((m.max - value) / abs(m.max))
    return min(candidates) if candidates else None


def not_run_notes(tests: Iterable[Mapping[str, Any]]) -> list[str]:
    """What did not run, one note per check and missing tool with its nodes: ``nccl-tests fidelity --
    nccl-tests not installed (node1, node2)``. Entries are run-record test entries (dicts); a test left
    ``not run`` for another reason (the session ended first) is named by its id."""
    notes: dict[str, list[str]] = {}
    for entry in tests:
        if entry.get("verdict") != "not run":
            continue
        why = entry.get("not_run") or {}
        key = f"{why['check']} \u2014 {why['tool']} not installed" if why else str(entry.get("nodeid"))
        nodes = notes.setdefault(key, [])
        nodes += [str(n) for n in entry.get("nodes") or [] if str(n) not in nodes]
    return [f"{key} ({', '.join(nodes)})" if nodes else key for key, nodes in notes.items()]


def node_summary_lines(record: RunRecord) -> list[str]:
    verdicts: dict[str, str] = {}
    for entry in record.tests.values():
        for node in entry.nodes:
            old = verdicts.get(node, "not run")
            if _RANK.get(entry.verdict, 0) > _RANK.get(old, 0):
                verdicts[node] = entry.verdict
            verdicts.setdefault(node, entry.verdict)
    lines = []
    for node in sorted(verdicts):
        judged = [(margin(m), m) for m in record.metrics if m.node == node and margin(m) is not None]
        worst = min(judged, key=lambda pair: pair[0])[1] if judged else None  # type: ignore[arg-type,return-value]
        detail = (
            f"worst: {worst.metric}{' ' + worst.what if worst.what else ''} = {worst.value:g} {worst.unit} "
            f"(limit {worst.limit_text()})"
            if worst is not None
            else "no judged metric"
        )
        lines.append(f"{node:<20} {verdicts[node].upper():<8} {detail}")
    return lines


def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.1f}%" if round(low, 1) == round(high, 1) else f"{low:.1f}-{high:.1f}%"


def regression_lines(regressions: Iterable[Regression], changes: Iterable[str] = ()) -> list[str]:
    """What changed and what got worse since the baseline, one line per metric with the nodes it hit.

    Reads like the upgrade story an operator tells: ``driver 550.54 -> 570.86 on a17, a18`` then
    ``all_reduce_busbw_gbps fell 11.8-12.4% on a17 (GPU 0, 3), a18 (GPU 1)``.
    """
    lines = [f"changed: {change}" for change in changes]
    by_metric: dict[str, list[Regression]] = {}
    for regression in regressions:
        by_metric.setdefault(regression.metric, []).append(regression)
    for metric, found in sorted(by_metric.items()):
        verb = "fell" if found[0].better == "higher" else "rose"
        where: dict[str, list[str]] = {}
        for regression in found:
            where.setdefault(regression.node, [])
            if regression.gpu_index is not None:
                where[regression.node].append(str(regression.gpu_index))
        nodes = ", ".join(f"{node} (GPU {', '.join(gpus)})" if gpus else node for node, gpus in sorted(where.items()))
        deltas = [abs(r.delta_pct) for r in found if math.isfinite(r.delta_pct)]
        amount = _span(deltas) if deltas else "from 0"
        lines.append(
            f"REGRESSED {metric} {verb} {amount} on {nodes} (tolerance {found[0].tolerance_pct:g}%, "
            f"e.g. {found[0].baseline:g} -> {found[0].value:g} {found[0].unit})"
        )
    return lines
