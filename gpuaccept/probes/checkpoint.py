"""A checkpoint saved as a fine-tune saves one, and restored as a job's cold start reads one.

    python -m gpuaccept.probes.checkpoint --path /mnt/chkpt --token t1 --mode save --mib 2048
    python -m gpuaccept.probes.checkpoint --path /mnt/chkpt --token t1 --mode restore   # on another node

Save: the model's weights as safetensors shards of bf16 tensors in a 7B decoder's shapes (Qwen2-7B: hidden 3584,
MLP 18944; as many layers as ``--mib`` holds), the LoRA adapter and its AdamW state with ``torch.save``, each file
written and fsynced, the folder fsynced, then a manifest of every file's sha256 (MLPerf Storage's checkpoint
rule: a checkpoint counts once it is on stable storage). The bytes are random: a filesystem that compresses or
deduplicates must not look faster than it is.

Restore: every file read back and hashed against the manifest (a byte changed between save and restore names
its file), then the shards loaded into the GPU's memory: the time from the first byte read to the last tensor
there is the cold start of a job that loads this checkpoint. Read on another node, none of the files can be in
this node's page cache; read on the node that wrote them, the pages are dropped first (POSIX_FADV_DONTNEED), and
the payload says which. Every call runs under the stall limit (``_stall.py``), in its forked child: the restore's
reads are timed there, and the cold start is that time and the load's, not the pipe that hands the bytes back.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Literal

from gpuaccept.contracts.storage import CheckpointFile, CheckpointPayload, PathProblem
from gpuaccept.probes._protocol import emit, node_name
from gpuaccept.probes._stall import Progress, Stalled, call, remove, run
from gpuaccept.timelimits import STALL_S

__all__ = ["main", "restore", "save"]

#: a Qwen2-7B decoder layer's linear weights (out, in): what one shard of the checkpoint holds per layer
HIDDEN, MLP, KV = 3584, 18944, 512
LAYER_SHAPES = {
    "self_attn.q_proj.weight": (HIDDEN, HIDDEN),
    "self_attn.k_proj.weight": (KV, HIDDEN),
    "self_attn.v_proj.weight": (KV, HIDDEN),
    "self_attn.o_proj.weight": (HIDDEN, HIDDEN),
    "mlp.gate_proj.weight": (MLP, HIDDEN),
    "mlp.up_proj.weight": (MLP, HIDDEN),
    "mlp.down_proj.weight": (HIDDEN, MLP),
}
LORA_RANK = 64
MANIFEST = "manifest.json"


def _folder(path: Path, token: str) -> Path:
    return path / f"gpuaccept-{token}" / "checkpoint"


def _write(target: Path, data: bytes, stall_s: float) -> None:
    """``data`` into ``target``, fsynced before it counts."""

    def write() -> None:
        with target.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())

    call(write, step="save", operation="write+fsync", path=target, limit_s=stall_s)


def _described(name: str, data: bytes) -> CheckpointFile:
    """A file's name, size and sha256 (hashed outside the timed part: a hash runs at a core's speed, not the disk's)."""
    return CheckpointFile(name=name, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())


def _layers(torch: Any, mib: int, seed: int) -> list[dict[str, Any]]:
    """Layers of random bf16 weights until ``mib`` MiB (at least one tensor), drawn on the GPU where there is one."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator(device=device).manual_seed(seed)
    budget, layers, layer = mib << 20, [], 0
    while budget > 0:
        tensors = {}
        for name, (rows, cols) in LAYER_SHAPES.items():
            rows = max(1, min(rows, budget // (2 * cols)))
            tensor = torch.randn(rows, cols, generator=generator, device=device, dtype=torch.bfloat16)
            tensors[f"model.layers.{layer}.{name}"] = tensor.cpu()
            budget -= rows * cols * 2
            if budget <= 0:
                break
        layers.append(tensors)
        layer += 1
    return layers


def _adapter_state(torch: Any, layers: int, seed: int) -> bytes:
    """The LoRA adapter (A and B of rank 64 on each linear) and its AdamW moments, as ``torch.save`` writes them."""
    import io

    generator = torch.Generator().manual_seed(seed + 1)
    state: dict[str, Any] = {"adapter": {}, "optimizer": {"exp_avg": {}, "exp_avg_sq": {}, "step": 0}}
    for layer in range(layers):
        for name, (rows, cols) in LAYER_SHAPES.items():
            for part, shape in (("lora_A", (LORA_RANK, cols)), ("lora_B", (rows, LORA_RANK))):
                key = f"model.layers.{layer}.{name}.{part}"
                state["adapter"][key] = torch.randn(*shape, generator=generator)
                state["optimizer"]["exp_avg"][key] = torch.randn(*shape, generator=generator)
                state["optimizer"]["exp_avg_sq"][key] = torch.rand(*shape, generator=generator)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def save(path: Path, token: str, mib: int, seed: int, stall_s: float) -> CheckpointPayload:
    import torch
    from safetensors.torch import save as to_safetensors

    folder = _folder(path, token)
    call(
        lambda: folder.mkdir(parents=True, exist_ok=True), step="save", operation="mkdir", path=folder, limit_s=stall_s
    )
    layers = _layers(torch, mib, seed)
    blobs = [(f"model-{i:05d}-of-{len(layers):05d}.safetensors", to_safetensors(t)) for i, t in enumerate(layers)]
    blobs.append(("adapter_and_optimizer.pt", _adapter_state(torch, min(len(layers), 4), seed)))
    files = [_described(name, data) for name, data in blobs]
    manifest = json.dumps({"files": [f.model_dump() for f in files], "node": node_name()}).encode()
    started = time.monotonic()
    for name, data in blobs:
        _write(folder / name, data, stall_s)
    _write(folder / MANIFEST, manifest, stall_s)

    def sync_folder() -> None:
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    call(sync_folder, step="save", operation="fsync", path=folder, limit_s=stall_s)
    return _payload("save", path, files, time.monotonic() - started)


def _drop(target: Path) -> None:
    fd = os.open(target, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def restore(path: Path, token: str, stall_s: float) -> CheckpointPayload:
    """Every file read back (timed: the restore's GB/s), the shards then loaded into the GPU's memory (the cold
    start: from the first byte read to the last tensor there), and only then hashed against the manifest."""
    import torch
    from safetensors.torch import load as from_safetensors

    folder = _folder(path, token)
    manifest_path = folder / MANIFEST
    manifest = json.loads(
        call(manifest_path.read_bytes, step="restore", operation="read", path=manifest_path, limit_s=stall_s)
    )
    expected = [CheckpointFile(**f) for f in manifest["files"]]
    writer = manifest.get("node", "")
    here = node_name()
    if writer == here:

        def drop(progress: Progress) -> None:
            for f in expected:
                target = folder / f.name
                progress.at("stat", target)
                if target.exists():
                    progress.at("fadvise", target)
                    _drop(target)
            progress.idle()

        run(drop, step="restore", limit_s=stall_s)
        cache = "page cache dropped (fadvise): read on the node that wrote it"
    else:
        cache = f"written by {writer}"

    def read_all(progress: Progress) -> tuple[dict[str, bytes], list[str], float]:
        """Every file read, timed here in the child: the pipe that carries the bytes back is not the restore."""
        blobs: dict[str, bytes] = {}
        missing: list[str] = []
        started = time.monotonic()
        for f in expected:
            target = folder / f.name
            progress.at("read", target)
            try:
                blobs[f.name] = target.read_bytes()
            except FileNotFoundError:
                missing.append(f.name)
        progress.idle()
        return blobs, missing, time.monotonic() - started

    blobs, missing, read_s = run(read_all, step="restore", limit_s=stall_s)
    mismatched = dict.fromkeys(missing, "missing")
    device = "cuda:0" if torch.cuda.is_available() else "cpu"  # after the fork: the child never holds CUDA
    loading = time.monotonic()  # the cold start: the child's read time, then the load here
    weights = [
        tensor
        for name, data in blobs.items()
        if name.endswith(".safetensors")
        for tensor in from_safetensors(data).values()
    ]
    placed = [tensor.to(device, non_blocking=True) for tensor in weights]
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    load_s = read_s + time.monotonic() - loading
    del placed
    read = [_described(name, data) for name, data in blobs.items()]
    for f, got in zip([f for f in expected if f.name in blobs], read, strict=True):
        if got.sha256 != f.sha256:
            mismatched[f.name] = f"sha256 {got.sha256[:12]} read, {f.sha256[:12]} written"
        elif got.bytes != f.bytes:
            mismatched[f.name] = f"{got.bytes} bytes read, {f.bytes} written"
    return _payload(
        "restore",
        path,
        read,
        read_s,
        mismatched=mismatched,
        cache=cache,
        device=device,
        load_s=round(load_s, 4) if weights else None,
    )


def _payload(
    mode: Literal["save", "restore", "clean"],
    path: Path,
    files: list[CheckpointFile],
    seconds: float,
    **found: object,
) -> CheckpointPayload:
    """A phase's payload: the bytes its ``files`` hold over its ``seconds``; what it did not find (``found``
    names what it did) None, and no file mismatched."""
    total = sum(f.bytes for f in files)
    unread: dict[str, object] = {"mismatched": {}, "cache": None, "device": None, "load_s": None, "problem": None}
    return CheckpointPayload.model_validate(
        {
            "mode": mode,
            "path": str(path),
            "bytes": total,
            "seconds": round(seconds, 4),
            "gbps": round(total / seconds / 1e9, 4) if seconds > 0 else 0.0,
            "files": files,
            **unread,
            **found,
        }
    )


def _nothing(mode: Literal["save", "restore", "clean"], path: Path, problem: PathProblem | None) -> CheckpointPayload:
    """A phase that moved nothing: the clean-up, or one the path's problem stopped."""
    return _payload(mode, path, [], 0.0, problem=problem)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", required=True, type=Path, help="the declared checkpoints filesystem's path")
    parser.add_argument("--token", required=True, help="this run's folder under the path (gpuaccept-<token>)")
    parser.add_argument("--mode", choices=("save", "restore", "clean"), required=True)
    parser.add_argument("--mib", type=int, default=2048, help="save: the weights' size in MiB")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stall-limit", type=float, default=STALL_S, help="an I/O stalled this long is named")
    args = parser.parse_args(argv)
    try:
        if args.mode == "save":
            payload = save(args.path, args.token, args.mib, args.seed, args.stall_limit)
        elif args.mode == "restore":
            payload = restore(args.path, args.token, args.stall_limit)
        else:
            remove(args.path / f"gpuaccept-{args.token}", args.stall_limit)
            payload = _nothing(args.mode, args.path, None)
    except Stalled as stalled:
        payload = _nothing(args.mode, args.path, PathProblem(kind="stalled", detail=str(stalled)))
    except OSError as exc:
        detail = f"{exc.filename or args.path}: {exc.strerror or exc}"
        if exc.errno == errno.EROFS:
            problem = PathProblem(kind="read-only", detail=detail)
        elif exc.errno == errno.ENOSPC:
            problem = PathProblem(kind="full", detail=detail)
        elif exc.errno == errno.ENOENT:
            problem = PathProblem(kind="missing", detail=detail)
        else:
            problem = PathProblem(kind="unwritable", detail=detail)
        payload = _nothing(args.mode, args.path, problem)
    emit(payload.model_dump(mode="json"), probe="checkpoint")


if __name__ == "__main__":
    main()
