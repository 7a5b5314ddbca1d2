"""Which judges one fine-tune launch's parts meet: every GPU's own run, a strategy across ranks, the fleet's agreement.

A launch trains several strategies in one process group (``gpuaccept.training.finetune_launch``); each test case
reads its strategy's share (``Part``) and hands it here. A launch stopped before it ended still has its finished
ranks judged and its unfinished ones bounded by their progress (``verdicts.launch_time``); a run across ranks is
judged whole or not at all. Why here and not in the test: the order and the conditions are the judging's (which
records meet which judge), so ``tests/acceptance/test_training.py`` only says what to run, where, and hands it over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuaccept.contracts.finetune import RankRun
from gpuaccept.errors import MeasurementError
from gpuaccept.judging.judge import Judge
from gpuaccept.judging.trajectory import Trajectory
from gpuaccept.thresholds.storage_site import StorageSection
from gpuaccept.training.finetune_launch import Part
from gpuaccept.training.plan import LaunchShape
from gpuaccept.verdicts.inference import Served
from gpuaccept.verdicts.launch_time import judge_unfinished_ranks
from gpuaccept.verdicts.resume import checkpoint_filesystem, judge_resume
from gpuaccept.verdicts.served_weights import judge_served_weights, models_filesystem, scratch_filesystem
from gpuaccept.verdicts.training import judge_each_gpu, judge_fleet_agreement, judge_not_trained, label

__all__ = ["SoloRuns", "ddp_of", "judge_across_ranks", "judge_own_runs"]


def judge_own_runs(judge: Judge, shape: LaunchShape, part: Part, storage: StorageSection, model: Path | None) -> bool:
    """Every GPU's own run of a launch (``judge_each_gpu``; the ranks that had not finished it bounded by their
    progress), then rank 0's resumed checkpoint and served weights on the site's filesystems. Whether the runs
    are whole (the launch was not stopped): only then are their summary and curves reported."""
    judge_unfinished_ranks(judge, shape, "solo", part.unfinished, model, part.why)
    if not part.runs:
        return False
    judge_each_gpu(judge, shape, part.runs, part.why)
    if part.why:
        return False
    rank0 = min(part.runs, key=lambda r: r.rank)  # rank 0 saved its own run's checkpoint and resumed it
    judge_resume(rank0.trained["checkpoint"], checkpoint_filesystem(storage), judge, rank0.node)
    served = rank0.trained["served_weights"]
    judge_served_weights(served, models_filesystem(storage), scratch_filesystem(storage), judge, rank0.node)
    return True


def judge_across_ranks(judge: Judge, shape: LaunchShape, strategy: str, part: Part, model: Path | None) -> bool:
    """A strategy's ranks that had not finished it, bounded by their progress; whether the run is then judged
    (``verdicts.training.judge_run``): every rank finished it, and none was held below its floor before it."""
    judge_unfinished_ranks(judge, shape, strategy, part.unfinished, model, part.why)
    if part.unfinished or not part.runs:  # a run across ranks is judged whole or not at all
        return False
    return not judge_not_trained(judge, shape, strategy, part.runs)


def ddp_of(part: Part) -> list[RankRun] | str:
    """The DDP run FSDP's memory is held against: its records when every rank finished it, else why not."""
    return part.runs if not part.unfinished else f"DDP did not finish: {part.why}"


@dataclass
class SoloRuns:
    """What ``test_finetune_agreement`` holds against each other: every GPU's own run on every node."""

    runs: list[Trajectory] = field(default_factory=list)
    served: list[Served] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    unmeasured: dict[str, str] = field(default_factory=dict)
    judged_as: str = "small"

    def add(self, node: str, judged_as: str, read: Callable[[], Part]) -> None:
        """One node's GPUs' own runs (``read``: its shared launch's solo part): their loss trajectories and what
        each served; a launch that failed is named (the other nodes are still judged), one stopped is noted."""
        self.judged_as = judged_as
        try:
            part = read()
        except MeasurementError as exc:
            self.failed.append(node)
            self.unmeasured[node] = str(exc)
            return
        if part.unfinished:  # the GPUs that finished still agree or not; the others are named by their test
            self.failed.append(node)
        for run in part.runs:
            data = run.trained
            self.runs.append(Trajectory(run.node, label(run), tuple(data["losses"]), data["checksum"], judged_as))
            serving = data["serving"]
            if serving is not None and serving["outcome"] == "served":  # 7B-class on GPUs: each GPU served its own
                self.served.append(Served.of(serving, run.node, label(run)))
            if data["test_hook"]:
                print(f"TEST HOOK on {run.node} {label(run)}: {data['test_hook']}")

    def judge(self, judge: Judge, fingerprint: Callable[[str], Mapping[str, Any]]) -> str | None:
        """Every GPU against the others of its SKU and stack and the baseline (``judge_fleet_agreement``); why the
        test does not apply (no other GPU to agree with and no baseline), or None."""
        prints = {node: fingerprint(node) for node in sorted({r.node for r in self.runs})}
        judged = judge_fleet_agreement(judge, self.runs, self.served, prints, self.judged_as, self.unmeasured)
        if not self.runs or judged or self.failed:  # none read: every node's launch is recorded unreadable
            return None
        alone = ", ".join(sorted({f"{r.where}" for r in self.runs}))
        return (
            f"not applicable: no other GPU of the same SKU and stack to agree with ({alone}) and no trajectory "
            "of it in a --baseline run"
        )
