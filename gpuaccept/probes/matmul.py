"""Dense BF16 matmul throughput of one GPU (TFLOP/s), and a sustained burn-in mode.

One rank per GPU, all GPUs of a node at once (a node's GPUs share power and cooling, so measuring them
together is what a training job sees). Random normal data (zeros draw less power and flatter the
result), ``torch.matmul(a, b, out=c)`` on square shapes, at least ``--warmup`` seconds of warm-up,
then ``--repeats`` batches timed with CUDA events; the figure is the median batch, in TFLOP/s
(2·n³ per product). By default four square shapes (8192, 4096, 12288, 16384) are measured one after
another on the warm GPU and the best is reported, so the figure is the GPU's best over 4096..16384
without knowing its favourite shape; ``--sizes`` picks others, ``--sweep`` measures seven.

Sustained, not burst: after a second of warm-up an H200 at its 700 W limit runs random-data matmul
power-capped (SM clock ~1410 MHz, NVML reason sw_power_cap), ~13% below what the first ~100 ms reach
before the power controller reacts. The sustained figure is what a training job gets and is what is
judged; the burst figure (``tflops_burst``: a few batches on the GPU as the test found it, before the
warm-up) is reported beside it for comparison with short-run benchmarks such as mamf-finder.

A fixed-seed product (4096³, inputs drawn on the CPU so every GPU gets the same bits) is reduced to
an exact integer checksum: identical GPUs running identical inputs through the same cuBLAS must agree
bit for bit, so a GPU that disagrees with its siblings computes wrong results (silent data corruption).

``--burn-in SECONDS`` runs the matmul without pause and reports, every ``--interval`` seconds, the
interval's TFLOP/s with the SM clock, temperature, power and clock-event reasons (NVML), and the
checksum before and after. Before touching CUDA the probe lists processes already on its GPU; a busy
GPU is reported and not measured (``--measure-busy`` measures anyway).
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import Any

from gpuaccept.contracts.bench import (
    BurnIn,
    BurnInInterval,
    MatmulBurnIn,
    MatmulBusy,
    MatmulFigures,
    MatmulRan,
    MatmulSize,
    MatmulSizes,
)
from gpuaccept.contracts.payloads import Sample
from gpuaccept.probes._bench import (
    NO_NVML,
    Lane,
    Preflight,
    median,
    preflight,
    spread,
    time_lanes,
    torch_device_bus,
)
from gpuaccept.probes._protocol import emit
from gpuaccept.probes._timing import Phases

__all__ = ["burst", "checksums", "figures", "main", "measure"]

SWEEP = (4096, 6144, 8192, 10240, 12288, 14336, 16384)
DEFAULT_SIZES = [8192, 4096, 12288, 16384]
LATER_WARMUP_S = 0.25
CHECK_N = 4096
SEED = 1234


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def checksum(torch: Any) -> int:
    """Exact position-weighted integer sum of the bits of a fixed-seed 4096³ BF16 product, on GPU 0."""
    return checksums(torch, [torch.device("cuda", 0)])[0]


def checksums(torch: Any, devices: list[Any]) -> list[int]:
    """``checksum`` on each device: the inputs are drawn once on the CPU, so every GPU gets the same bits."""
    gen = torch.Generator().manual_seed(SEED)
    a_host = torch.randn(CHECK_N, CHECK_N, generator=gen).to(torch.bfloat16)
    b_host = torch.randn(CHECK_N, CHECK_N, generator=gen).to(torch.bfloat16)
    sums = []
    for device in devices:
        bits = torch.matmul(a_host.to(device), b_host.to(device)).view(torch.int16).to(torch.int64).flatten()
        weights = torch.arange(bits.numel(), device=device, dtype=torch.int64) % 65521 + 1
        sums.append((bits * weights).sum())
    return [int(value.item()) for value in sums]


def _operands(torch: Any, n: int, data: str = "normal", device: Any = "cuda") -> tuple[Any, Any, Any]:
    """Random normal operands (realistic power draw); ``zeros`` only to show how much data matters."""
    make = torch.zeros if data == "zeros" else torch.randn
    a = make(n, n, device=device, dtype=torch.bfloat16)
    b = make(n, n, device=device, dtype=torch.bfloat16)
    return a, b, torch.empty(n, n, device=device, dtype=torch.bfloat16)


def _batch(n: int) -> int:
    """Calls per timed batch: about 15 ms of work at H100-class speed, so launch gaps vanish."""
    return max(1, round(10 * (8192 / n) ** 3))


def _lanes(torch: Any, devices: list[Any], n: int, data: str) -> list[Lane]:
    lanes = []
    for device in devices:
        a, b, c = _operands(torch, n, data, device)
        lanes.append(Lane(device, functools.partial(torch.matmul, a, b, out=c)))
    return lanes


def burst(torch: Any, n: int, data: str, devices: list[Any] | None = None) -> list[float]:
    """Per device: median TFLOP/s of 5 batches right after one untimed batch, every device at once: the
    GPUs before the power cap reacts."""
    devices = devices or [torch.device("cuda", 0)]
    times = time_lanes(torch, _lanes(torch, devices, n, data), batch=_batch(n), repeats=5, warmup_s=0.0)
    return [round(median([2.0 * n**3 / t / 1e12 for t in lane]), 1) for lane in times]


def measure(
    torch: Any,
    pre: Preflight,
    sizes: list[int],
    repeats: int,
    warmup_s: float,
    data: str = "normal",
    devices: list[Any] | None = None,
    ordinals: list[int] | None = None,
    timer: Any = None,
) -> list[tuple[float, int, list[MatmulSize]]]:
    """Each size in turn, every device at once: the first after ``warmup_s``, the others after a short one.

    ``ordinals`` are the devices' positions in ``pre`` (for the NVML sample under load). Returns one
    result per device: its best size's TFLOP/s, that size, and every size's median, min, max and spread.
    """
    devices = devices or [torch.device("cuda", 0)]
    ordinals = ordinals if ordinals is not None else list(range(len(devices)))
    by_size: list[list[MatmulSize]] = [[] for _ in devices]
    for index, n in enumerate(sizes):
        lanes = _lanes(torch, devices, n, data)
        seen, sample = pre.sampler(ordinals)
        times = time_lanes(
            torch,
            lanes,
            batch=_batch(n),
            repeats=repeats,
            warmup_s=warmup_s if index == 0 else min(warmup_s, LATER_WARMUP_S),
            during=sample,
            timer=timer,
        )
        flops = 2.0 * n**3
        for slot, lane_times, during in zip(by_size, times, seen, strict=True):
            samples = [flops / t / 1e12 for t in lane_times]
            figure = spread(samples, 1)
            slot.append(
                {
                    "size": n,
                    "tflops": figure["median"],
                    "tflops_min": figure["min"],
                    "tflops_max": figure["max"],
                    "spread_pct": figure["spread_pct"],
                    "batches": len(samples),
                    "calls_per_batch": _batch(n),
                    "during": during,
                }
            )
        del lanes
        torch.cuda.empty_cache()
    out = []
    for sizes_seen in by_size:
        best = max(sizes_seen, key=lambda f: f["tflops"])
        out.append((best["tflops"], best["size"], sizes_seen))
    return out


def figures(
    best: tuple[float, int, list[MatmulSize]], tflops_burst: float | None, checksum: int, data: str
) -> MatmulFigures:
    """A GPU's matmul figures as ``gpubench`` and ``matmul`` both write them."""
    tflops, best_size, sizes = best
    return {
        "tflops": tflops,
        "best_size": best_size,
        "sizes": sizes,
        "tflops_burst": tflops_burst,
        "checksum": checksum,
        "data": "zeros" if data == "zeros" else "normal",
    }


def burn_in(torch: Any, pre: Preflight, n: int, duration_s: float, interval_s: float) -> BurnIn:
    """Sustained matmul with one TFLOP/s figure and one NVML sample per interval."""
    a, b, c = _operands(torch, n)
    batch = _batch(n)
    flops = 2.0 * n**3
    intervals: list[BurnInInterval] = []
    start = time.monotonic()
    while time.monotonic() - start < duration_s:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        calls, t0 = 0, time.monotonic()
        seen: Sample | None = None
        sampled = False
        while time.monotonic() - t0 < interval_s:
            for _ in range(batch):
                torch.matmul(a, b, out=c)
            calls += batch
            if not sampled and time.monotonic() - t0 > interval_s / 2:
                seen, sampled = pre.sample(), True
            torch.cuda.synchronize()
        end.record()
        torch.cuda.synchronize()
        elapsed = begin.elapsed_time(end) / 1000
        tflops = round(calls * flops / elapsed / 1e12, 1)
        during = seen if sampled else pre.sample()
        intervals.append({"t_s": round(time.monotonic() - start, 1), "tflops": tflops, "during": during})
    duration = round(time.monotonic() - start, 1)
    return {"size": n, "duration_s": duration, "interval_s": interval_s, "intervals": intervals}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, default=DEFAULT_SIZES, help="square sizes (comma list)")
    parser.add_argument("--sweep", action="store_true", help=f"measure {SWEEP[0]}..{SWEEP[-1]} and report each")
    parser.add_argument("--repeats", type=int, default=20, help="timed batches per size (median reported)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per size")
    parser.add_argument("--burn-in", type=float, default=0.0, help="seconds of sustained matmul (0 = off)")
    parser.add_argument("--interval", type=float, default=5.0, help="burn-in reporting interval (s)")
    parser.add_argument("--measure-busy", action="store_true", help="measure even if other processes use the GPU")
    parser.add_argument("--data", choices=("normal", "zeros"), default="normal", help="operand values (diagnosis only)")
    parser.add_argument("--no-burst", action="store_true", help="skip the burst figure")
    args = parser.parse_args(argv)
    phases = Phases()

    pre = preflight(1)
    gpu = pre.gpus[0] if pre.gpus else None
    idle = pre.sample()
    errors: dict[str, str] = {} if pre.lib is not None else {"idle": NO_NVML}
    if pre.busy and not args.measure_busy:
        skipped: MatmulBusy = {
            "outcome": "busy",
            "busy": pre.busy,
            "idle": idle,
            "skipped": "GPU busy: other processes were running on it before the benchmark",
            "errors": errors,
        }
        emit(skipped, gpu=gpu, probe="matmul")
        return
    import torch

    torch_bus = torch_device_bus(torch)
    if torch_bus is None:
        errors["torch_bus"] = "torch's device properties give no PCI bus id"
    phases.mark("startup")
    tflops_burst = None
    if not args.no_burst and args.burn_in <= 0:
        tflops_burst = burst(torch, args.sizes[0], args.data)[0]
    start = checksum(torch)
    phases.mark("warmup")
    result: MatmulSizes | MatmulBurnIn
    if args.burn_in > 0:
        run = burn_in(torch, pre, args.sizes[0], args.burn_in, args.interval)
        end = checksum(torch)
        phases.mark("measure")
        if pre.lib is None:
            errors["burn_in.intervals.during"] = NO_NVML
        result = {
            "outcome": "burn_in",
            "burn_in": run,
            "checksum_end": end,
            **_ran(pre, idle, torch_bus, torch.__version__, start, phases, errors),
        }
    else:
        sizes = list(SWEEP) if args.sweep else args.sizes
        best = measure(torch, pre, sizes, args.repeats, args.warmup, args.data)[0]
        phases.mark("measure")
        if pre.lib is None:
            errors["sizes.during"] = NO_NVML
        result = {
            "outcome": "sizes",
            **figures(best, tflops_burst, start, args.data),
            **_ran(pre, idle, torch_bus, torch.__version__, start, phases, errors),
        }
    emit(result, gpu=gpu, probe="matmul")


def _ran(
    pre: Preflight,
    idle: Sample | None,
    torch_bus: str | None,
    version: str,
    start: int,
    phases: Phases,
    errors: dict[str, str],
) -> MatmulRan:
    """What every measured rank writes beside its figures."""
    seconds = phases.as_dict()
    return {
        "busy": pre.busy,
        "idle": idle,
        "torch_bus": torch_bus,
        "torch": version,
        "checksum": start,
        "phases": {
            "startup_s": seconds["startup_s"],
            "warmup_s": seconds["warmup_s"],
            "measure_s": seconds["measure_s"],
            "process_wall_s": seconds["process_wall_s"],
        },
        "errors": errors,
    }


if __name__ == "__main__":
    main()
