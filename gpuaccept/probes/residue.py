"""GPU memory left between jobs (SEC21): does the next tenant read what the last one wrote?

Three modes, each one process per node driving every visible GPU at once (a thread each):

* ``--mode fill --seed S``: allocate as much free memory as the GPU gives (``--reserve-mib`` left over for
  CUDA's own needs), first scan what it holds (the non-zero bytes the GPU's previous job, a fine-tune in a
  suite run, left for this new process), then write this run's pattern into it on the GPU, synchronise, report
  the bytes, exit. The process ends, so the driver takes the memory back.
* ``--mode scan --seed S``: in the next step, allocate as much as possible *uninitialised*
  (``torch.empty``) and scan it on the GPU: words equal to the pattern, non-zero bytes, and the commonest
  non-zero words of a strided sample, so the report can say what the driver left (zeros, or other bytes). With
  ``--plant-seed P`` the same process then plants pattern P, frees and scans again: the scanner's proof, without
  a step (and a start-up) of its own.
* ``--mode plant``: fill, free, scan in the same process. PyTorch's caching allocator hands the freed blocks
  straight back, so the scan must find the pattern: the proof that the scanner sees a pattern that is there.

The pattern: every 64-bit word is ``tag << 32 | h(seed, o)``, ``tag`` a non-zero 32-bit value derived from
the seed and ``o`` the word's offset inside its 4 KiB page (from the tensor's address). GPU memory is
mapped in pages of at least 4 KiB (64 KiB and 2 MiB for large allocations), so that offset is the same in
the filling and the scanning process whatever page the driver maps where: a word found at its own offset is
this run's pattern with a chance of 2**-64 per word of being anything else. The fill and the scan are torch
ops on a ``(rows, 512)`` view compared with one page of pattern: on CPU tensors too, which is what the
selftests exercise.

By hand: ``python -m gpuaccept.probes.residue --mode scan --seed 7``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from gpuaccept.contracts.tenant import ResidueGpu, ResidueRecord, TopValue
from gpuaccept.probes._protocol import emit, gpu_identity

if TYPE_CHECKING:
    import torch

__all__ = ["collect", "fill", "gpu_entry", "main", "page_pattern", "scan", "tag_of"]

#: 64-bit words per 4 KiB page: the period of the pattern
PAGE_WORDS = 512
#: one allocation; halved down to ``MIN_CHUNK`` when the GPU cannot give a whole one
CHUNK_BYTES = 256 * 2**20
MIN_CHUNK = 2 * 2**20
#: bytes of each chunk's non-zero count taken at a time (the comparison's bool temporary is this large)
BYTE_SLICE = 32 * 2**20
#: words of each chunk sampled for the commonest non-zero values
SAMPLE_WORDS = 1 << 16
#: the multiplier of the in-page hash: odd and below 2**31, so (offset < 2**9) * it + seed stays in int64
_MUL = 0x5BD1E995


def _mix32(value: int) -> int:
    """A 32-bit avalanche of ``value`` (MurmurHash3's fmix32 finaliser): seeds 7 and 8 give unrelated tags."""
    h = value & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h


def tag_of(seed: int) -> int:
    """The pattern's high 32 bits for ``seed``: never 0 (zeroed memory must not match) nor all ones."""
    tag = _mix32(seed ^ 0x9E3779B9)
    return tag if tag not in (0, 0xFFFFFFFF) else 0x5EC21A5E


def page_pattern(seed: int, device: Any = "cpu") -> torch.Tensor:
    """One 4 KiB page of the pattern (``PAGE_WORDS`` int64 words), word ``o`` = ``tag << 32 | h(seed, o)``."""
    import torch

    offsets = torch.arange(PAGE_WORDS, dtype=torch.int64, device=device)
    low = (offsets * _MUL + (_mix32(seed) & 0x7FFFFFFF)) & 0xFFFFFFFF
    high = tag_of(seed)
    high_signed = high - (1 << 32) if high >= 1 << 31 else high  # int64 holds tag << 32 only as signed
    return low | (high_signed << 32)


def _rows(chunk: torch.Tensor, page: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``chunk`` (int64, a multiple of a page long) as ``(rows, 512)`` and the page rolled to the chunk's own
    in-page offset, so row ``r`` column ``c`` sits at in-page offset ``(start + c) % 512``."""
    import torch

    start = (chunk.data_ptr() // 8) % PAGE_WORDS
    rolled = torch.roll(page, -start)
    return chunk.view(-1, PAGE_WORDS), rolled


def fill(chunks: Iterable[torch.Tensor], seed: int) -> int:
    """Write the pattern into every chunk; the bytes written."""
    page = None
    written = 0
    for chunk in chunks:
        if page is None or page.device != chunk.device:
            page = page_pattern(seed, chunk.device)
        rows, rolled = _rows(chunk, page)
        rows.copy_(rolled.expand_as(rows))
        written += chunk.numel() * 8
    return written


def scan(chunks: Iterable[torch.Tensor], seed: int, sample_words: int = SAMPLE_WORDS) -> dict[str, Any]:
    """What the chunks hold: bytes in pattern words (at their in-page offset), bytes in words carrying the
    tag, non-zero bytes, and the commonest non-zero words of a strided sample of each chunk."""
    import torch

    page = None
    tag = tag_of(seed)
    tag_signed = tag - (1 << 32) if tag >= 1 << 31 else tag
    scanned = pattern = tagged = nonzero = sampled = 0
    common: Counter[int] = Counter()
    for chunk in chunks:
        if page is None or page.device != chunk.device:
            page = page_pattern(seed, chunk.device)
        rows, rolled = _rows(chunk, page)
        pattern += int((rows == rolled).sum().item()) * 8
        tagged += int(((chunk >> 32) == tag_signed).sum().item()) * 8
        raw = chunk.view(torch.uint8)
        for start in range(0, raw.numel(), BYTE_SLICE):
            nonzero += int(torch.count_nonzero(raw[start : start + BYTE_SLICE]).item())
        stride = max(1, chunk.numel() // sample_words) | 1  # odd: a page-multiple stride sees one offset only
        sample = chunk[::stride]
        sample = sample[sample != 0]
        sampled += int(chunk[::stride].numel())
        if sample.numel():
            values, counts = torch.unique(sample, return_counts=True)
            top = torch.topk(counts, min(8, counts.numel()))
            for i in top.indices.tolist():
                common[int(values[i].item()) & 0xFFFFFFFFFFFFFFFF] += int(counts[i].item())
        scanned += chunk.numel() * 8
    return {
        "bytes": scanned,
        "pattern_bytes": pattern,
        "tag_bytes": tagged,
        "nonzero_bytes": nonzero,
        "sampled_words": sampled,
        "top_values": [TopValue(value=f"0x{v:016x}", words=n) for v, n in common.most_common(5)],
    }


def allocate(device: Any, budget: int) -> list[torch.Tensor]:
    """Uninitialised int64 chunks on ``device`` up to ``budget`` bytes, or as many as it gives: a chunk the
    GPU refuses is tried at half the size, down to ``MIN_CHUNK``."""
    import torch

    chunks: list[torch.Tensor] = []
    size, taken = CHUNK_BYTES, 0
    while size >= MIN_CHUNK and taken + MIN_CHUNK <= budget:
        want = min(size, (budget - taken) // MIN_CHUNK * MIN_CHUNK)
        try:
            chunks.append(torch.empty(want // 8, dtype=torch.int64, device=device))
            taken += want
        except torch.OutOfMemoryError:
            size //= 2
    return chunks


def _planted(device: Any, chunks: list[torch.Tensor], seed: int, budget: int) -> tuple[list[torch.Tensor], int]:
    """Pattern ``seed`` into ``chunks``, freed and allocated again: PyTorch's caching allocator hands the same
    blocks back, so a scan of the new chunks must find it. The new chunks and the bytes planted."""
    import torch

    planted = fill(chunks, seed)
    torch.cuda.synchronize(device)
    chunks.clear()  # back to PyTorch's cache, not to the driver: the scan gets the same blocks
    return allocate(device, budget), planted


def _one_gpu(
    ordinal: int, ident: dict[str, Any], mode: str, seed: int, reserve: int, plant_seed: int | None = None
) -> ResidueGpu:
    """Fill, scan or plant on CUDA device ``ordinal`` (``ident``: its identity from NVML). Run in a thread beside
    the other GPUs': it never empties PyTorch's cache, which would hand every device's free blocks back to the
    driver, the proof's too, between its plant and its scan (``collect`` empties it before and after)."""
    import torch

    device = torch.device("cuda", ordinal)
    free, total = torch.cuda.mem_get_info(device)
    budget = max(0, free - reserve)
    started = time.perf_counter()
    chunks = allocate(device, budget)
    found: dict[str, Any] = {}
    if mode == "fill":
        before = scan(chunks, seed)  # what the previous job on this GPU left this new process
        found.update(inherited_nonzero_bytes=before["nonzero_bytes"], inherited_top_values=before["top_values"])
        found["bytes"] = fill(chunks, seed)
        torch.cuda.synchronize(device)
    if mode == "plant":
        chunks, _ = _planted(device, chunks, seed, budget)
    if mode in ("scan", "plant"):
        found.update(scan(chunks, seed))
        torch.cuda.synchronize(device)
    if mode == "scan" and plant_seed is not None:
        chunks, _ = _planted(device, chunks, plant_seed, budget)
        proof = scan(chunks, plant_seed)
        found.update(proof_bytes=proof["bytes"], proof_pattern_bytes=proof["pattern_bytes"])
    seconds = time.perf_counter() - started
    chunks.clear()
    ident = {**ident, "index": int(ident.get("index", ordinal))}
    ident["name"] = ident.get("name") or torch.cuda.get_device_name(device)
    return gpu_entry(ident, found, total=int(total), free=int(free), seconds=round(seconds, 3))


def gpu_entry(
    ident: Mapping[str, Any], found: Mapping[str, Any], *, total: int, free: int, seconds: float
) -> ResidueGpu:
    """One GPU's entry: its identity (``index`` and ``name``, NVML's ``uuid`` and ``pci_bus_id`` where it answered),
    the bytes its step covered and what it read (``found``); each reading its mode does not take is null (a key
    ``ResidueGpu`` requires as a number, left out, is refused by the type)."""
    given = {
        "index": ident["index"],
        "uuid": ident.get("uuid"),
        "pci_bus_id": ident.get("pci_bus_id"),
        "name": ident["name"],
        "total_bytes": total,
        "free_bytes": free,
        "seconds": seconds,
    }
    return ResidueGpu.model_validate({**dict.fromkeys(ResidueGpu.model_fields), **found, **given})


def collect(mode: str, seed: int, reserve_mib: int = 512, plant_seed: int | None = None) -> ResidueRecord:
    """Every visible GPU, all at once; a node without CUDA says so (``cuda`` False, ``why``)."""
    tag = f"0x{tag_of(seed):08x}"
    try:
        import torch
    except ImportError as exc:
        return ResidueRecord(mode=mode, seed=seed, tag=tag, cuda=False, why=f"torch does not import: {exc}", gpus=[])  # type: ignore[arg-type]
    if not torch.cuda.is_available():
        return ResidueRecord(mode=mode, seed=seed, tag=tag, cuda=False, why="no CUDA device visible", gpus=[])  # type: ignore[arg-type]
    # every GPU at once, a thread each: the work is the GPU's (a CUDA wait releases the GIL), so a node of eight
    # takes about what one takes (four H200 one after the other: 33 s of the tenant section's two steps)
    count = torch.cuda.device_count()
    idents = [gpu_identity(i) or {} for i in range(count)]  # NVML from one thread
    reserve = reserve_mib * 2**20
    torch.cuda.empty_cache()
    with ThreadPoolExecutor(max_workers=count) as pool:
        gpus = list(pool.map(lambda i: _one_gpu(i, idents[i], mode, seed, reserve, plant_seed), range(count)))
    torch.cuda.empty_cache()
    return ResidueRecord(mode=mode, seed=seed, tag=tag, cuda=True, why=None, gpus=gpus)  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gpuaccept.probes.residue", description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("fill", "scan", "plant"), required=True)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SLURM_JOB_ID", "0") or 0))
    parser.add_argument("--reserve-mib", type=int, default=512, help="free memory left unallocated (CUDA's own)")
    parser.add_argument("--plant-seed", type=int, help="scan: then plant this seed's pattern and find it (the proof)")
    args = parser.parse_args(argv)
    record = collect(args.mode, args.seed, args.reserve_mib, args.plant_seed)
    emit(record.model_dump(mode="json"), probe="residue")


if __name__ == "__main__":
    main()
