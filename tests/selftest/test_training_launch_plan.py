"""The fine-tune launch plan the training tests ask for (``gpuaccept.training.finetune_launch``), without a cluster:
which strategies a launch trains, its arguments and folders, when it does not apply, how a launch's records are
read per strategy."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.contracts.records import RankRecord
from gpuaccept.dispatch.result import parse_records
from gpuaccept.errors import MeasurementError
from gpuaccept.probes.specs import FINETUNE
from gpuaccept.training.budget import NO_PLAN_S, LaunchPlan, StrategyWork, launch_limit, plan_arg, read_plan
from gpuaccept.training.config import FIXTURES
from gpuaccept.training.finetune_launch import (
    CPU_RANKS_PER_NODE,
    launch_absent,
    not_applicable,
    plan_launch,
    stage_runs,
    strategy_records,
)
from gpuaccept.training.plan import FinetunePlan, Store
from tests.selftest.h100_lines import h100_judge

pytestmark = pytest.mark.selftest

REPORTS = Path("/suite/reports")
CKPT = Path("/models/llama")


def _record(node: str, rank: int, data: dict[str, object]) -> RankRecord:
    return RankRecord(node=node, rank=rank, world_size=2, local_rank=rank, gpu=None, data=dict(data))


def test_a_node_trains_every_gpu_alone_then_ddp_and_fsdp() -> None:
    launch = plan_launch("node", ["n1"], 8, "default", None)
    assert (launch.tasks_per_node, launch.gpus_per_task, launch.ranks) == (8, 1, 8)
    assert launch.strategies == ["solo", "ddp", "fsdp"]
    assert launch.lifecycle
    assert launch.first("solo") and not launch.first("ddp")
    assert launch.holds_fsdp_to_ddp("fsdp") and not launch.holds_fsdp_to_ddp("ddp")


def test_a_one_gpu_node_trains_its_gpu_alone_with_the_lifecycle() -> None:
    launch = plan_launch("node", ["n1"], 1, "default", None)
    assert launch.strategies == ["solo"]
    assert launch.lifecycle  # its own run is the run with the lifecycle
    assert not launch.holds_fsdp_to_ddp("fsdp")


def test_a_cpu_node_trains_gloo_ranks_and_no_fsdp_memory_check() -> None:
    launch = plan_launch("node", ["n1"], 0, "default", None)
    assert (launch.tasks_per_node, launch.gpus_per_task) == (CPU_RANKS_PER_NODE, 0)
    assert not launch.gpu_run
    assert launch.strategies == ["solo", "ddp", "fsdp"]
    assert not launch.holds_fsdp_to_ddp("fsdp")  # gloo ranks have no GPU memory to compare


def test_the_multinode_launch_trains_ddp_and_fsdp_across_every_node() -> None:
    launch = plan_launch("multinode", ["n1", "n2"], 4, "default", None)
    assert launch.ranks == 8
    assert launch.strategies == ["ddp", "fsdp"]
    assert launch.lifecycle
    assert launch.first("ddp")
    assert launch.folder() == "8r-2nodes" and launch.folder("fsdp") == "fsdp-8r-2nodes"
    assert launch.out() == "8r-2nodes"


def test_whose_limits_judge_a_launch() -> None:
    assert plan_launch("node", ["n1"], 8, "default", None).judged_as == "small"
    assert plan_launch("node", ["n1"], 8, "default", CKPT).judged_as == "pretrained"
    assert plan_launch("node", ["n1"], 8, "scale", None).judged_as == "scale"


def test_a_node_launch_names_its_node_for_the_probe_so_one_fan_out_serves_every_node() -> None:
    launch = plan_launch("node", ["n1"], 2, "scale", None)
    assert launch.folder() == "scale-2r-n1" and launch.folder("solo") == "solo-scale-2r-n1"
    assert launch.out() == "scale-2r-{node}"
    other = plan_launch("node", ["n2"], 2, "scale", None)
    assert launch.args(REPORTS, model_path=None, dataset=None, plan=None) == other.args(
        REPORTS, model_path=None, dataset=None, plan=None
    )


def test_the_probe_arguments() -> None:
    launch = plan_launch("node", ["n1"], 2, "default", None)
    assert launch.args(REPORTS, model_path=None, dataset=None, plan=None) == [
        "--strategy",
        "solo,ddp,fsdp",
        "--out",
        "/suite/reports/training/2r-{node}",
    ]
    ckpt = plan_launch("node", ["n1"], 2, "default", CKPT)
    data = Path("/data/chat.jsonl")
    plan = LaunchPlan((StrategyWork("solo", 10, 512, 1234.5, "floor"),), lifecycle=True, serving=False)
    assert ckpt.args(REPORTS, model_path=CKPT, dataset=data, plan=plan)[4:] == [
        "--model-path",
        str(CKPT),
        "--dataset",
        str(data),
        *plan_arg(plan),
    ]
    scale = plan_launch("multinode", ["n1", "n2"], 8, "scale", None)
    assert scale.args(REPORTS, model_path=None, dataset=None, plan=None) == [
        "--strategy",
        "ddp,fsdp",
        "--out",
        "/suite/reports/training/scale-16r-2nodes",
        "--profile",
        "scale",
    ]


def test_the_launch_carries_its_plan_and_the_spec_derives_its_limit_from_it() -> None:
    """The ``--plan`` argument reads back as the plan it was written from; the spec's limit is the plan's, and a
    launch without one (no floor declared) gets the spec's default."""
    solo, ddp = StrategyWork("solo", 10, 512, 1234.54, "floor"), StrategyWork("ddp", 10, 512, 999.0, "floor")
    plan = LaunchPlan((solo, ddp), lifecycle=True, serving=True, storage=(("saved", 3.5),))
    args = ["--strategy", "solo,ddp", *plan_arg(plan)]
    assert read_plan(args[-1]) == plan
    assert FINETUNE.limit(args, 8) == launch_limit(plan)
    assert FINETUNE.limit(args[:2], 8).seconds == NO_PLAN_S
    assert plan.solo_floor == 1234.5  # the probe holds every GPU's own run to it before DDP
    assert LaunchPlan((solo,), lifecycle=True, serving=False).solo_floor is None  # nothing node-wide to hold back
    assert LaunchPlan((ddp,), lifecycle=True, serving=False).solo_floor is None  # no solo run


def test_the_7b_class_run_needs_gpus_and_gives_way_to_a_checkpoint() -> None:
    assert launch_absent(plan_launch("node", ["n1"], 8, "scale", None), None) is None
    assert launch_absent(plan_launch("node", ["n1"], 0, "default", None), None) is None
    cpu = launch_absent(plan_launch("multinode", ["n1", "n2"], 0, "scale", None), None)
    assert cpu == "not applicable: the 7B-class fine-tune needs GPUs; n1, n2 declares none"
    ckpt = launch_absent(plan_launch("node", ["n1"], 8, "scale", CKPT), CKPT)
    assert ckpt == "not applicable: --model-path given: the checkpoint is the real-scale fine-tune"


def _recorded_launch() -> dict[str, Any]:
    """The CPU recording's launch of solo, DDP and FSDP (``fixtures/training/finetune-small-cpu.out``)."""
    (record,) = parse_records("finetune", (FIXTURES / "finetune-small-cpu.out").read_text(), 1, ())
    return copy.deepcopy(record.data)


def test_each_strategy_reads_its_own_figures_of_the_launch() -> None:
    launch = _recorded_launch()
    launch["strategies"]["fsdp"] = None  # a launch of solo and DDP
    launch["strategies"]["ddp"]["losses"] = [2.0]
    single = {**launch["strategies"]["ddp"], "losses": [3.0], "phases": launch["phases"], "process_wall_s": 1.0}
    records = [_record("n1", 0, launch), _record("n1", 1, single)]  # a launch of one strategy: at the top level
    ddp = strategy_records(records, "ddp")
    assert [r.trained["losses"] for r in ddp] == [[2.0], [3.0]]
    assert [(r.node, r.rank) for r in ddp] == [("n1", 0), ("n1", 1)]
    with pytest.raises(MeasurementError, match=r"n1 rank 1: the finetune result holds no solo run \(has \['ddp'\]\)"):
        strategy_records(records, "solo")
    with pytest.raises(
        MeasurementError, match=r"n1 rank 0: the finetune result holds no fsdp run \(has \['ddp', 'solo'\]\)"
    ):
        strategy_records(records, "fsdp")


def test_a_stopped_launchs_stages_are_held_to_a_run_naming_the_field() -> None:
    """What a launch stopped at its limit had sent, strategy by strategy, is a run of the contract or an ERROR."""
    solo = _recorded_launch()["strategies"]["solo"]
    (run,) = stage_runs([_record("n1", 0, solo)])
    assert run.trained["strategy"] == "solo"
    del solo["tokens_per_s"]
    with pytest.raises(
        MeasurementError, match=r"probe finetune: n1 rank 0: stage is not a run: field run.tokens_per_s"
    ):
        stage_runs([_record("n1", 0, solo)])


def test_what_the_gpus_declare_not_applicable_is_named_once_each() -> None:
    too_small: dict[str, object] = {
        "outcome": "not_applicable",
        "not_applicable": "24 GiB is too little for the 7B-class model",
    }
    records = [_record("n1", 0, too_small), _record("n1", 1, too_small), _record("n1", 2, _recorded_launch())]
    assert not_applicable(records) == "not applicable: 24 GiB is too little for the 7B-class model"
    assert not_applicable([_record("n1", 0, _recorded_launch())]) is None


def test_the_plan_holds_the_floors_the_weights_storage_work_and_the_limit() -> None:
    """The 7B-class launch of an 8-GPU H100 node, planned: a GPU's own floor is train_mfu_pct's 30% of 989 TFLOPS
    at the model's FLOPs a token (31,716,278,272 in the H100 recording's model_flops), the merged weights are its
    frozen matmul weights (7,070,285,824 there) and input embedding (3,584 x 152,064) in bf16, moved at the
    declared filesystems' rates; the limit adds that storage work to the steps at the floors."""
    plan = FinetunePlan.of(
        h100_judge(), plan_launch("node", ["n1"], 8, "scale", None), None, Store("m", 2, 4), Store("s", 5, 10)
    )
    assert plan.launch_plan is not None and plan.launch_plan.solo_floor == pytest.approx(
        0.30 * 989e12 / 31716278272, abs=0.1
    )
    assert plan.weight_bytes == (7070285824 + 3584 * 152064) * 2
    gb = (7070285824 + 3584 * 152064) * 2 / 1e9
    assert plan.storage == (
        ("merged weights saved and cold-started", round(gb / 2 + gb / 4, 1)),
        ("copied to scratch and cold-started", round(gb / 5 + gb / 10, 1)),
    )
    # the limit as the spec derives it from the launch's arguments, the plan among them
    limit = FINETUNE.limit(plan.launch.args(REPORTS, model_path=None, dataset=None, plan=plan.launch_plan), 8)
    assert "merged weights saved and cold-started 11.4 s" in limit.basis
    unsaved = FinetunePlan.of(h100_judge(), plan.launch, None).launch_plan
    assert unsaved is not None
    assert limit.seconds == pytest.approx(launch_limit(unsaved).seconds + 1.25 * (11.4 + 4.6), abs=0.2)
    # a checkpoint on CPU ranks: its speed is reported, not judged; no floor, no plan (the spec's default limit)
    cpu = FinetunePlan.of(h100_judge(), plan_launch("node", ["n1"], 0, "default", CKPT), CKPT)
    assert cpu.launch_plan is None
