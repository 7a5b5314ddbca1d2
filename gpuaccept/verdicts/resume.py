"""The fine-tune's own checkpoint, its one home: saved to the site's checkpoint filesystem, read back whole, and
resumed to the very losses of the run that saved it.

The fine-tune (``gpuaccept.training.checkpoint``) saves rank 0's own run half-way; once training is over the
launch restores it on that node (page cache dropped), checks every byte, rebuilds the model from its seed and
trains a few more steps (``gpuaccept.training.resume``). Judged:
* every file read back identical to what was written (``train_checkpoint_bytes``), naming the files that differ;
* the resumed steps' losses equal to the uninterrupted run's (``train_resume_loss_delta``, max 0: the run is
  bitwise deterministic, so any difference is state the checkpoint lost);
* where the site declares a checkpoint filesystem (``storage.filesystems.*.role: checkpoints``), the save's and
  the restore's GB/s against its contract's per-node write and read figures. Without one the checkpoint goes to
  the run folder and its speed is the run's, not a filesystem's the site answers for: no GB/s is judged.
"""

from __future__ import annotations

from typing import Any

from gpuaccept.contracts.finetune_storage import Checkpoint
from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.thresholds.storage_site import Filesystem, StorageSection
from gpuaccept.verdicts.storage import described, judge_speed

__all__ = ["RESUME_METRICS", "checkpoint_filesystem", "judge_resume"]

#: what the resume judges against a limit (its test's ``judges`` mark; the byte check is an expectation)
RESUME_METRICS = ("train_checkpoint_save_gbps", "train_checkpoint_restore_gbps", "train_resume_loss_delta")


def checkpoint_filesystem(storage: StorageSection) -> tuple[str, Filesystem] | None:
    """The declared filesystem the fine-tune saves its checkpoint to: the first of role ``checkpoints``, a shared
    one before a node-local one (where a job's checkpoints must survive the node); None when none is declared."""
    ranked = sorted(
        (fs.scope != "shared", index, name)
        for index, (name, fs) in enumerate(storage.filesystems.items())
        if fs.role == "checkpoints"
    )
    return (ranked[0][2], storage.filesystems[ranked[0][2]]) if ranked else None


def judge_resume(
    checkpoint: Checkpoint | None,
    declared: tuple[str, Filesystem] | None,
    judge: JudgeLike,
    node: str,
) -> None:
    """Judge the checkpoint rank 0's own run saved on ``node`` (its ``checkpoint`` payload) and its resume."""
    if checkpoint is None:
        judge.unreadable(
            "train_resume_loss_delta", "the fine-tune saved no resumable checkpoint (rank 0's own run)", node=node
        )
        return
    saved, resumed = checkpoint["saved"], checkpoint["resumed"]
    where: dict[str, Any] = {"fspath": saved["path"], "step": saved["step"]}
    if declared is not None:
        where["filesystem"] = declared[0]
    if saved["outcome"] == "error":  # the filesystem refused the save (full, read-only, gone): nothing to restore
        judge.expect("train_checkpoint_bytes", f"not saved: {saved['error']}", "identical", node=node, **where)
        return
    if declared is not None:
        timed = {"seconds": saved["seconds"], "files": len(saved["files"])}
        judge_speed(judge, "train_checkpoint_save_gbps", saved, declared, "write", node=node, **timed, **where)
    if resumed is None or resumed["restore"] is None:
        why = resumed["resume_error"] if resumed is not None and resumed["outcome"] == "stopped" else None
        judge.unreadable(
            "train_resume_loss_delta", why or "the resume did not run (the launch ended before it)", node=node, **where
        )
        return
    restore = resumed["restore"]
    if declared is not None:
        read: dict[str, Any] = {"seconds": restore["seconds"], "cache": restore["cache"]}
        judge_speed(judge, "train_checkpoint_restore_gbps", restore, declared, "read", node=node, **read, **where)
    differs = described(restore["mismatched"])
    judge.expect("train_checkpoint_bytes", differs, "identical", node=node, files=restore["files"], **where)
    if differs != "identical":  # not resumed from bytes that changed: the byte check names the files
        return
    if resumed["outcome"] == "stopped":
        judge.unreadable("train_resume_loss_delta", resumed["resume_error"], node=node, **where)
        return
    judge.check(
        "train_resume_loss_delta",
        resumed["max_abs_delta"],
        node=node,
        resumed=resumed["losses"],
        uninterrupted=resumed["expected_losses"],
        **where,
    )
