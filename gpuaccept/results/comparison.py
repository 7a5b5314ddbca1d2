"""A check against the same check of an earlier run, as the judging core compared it, carried on the check.

``Baseline.compare`` (``gpuaccept.judging.baseline``) is the one place a figure is compared with the
baseline run: the judge calls it once per judged check and stores the result on the check as
``extra["baseline"]`` (run record ``gpuaccept.run/3``). Everything after reads that: the regression
lines of the terminal, the side-by-side CSV and Allure table, the summary page. Nothing here compares.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gpuaccept.results.metrics import MetricResult

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SIDE_BY_SIDE_COLUMNS", "Comparison", "comparison_of", "regressed", "side_by_side"]

SIDE_BY_SIDE_COLUMNS = (
    "metric",
    "node",
    "subject",
    "unit",
    "baseline",
    "now",
    "delta_pct",
    "tolerance_pct",
    "better",
    "status",
    "test",
)


@dataclass(frozen=True)
class Comparison:
    """The baseline run's value of a check and what the check did since, in the metric's direction."""

    #: the baseline run's value (None: ``new``)
    value: float | str | None
    #: the baseline record's stable name (``20261101T000000Z.json``)
    file: str
    #: what the figure did since the baseline run: regressed, changed, improved, within tolerance, same, or new
    #: (the baseline has no such check); ``not measured now`` is the side-by-side table's word for a baseline
    #: check this run did not make
    status: str
    #: (now - baseline) / |baseline| in %; None for a non-number, ±inf from a baseline of 0
    delta_pct: float | None
    #: the tolerance in % the check was held to (None in a migrated ``gpuaccept.run/2`` record)
    tolerance_pct: float | None
    better: str

    @property
    def regressed(self) -> bool:
        return self.status == "regressed"

    def reason(self, check: MetricResult) -> str:
        """What the judge appends to a regressed check's reason (and categories.json matches on)."""
        tolerance = "" if self.tolerance_pct is None else f", tolerance {self.tolerance_pct:g}%"
        delta = abs(self.delta_pct) if self.delta_pct is not None else math.nan
        return (
            f"regressed {delta:.1f}% vs baseline {self.file} "
            f"({_g(self.value)} -> {_g(check.value)} {check.unit}{tolerance})"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Comparison:
        return cls(**{k: raw.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


def _g(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def comparison_of(check: MetricResult) -> Comparison | None:
    """The comparison the judge made for this check (None: no baseline, or no such check in it)."""
    raw = check.extra.get("baseline")
    return Comparison.from_dict(raw) if isinstance(raw, dict) and "status" in raw else None


def regressed(checks: Iterable[MetricResult]) -> list[tuple[MetricResult, Comparison]]:
    """The checks that got worse than the baseline beyond tolerance, with their comparison."""
    pairs = ((c, comparison_of(c)) for c in checks)
    return [(c, cmp) for c, cmp in pairs if cmp is not None and cmp.regressed]


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 2)


def side_by_side(
    checks: Iterable[MetricResult],
    missing: Iterable[MetricResult] = (),
    comparisons: dict[int, Comparison | None] | None = None,
) -> pd.DataFrame:
    """Baseline vs now per check with delta % and status, from the comparisons the checks carry (or
    ``comparisons`` by ``id(check)``); ``missing`` are the baseline's checks not measured now."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for check in checks:
        found = comparisons.get(id(check)) if comparisons is not None else comparison_of(check)
        rows.append(
            {
                "metric": check.metric,
                "node": check.node,
                "subject": check.subject,
                "unit": check.unit,
                "baseline": None if found is None else found.value,
                "now": check.value,
                "delta_pct": None if found is None else _finite(found.delta_pct),
                "tolerance_pct": None if found is None else found.tolerance_pct,
                "better": None if found is None else found.better,
                "status": "new" if found is None else found.status,
                "test": check.test,
            }
        )
    for old in missing:
        rows.append(
            dict.fromkeys(SIDE_BY_SIDE_COLUMNS)
            | {"metric": old.metric, "node": old.node, "subject": old.subject, "unit": old.unit}
            | {"baseline": old.value, "status": "not measured now", "test": old.test}
        )
    return pd.DataFrame(rows, columns=list(SIDE_BY_SIDE_COLUMNS))
