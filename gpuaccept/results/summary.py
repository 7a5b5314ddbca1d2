"""One line per node for the end of the terminal output: verdict and the metric closest to failing."""

from __future__ import annotations

from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import RunRecord

__all__ = ["margin", "node_summary_lines"]

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


def node_summary_lines(record: RunRecord) -> list[str]:
    verdicts: dict[str, str] = {}
    for entry in record.tests.values():
        for node in entry.nodes:
            old = verdicts.get(node, "not run")
            if _RANK[entry.verdict] > _RANK[old]:
                verdicts[node] = entry.verdict
            verdicts.setdefault(node, entry.verdict)
    lines = []
    for node in sorted(verdicts):
        judged = [(margin(m), m) for m in record.metrics if m.node == node and margin(m) is not None]
        worst = min(judged, key=lambda pair: pair[0])[1] if judged else None  # type: ignore[arg-type,return-value]
        detail = (
            f"worst: {worst.metric}{' GPU ' + worst.gpu if worst.gpu else ''} = {worst.value:g} {worst.unit} "
            f"(limit {worst.limit_text()})"
            if worst is not None
            else "no judged metric"
        )
        lines.append(f"{node:<20} {verdicts[node].upper():<8} {detail}")
    return lines
