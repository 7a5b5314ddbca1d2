"""Time limits follow from the plan, and where each rank stood decides how a stopped launch is read.

Pure logic, no cluster: the fine-tune launch's limit from its steps, tokens and floors (``training.budget``);
``--probe-timeout`` scaling and capping every declared limit (``timelimits``); every probe the acceptance
suite runs declaring a limit (``probes.specs``) and no acceptance test writing its own; the launcher's
watch stopping a launch once a rank is proven behind its floor or the launch is hung (``training.watch``);
the bound a stopped rank's progress proves and how it is judged (``verdicts.launch_time``); and the FLOPs a
launch is planned with equal to those its model counts (``training.flops``).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.contracts.progress_line import Progress, format_progress, read_progress
from gpuaccept.dispatch.step import Step, step_limits
from gpuaccept.probes import specs
from gpuaccept.probes.specs import SPECS, ProbeSpec
from gpuaccept.timelimits import TimeLimit, TimeoutRule
from gpuaccept.training.budget import FIXED_S, MARGIN, LaunchPlan, StrategyWork, launch_limit
from gpuaccept.training.watch import standing, stands
from gpuaccept.verdicts.launch_time import judge_unfinished
from gpuaccept.verdicts.training import LaunchShape

REPO = Path(__file__).resolve().parents[2]


def _plan(rate: float = 8192.0) -> LaunchPlan:
    works = tuple(StrategyWork(name, 100, 8192, rate, "a floor") for name in ("solo", "ddp", "fsdp"))
    return LaunchPlan(works, lifecycle=True, serving=True)


def test_launch_limit_is_the_plan_at_the_floor_plus_fixed_costs_with_margin():
    """100 steps of 8,192 tokens at 8,192 tokens/s is 100 s a strategy; three of them and the fixed costs."""
    limit = launch_limit(_plan())
    per_strategy = FIXED_S["set-up"] + FIXED_S["warm-up"] + FIXED_S["evals and checkpoints"] + 100.0
    fixed = FIXED_S["start-up"] + FIXED_S["lifecycle"] + FIXED_S["serving"]
    assert limit.seconds == pytest.approx(MARGIN * (fixed + 3 * per_strategy), abs=0.1)
    ends = dict(limit.phases)
    assert ends["solo"] == pytest.approx(MARGIN * (FIXED_S["start-up"] + per_strategy), abs=0.1)
    assert ends["solo"] < ends["ddp"] < ends["fsdp"] < limit.seconds
    assert "8,192 tokens/s (a floor)" in limit.basis and "lifecycle" in limit.basis
    # half the floor rate: twice the step time, the fixed costs unchanged
    slower = launch_limit(_plan(4096.0))
    assert slower.seconds - limit.seconds == pytest.approx(MARGIN * 300.0, abs=0.2)


def test_healthy_4xh200_launch_uses_under_two_thirds_of_its_limit():
    """The 7B launch on 4 H200s took 294.59 s (docs/measurements.md '4 x H200 SXM 141GB, 2026-11-27'); at the
    30/30/25% MFU floors of an H200 (989 TFLOPS dense BF16) and the 7B's FLOPs a token its limit leaves a third
    free."""
    config = json.loads((REPO / "fixtures" / "training" / "qwen2-7b.json").read_text())
    from gpuaccept.training.config import LINEAR_MODULES
    from gpuaccept.training.flops import flops_from_config

    flops = flops_from_config(config, 64, LINEAR_MODULES, 2048).per_token
    works = tuple(
        StrategyWork(name, 100, 8192, pct / 100 * 989e12 / flops, f"{pct}% MFU")
        for name, pct in (("solo", 30), ("ddp", 30), ("fsdp", 25))
    )
    limit = launch_limit(LaunchPlan(works, lifecycle=True, serving=True))
    assert 294.59 / limit.seconds < 2 / 3, limit.basis


@pytest.mark.parametrize(
    ("text", "seconds", "note"),
    [
        ("600", 600.0, "capped at 600 s"),
        ("2000", 1000.0, ""),
        ("x2", 2000.0, "x2"),
        ("x0.5,300", 300.0, "capped"),
    ],
)
def test_probe_timeout_scales_or_caps_every_limit(text, seconds, note):
    limit = TimeLimit(1000.0, "planned", (("solo", 400.0),), hang_s=100.0)
    ruled = TimeoutRule.parse(text).apply(limit)
    assert ruled.seconds == seconds and note in ruled.basis
    scale = 2.0 if text == "x2" else 0.5 if text.startswith("x0.5") else 1.0
    assert ruled.phases == (("solo", 400.0 * scale),) and ruled.hang_s == 100.0 * scale


@pytest.mark.parametrize("text", ["soon", "x0", "-5", "x"])
def test_probe_timeout_refuses_nonsense(text):
    with pytest.raises(ValueError):
        TimeoutRule.parse(text)


def test_every_probe_the_suite_runs_declares_its_limit_and_no_test_writes_one():
    """Every ``cluster.run*(SPEC, ...)`` and ``cluster.limit(SPEC)`` of tests/acceptance passes a spec of
    ``probes.specs`` (never a probe's name as a string), and none passes ``timeout_s`` or ``limit`` (the fine-tune's
    limit is its spec's, from the ``--plan`` its launch carries)."""
    named: set[str] = set()
    constants = {name for name, value in vars(specs).items() if isinstance(value, ProbeSpec)}
    for path in sorted((REPO / "tests" / "acceptance").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            if node.func.attr not in ("run", "run_shared", "run_each", "limit"):
                continue
            assert not any(k.arg in ("timeout_s", "limit") for k in node.keywords), (
                f"{path.name}:{node.lineno} writes a limit"
            )
            assert node.args, f"{path.name}:{node.lineno} names no probe"
            first = node.args[0]
            assert not isinstance(first, (ast.Constant, ast.JoinedStr)), (
                f"{path.name}:{node.lineno}: pass a spec of gpuaccept.probes.specs, not {ast.unparse(first)}"
            )
            if isinstance(first, ast.Name) and first.id in constants:
                named.add(getattr(specs, first.id).name)
            else:  # a helper's parameter: the specs its callers hand it are checked where they are named
                assert isinstance(first, ast.Name), f"{path.name}:{node.lineno}: {ast.unparse(first)}"
    assert named and named <= set(SPECS), sorted(named - set(SPECS))
    for probe, spec in SPECS.items():
        limit = spec.limit((), 8)
        assert limit.seconds > 0 and limit.basis, probe
        assert spec.module == f"gpuaccept.probes.{probe}" and (REPO / (spec.module.replace(".", "/") + ".py")).is_file()


def test_a_step_without_a_limit_gets_its_probes_declared_one():
    burn = Step(specs.MATMUL, ("node1",), args=("--burn-in", "600"))
    assert burn.timeout_s == 780 and "--burn-in 600" in burn.limit_basis
    assert Step(specs.HYGIENE, ("node1",)).timeout_s == specs.HYGIENE.limit((), 0).seconds
    # a selftest's own probe has a spec of its own, with its limit, outside the table the product launches
    assert Step(specs.FAULTS, ("node1",)).timeout_s == 300 and "selftest" in specs.FAULTS.limit((), 0).basis
    assert specs.SELFTEST_SPECS and not set(specs.SELFTEST_SPECS) & set(SPECS)
    assert Step(specs.HYGIENE, ("node1",), timeout_s=7).timeout_s == 7


def test_the_record_keeps_limit_wall_and_ratio():
    from gpuaccept.dispatch.result import ProbeResult

    step = Step(specs.FINETUNE, ("node1",), timeout_s=400.0, limit_basis="planned")
    result = ProbeResult("finetune", [], ("node1",), 0, "", "", 250.0)
    assert step_limits(step, result) == {
        "probe": "finetune",
        "nodes": ["node1"],
        "limit_s": 400.0,
        "basis": "planned",
        "wall_s": 250.0,
        "ratio": 0.625,
    }


# ---- where each rank stood -------------------------------------------------------------------------------


def _lines(*rows: tuple[str, int, str, int, int, float]) -> str:
    return "\n".join(
        "3: " + format_progress(Progress(node, rank, phase, step, steps, t, rank))
        for node, rank, phase, step, steps, t in rows
    )


T0 = 1_700_000_000.0
PHASES = (("solo", 100.0), ("ddp", 200.0))


def _healthy_and_slow(slow_step: int, at: float) -> str:
    return _lines(
        ("node1", 0, "start-up", 0, 0, T0 + 1),
        ("node1", 1, "start-up", 0, 0, T0 + 1),
        ("node1", 0, "solo", 0, 100, T0 + 20),
        ("node1", 1, "solo", 0, 100, T0 + 20),
        ("node1", 0, "solo", 100, 100, T0 + 70),
        ("node1", 0, "ddp set-up", 0, 0, T0 + 71),
        ("node1", 1, "solo", slow_step, 100, T0 + at),
    )


def test_progress_lines_round_trip_behind_a_label():
    out = _healthy_and_slow(41, 95)
    assert [p.step for p in read_progress(out + "\nnoise GPUACCEPT_PROGRESS {broken\n")][-1] == 41


def test_watch_goes_on_while_every_rank_is_within_its_phase():
    out = _healthy_and_slow(41, 95)
    assert standing(out, PHASES, T0, T0 + 99, hang_s=180).reason == ""


def test_watch_stops_a_launch_once_a_rank_is_behind_its_floor_and_names_it():
    out = _healthy_and_slow(41, 95)
    stop = standing(out, PHASES, T0, T0 + 101, hang_s=180)
    assert stop.ranks == (("node1", 1),) and not stop.hang
    assert "rank 1 on node1, GPU 1 in solo step 41 of 100" in stop.reason and "not done with solo" in stop.reason


def test_watch_names_a_hang_by_the_rank_furthest_behind():
    """Rank 1 stalled in solo; rank 0 waits for it in DDP's set-up: both silent, rank 1 is the hang."""
    out = _healthy_and_slow(3, 25)
    stop = standing(out, tuple((name, end + 1000) for name, end in PHASES), T0, T0 + 300, 180)
    assert stop.hang and stop.ranks == (("node1", 1),), stop
    assert "in solo step 3 of 100" in stop.reason and "no progress from any rank" in stop.reason


class _Judge:
    """The judging core's answers a stopped rank needs: the floor and the peak; what it was asked to record."""

    def __init__(self, floor: float) -> None:
        self.floor = floor
        self.calls: list[tuple[str, str, Any, dict[str, Any]]] = []

    def declared(self, metric: str, node: str, scale: int | None = None) -> Any:
        return type("Limit", (), {"min": self.floor})()

    def sku(self, node: str) -> str:
        return "NVIDIA H100 80GB HBM3"

    def datasheet(self, sku: str, name: str) -> float:
        return 989.0

    def check(self, metric: str, value: Any, *, node: str, **extra: Any) -> None:
        self.calls.append(("check", metric, value, extra))

    def unreadable(self, metric: str, why: str, *, node: str, **extra: Any) -> None:
        self.calls.append(("unreadable", metric, why, extra))


def test_a_slow_rank_is_failed_by_its_progress_bound():
    """Rank 1 finished 41 of 100 7B steps in the 81 s since solo began: at most 42 x 8,192 tokens / 81 s,
    far below a 30% MFU floor on an H100: a FAILED check on its speed metric, naming the bound."""
    out = _healthy_and_slow(41, 95)
    stand = stands(out, T0 + 101, hang_s=180)[("node1", 1)]
    judge = _Judge(floor=30.0)
    judge_unfinished(
        judge, LaunchShape("scale", "node", 2, True), "solo", stand, node="node1", gpu="1", model_path=None, why="x"
    )
    (kind, metric, value, extra) = judge.calls[0]
    assert kind == "check" and metric == "train_mfu_pct" and value < 30
    tokens_per_s = 42 * 8192 / 81
    assert value == pytest.approx(100 * tokens_per_s * 3.17e10 / 989e12, rel=0.05)
    assert "at most" in extra["bound"] and "at step 41 of 100" in extra["progress"]


def test_a_bound_that_proves_nothing_and_a_hang_are_unreadable():
    judge = _Judge(floor=0.001)  # a floor the bound does not get under: nothing proven
    stand = stands(_healthy_and_slow(41, 95), T0 + 101, hang_s=180)[("node1", 1)]
    judge_unfinished(
        judge, LaunchShape("scale", "node", 2, True), "solo", stand, node="node1", gpu="1", model_path=None, why="x"
    )
    hung = stands(_healthy_and_slow(3, 25), T0 + 300, hang_s=180)[("node1", 1)]
    judge_unfinished(
        judge, LaunchShape("scale", "node", 2, True), "solo", hung, node="node1", gpu="1", model_path=None, why="x"
    )
    assert [c[0] for c in judge.calls] == ["unreadable", "unreadable"]
    assert "(a hang)" in judge.calls[1][2]


# ---- the FLOPs a launch is planned with ----------------------------------------------------------------------


def test_flops_from_config_equals_the_built_models_count():
    """The count from config.json alone (what the login node plans with) equals ``count_flops`` on the model
    built from that config with LoRA on every linear layer (the tiny CPU config: the same code as the 7B's)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    from gpuaccept.training.config import LINEAR_MODULES
    from gpuaccept.training.flops import count_flops, flops_from_config

    raw = json.loads((REPO / "fixtures" / "training" / "qwen2-tiny.json").read_text())
    config = transformers.AutoConfig.for_model(**{k: v for k, v in raw.items() if k != "architectures"})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, target_modules=list(LINEAR_MODULES)))
    built = count_flops(model, config, 96)
    planned = flops_from_config(raw, 8, LINEAR_MODULES, 96)
    assert (planned.frozen_matmul_params, planned.adapter_params) == (built.frozen_matmul_params, built.adapter_params)
    assert planned.per_token == built.per_token
