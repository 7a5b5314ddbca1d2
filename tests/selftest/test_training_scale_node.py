"""The 7B-class run's DDP and FSDP judging on a user's 8-GPU node, with no 8-GPU machine at hand.

Each node's records are built from a real result line: the 7B run of one H100 80GB HBM3 (2026-11-25,
``fixtures/training/finetune-scale-h100.out``), turned into 8 ranks with the speeds and memory measured for DDP
and FSDP2 on 2 x H100 80GB HBM3 (docs/measurements.md '2 x H100 80GB HBM3, 2026-11-25': DDP kept 97.6% of a GPU's
own speed, FSDP2 90.4%; FSDP2 saved 0.733-0.736 of the expected memory). What is checked is the judging: every rank by
the SKU's DDP/FSDP MFU floor, a slow GPU named even above the floor, the shards and the memory saving for 8
ranks.
"""

from __future__ import annotations

import dataclasses

import pytest

from gpuaccept.contracts.finetune import RankRun
from gpuaccept.verdicts.training import LaunchShape, judge_run

from .ending import ends
from .h100_lines import h100_judge, h100_run

pytestmark = pytest.mark.selftest

GIB = float(1 << 30)
#: measured on 2 x H100 80GB HBM3 (docs/measurements.md '2 x H100 80GB HBM3, 2026-11-25'): per-GPU speed over the
#: GPU alone
DDP_SPEED, FSDP_SPEED = 0.976, 0.904
#: DDP's peak there, and the share of FSDP2's expected saving it realised
DDP_PEAK_GIB, FSDP_SAVING = 72.68, 0.733


def _node(strategy: str, speed: list[float] | None = None) -> list[RankRun]:
    """8 ranks of one node for ``strategy``: the real one-GPU line at the measured speed ratio (``speed``: each
    rank's own factor on top of it), the shards and peak memory that strategy gives 8 ranks."""
    solo = h100_run("finetune-scale-h100.out")[0]
    ratio = DDP_SPEED if strategy == "ddp" else FSDP_SPEED
    data = solo.trained
    total = data["param_bytes_total"]
    state = total + 3 * 2 * data["trainable_params"]  # bf16 weights + the bf16 adapters' grads and Adam moments
    fsdp_peak = DDP_PEAK_GIB - FSDP_SAVING * (1 - 1 / 8) * state / GIB
    records = []
    for rank in range(8):
        factor = ratio * (speed[rank] if speed else 1.0)
        gpu = {**(solo.record.gpu or {}), "index": rank, "pci_bus_id": f"00000000:{0x18 + rank:02X}:00.0"}
        record = dataclasses.replace(solo.record, rank=rank, world_size=8, local_rank=rank, gpu=gpu)
        records.append(
            RankRun(
                record,
                {
                    **data,
                    "strategy": strategy,
                    "world_size": 8,
                    "tokens_per_s": data["tokens_per_s"] * factor,
                    "model_tflops_per_s": round(data["model_tflops_per_s"] * factor, 2),
                    "param_bytes_local": total // 8 if strategy == "fsdp" else total,
                    "peak_mem_gib": round(fsdp_peak if strategy == "fsdp" else DDP_PEAK_GIB, 3),
                },
            )
        )
    return records


SHAPE = LaunchShape("scale", "node", 8, True)


def test_a_healthy_8_gpu_node_passes_ddp_and_fsdp_by_mfu_shards_and_memory() -> None:
    judge = h100_judge()
    with ends(judge, "passed"):
        judge_run(judge, SHAPE, "ddp", _node("ddp"), 300.0)
    mfu = [r for r in judge.results if r.metric == "train_mfu_pct_ddp_node"]
    assert len(mfu) == 8 and all(r.verdict == "pass" for r in mfu)
    assert mfu[0].value == pytest.approx(100 * 356.57 * DDP_SPEED / 989, abs=0.01)
    judge = h100_judge()
    with ends(judge, "passed"):
        judge_run(judge, SHAPE, "fsdp", _node("fsdp"), 300.0, _node("ddp"))
    checks: dict[str, list[object]] = {}
    for r in judge.results:
        checks.setdefault(r.metric, []).append(r.value)
    assert checks["train_fsdp_shard_ratio"] == [1.0] * 8
    assert checks["train_fsdp_mem_saving_ratio"] == [pytest.approx(FSDP_SAVING, abs=0.001)] * 8
    assert len(checks["train_mfu_pct_fsdp_node"]) == 8


def test_one_slow_gpu_of_eight_is_named_though_it_clears_the_floor() -> None:
    """GPU 5 at 0.87x its siblings: 30.6% MFU under DDP clears the 30% floor, but is more than 10% below the node's
    median (35.2%): it fails, named, and the seven others pass."""
    judge = h100_judge()
    speed = [1.0] * 8
    speed[5] = 0.87
    with ends(judge, "failed", match=r"GPU 5 \(00000000:1D:00.0\).*train_mfu_pct_ddp_node") as ended:
        judge_run(judge, SHAPE, "ddp", _node("ddp", speed), 300.0)
    assert "GPU 4" not in ended.value and "GPU 6" not in ended.value
    slow = next(r for r in judge.results if r.metric == "train_mfu_pct_ddp_node" and str(r.subject).startswith("5 "))
    assert isinstance(slow.value, float) and slow.value >= 30 and "median" in slow.reason


def test_a_rank_holding_the_whole_model_under_fsdp_fails_the_shard_check() -> None:
    """One rank of eight that did not shard (it holds every parameter) is named by the shard ratio."""
    judge = h100_judge()
    records = _node("fsdp")
    whole = records[3].trained
    records[3] = dataclasses.replace(records[3], run={**whole, "param_bytes_local": whole["param_bytes_total"]})
    with ends(judge, "failed", match=r"GPU 3 .*train_fsdp_shard_ratio = 8"):
        judge_run(judge, SHAPE, "fsdp", records, 300.0, _node("ddp"))
