"""The end of the terminal output: one line per node (verdict, metric closest to failing), then what
regressed against the baseline and what changed on the nodes since then."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from gpuaccept.results.comparison import regressed
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import RunRecord, TestEntry

__all__ = ["VERDICT_RANK", "margin", "node_summary_lines", "not_run_notes", "regression_lines", "worst_verdict"]

#: Worst first: what a node's (or a summary cell's) verdict is when its tests disagree; the terminal's
#: per-node lines and the summary page's matrix both rank by it.
VERDICT_RANK = {"error": 4, "failed": 3, "not run": 2, "measured": 2, "passed": 1, "skipped": 0}


def worst_verdict(verdicts: Iterable[str]) -> str:
    """The worst of some test verdicts (an unknown one counts as ``not run``)."""
    return max(verdicts, key=lambda v: VERDICT_RANK.get(v, 2))


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


def not_run_notes(tests: Iterable[TestEntry]) -> list[str]:
    """What did not run, one note per check and missing tool with its nodes: ``nccl-tests fidelity --
    nccl-tests not installed (node1, node2)``. A test left ``not run`` for another reason (the session
    ended first) is named by its id."""
    notes: dict[str, list[str]] = {}
    for entry in tests:
        if entry.verdict != "not run":
            continue
        why = entry.not_run or {}
        key = f"{why['check']} \u2014 {why['tool']} not installed" if why else entry.nodeid
        nodes = notes.setdefault(key, [])
        nodes += [str(n) for n in entry.nodes if str(n) not in nodes]
    return [f"{key} ({', '.join(nodes)})" if nodes else key for key, nodes in notes.items()]


#: a check's verdict as the verdict it gives its node in a test of several nodes
_CHECK_TO_NODE = {"fail": "failed", "unmeasured": "error", "unjudged": "error", "measured": "measured"}


def _node_verdict(entry: TestEntry, node: str, checks: list[MetricResult]) -> str:
    """A node's verdict in ``entry``: a test of one node gives it the test's; a test of several nodes that did
    not pass gives each node what its own checks say, so one node's slow filesystem or bad link does not mark
    the nodes it was measured beside (their checks passed; a node without checks of its own takes the test's)."""
    if len(entry.nodes) < 2 or entry.verdict not in ("failed", "error"):
        return entry.verdict
    own = [_CHECK_TO_NODE.get(c.verdict, "passed") for c in checks if c.node == node]
    return worst_verdict(own) if own else entry.verdict


def node_summary_lines(record: RunRecord) -> list[str]:
    verdicts: dict[str, str] = {}
    by_test: dict[str, list[MetricResult]] = {}
    for m in record.metrics:
        by_test.setdefault(m.test, []).append(m)
    for test_id, entry in record.tests.items():
        for node in entry.nodes:
            verdict = _node_verdict(entry, node, by_test.get(test_id, []))
            verdicts[node] = worst_verdict([verdicts[node], verdict]) if node in verdicts else verdict
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


def regression_lines(checks: Iterable[MetricResult], changes: Iterable[str] = ()) -> list[str]:
    """What changed and what got worse since the baseline, one line per metric with the nodes it hit,
    from the comparisons the judge carried on the checks.

    Reads like the upgrade story an operator tells: ``driver 550.54 -> 570.86 on a17, a18`` then
    ``all_reduce_busbw_gbps fell 11.8-12.4% on a17 (GPU 0, 3), a18 (GPU 1)``.
    """
    lines = [f"changed: {change}" for change in changes]
    by_metric: dict[str, list[Any]] = {}
    for check, comparison in regressed(checks):
        by_metric.setdefault(check.metric, []).append((check, comparison))
    for metric, found in sorted(by_metric.items()):
        verb = "fell" if found[0][1].better == "higher" else "rose"
        where: dict[str, list[str]] = {}
        for check, _comparison in found:
            where.setdefault(check.node, [])
            if check.gpu_index is not None:
                where[check.node].append(str(check.gpu_index))
        nodes = ", ".join(f"{node} (GPU {', '.join(gpus)})" if gpus else node for node, gpus in sorted(where.items()))
        deltas = [abs(c.delta_pct) for _m, c in found if c.delta_pct is not None and math.isfinite(c.delta_pct)]
        amount = _span(deltas) if deltas else "from 0"
        check, first = found[0]
        tolerance = f"tolerance {first.tolerance_pct:g}%, " if first.tolerance_pct is not None else ""
        lines.append(
            f"REGRESSED {metric} {verb} {amount} on {nodes} ({tolerance}e.g. {first.value:g} -> {check.value:g} "
            f"{check.unit})"
        )
    return lines
