"""Margins: how far a judged figure stands from its limit, and today's limits held to healthy GPU runs.

``fixtures/healthy-figures.json`` keeps the judged figures of whole-suite runs that came out ACCEPTED on
real GPUs (benchmarks/healthy_figures.py; docs/measurements.md names each run). Against today's limits for
each run's SKU and site file, no healthy figure may fail, and one within 5% of its limit must carry the
catalogue's reason (``tight_margin``); a reason no healthy run needs is stale and fails too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.report.summary_margins import margin_rows
from gpuaccept.results.metrics import MetricResult
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.thresholds.schema import TIGHT_MARGIN_PCT

ROOT = Path(__file__).resolve().parents[2]
RUNS = json.loads((ROOT / "fixtures/healthy-figures.json").read_text())["runs"]


def _check(value: float, lo: float | None = None, hi: float | None = None, verdict: str = "pass") -> MetricResult:
    return MetricResult("t", "m", value, "u", "node1", "H100", min=lo, max=hi, verdict=verdict)  # type: ignore[arg-type]


def test_margin_is_the_distance_to_the_nearest_limit_in_percent_of_it() -> None:
    assert _check(110, lo=100).margin_pct == pytest.approx(10.0)
    assert _check(90, hi=100).margin_pct == pytest.approx(10.0)
    assert _check(1.0, lo=0.95, hi=1.05).margin_pct == pytest.approx(4.76, abs=0.01)
    assert _check(90, lo=100, verdict="fail").margin_pct == pytest.approx(-10.0)  # beyond the limit: negative


def test_no_margin_without_a_numeric_limit_or_against_a_limit_of_zero() -> None:
    assert _check(0, hi=0).margin_pct is None  # a count that must be none sits on its limit
    assert _check(5).margin_pct is None
    assert _check(5, lo=1, verdict="info").margin_pct is None
    assert MetricResult("t", "m", "Enabled", "mode", "n", "H100", equal="Enabled", verdict="pass").margin_pct is None


def test_the_record_and_each_test_entry_carry_the_margin() -> None:
    check = _check(120, lo=100)
    assert check.to_dict()["margin_pct"] == 20.0
    assert check.check_entry()["margin_pct"] == 20.0
    assert MetricResult.from_dict(check.to_dict()).margin_pct == pytest.approx(20.0)


def test_the_summary_lists_each_check_at_its_tightest_with_the_reason_only_when_close() -> None:
    thresholds = load_thresholds()
    rows = margin_rows(
        [
            MetricResult("t", "gpu_pcie_width_max", 16, "lanes", "n1", "H100", "0", "gpu", min=16, verdict="pass"),
            MetricResult("t", "membw_tbps", 3.0, "TB/s", "n1", "H100", "0", "gpu", min=2.6, verdict="pass"),
            MetricResult("t", "membw_tbps", 2.7, "TB/s", "n1", "H100", "1", "gpu", min=2.6, verdict="pass"),
        ],
        thresholds.metrics,
    )
    assert [(r.check, r.where) for r in rows] == [("gpu_pcie_width_max", "n1 GPU 0"), ("membw_tbps", "n1 GPU 1")]
    assert rows[0].why_tight and rows[0].tight
    assert rows[1].why_tight is None and rows[1].tight


def _room(limit: Any, lowest: float, highest: float) -> float | None:
    """The margin a run's figures leave under ``limit`` (percent; the floor judged on the lowest figure, the
    ceiling on the highest), as the record computes it (``MetricResult.margin_pct``); None with no number."""
    sides = [_check(lowest, lo=limit.min).margin_pct, _check(highest, hi=limit.max).margin_pct]
    known = [side for side in sides if side is not None]
    return min(known) if known else None


def _limits(run: dict[str, Any]) -> dict[str, Any]:
    site = ROOT / run["site"] if run["site"] else None
    return load_thresholds(site).limits_for(run["sku"])


@pytest.mark.parametrize(
    "run", RUNS, ids=[f"{r['machine'].split(',')[0]} {r['date']} #{i}" for i, r in enumerate(RUNS)]
)
def test_todays_limits_pass_every_healthy_run_and_say_why_a_figure_sits_close(run: dict[str, Any]) -> None:
    assert run["verdict"].startswith("ACCEPTED")
    catalogue = load_thresholds().metrics
    limits = _limits(run)
    failing, unexplained = [], []
    for metric, (lowest, highest) in run["figures"].items():
        limit = limits.get(metric)
        if limit is None:
            continue
        room = _room(limit, lowest, highest)
        if room is None:
            continue
        if room < 0:
            failing.append(f"{metric}: {lowest}-{highest} against min {limit.min} max {limit.max}")
        elif room < TIGHT_MARGIN_PCT and not catalogue[metric].tight_margin:
            unexplained.append(f"{metric}: {room:.1f}% from its limit ({lowest}-{highest}; {limit.min}/{limit.max})")
    assert not failing, f"a healthy {run['machine']} run fails today's limits: {failing}"
    assert not unexplained, f"within {TIGHT_MARGIN_PCT}% of the limit without a stated reason: {unexplained}"


def test_every_stated_reason_is_needed_by_some_healthy_run() -> None:
    needed: set[str] = set()
    for run in RUNS:
        limits = _limits(run)
        for metric, (lowest, highest) in run["figures"].items():
            limit = limits.get(metric)
            if limit is None:
                continue
            room = _room(limit, lowest, highest)
            if room is not None and room < TIGHT_MARGIN_PCT:
                needed.add(metric)
    stated = {name for name, spec in load_thresholds().metrics.items() if spec.tight_margin}
    assert stated <= needed, (
        f"tight_margin stated where no healthy run sits within {TIGHT_MARGIN_PCT}%: {stated - needed}"
    )
