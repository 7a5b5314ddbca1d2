"""One fine-tune launch trains every rank alone, then DDP and FSDP, and runs the lifecycles side by side.

A short CPU run (2 gloo ranks, a few steps) through the local launcher: each rank's solo run is its own
world of one (full data order, nothing written), the DDP and FSDP lifecycles land on two different
ranks of rank 0's node and come back in rank 0's record, and the launch's phases add up to the
process's wall time.
"""

from __future__ import annotations

import pytest

from gpuaccept.dispatch.local import LocalLauncher
from gpuaccept.dispatch.step import Step
from gpuaccept.probes import specs
from gpuaccept.probes.specs import FINETUNE

pytestmark = pytest.mark.selftest


def test_solo_then_ddp_and_fsdp_in_one_launch(tmp_path):
    launcher = LocalLauncher(gpus_per_node=0)
    step = Step(
        spec=specs.FINETUNE,
        nodes=(launcher.node,),
        tasks_per_node=2,
        args=(
            "--strategy",
            "solo,ddp,fsdp",
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
            "--steps",
            "6",
            "--ckpt-every",
            "3",
            "--gen-tokens",
            "4",
        ),
        env={"OMP_NUM_THREADS": "1"},
        timeout_s=400,
    )
    result = launcher.run(step)
    rank0, rank1 = (FINETUNE.read(r).root for r in sorted(result.records, key=lambda r: r.rank))
    assert rank0["outcome"] == rank1["outcome"] == "strategies"
    for launched in (rank0, rank1):
        solo = launched["strategies"]["solo"]
        assert solo is not None and solo["outcome"] == "run"
        assert solo["world_size"] == 1 and solo["steps_done"] == 6
        assert solo["lifecycle"] is None, "a solo run of several ranks has no lifecycle"
        ddp = launched["strategies"]["ddp"]
        assert ddp is not None and ddp["outcome"] == "run" and ddp["world_size"] == 2
    # every rank's solo run saw the same data in the same order from the same seed: the same losses
    assert rank0["strategies"]["solo"]["losses"] == rank1["strategies"]["solo"]["losses"]  # type: ignore[index]
    assert not (tmp_path / "solo").exists(), "a solo run writes nothing"
    assert (tmp_path / "original" / "config.json").is_file(), "DDP and FSDP share one saved original"
    lifecycles = [rank0["strategies"][name]["lifecycle"] for name in ("ddp", "fsdp")]  # type: ignore[index]
    assert all(c is not None and c["outcome"] == "compared" for c in lifecycles), lifecycles
    assert {c["lifecycle_rank"] for c in lifecycles} == {0, 1}, "the lifecycles ran side by side"
    for lifecycle in lifecycles:
        assert lifecycle["original_kept"] and lifecycle["reload_eval_delta"] < 0.01
    phases = rank0["phases"]
    parts = sum(v for k, v in phases.items() if k != "process_wall_s")
    assert abs(parts - phases["process_wall_s"]) < 0.5, phases
    assert phases["startup_s"] > 0 and phases["measure_s"] > 0 and phases["lifecycle_s"] > 0
