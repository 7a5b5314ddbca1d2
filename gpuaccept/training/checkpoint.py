"""A resumable checkpoint as the fine-tune writes it and reads it back (the resume itself: ``training.resume``).

Half-way through its own run (a world of one: the GPU alone, or the launch's one rank), rank 0 of the launch saves
what a job needs to go on: the LoRA adapter's tensors in their own dtype (safetensors), the AdamW state and the
schedule's position (``torch.save``), each file written and fsynced, the folder fsynced, then a manifest of every
file's sha256 (MLPerf Storage's checkpoint rule: a checkpoint counts once it is on stable storage). It goes to the
site's checkpoint filesystem when one is declared (``--checkpoint-dir``), else to the launch's run folder.

Once training is over, the launch reads it back on that node with its page cache dropped (``POSIX_FADV_DONTNEED``:
none of it may come from memory), hashes every file against the manifest, rebuilds the model from its seed (nothing
of the run's memory), loads the adapter, the optimizer and the schedule, and trains ``RESUME_STEPS`` more steps on
the batches that followed. Their losses must equal the uninterrupted run's at those steps: the fine-tune is bitwise
deterministic on one GPU (docs/measurements.md 'Training that tests the GPU (2026-11-23)', 'Determinism of the
built-in fine-tune'), so a checkpoint that lost or changed any state shows as a different loss. The save and restore
GB/s are the storage section's figures of a checkpoint training really wrote.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = [
    "ADAPTER",
    "MANIFEST",
    "OPTIMIZER",
    "RESUME_STEPS",
    "STATE",
    "differences",
    "fsync_dir",
    "gbps",
    "read_uncached",
    "remove",
    "restore",
    "resume_step",
    "save",
    "sha256",
    "write_synced",
]

#: steps trained after the restore: enough that the optimizer's moments and the schedule drive them (a lost
#: moment or a reset schedule changes the second step's loss), few enough to cost seconds on a 7B
RESUME_STEPS = 3
MANIFEST = "manifest.json"
ADAPTER, OPTIMIZER, STATE = "adapter.safetensors", "optimizer.pt", "trainer_state.json"


def resume_step(steps: int) -> int | None:
    """The step after which the checkpoint is saved: half-way, leaving ``RESUME_STEPS`` to compare (None: too
    short a run to resume)."""
    at = steps // 2
    return at if at >= 1 and at + RESUME_STEPS <= steps else None


def gbps(moved: int, seconds: float) -> float | None:
    """``moved`` bytes over ``seconds`` in GB/s (10^9 B/s), None for no time."""
    return round(moved / seconds / 1e9, 4) if seconds > 0 else None


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def differences(files: list[dict[str, Any]], hashes: dict[str, str]) -> dict[str, str]:
    """Each manifest file that was not read back (``missing``: no hash of it) or whose bytes read back hash otherwise
    (``changed``); ``hashes``: the sha256 of each file read."""
    return {
        f["name"]: "missing" if f["name"] not in hashes else "changed"
        for f in files
        if hashes.get(f["name"]) != f["sha256"]
    }


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(target: Path, data: bytes) -> None:
    with target.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _trainable(model: nn.Module) -> dict[str, torch.Tensor]:
    """The trainable tensors as they are (their own dtype, on the host): a bf16 adapter saved as fp32 would
    resume from other values."""
    return {
        name.removeprefix("module."): p.detach().to("cpu", copy=True).contiguous()
        for name, p in model.named_parameters()
        if p.requires_grad
    }


def save(folder: Path, step: int, model: nn.Module, opt: torch.optim.Optimizer, sched: Any) -> dict[str, Any]:
    """The checkpoint after ``step`` into ``folder`` (emptied first), fsynced; its files, bytes and seconds.

    The tensors are serialised to memory first, so the timed part is the filesystem's: writes, fsyncs and the
    folder's fsync. The hashes are taken after the clock stops (a hash runs at a core's speed, not the disk's).
    """
    from safetensors.torch import save as to_safetensors

    optimizer = io.BytesIO()
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, optimizer)
    files = {
        ADAPTER: to_safetensors(_trainable(model)),
        OPTIMIZER: optimizer.getvalue(),
        STATE: json.dumps({"step": step}).encode(),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    started = time.monotonic()
    for name, data in files.items():
        write_synced(folder / name, data)
    fsync_dir(folder)
    seconds = time.monotonic() - started
    described = [{"name": name, "bytes": len(data), "sha256": sha256(data)} for name, data in files.items()]
    (folder / MANIFEST).write_text(json.dumps({"step": step, "files": described}, indent=2) + "\n")
    total = sum(len(data) for data in files.values())
    return {
        "outcome": "saved",
        "path": str(folder),
        "step": step,
        "bytes": total,
        "seconds": round(seconds, 4),
        "gbps": gbps(total, seconds),
        "files": described,
    }


def remove(folder: Path, parents: int = 2) -> None:
    """``folder`` and its contents, then up to ``parents`` folders above it that it leaves empty (this run's folder
    on a site's filesystem, once no other node's or purpose's is left in it)."""
    shutil.rmtree(folder, ignore_errors=True)
    for parent in list(folder.parents)[:parents]:
        try:
            parent.rmdir()
        except OSError:  # not empty (another node's, or another purpose's), or not ours to remove
            return


def read_uncached(path: Path) -> bytes:
    """The file's bytes from the filesystem, not from this node's page cache (dropped for it first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read()
    finally:
        os.close(fd)


def restore(folder: Path) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Every file of the manifest read back uncached and hashed: the bytes and what the restore measured."""
    manifest = json.loads((folder / MANIFEST).read_text())
    started = time.monotonic()
    data = {f["name"]: read_uncached(folder / f["name"]) for f in manifest["files"] if (folder / f["name"]).is_file()}
    seconds = time.monotonic() - started
    mismatched = differences(manifest["files"], {name: sha256(blob) for name, blob in data.items()})
    total = sum(len(b) for b in data.values())
    return data, {
        "path": str(folder),
        "bytes": total,
        "seconds": round(seconds, 4),
        "gbps": gbps(total, seconds),
        "cache": "dropped (POSIX_FADV_DONTNEED) on the node that wrote it",
        "files": len(manifest["files"]),
        "mismatched": mismatched,
    }
