"""The fleet-agreement rule for fine-tunes (``gpuaccept.verdicts.trajectory``, comparing through
``gpuaccept.judging.trajectory``) and its test hook.

Every GPU of one SKU and software stack must train the same loss curve bit for bit; a departing GPU
fails naming node, GPU, first departing step and by how much; a group of one with no baseline passes
nothing; against a ``--baseline`` the same stack must retrain the same curve, a changed stack is shown
beside what changed. Pure judging over hand-made trajectories, no training.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.judging.baseline import Baseline
from gpuaccept.judging.judge import Judge
from gpuaccept.judging.trajectory import Trajectory, departure, majority, stack_key
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import RunRecord
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.training.lifecycle import _reduction_pct
from gpuaccept.training.perturb import Perturbation, parse
from gpuaccept.verdicts.trajectory import judge_fleet

from .ending import ends

CURVE = (6.8982, 5.1, 3.9, 2.367, 1.2, 0.6, 0.2, 0.09, 0.05, 0.04748)


def _print(
    gpu: str = "NVIDIA H100 80GB HBM3", torch: str = "2.11.0+cu130", driver: str = "580.159.04"
) -> dict[str, Any]:
    return {
        "gpus": {"count": 1, "driver": driver, "cuda_driver": "13.0", "devices": [{"name": gpu, "vbios": "x"}]},
        "stack": {"torch": torch, "torch_cuda": "13.0", "nccl": "2.28.9", "transformers": "5.23.0", "peft": "0.21.2"},
        "kernel": "6.18",
        "os": "Debian",
        "cpu": {"model": "EPYC"},
        "arch": "x86_64",
    }


def _judge(baseline: Baseline | None = None) -> tuple[Judge, list[MetricResult]]:
    thresholds = load_thresholds()
    sink: list[MetricResult] = []
    return Judge(thresholds, lambda node: "H100-SXM-80GB", sink.append, "test_finetune_agreement", baseline), sink


def _bent(step: int, by: float = 1e-6) -> tuple[float, ...]:
    """CURVE with every loss from ``step`` (1-based) on off by a relative ``by``."""
    return tuple(v * (1 + by) if i + 1 >= step else v for i, v in enumerate(CURVE))


def _checks(sink: list[MetricResult], metric: str) -> dict[str, MetricResult]:
    return {f"{r.node}/{r.subject}": r for r in sink if r.metric == metric}


def test_departing_gpu_fails_naming_node_gpu_step_and_size():
    judge, sink = _judge()
    runs = [Trajectory(f"node{n}", str(g), CURVE, "aa") for n in (1, 2) for g in (0, 1)]
    runs[3] = Trajectory("node2", "1", _bent(6), "bb")
    prints = {"node1": _print(), "node2": _print()}
    assert judge_fleet(judge, runs, prints) == 4
    checks = _checks(sink, "train_trajectory_rel_diff")
    assert [k for k, r in checks.items() if r.verdict == "fail"] == ["node2/1"]
    bad = checks["node2/1"]
    assert bad.extra["first_step"] == 6 and bad.extra["agreeing"] == "3 of 4"
    assert "first departs at step 6" in bad.reason and "1e-06 relative" in bad.reason, bad.reason
    assert math.isclose(bad.value, 1e-6, rel_tol=1e-6)
    assert all(r.value == 0.0 and r.verdict == "pass" for k, r in checks.items() if k != "node2/1")
    (group,) = [r for r in sink if r.metric == "train_trajectory_group"]
    assert group.verdict == "info" and group.value == 4 and "node2 GPU 1" in group.extra["members"]
    with ends(judge, "failed", match=r"node2 GPU 1: train_trajectory_rel_diff.*step 6"):
        pass


def test_groups_split_by_gpu_model_and_stack():
    judge, sink = _judge()
    runs = [Trajectory("node1", "0", CURVE), Trajectory("node2", "0", _bent(2, 0.03)), Trajectory("node3", "0", CURVE)]
    prints = {"node1": _print(), "node2": _print(torch="2.13.0+cu130"), "node3": _print()}
    judge_fleet(judge, runs, prints)
    groups = [r for r in sink if r.metric == "train_trajectory_group"]
    assert sorted(g.value for g in groups) == [1, 2]
    # node2 trains another torch: alone in its group, judged against nobody
    assert set(_checks(sink, "train_trajectory_rel_diff")) == {"node1/0", "node3/0"}
    with ends(judge, "passed"):
        pass


def test_group_of_one_without_baseline_passes_nothing():
    judge, sink = _judge()
    assert judge_fleet(judge, [Trajectory("node1", "0", CURVE, "aa")], {"node1": _print()}) == 0
    assert {r.verdict for r in sink} == {"info"}
    assert not any(r.judged for r in sink)


def test_no_majority_fails_every_member():
    judge, sink = _judge()
    runs = [Trajectory("node1", "0", CURVE), Trajectory("node1", "1", _bent(3))]
    judge_fleet(judge, runs, {"node1": _print()})
    checks = _checks(sink, "train_trajectory_rel_diff")
    assert {r.verdict for r in checks.values()} == {"fail"}
    assert all("no majority" in r.reason and "step 3" in r.reason for r in checks.values())


def test_same_losses_other_weights_fail():
    judge, sink = _judge()
    runs = [Trajectory("node1", str(g), CURVE, "aa") for g in range(3)] + [Trajectory("node1", "3", CURVE, "bb")]
    judge_fleet(judge, runs, {"node1": _print()})
    bad = _checks(sink, "train_trajectory_rel_diff")["node1/3"]
    assert bad.verdict == "fail" and "sha256 bb != aa" in bad.reason


def test_missing_steps_and_nan_depart():
    short = Trajectory("n", "0", CURVE[:7])
    dep = departure(short, Trajectory("n", "1", CURVE))
    assert dep.step == 8 and dep.value is None and math.isinf(dep.max_rel_diff)
    nan = Trajectory("n", "0", (*CURVE[:4], float("nan"), *CURVE[5:]))
    assert departure(nan, Trajectory("n", "1", CURVE)).step == 5
    assert departure(nan, nan).step is None, "a NaN equals itself bitwise here (the NaN check is elsewhere)"
    assert majority([nan, nan, short])[1] == 2


def _baseline(tmp_path: Path, losses: tuple[float, ...], fingerprint: dict[str, Any]) -> Baseline:
    record = {
        "started": "2026-11-23T21:00:00+00:00",
        "fingerprints": {"node1": fingerprint},
        "metrics": [
            {
                "metric": "train_trajectory",
                "unit": "steps",
                "sku": "H100-SXM-80GB",
                "node": "node1",
                "gpu": "0",
                "value": len(losses),
                "test": "tests/acceptance/test_training.py::test_finetune_agreement",
                "extra": {"losses": list(losses), "checksum": "aa", "stack": stack_key("H100-SXM-80GB", fingerprint)},
            }
        ],
    }
    return Baseline(RunRecord.from_dict(record), tmp_path / "run1.json", load_thresholds())


def test_one_gpu_against_its_baseline(tmp_path):
    baseline = _baseline(tmp_path, CURVE, _print())
    judge, sink = _judge(baseline)
    assert judge_fleet(judge, [Trajectory("node1", "0", _bent(11 - 4), "aa")], {"node1": _print()}) == 1
    (check,) = _checks(sink, "train_trajectory_baseline_rel_diff").values()
    assert check.verdict == "fail" and check.extra["first_step"] == 7
    assert "trajectory changed since run1.json: first departs at step 7" in check.reason, check.reason
    assert "no fingerprint field changed" in check.reason
    # the healthy rerun agrees with it
    judge, sink = _judge(baseline)
    with ends(judge, "passed"):
        judge_fleet(judge, [Trajectory("node1", "0", CURVE, "aa")], {"node1": _print()})


def test_two_gpus_two_curves_settled_by_the_baseline(tmp_path):
    """A 2-GPU node with GPU 1 perturbed: no majority, but GPU 0 retrained its baseline curve exactly."""
    baseline = _baseline(tmp_path, CURVE, _print())
    judge, sink = _judge(baseline)
    runs = [Trajectory("node1", "0", CURVE, "aa"), Trajectory("node1", "1", _bent(11 - 4), "bb")]
    judge_fleet(judge, runs, {"node1": _print()})
    checks = _checks(sink, "train_trajectory_rel_diff")
    assert checks["node1/0"].verdict == "pass"
    bad = checks["node1/1"]
    assert bad.verdict == "fail" and "whose curve the baseline run confirms" in bad.reason, bad.reason


def test_changed_stack_is_shown_beside_what_changed_not_judged(tmp_path):
    baseline = _baseline(tmp_path, CURVE, _print(driver="550.54"))
    judge, sink = _judge(baseline)
    assert judge_fleet(judge, [Trajectory("node1", "0", _bent(4, 0.02), "aa")], {"node1": _print()}) == 0
    (change,) = [r for r in sink if r.metric == "train_trajectory_baseline_change"]
    assert change.verdict == "info" and change.extra["first_step"] == 4
    assert "driver 550.54 -> 580.159.04 on node1" in change.extra["changed"]


def test_perturbation_hook_parsing():
    assert parse(None) is None and parse("") is None
    hook = parse("node=node2,rank=1,step=12")
    assert hook == Perturbation(step=12, node="node2", rank=1)
    assert hook.selects(node="node2", gpu=None, rank=1)
    assert not hook.selects(node="node1", gpu=None, rank=1)
    assert parse("gpu=1") == Perturbation(step=10, gpu=1)
    for bad in ("gpu", "gpu=x", "colour=1", "step=0"):
        with pytest.raises(ValueError, match="GPUACCEPT_TEST_PERTURB_TRAINING"):
            parse(bad)


def test_non_finite_perplexity_leaves_no_reduction():
    assert math.isnan(_reduction_pct(float("inf"), 1.3))
    assert math.isnan(_reduction_pct(1855.0, float("nan")))
    assert math.isclose(_reduction_pct(1855.0, 1.2656), 99.9318, rel_tol=1e-4)
