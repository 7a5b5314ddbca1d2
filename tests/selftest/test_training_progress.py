"""A slow GPU is named by its own progress, a hung one as a hang, and the others keep their verdicts.

Real fine-tune launches (gloo ranks on CPU) with the selftest knobs of ``gpuaccept.training.progress_reporter``:

- through the acceptance suite on the 2-node loopback cluster: node2's rank 1 sleeps after every step.
  The launch's limit follows from its plan at the CPU SKU's floor (``--probe-timeout x0.6`` scales it, to keep
  CI short); the launcher stops the fan-out step once that rank has not finished its solo run when a rank at
  the floor would have, and ``test_finetune_each_gpu[node2-default]`` is FAILED by that rank's speed check,
  whose value is the upper bound its progress proves. node2's rank 0 and both of node1's ranks finished their
  solo runs before the stop and are judged on their own figures: they pass.
- through the local launcher: rank 1 stops making progress at step 3; the step is stopped as a hang once no
  rank has written a progress line for the step's hang time, naming rank 1 and where it stood, long before
  the step's limit.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpuaccept.dispatch.local import LocalLauncher
from gpuaccept.dispatch.step import Step
from gpuaccept.errors import ProbeTimeout
from gpuaccept.probes import specs
from gpuaccept.training.budget import LaunchPlan, StrategyWork, plan_arg
from gpuaccept.training.progress_reporter import SLOW_RANK_ENV, STALL_RANK_ENV

from .conftest import repository_view, run_inner

#: the local launch's hang time: past the longest silent start-up seen on CI's loaded cores, far below the limit
HANG_S = 60.0


def test_slow_rank_is_failed_by_its_progress_bound_and_the_others_judged(dev_cluster, tmp_path: Path):
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    started = time.monotonic()
    run = run_inner(
        tmp_path,
        str(repository_view(tmp_path / "repo") / "tests" / "acceptance" / "test_training.py"),
        "-m",
        "acceptance",
        "-k",
        "finetune_each_gpu and default",
        "--launcher",
        "slurm",
        "--nodes",
        "2",
        "--probe-timeout",
        "x0.6",
        env={**dev_cluster.env, SLOW_RANK_ENV: "1:4@node2", "OMP_NUM_THREADS": "1"},
        timeout=900,
    )
    verdicts = run.verdicts()
    assert verdicts.get("test_finetune_each_gpu[node2-default]") == "failed", (verdicts, run.output[-3000:])
    assert verdicts.get("test_finetune_each_gpu[node1-default]") == "passed", (verdicts, run.output[-3000:])
    speed = [m for m in run.record["metrics"] if m["metric"] == "train_tokens_per_s_per_gpu_solo"]
    failed = [(m["node"], m["subject"]) for m in speed if m["verdict"] == "fail"]
    assert failed == [("node2", "cpu rank 1")], speed
    (slow,) = [m for m in speed if m["verdict"] == "fail"]
    assert "at most" in slow["extra"]["bound"] and "in solo at step" in slow["extra"]["progress"], slow
    assert "not done with solo" in slow["extra"]["stopped"], slow
    judged = sorted((m["node"], m["subject"]) for m in speed if m["verdict"] == "pass")
    assert judged == [("node1", "cpu rank 0"), ("node1", "cpu rank 1"), ("node2", "cpu rank 0")], speed
    # the step was stopped by the ranks' progress, well within its derived limit, and the record says so
    tests = run.record["tests"].values() if isinstance(run.record["tests"], dict) else run.record["tests"]
    steps = [s for t in tests for s in t.get("steps", []) if s["probe"] == "finetune"]
    assert steps and all(s["ratio"] is not None and s["ratio"] < 0.95 for s in steps), json.dumps(run.record["tests"])[
        :6000
    ]
    assert all("tokens/s" in s["basis"] and "x0.6 (--probe-timeout)" in s["basis"] for s in steps), steps
    assert time.monotonic() - started < 600


def test_hung_rank_is_named_as_a_hang_long_before_the_limit(tmp_path: Path):
    launcher = LocalLauncher(gpus_per_node=0)
    args = ("--strategy", "solo,ddp", "--device", "cpu", "--out", str(tmp_path), "--steps", "20", "--ckpt-every", "20")
    step = Step(
        spec=specs.FINETUNE,
        nodes=(launcher.node,),
        tasks_per_node=2,
        args=args,
        env={"GPUACCEPT_SELFTEST": "1", STALL_RANK_ENV: "1:3", "OMP_NUM_THREADS": "1"},
        timeout_s=280,
        phases=(("solo", 260.0), ("ddp", 270.0)),
        # a hang is silence from every rank, start-up's imports included: two ranks importing torch, transformers
        # and peft on CI's two busy cores printed nothing for 22 s (CI 2026-11-28), so 20 s named start-up a hang
        hang_s=HANG_S,
    )
    started = time.monotonic()
    with pytest.raises(ProbeTimeout) as info:
        launcher.run(step)
    elapsed = time.monotonic() - started
    message = str(info.value)
    assert "(a hang)" in message and "rank 1 " in message and "in solo step 3 of 20" in message, message
    reason = message.split(" limit: ", 1)[1].split("; ranks")[0]
    assert "rank 0 " not in reason, f"rank 0 only waited for rank 1: {message}"
    assert elapsed < 200, f"the hang took {elapsed:.0f} s to be named"


def _floor(tokens_per_s: float) -> LaunchPlan:
    """A plan of solo then DDP whose GPUs' own runs are held to ``tokens_per_s`` (what ``--plan`` carries)."""
    works = tuple(StrategyWork(name, 12, 512, tokens_per_s, "the test's floor") for name in ("solo", "ddp"))
    return LaunchPlan(works, lifecycle=True, serving=False)


def test_a_gpu_below_its_floor_alone_is_not_trained_across_the_node(tmp_path: Path):
    """Rank 1's own run trains below the floor (1.5 s of sleep after every step, and a floor just under what
    rank 0 trains at): both ranks skip DDP and say why, naming rank 1 and its rate; rank 0's solo run stands."""
    launcher = LocalLauncher(gpus_per_node=0)
    args = ("--strategy", "solo,ddp", "--device", "cpu", "--out", str(tmp_path), "--steps", "12", "--ckpt-every", "12")
    env = {"GPUACCEPT_SELFTEST": "1", SLOW_RANK_ENV: "1:1.5", "OMP_NUM_THREADS": "1"}
    step = Step(
        specs.FINETUNE,
        (launcher.node,),
        tasks_per_node=2,
        args=(*args, *plan_arg(_floor(1000.0))),
        env=env,
        timeout_s=300,
    )
    result = launcher.run(step)
    for record in result.records:
        runs = record.data["strategies"]
        assert "steps_done" in runs["solo"], runs["solo"]
        why = runs["ddp"]["not_run"]
        assert "rank 1 on" in why and "below the floor of 1,000" in why and "rank 0" not in why, why
    rates = {r.rank: r.data["strategies"]["solo"]["tokens_per_s"] for r in result.records}
    assert rates[1] < 1000 < rates[0], rates
