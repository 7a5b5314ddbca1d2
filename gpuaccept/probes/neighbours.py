"""Neighbours that don't slow each other (VMAAS03): does one half of a node's GPUs lose speed while the other
half works?

Two tenants may share a node, each given some of its GPUs. What one does must not slow the other: power
capping shared by the node, a PCIe switch or root complex two GPUs hang off, host memory bandwidth and CPU
time are all shared. The probe holds every GPU of the node in one step (one task), splits them into two
disjoint halves (A: the first half of the visible GPUs in PCI order, B: the rest) and measures each GPU three
ways, in windows of ``--seconds`` each:

* ``matmul``: bf16 matmul (8192 x 8192) TFLOP/s, the GPU's compute and its share of the node's power;
* ``hbm``: a 1 GiB device-to-device copy, bytes read plus written per second (TB/s), its memory;
* ``h2d``: a 256 MiB pinned host-to-device copy (GB/s), its PCIe path and the host's memory.

First half A alone, then half B alone, then both at once. Each half runs in a child process of its own whose
``CUDA_VISIBLE_DEVICES`` is its half, as a tenant's job would (another process, another CUDA context: what the
driver and the hardware must keep apart); this process never touches CUDA. Both children warm each figure up,
meet at a barrier (a file per half in a folder they share) and then time it for the same wall-clock window, so
the halves overlap for the whole window whatever speed either runs at. Within a half every GPU runs at once
(one batch per GPU queued, then all synchronised; the median batch per GPU is its figure). The host copies are
not bound to the GPU's NUMA node (a half may span both sockets): alone and together are measured the same way,
so their ratio is what a neighbour costs, not what the binding costs.

Reported per GPU: the figure alone, together and together / alone in percent (``contracts/neighbours.py``). A
healthy node's ratios are a property of its board (two GPUs behind one PCIe switch share its uplink), so the
limits come from measurements of healthy nodes (``docs/measurements.md``); the judge is
``gpuaccept/verdicts/neighbours.py``. The probe never slows a half itself: the fault is a real neighbour
(``benchmarks/neighbour.py`` on one half's GPUs, started beside it).

By hand: ``python -m gpuaccept.probes.neighbours --seconds 3`` (every visible GPU; at least two).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpuaccept.contracts.neighbours import FIGURES, BusyGpu, NeighbourGpu, NeighboursRecord, ratio_pct
from gpuaccept.probes._bench import Lane, median, preflight
from gpuaccept.probes._nvml import nvml
from gpuaccept.probes._protocol import emit

__all__ = ["barrier", "collect", "main", "merge", "phase_limit", "split", "visible_devices"]

MATMUL_N = 8192
MATMUL_BATCH = 10  # about 15 ms of bf16 work on an H100
HBM_BYTES = 1 << 30
HBM_BATCH = 10  # 20 GiB of traffic, about 7 ms at H100 speed
H2D_BYTES = 256 << 20
H2D_BATCH = 4  # 1 GiB, about 19 ms at PCIe Gen5 speed
#: longest wait at a barrier for the other half (its torch import, CUDA start and warm-up)
BARRIER_S = 60.0
#: what the children run (``__name__`` is ``__main__`` under ``python -m``)
MODULE = "gpuaccept.probes.neighbours"
#: a child's start-up budget (torch import, CUDA context on its GPUs, the buffers)
START_S = 60.0


def phase_limit(seconds: float) -> float:
    """The longest one phase (one or both halves) may take: start-up, the longest barrier wait, and each figure's
    window plus its warm-up (at most 1 s) and buffers (4 s allowed). ``probes/specs.py`` allows three of these."""
    return START_S + BARRIER_S + len(FIGURES) * (seconds + 5)


def visible_devices() -> list[str]:
    """The GPUs this step may use, as ``CUDA_VISIBLE_DEVICES`` tokens (index or UUID), in their order; every
    GPU NVML sees when it is unset."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [t.strip() for t in visible.split(",") if t.strip()]
    lib = nvml()
    return [str(i) for i in range(int(lib.nvmlDeviceGetCount()))] if lib is not None else []


def split(devices: Sequence[str]) -> dict[str, list[str]]:
    """Two disjoint halves: A the first ``len // 2`` GPUs, B the rest (B holds the odd one)."""
    cut = len(devices) // 2
    return {"A": list(devices[:cut]), "B": list(devices[cut:])}


def barrier(folder: Path, name: str, me: str, parties: int, timeout_s: float = BARRIER_S) -> None:
    """Wait until ``parties`` children have reached barrier ``name``: each writes ``<name>.<me>`` in ``folder``
    (the halves share no CUDA context and need no network), then polls for the others'. A half that never
    arrives (crashed, hung) is named after ``timeout_s``."""
    (folder / f"{name}.{me}").write_text(str(os.getpid()))
    deadline = time.monotonic() + timeout_s
    while len(list(folder.glob(f"{name}.*"))) < parties:
        if time.monotonic() > deadline:
            here = sorted(p.suffix.lstrip(".") for p in folder.glob(f"{name}.*"))
            raise TimeoutError(f"barrier {name}: {parties} halves expected within {timeout_s:g} s, arrived: {here}")
        time.sleep(0.005)


def _window(
    torch: Any, lanes: list[Lane], batch: int, seconds: float, warmup_s: float, ready: Callable[[], None]
) -> tuple[list[float], int, float]:
    """Warm up, call ``ready`` (the barrier), then one batch per lane at a time, every lane at once, until
    ``seconds`` have passed: each lane's median seconds per call, the batches timed and the window's length."""

    def round_of_batches() -> list[tuple[Any, Any]]:
        pairs = []
        for lane in lanes:
            stream = torch.cuda.current_stream(lane.device)
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record(stream)
            for _ in range(batch):
                lane.call()
            end.record(stream)
            pairs.append((begin, end))
        return pairs

    start = time.monotonic()
    while True:
        for _, end in round_of_batches():
            end.synchronize()
        if time.monotonic() - start >= warmup_s:
            break
    ready()
    samples: list[list[float]] = [[] for _ in lanes]
    opened = time.monotonic()
    while True:
        pairs = round_of_batches()
        for (begin, end), lane_samples in zip(pairs, samples, strict=True):
            end.synchronize()
            lane_samples.append(begin.elapsed_time(end) / 1000 / batch)
        if time.monotonic() - opened >= seconds:
            break
    return [median(s) for s in samples], len(samples[0]), round(time.monotonic() - opened, 3)


def _lanes(torch: Any, figure: str, devices: list[Any]) -> tuple[list[Lane], int, Callable[[float], float]]:
    """Each device's work for ``figure``, the calls per batch, and seconds-per-call -> the figure."""
    lanes = []
    for device in devices:
        if figure == "matmul":
            a, b = (torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16) for _ in range(2))
            c = torch.empty_like(a)
            lanes.append(Lane(device, functools.partial(torch.matmul, a, b, out=c)))
        elif figure == "hbm":
            src = torch.empty(HBM_BYTES, dtype=torch.uint8, device=device).random_(0, 255)
            lanes.append(Lane(device, functools.partial(torch.empty_like(src).copy_, src)))
        else:
            host = torch.empty(H2D_BYTES, dtype=torch.uint8).pin_memory()
            dev = torch.empty(H2D_BYTES, dtype=torch.uint8, device=device)
            lanes.append(Lane(device, functools.partial(dev.copy_, host, non_blocking=True)))
    if figure == "matmul":
        return lanes, MATMUL_BATCH, lambda t: round(2.0 * MATMUL_N**3 / t / 1e12, 1)
    if figure == "hbm":
        return lanes, HBM_BATCH, lambda t: round(2 * HBM_BYTES / t / 1e12, 3)
    return lanes, H2D_BATCH, lambda t: round(H2D_BYTES / t / 1e9, 2)


def child(half: str, parties: int, folder: Path, seconds: float, out: Path) -> None:
    """One half's process: its GPUs' identity and others' processes (before CUDA), then each figure timed after
    the barrier every half meets; the result as JSON in ``out`` (stdout belongs to the parent's result line)."""
    pre = preflight(len(visible_devices()))
    import torch

    if not torch.cuda.is_available() or not torch.cuda.device_count():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise SystemExit(f"neighbours half {half}: no CUDA device visible (CUDA_VISIBLE_DEVICES={visible})")
    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    figures: dict[str, list[float]] = {}
    windows: dict[str, dict[str, float]] = {}
    for figure in FIGURES:
        lanes, batch, value = _lanes(torch, figure, devices)
        ready = functools.partial(barrier, folder, figure, half, parties)
        per_call, batches, length = _window(torch, lanes, batch, seconds, min(1.0, seconds / 3), ready)
        figures[figure] = [value(t) for t in per_call]
        windows[figure] = {"batches": batches, "seconds": length}
        del lanes
        torch.cuda.empty_cache()
    gpus = pre.gpus or [{"index": int(t) if t.isdigit() else i} for i, t in enumerate(visible_devices())]
    out.write_text(json.dumps({"gpus": gpus, "busy": pre.busy, "figures": figures, "windows": windows}))


def _run(halves: dict[str, list[str]], folder: Path, seconds: float) -> dict[str, dict[str, Any]]:
    """Start one child per half at once (each seeing its half only) and wait for all; a half that fails or
    hangs is named with its GPUs."""
    folder.mkdir(parents=True)
    limit = phase_limit(seconds)
    procs = {}
    for name, devices in halves.items():
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(devices), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        argv = [sys.executable, "-m", MODULE, "--child", name, "--parties", str(len(halves)), "--folder", str(folder)]
        argv += ["--seconds", str(seconds), "--out", str(folder / f"{name}.json")]
        procs[name] = subprocess.Popen(argv, env=env, stdout=sys.stderr)  # a stray print must not reach stdout
    failed = []
    for name, proc in procs.items():
        try:
            rc = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
        if rc != 0:
            what = f"exit status {rc}" if rc is not None else f"still running after {limit:g} s, killed"
            failed.append(f"half {name} (CUDA_VISIBLE_DEVICES={','.join(halves[name])}): {what}")
    if failed:
        raise RuntimeError("; ".join(failed) + " (its traceback is above)")
    return {name: json.loads((folder / f"{name}.json").read_text()) for name in halves}


def merge(solo: dict[str, dict[str, Any]], together: dict[str, dict[str, Any]], seconds: float) -> NeighboursRecord:
    """Each half's GPUs with their figures alone and together (``solo`` holds each half's own run)."""
    gpus, busy = [], []
    halves: dict[str, list[int]] = {}
    for half in ("A", "B"):
        alone, both = solo[half], together[half]
        halves[half] = [int(g["index"]) for g in alone["gpus"]]
        for i, ident in enumerate(alone["gpus"]):
            figures = {f: alone["figures"][f][i] for f in FIGURES}
            beside = {f: both["figures"][f][i] for f in FIGURES}
            ratios = {f: ratio_pct(figures[f], beside[f]) for f in FIGURES}
            gpus.append(NeighbourGpu(**ident, half=half, solo=figures, together=beside, ratio_pct=ratios))
        busy += [BusyGpu(**entry, phase="solo") for entry in alone["busy"]]
        busy += [BusyGpu(**entry, phase="together") for entry in both["busy"]]
    return NeighboursRecord(seconds=seconds, halves=halves, gpus=gpus, busy=busy)  # type: ignore[arg-type]


def collect(seconds: float) -> NeighboursRecord:
    """Half A alone, half B alone, both at once; fewer than two GPUs visible is said, not measured."""
    devices = visible_devices()
    if len(devices) < 2:
        return NeighboursRecord(seconds=seconds, why=f"{len(devices)} GPU(s) visible: two halves need at least 2")
    halves = split(devices)
    with tempfile.TemporaryDirectory(prefix="gpuaccept-neighbours-") as tmp:
        solo = {name: _run({name: gpus}, Path(tmp) / f"solo-{name}", seconds)[name] for name, gpus in halves.items()}
        print(f"neighbours: both halves at once now ({tmp}/together)", file=sys.stderr, flush=True)
        together = _run(halves, Path(tmp) / "together", seconds)
    return merge(solo, together, seconds)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gpuaccept.probes.neighbours", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="each figure's timed window (both halves at once)")
    parser.add_argument("--child", choices=("A", "B"), help=argparse.SUPPRESS)
    parser.add_argument("--parties", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.parties, args.folder, args.seconds, args.out)
        return
    emit(collect(args.seconds).model_dump(mode="json"), probe="neighbours")


if __name__ == "__main__":
    main()
