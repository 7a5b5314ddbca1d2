"""Compare a run with an earlier run record: per-metric regressions and what changed on the nodes.

The moment this exists for is the upgrade: the cluster passed last month, the driver went from 550 to
570, and now all_reduce busbw is 12% lower on four nodes while still above the absolute floor. The
absolute limits cannot see that; the previous run of the same cluster can. ``--baseline latest``
(the record ``latest.json`` held *before* this session started) or ``--baseline PATH`` loads one, and
every metric is matched by (metric, node, GPU) and judged in the metric's own direction
(``better: higher|lower`` in thresholds.yaml) against a tolerance: the limit's ``regression_pct`` or
the suite-wide ``settings.regression_pct``. The fingerprint diff (driver, CUDA, NCCL, torch, kernel,
GPU model) says what changed in between, so the report reads as cause and effect.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpuaccept.judging.fields import FINGERPRINT_FIELDS, field_value
from gpuaccept.results.metrics import MetricResult, subject_of
from gpuaccept.results.record import RecordError, read_record

if TYPE_CHECKING:
    import pandas as pd

    from gpuaccept.settings import Settings
    from gpuaccept.thresholds.loader import Thresholds

__all__ = [
    "BASELINE_KEY",
    "SIDE_BY_SIDE_COLUMNS",
    "Baseline",
    "BaselineError",
    "FingerprintChange",
    "Regression",
    "fingerprint_diff",
    "load_session_baseline",
    "resolve_baseline_path",
    "summarize_changes",
]

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


class BaselineError(pytest.UsageError):  # type: ignore[misc]  # final in typing; pytest maps it to exit 4
    """The baseline run record is missing or unreadable; the message names the file and the source."""


@dataclass(frozen=True)
class FingerprintChange:
    """One field that differs between the baseline's fingerprint of a node and this run's."""

    node: str
    field: str
    before: Any
    after: Any

    def __str__(self) -> str:
        return f"{self.field} {self.before} -> {self.after} on {self.node}"


def fingerprint_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[FingerprintChange]:
    """Changed fields for every node present in both runs (nodes with an error fingerprint are skipped)."""
    changes: list[FingerprintChange] = []
    for node in sorted(set(before) & set(after)):
        old, new = before[node], after[node]
        if not isinstance(old, dict) or not isinstance(new, dict) or "error" in old or "error" in new:
            continue
        for spec in FINGERPRINT_FIELDS:
            was, now = field_value(old, spec.path), field_value(new, spec.path)
            if was != now:
                changes.append(FingerprintChange(node, spec.label, was, now))
    return changes


def summarize_changes(changes: Iterable[FingerprintChange]) -> list[str]:
    """``driver 550.54 -> 570.86 on node1, node2``: one line per (field, before, after)."""
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for change in changes:
        grouped.setdefault((change.field, str(change.before), str(change.after)), []).append(change.node)
    return [f"{field} {was} -> {now} on {', '.join(nodes)}" for (field, was, now), nodes in grouped.items()]


@dataclass(frozen=True)
class Regression:
    """A metric worse than the baseline's value beyond the tolerance, in the metric's direction."""

    metric: str
    node: str
    #: ``node GPU 3 (bus)`` / ``node HCA mlx5_0 port 1``: the judged check's own ``where``
    where: str
    #: the GPU's index when the check is about one GPU (the summary lists them per node)
    gpu_index: int | None
    test: str
    baseline: float
    value: float
    unit: str
    delta_pct: float
    tolerance_pct: float
    better: str
    baseline_file: str

    @property
    def reason(self) -> str:
        """What ``Judge.check`` appends to the metric's reason (and categories.json matches on)."""
        return (
            f"regressed {abs(self.delta_pct):.1f}% vs baseline {self.baseline_file} "
            f"({self.baseline:g} -> {self.value:g} {self.unit}, tolerance {self.tolerance_pct:g}%)"
        )

    def __str__(self) -> str:
        return f"{self.metric} on {self.where}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _delta_pct(base: float, now: float) -> float:
    if base == 0:
        return 0.0 if now == 0 else math.copysign(math.inf, now)
    return (now - base) / abs(base) * 100


def resolve_baseline_path(value: str, runs_dir: Path, source: str = "--baseline") -> Path:
    """``latest`` -> ``<runs_dir>/latest.json``; anything else is a path (a folder means its latest.json)."""
    path = runs_dir / "latest.json" if value == "latest" else Path(value).expanduser()
    if path.is_dir():
        path = path / "latest.json"
    if not path.is_file():
        hint = " (no earlier run wrote one: run the suite once without --baseline first)" if value == "latest" else ""
        raise BaselineError(f"{source}: baseline run record {path} not found{hint}")
    return path


class Baseline:
    """An earlier run record, indexed by (metric, node, GPU), that judges this run's metrics."""

    def __init__(self, record: Mapping[str, Any], path: Path, thresholds: Thresholds | None = None) -> None:
        self.record = dict(record)
        self.path = path
        self.name = self._stable_name(path)
        self._thresholds = thresholds
        self._index: dict[tuple[str, str, str | None], list[dict[str, Any]]] = {}
        for raw in self.record.get("metrics") or []:
            subject = subject_of(raw)[0]  # a gpuaccept.run/1 record's ``gpu``, migrated
            key = (str(raw.get("metric")), str(raw.get("node")), subject)
            self._index.setdefault(key, []).append(raw)

    @classmethod
    def load(cls, path: Path, thresholds: Thresholds | None = None, source: str = "--baseline") -> Baseline:
        """Read a run record; a missing file or a file that is not a gpuaccept record is a usage error."""
        try:
            record = read_record(path)
        except RecordError as exc:
            raise BaselineError(f"{source}: baseline {exc}") from None
        if not record.get("metrics"):
            raise BaselineError(
                f"{source}: baseline run record {path} holds no metrics (a session that measured nothing, such as "
                "the selftests' own): nothing could regress against it; name the record of an acceptance run"
            )
        return cls(record, path, thresholds)

    def _stable_name(self, path: Path) -> str:
        """The record's own timestamped name: ``latest.json`` is overwritten by the very next run."""
        if path.name != "latest.json":
            return path.name
        try:
            started = _dt.datetime.fromisoformat(str(self.record.get("started")))
        except ValueError:
            return str(path)
        stamped = started.astimezone(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + ".json"
        return stamped if path.with_name(stamped).is_file() else f"latest.json of {started:%Y-%m-%d %H:%M:%S}"

    @property
    def started(self) -> str:
        return str(self.record.get("started", "unknown time"))

    @property
    def fingerprints(self) -> dict[str, Any]:
        return dict(self.record.get("fingerprints") or {})

    def find(self, metric: str, node: str, subject: str | None, test: str | None = None) -> dict[str, Any] | None:
        """The baseline's entry for this metric on this node and subject (GPU, HCA port, ...): the same
        test's if several, else the only one."""
        candidates = self._index.get((metric, node, subject), [])
        if test is not None:
            same = [c for c in candidates if c.get("test") == test]
            if same:
                return same[0]
        return candidates[0] if len(candidates) == 1 else None

    def trajectory(self, node: str, gpu: str | None) -> dict[str, Any] | None:
        """This GPU's fine-tune trajectory in the baseline run (the ``train_trajectory`` figure's exact
        losses, weights' sha256 and stack key), or None when that run recorded none for it."""
        entry = self.find("train_trajectory", node, gpu)
        extra = entry.get("extra") if entry is not None else None
        return extra if isinstance(extra, dict) and extra.get("losses") else None

    def _direction_and_tolerance(self, result: MetricResult) -> tuple[str, float]:
        if self._thresholds is None:
            return "higher", 5.0
        spec = self._thresholds.metrics.get(result.metric)
        better = spec.better if spec is not None else "higher"
        tolerance: float | None = None
        if result.sku in self._thresholds.skus:
            limit = self._thresholds.limits_for(result.sku).get(result.metric)
            tolerance = limit.regression_pct if limit is not None else None
        return better, tolerance if tolerance is not None else self._thresholds.setting("regression_pct")

    def compare(self, result: MetricResult) -> Regression | None:
        """A ``Regression`` when ``result`` is worse than the baseline beyond tolerance, else None.

        Metrics judged by equality (``better: equal``) and non-numbers never regress here: a changed
        value of those is a configuration change, shown in the side-by-side table and the fingerprint
        diff, and judged by its own limit.
        """
        now = _number(result.value)
        if now is None:
            return None
        entry = self.find(result.metric, result.node, result.subject, result.test)
        base = _number(entry.get("value")) if entry is not None else None
        if base is None:
            return None
        better, tolerance = self._direction_and_tolerance(result)
        delta = _delta_pct(base, now)
        worse = delta < -tolerance if better == "higher" else delta > tolerance if better == "lower" else False
        if not worse:
            return None
        return Regression(
            metric=result.metric,
            node=result.node,
            where=result.where,
            gpu_index=result.gpu_index,
            test=result.test,
            baseline=base,
            value=now,
            unit=result.unit,
            delta_pct=delta,
            tolerance_pct=tolerance,
            better=better,
            baseline_file=self.name,
        )

    def regressions(self, results: Iterable[MetricResult]) -> list[Regression]:
        return [r for r in (self.compare(m) for m in results) if r is not None]

    def fingerprint_changes(self, current: Mapping[str, Any]) -> list[FingerprintChange]:
        return fingerprint_diff(self.fingerprints, current)

    def side_by_side(self, results: Iterable[MetricResult]) -> pd.DataFrame:
        """Baseline vs now per metric/node/GPU with delta %, and a status for each row."""
        import pandas as pd

        rows: list[dict[str, Any]] = []
        seen: set[tuple[str, str, str | None]] = set()
        for result in results:
            key = (result.metric, result.node, result.subject)
            seen.add(key)
            entry = self.find(result.metric, result.node, result.subject, result.test)
            base = entry.get("value") if entry is not None else None
            regression = self.compare(result)
            now_n, base_n = _number(result.value), _number(base)
            delta = _delta_pct(base_n, now_n) if now_n is not None and base_n is not None else None
            better, tolerance = self._direction_and_tolerance(result)
            if entry is None:
                status = "new"
            elif regression is not None:
                status = "regressed"
            elif delta is None or better == "equal":
                status = "same" if base == result.value else "changed"
            elif (delta > tolerance and better == "higher") or (delta < -tolerance and better == "lower"):
                status = "improved"
            else:
                status = "within tolerance"
            rows.append(
                {
                    "metric": result.metric,
                    "node": result.node,
                    "subject": result.subject,
                    "unit": result.unit,
                    "baseline": base,
                    "now": result.value,
                    "delta_pct": None if delta is None or not math.isfinite(delta) else round(delta, 2),
                    "tolerance_pct": tolerance,
                    "better": better,
                    "status": status,
                    "test": result.test,
                }
            )
        nodes = {row["node"] for row in rows}
        for (metric, node, subject), entries in sorted(self._index.items(), key=lambda kv: tuple(map(str, kv[0]))):
            if (metric, node, subject) not in seen and node in nodes:
                old = entries[0]
                rows.append(
                    dict.fromkeys(SIDE_BY_SIDE_COLUMNS)
                    | {"metric": metric, "node": node, "subject": subject, "unit": old.get("unit")}
                    | {"baseline": old.get("value"), "status": "not measured now", "test": old.get("test")}
                )
        return pd.DataFrame(rows, columns=list(SIDE_BY_SIDE_COLUMNS))


def load_session_baseline(settings: Settings, reports_dir: Path, thresholds: Thresholds) -> Baseline | None:
    """The ``--baseline`` record of this session, read at configure time (``latest`` means the record
    ``latest.json`` held before this run overwrites it); None when no baseline was asked for."""
    if not settings.baseline:
        return None
    runs_dir = settings.run_record.parent if settings.run_record else reports_dir / "runs"
    source = settings.sources.get("baseline", "--baseline")
    return Baseline.load(resolve_baseline_path(settings.baseline, runs_dir, source), thresholds, source)


BASELINE_KEY = pytest.StashKey["Baseline | None"]()
