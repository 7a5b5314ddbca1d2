"""The calibration rule on figures shaped like an 8-GPU node's: the floor, and the refusals that keep a
bad node, GPU or run from setting it (docs/calibrate.md)."""

from __future__ import annotations

import pytest

from gpuaccept.calibrate.rule import Refusal, Sample, calibrate_metric, round_sig

pytestmark = pytest.mark.selftest


def samples(
    base: float = 700.0, *, node_factor: float = 1.0, gpu_factor: float = 1.0, glitch: float = 1.0
) -> list[Sample]:
    """2 nodes x 4 GPUs x 3 runs, +-1% apart; node b (all its GPUs), GPU 3 of a, or run 2 of a GPU 0 scaled."""
    out = []
    for node in ("a", "b"):
        for gpu in range(4):
            for run in range(3):
                value = base * (1 + 0.005 * ((gpu + run) % 3 - 1))
                value *= node_factor if node == "b" else 1.0
                value *= gpu_factor if (node, gpu) == ("a", 3) else 1.0
                value *= glitch if (node, gpu, run) == ("a", 0, 2) else 1.0
                out.append(Sample(round(value, 2), node, str(gpu), f"run-{run + 1}.json"))
    return out


def test_floor_is_min_minus_k_sd_capped_by_the_straggler_pct() -> None:
    cal = calibrate_metric("matmul_bf16_tflops", samples(), better="higher", pct=10, k=3)
    values = [float(s.value) for s in samples()]
    assert cal.low == min(values) and cal.count == 24
    assert cal.min is not None and cal.min <= min(values)
    assert cal.min == round_sig(max(cal.low - 3 * cal.stdev, cal.median * 0.9), down=True)  # type: ignore[operator]
    assert cal.min > cal.median * 0.9  # a tight spread: min - 3 sd is above the cap
    noisy = calibrate_metric("x", samples(glitch=0.93), better="higher", pct=10, k=3)
    assert noisy.min == round_sig(noisy.median * 0.9, down=True)  # type: ignore[operator]  # capped


def test_ceiling_for_lower_is_better() -> None:
    cal = calibrate_metric("train_wall_s", samples(40.0), better="lower", pct=10, k=3)
    assert cal.max is not None and cal.max >= cal.high  # type: ignore[operator]
    assert cal.max <= round_sig(cal.median * 1.1, down=False)  # type: ignore[operator]


def test_slow_node_refuses_naming_it() -> None:
    with pytest.raises(Refusal, match=r"node b: median 560 vs 700 on the other nodes"):
        calibrate_metric("matmul_bf16_tflops", samples(node_factor=0.8), better="higher", pct=10, k=3)


def test_slow_gpu_refuses_naming_it() -> None:
    with pytest.raises(Refusal, match=r"a GPU 3: median 595 vs 700 on a's other GPUs"):
        calibrate_metric("matmul_bf16_tflops", samples(gpu_factor=0.85), better="higher", pct=10, k=3)


def test_one_bad_run_refuses_naming_it() -> None:
    with pytest.raises(Refusal, match=r"a GPU 0 in run-3.json: 5\d\d(\.\d+)? vs median 700"):
        calibrate_metric("matmul_bf16_tflops", samples(glitch=0.8), better="higher", pct=10, k=3)


def test_equal_metrics_must_agree() -> None:
    same = [Sample("Enabled", n, "0", "r1") for n in ("a", "b")]
    assert calibrate_metric("gpu_ecc_mode", same, better="equal", pct=10, k=3).equal == "Enabled"
    with pytest.raises(Refusal, match=r"most read Enabled.*\n  c GPU 0 in r1: Disabled"):
        calibrate_metric("gpu_ecc_mode", [*same, Sample("Disabled", "c", "0", "r1")], better="equal", pct=10, k=3)


def test_round_sig() -> None:
    assert round_sig(693.87, down=True) == 693 and round_sig(693.87, down=False) == 694
    assert round_sig(0.041478, down=True) == 0.0414 and round_sig(0.0, down=True) == 0.0
