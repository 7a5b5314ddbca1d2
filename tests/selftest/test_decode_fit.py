"""Decode and prefill floors of the SKUs never measured, held to the rule that predicts them.

The rule (``gpuaccept/inference/decode_fit.py``) is fitted on the lowest in-suite figures of the two SKUs
measured (``fixtures/healthy-figures.json``, whole-suite runs ACCEPTED on real GPUs); each unmeasured SKU's
floor in thresholds.yaml must be what it predicts at that SKU's datasheet bandwidth, and say on the check that
it was predicted. A new healthy run that lowers a measured SKU's figure changes the fit, and this test names
the floors to rewrite.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaccept.inference.decode_fit import DecodeFit, unmeasured_floor
from gpuaccept.thresholds.loader import load_thresholds

ROOT = Path(__file__).resolve().parents[2]
RUNS = json.loads((ROOT / "fixtures/healthy-figures.json").read_text())["runs"]
MEASURED = ("H100-SXM-80GB", "H200")
UNMEASURED = ("A100-SXM4-80GB", "L40S", "B200")


def _lowest(sku: str, metric: str) -> float:
    return min(run["figures"][metric][0] for run in RUNS if run["sku"] == sku and metric in run["figures"])


def _fit(metric: str) -> DecodeFit:
    thresholds = load_thresholds()
    points = [(thresholds.datasheet(sku, "hbm_tbps"), _lowest(sku, metric)) for sku in MEASURED]
    return DecodeFit.through(*points)  # type: ignore[arg-type]


def test_the_fit_goes_through_both_measured_skus_and_is_physical() -> None:
    thresholds = load_thresholds()
    for metric in ("infer_decode_mbu_pct", "infer_decode_mbu_pct_batch"):
        fit = _fit(metric)
        assert fit.plausible, f"{metric}: fixed cost {fit.fixed}, share {fit.share}"
        for sku in MEASURED:
            bandwidth = thresholds.datasheet(sku, "hbm_tbps")
            assert bandwidth is not None
            assert fit.mbu_pct(bandwidth) == pytest.approx(_lowest(sku, metric), abs=1e-6)


def test_a_faster_memory_reaches_a_smaller_share_of_it() -> None:
    fit = _fit("infer_decode_mbu_pct")
    assert fit.mbu_pct(0.864) > fit.mbu_pct(2.039) > fit.mbu_pct(3.35) > fit.mbu_pct(8.0)


@pytest.mark.parametrize("sku", UNMEASURED)
@pytest.mark.parametrize("metric", ["infer_decode_mbu_pct", "infer_decode_mbu_pct_batch"])
def test_an_unmeasured_skus_decode_floor_is_what_the_fit_predicts(sku: str, metric: str) -> None:
    thresholds = load_thresholds()
    bandwidth = thresholds.datasheet(sku, "hbm_tbps")
    assert bandwidth is not None
    limit = thresholds.skus[sku].limits[metric]
    want = unmeasured_floor(_fit(metric).mbu_pct(bandwidth))
    assert limit.min == want, f"thresholds.yaml skus.{sku}.limits.{metric}: min {limit.min}, the fit says {want}"
    assert limit.source.startswith("predicted, not measured")


@pytest.mark.parametrize("sku", UNMEASURED)
def test_an_unmeasured_skus_prefill_floor_is_the_lower_measured_share(sku: str) -> None:
    limit = load_thresholds().skus[sku].limits["infer_prefill_mfu_pct"]
    want = unmeasured_floor(min(_lowest(s, "infer_prefill_mfu_pct") for s in MEASURED))
    assert limit.min == want
    assert limit.source.startswith("predicted, not measured")
