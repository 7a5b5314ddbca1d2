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

Each half runs in one child process of its own whose ``CUDA_VISIBLE_DEVICES`` is its half, as a tenant's job
would (another process, another CUDA context: what the driver and the hardware must keep apart); this process
never touches CUDA. Both children start at once, so their start-ups overlap, and each goes through every phase
(``_neighbour_halves.PHASES``): half A alone (``solo-A``), half B alone (``solo-B``), then both at once
(``together``), kept in step by a file barrier. Each child opens its CUDA contexts before the first phase, and
the half that does not measure in a phase waits at the phase's end barrier with its contexts open and nothing
on its GPUs (its buffers freed): that is what an idle tenant's job looks like, so "alone" means beside an idle
neighbour, as a tenant meets it, not beside GPUs nobody holds. Within a phase each figure is warmed up, then
the halves measuring meet at the figure's barrier and time it for the same wall-clock window, so in
``together`` the halves overlap for the whole window whatever speed either runs at. Within a half every GPU
runs at once (one batch per GPU queued, then all synchronised; the median batch per GPU is its figure). The
host copies are not bound to the GPU's NUMA node (a half may span both sockets): alone and together are
measured the same way, so their ratio is what a neighbour costs, not what the binding costs. Others'
processes on a half's GPUs are looked up through NVML as each of its measuring phases begins (``busy``).

A half that fails writes why beside the barriers (``failed.<half>``); the other half stops at its next barrier,
and the record's ``why`` names each half, its GPUs and what happened (``_run``). Nothing waits longer than
``_neighbour_halves.run_limit``.

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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuaccept.contracts.neighbours import FIGURES, UNITS, BusyGpu, NeighbourGpu, NeighboursRecord, ratio_pct
from gpuaccept.probes._bench import Lane, Preflight, median, preflight
from gpuaccept.probes._gpu import foreign_processes
from gpuaccept.probes._neighbour_halves import HALVES, START_S, HalfGone, run_half, run_limit, split
from gpuaccept.probes._nvml import nvml
from gpuaccept.probes._protocol import emit

__all__ = ["HalfFailed", "collect", "main", "merge", "visible_devices"]

MATMUL_N = 8192
MATMUL_BATCH = 10  # about 15 ms of bf16 work on an H100
HBM_BYTES = 1 << 30
HBM_BATCH = 10  # 20 GiB of traffic, about 7 ms at H100 speed
H2D_BYTES = 256 << 20
H2D_BATCH = 4  # 1 GiB, about 19 ms at PCIe Gen5 speed
#: what the children run (``__name__`` is ``__main__`` under ``python -m``)
MODULE = "gpuaccept.probes.neighbours"
#: how long the others may go on once a half has failed: a healthy half sees the failure at its next barrier,
#: after its start-up at the latest; one still running then is hung and is killed
GRACE_S = START_S
#: a child's exit status when it stopped because the other half failed (its own run was fine)
STOPPED = 3


class HalfFailed(RuntimeError):
    """A half did not come back with its figures: the message names each half, its GPUs and what happened."""


def visible_devices() -> list[str]:
    """The GPUs this step may use, as ``CUDA_VISIBLE_DEVICES`` tokens (index or UUID), in their order; every
    GPU NVML sees when it is unset."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [t.strip() for t in visible.split(",") if t.strip()]
    lib = nvml()
    return [str(i) for i in range(int(lib.nvmlDeviceGetCount()))] if lib is not None else []


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


def _pids(pre: Preflight) -> list[set[int]]:
    """Every process NVML lists on each of this half's GPUs, this one included."""
    return [{int(p["pid"]) for p in foreign_processes(pre.lib, h, own=set())} for h in pre.handles]


def _own_pids(pre: Preflight, before: list[set[int]]) -> set[int]:
    """This process as NVML lists it on its GPUs, once its contexts are open: its pid where NVML's pids are this
    namespace's, else (a container whose NVML gives host pids) what is new on every one of its GPUs since
    ``before`` (taken before CUDA). A process of someone else's that started on all of them during this one's
    start-up is then taken for this one; one on some of them is still named."""
    now = _pids(pre)
    if not now or any(os.getpid() in pids for pids in now):
        return {os.getpid()}
    return set.intersection(*(seen - old for seen, old in zip(now, before, strict=True)))


def _busy(pre: Preflight, own: set[int]) -> list[dict[str, Any]]:
    """Others' processes on this half's GPUs now (``own``: this process's pids as NVML lists them)."""
    found = []
    for gpu, handle in zip(pre.gpus, pre.handles, strict=True):
        procs = foreign_processes(pre.lib, handle, own=own)
        if procs:
            found.append({"gpu": gpu["index"], "pci_bus_id": gpu["pci_bus_id"], "processes": procs})
    return found


def _measure(
    torch: Any, devices: list[Any], seconds: float, figure: str, ready: Callable[[], None]
) -> tuple[list[float], int, float]:
    """One figure on every GPU of the half (``Measure``); its buffers are freed after, so a half idle in the next
    phase holds its CUDA contexts and nothing else on its GPUs."""
    lanes, batch, value = _lanes(torch, figure, devices)
    per_call, batches, length = _window(torch, lanes, batch, seconds, min(1.0, seconds / 3), ready)
    del lanes
    torch.cuda.empty_cache()
    return [value(t) for t in per_call], batches, length


def child(half: str, folder: Path, seconds: float) -> None:
    """One half's process: its GPUs' identity and the processes on them (before CUDA), its CUDA contexts, then
    every phase (``run_half``); the result as JSON in ``<folder>/<half>.json`` (stdout belongs to the parent's
    result line)."""
    pre = preflight(len(visible_devices()))
    before = _pids(pre)
    import torch

    if not torch.cuda.is_available() or not torch.cuda.device_count():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise SystemExit(f"neighbours half {half}: no CUDA device visible (CUDA_VISIBLE_DEVICES={visible})")
    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    for device in devices:  # the contexts an idle tenant's job holds, open before any phase
        torch.empty(1, device=device)
        torch.cuda.synchronize(device)
    own = _own_pids(pre, before)
    measure = functools.partial(_measure, torch, devices, seconds)
    phases = run_half(half, folder, seconds, measure, functools.partial(_busy, pre, own))
    gpus: list[Mapping[str, object]] = [*pre.gpus] or [
        {"index": int(t) if t.isdigit() else i, "uuid": None, "pci_bus_id": None, "name": None}
        for i, t in enumerate(visible_devices())
    ]
    (folder / f"{half}.json").write_text(json.dumps({"gpus": gpus, "phases": phases}))


def _child_main(half: str, folder: Path, seconds: float) -> None:
    """``child``, saying why it failed in ``failed.<half>`` for the other half's barriers and the parent; a
    half stopped by the other's failure exits ``STOPPED`` and blames no one."""
    try:
        child(half, folder, seconds)
    except HalfGone as gone:
        print(f"neighbours half {half}: {gone}", file=sys.stderr, flush=True)
        raise SystemExit(STOPPED) from None
    except BaseException as exc:
        said = str(exc.code) if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"
        draft = folder / f".failed-{half}"  # whole before it is seen: renamed into place, never half-written
        draft.write_text((said.strip().splitlines() or [""])[0][:500])
        draft.replace(folder / f"failed.{half}")
        raise


def _wait(procs: dict[str, subprocess.Popen[bytes]], limit: float, grace: float) -> dict[str, str]:
    """Wait for every child, at most ``limit`` s, and at most ``grace`` s once one has exited non-zero (the others
    see its failure at their next barrier); kill what still runs then. What went wrong with each half that did
    not exit 0."""
    deadline, failed_at, first = time.monotonic() + limit, 0.0, ""
    while True:
        codes = {name: proc.poll() for name, proc in procs.items()}  # every one polled, none skipped
        if all(code is not None for code in codes.values()):
            break
        now = time.monotonic()
        if not first and (first := next((n for n, c in codes.items() if c not in (None, 0)), "")):
            failed_at = now
        if now > deadline or (first and now - failed_at > grace):
            break
        time.sleep(0.05)
    wrong = {}
    for name, proc in procs.items():
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            after = f"{grace:g} s after half {first} exited ({codes[first]})" if first else f"after {limit:g} s"
            wrong[name] = f"still running {after}, killed"
        elif proc.returncode == STOPPED:
            wrong[name] = "stopped because the other half failed"
        elif proc.returncode != 0:
            wrong[name] = f"exit status {proc.returncode}"
    return wrong


def _run(halves: dict[str, list[str]], folder: Path, seconds: float) -> dict[str, dict[str, Any]]:
    """Start one child per half at once (each seeing its half only), each running every phase, and wait for
    both; a half that fails or hangs is named with its GPUs and why (``HalfFailed``)."""
    folder.mkdir(parents=True, exist_ok=True)
    procs = {}
    for name, devices in halves.items():
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(devices), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        argv = [sys.executable, "-m", MODULE, "--child", name, "--folder", str(folder), "--seconds", str(seconds)]
        procs[name] = subprocess.Popen(argv, env=env, stdout=sys.stderr)  # a stray print must not reach stdout
    wrong = _wait(procs, run_limit(seconds), GRACE_S)
    for name in halves:
        said = folder / f"failed.{name}"
        if said.exists():
            wrong[name] = f"{wrong.get(name, 'exit status 0')}: {said.read_text()}"
        elif name not in wrong and not (folder / f"{name}.json").exists():
            wrong[name] = "exit status 0 without its figures"
    if wrong:
        gpus = {name: ",".join(devices) for name, devices in halves.items()}
        raise HalfFailed("; ".join(f"half {n} (CUDA_VISIBLE_DEVICES={gpus[n]}): {wrong[n]}" for n in sorted(wrong)))
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
    return NeighboursRecord(seconds=seconds, halves=halves, gpus=gpus, busy=busy, units=UNITS, why=None)  # type: ignore[arg-type]


def _unmeasured(seconds: float, why: str) -> NeighboursRecord:
    return NeighboursRecord(seconds=seconds, halves={}, gpus=[], busy=[], units=UNITS, why=why)


def collect(seconds: float) -> NeighboursRecord:
    """Half A alone, half B alone, both at once, in one child per half; fewer than two GPUs visible, or a half
    that did not come back with its figures, is said (``why``), not measured."""
    devices = visible_devices()
    if len(devices) < 2:
        how = "" if devices or "CUDA_VISIBLE_DEVICES" in os.environ or nvml() else " (no NVML, no CUDA_VISIBLE_DEVICES)"
        return _unmeasured(seconds, f"{len(devices)} GPU(s) visible{how}: two halves need at least 2")
    halves = split(devices)
    with tempfile.TemporaryDirectory(prefix="gpuaccept-neighbours-") as tmp:
        print(f"neighbours: halves {halves}, barriers in {tmp}", file=sys.stderr, flush=True)
        try:
            results = _run(halves, Path(tmp), seconds)
        except HalfFailed as failed:
            return _unmeasured(seconds, str(failed))
    solo = {name: {"gpus": r["gpus"], **r["phases"]["solo"]} for name, r in results.items()}
    together = {name: {"gpus": r["gpus"], **r["phases"]["together"]} for name, r in results.items()}
    return merge(solo, together, seconds)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gpuaccept.probes.neighbours", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="each figure's timed window (both halves at once)")
    parser.add_argument("--child", choices=HALVES, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child_main(args.child, args.folder, args.seconds)
        return
    emit(collect(args.seconds).model_dump(mode="json"), probe="neighbours")


if __name__ == "__main__":
    main()
