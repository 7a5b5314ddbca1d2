"""The acceptance summary's table of margins: for each check this run judged against a numeric limit, the
place where it stood closest to that limit, and how close.

A pass says a figure cleared its limit; the margin says by how much. A healthy node whose tightest figure
sits 2% inside its floor passes today and fails after a small drift, and the operator should see that
before it happens. Checks whose limit is the part's own specification (a PCIe link's width, an NVLink
count) sit on it by nature: the catalogue says so (``tight_margin``) and the table shows that reason beside
them, so a reader can tell a specification met exactly from a figure about to fail. Read from the run
record alone (``MetricResult.margin_pct``); it never judges.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuaccept.results.metrics import MetricResult
from gpuaccept.thresholds.schema import TIGHT_MARGIN_PCT, MetricSpec

__all__ = ["MarginRow", "margin_rows"]


@dataclass(frozen=True)
class MarginRow:
    """One check at its tightest in this run."""

    check: str
    where: str
    observed: float
    unit: str
    expected: str
    margin_pct: float
    verdict: str
    #: the catalogue's reason a healthy figure sits this close, when it is within ``TIGHT_MARGIN_PCT``
    why_tight: str | None

    @property
    def tight(self) -> bool:
        return self.margin_pct < TIGHT_MARGIN_PCT


def margin_rows(metrics: Iterable[MetricResult], catalogue: Mapping[str, MetricSpec]) -> list[MarginRow]:
    """Each check's tightest place in the run, the tightest first (a failed check's margin is negative)."""
    tightest: dict[str, tuple[float, MetricResult]] = {}
    for m in metrics:
        margin = m.margin_pct
        if margin is not None and (m.metric not in tightest or margin < tightest[m.metric][0]):
            tightest[m.metric] = (margin, m)
    rows = []
    for name, (margin, m) in tightest.items():
        spec = catalogue.get(name)
        why = spec.tight_margin if spec is not None and margin < TIGHT_MARGIN_PCT else None
        rows.append(MarginRow(name, m.where, float(m.value), m.unit, m.limit_text(), margin, m.verdict, why))  # type: ignore[arg-type]
    return sorted(rows, key=lambda r: (r.margin_pct, r.check))
