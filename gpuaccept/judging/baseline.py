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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpuaccept.judging.fields import FINGERPRINT_FIELDS, field_value
from gpuaccept.results.comparison import Comparison
from gpuaccept.results.metrics import MetricResult, number
from gpuaccept.results.record import RecordError, RunRecord, is_latest, read_record

if TYPE_CHECKING:
    from gpuaccept.settings import Settings
    from gpuaccept.thresholds.loader import Thresholds

__all__ = [
    "BASELINE_KEY",
    "Baseline",
    "BaselineError",
    "FingerprintChange",
    "fingerprint_diff",
    "load_session_baseline",
    "resolve_baseline_path",
    "summarize_changes",
]


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
    """An earlier run record, indexed by (metric, node, subject), that this run's checks are compared with."""

    def __init__(self, record: RunRecord, path: Path, thresholds: Thresholds | None = None) -> None:
        self.record = record
        self.path = path
        self.name = self._stable_name(path)
        self._thresholds = thresholds
        self._index: dict[tuple[str, str, str | None], list[MetricResult]] = {}
        for check in record.metrics:
            self._index.setdefault((check.metric, check.node, check.subject), []).append(check)

    @classmethod
    def load(cls, path: Path, thresholds: Thresholds | None = None, source: str = "--baseline") -> Baseline:
        """Read a run record; a missing file or a file that is not a gpuaccept record is a usage error."""
        try:
            record = read_record(path)
        except RecordError as exc:
            raise BaselineError(f"{source}: baseline {exc}") from None
        if not record.metrics:
            raise BaselineError(
                f"{source}: baseline run record {path} holds no metrics (a session that measured nothing, such as "
                "the selftests' own): nothing could regress against it; name the record of an acceptance run"
            )
        return cls(record, path, thresholds)

    def _stable_name(self, path: Path) -> str:
        """The record's own timestamped name: ``latest.json`` is overwritten by the very next run."""
        if path.name != "latest.json":
            return path.name
        started = self.record.started
        stamp = started.astimezone(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        for named in sorted(path.parent.glob(f"{stamp}*.json")):  # <stamp>[-job<id>][-n].json, the same bytes
            if is_latest(named):
                return named.name
        return f"latest.json of {started:%Y-%m-%d %H:%M:%S}"

    @property
    def started(self) -> str:
        return self.record.started.isoformat()

    @property
    def fingerprints(self) -> dict[str, Any]:
        return dict(self.record.fingerprints)

    def find(self, metric: str, node: str, subject: str | None, test: str | None = None) -> MetricResult | None:
        """The baseline's check of this metric on this node and subject (GPU, HCA port, ...): the same
        test's if several, else the only one."""
        candidates = self._index.get((metric, node, subject), [])
        if test is not None:
            same = [c for c in candidates if c.test == test]
            if same:
                return same[0]
        return candidates[0] if len(candidates) == 1 else None

    def trajectory(self, node: str, gpu: str | None, profile: str = "small") -> dict[str, Any] | None:
        """This GPU's fine-tune trajectory of ``profile`` in the baseline run (the ``train_trajectory``
        figure's exact losses, weights' sha256 and stack key), or None when that run recorded none for
        it. Records from before the real-scale run carry no profile: theirs is the small model's."""
        for entry in self._index.get(("train_trajectory", node, gpu), []):
            extra = entry.extra if isinstance(entry.extra, dict) else {}
            if extra.get("losses") and (extra.get("stack") or {}).get("profile", "small") == profile:
                return extra
        return None

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

    def compare(self, result: MetricResult) -> Comparison:
        """``result`` against the baseline's same check, in the metric's direction: the one comparison
        with the baseline (the judge carries it on the check; readers never compare again).

        ``regressed`` when worse beyond tolerance. Metrics judged by equality (``better: equal``) and
        non-numbers never regress here: a changed value of those is a configuration change (``changed``),
        shown in the side-by-side table and the fingerprint diff, and judged by its own limit.
        """
        better, tolerance = self._direction_and_tolerance(result)
        entry = self.find(result.metric, result.node, result.subject, result.test)
        if entry is None:
            return Comparison(None, self.name, "new", None, tolerance, better)
        now, base = number(result.value), number(entry.value)
        delta = _delta_pct(base, now) if now is not None and base is not None else None
        if delta is None or better == "equal":
            status = "same" if entry.value == result.value else "changed"
        elif (delta < -tolerance and better == "higher") or (delta > tolerance and better == "lower"):
            status = "regressed"
        elif (delta > tolerance and better == "higher") or (delta < -tolerance and better == "lower"):
            status = "improved"
        else:
            status = "within tolerance"
        return Comparison(entry.value, self.name, status, delta, tolerance, better)

    def not_measured(self, checks: Iterable[MetricResult]) -> list[MetricResult]:
        """The baseline's checks on the nodes of ``checks`` that this run did not make (no comparison)."""
        seen = {(c.metric, c.node, c.subject) for c in checks}
        nodes = {key[1] for key in seen}
        return [
            entries[0]
            for key, entries in sorted(self._index.items(), key=lambda kv: tuple(map(str, kv[0])))
            if key not in seen and key[1] in nodes
        ]

    def fingerprint_changes(self, current: Mapping[str, Any]) -> list[FingerprintChange]:
        return fingerprint_diff(self.fingerprints, current)


def load_session_baseline(settings: Settings, reports_dir: Path, thresholds: Thresholds) -> Baseline | None:
    """The ``--baseline`` record of this session, read at configure time (``latest`` means the record
    ``latest.json`` held before this run overwrites it); None when no baseline was asked for."""
    if not settings.baseline:
        return None
    runs_dir = settings.run_record.parent if settings.run_record else reports_dir / "runs"
    source = settings.sources.get("baseline", "--baseline")
    return Baseline.load(resolve_baseline_path(settings.baseline, runs_dir, source), thresholds, source)


BASELINE_KEY = pytest.StashKey["Baseline | None"]()
