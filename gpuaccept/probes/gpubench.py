"""Every GPU of a node in one process: matmul, HBM copy, each PCIe link alone and all at once, every GPU pair.

Why one process: each probe step paid the interpreter, ``import torch`` and CUDA initialisation again
(4.3-7.2 s per process on the H100 and H200 hosts measured), four times per node for matmul, HBM, host
bandwidth and P2P; their measurements together take a few seconds. One process pays it once and
measures in this order:

1. matmul (``probes.matmul``): burst, checksum, then each square size, every GPU at once (one lane per
   GPU, queued round-robin from this thread: the GPUs share power and cooling as in training);
2. HBM copy (``probes.membw``), every GPU at once;
3. host links (``probes.hostbw``): each GPU's link alone with the others idle, the thread bound to that
   GPU's NUMA-local CPUs before its pinned buffer is allocated; then every GPU at once;
4. GPU pairs (``probes.p2p``): rounds of disjoint pairs, with the NVLink error counters read around
   them (the load that ``test_nvlink_errors_under_load`` judges).

Nothing runs on a GPU that another part is measuring, and the parts run one after another. A GPU with
someone else's processes on it is named in ``busy`` and not measured (the others are); the pairs are skipped
then (their ``busy`` outcome). The result (``contracts.bench.GpuBenchRan``; ``GpuBenchError`` where no GPU is
visible) holds each measured GPU's parts (``per_gpu``, with an ``idle`` sample before the parts and an
``end`` sample after them: the PCIe replay counter's window), the all-at-once host figures, the pairs,
``errors`` (each reading written None, by its path, and why) and ``phases``: start-up (interpreter, imports,
NVML, CUDA contexts), warm-up, timed measurement, the rest (allocations, checksums, NVML reads) and each part's
wall time. Run by hand:
``python -m gpuaccept.probes.gpubench`` (every visible GPU).
"""

from __future__ import annotations

from gpuaccept.probes._timing import Phases, quick_exit

PHASES = Phases()  # from the process start: the interpreter and the imports count as start-up

import argparse  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from gpuaccept.contracts.bench import (  # noqa: E402
    BenchPerGpu,
    BenchPhases,
    GpuBenchError,
    GpuBenchRan,
    HostbwConcurrent,
    MatmulFigures,
    P2pBusy,
    P2pMeasured,
)
from gpuaccept.probes import hostbw, matmul, membw, p2p  # noqa: E402
from gpuaccept.probes._bench import preflight, torch_device_bus, visible_count  # noqa: E402
from gpuaccept.probes._protocol import emit  # noqa: E402
from gpuaccept.units import parse_bytes  # noqa: E402

__all__ = ["PARTS", "main"]

PARTS = ("matmul", "membw", "hostbw", "p2p")


def _parts(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(PARTS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: parts are {', '.join(PARTS)} (comma-separated)")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", type=_parts, default=list(PARTS), help="which measurements (default: all)")
    p.add_argument("--sizes", type=matmul._sizes, default=matmul.DEFAULT_SIZES, help="matmul square sizes")
    p.add_argument("--matmul-repeats", type=int, default=20, help="timed matmul batches per size")
    p.add_argument("--matmul-warmup", type=float, default=1.0, help="seconds of warm-up before the first size")
    p.add_argument("--no-burst", action="store_true", help="skip the matmul burst figure")
    p.add_argument("--membw-size", type=parse_bytes, default=2 << 30, help="HBM copy bytes")
    p.add_argument("--membw-repeats", type=int, default=20)
    p.add_argument("--membw-warmup", type=float, default=0.5)
    p.add_argument("--hostbw-size", type=parse_bytes, default=256 << 20, help="host copy bytes")
    p.add_argument("--hostbw-repeats", type=int, default=6)
    p.add_argument("--hostbw-warmup", type=float, default=0.05)
    p.add_argument("--no-bind", action="store_true", help="do not bind to each GPU's NUMA-local CPUs")
    p.add_argument("--p2p-size", type=parse_bytes, default=1 << 30, help="GPU-to-GPU copy bytes")
    p.add_argument("--p2p-repeats", type=int, default=10)
    p.add_argument("--p2p-warmup", type=float, default=0.2)
    p.add_argument("--p2p-serial", action="store_true", help="one GPU pair at a time instead of rounds")
    p.add_argument("--measure-busy", action="store_true", help="measure GPUs that other processes use")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    pre = preflight(visible_count())
    if not pre.gpus:
        error: GpuBenchError = {
            "outcome": "error",
            "error": "no GPU visible (NVML found none, or CUDA_VISIBLE_DEVICES is empty)",
        }
        emit(error, probe="gpubench")
        return
    busy_gpus = {entry["gpu"] for entry in pre.busy} if not args.measure_busy else set()
    ordinals = [i for i, gpu in enumerate(pre.gpus) if gpu["index"] not in busy_gpus]
    idle = {i: pre.sample(i) for i in ordinals}
    import torch

    devices = [torch.device("cuda", i) for i in ordinals]
    for device in devices:  # every CUDA context now, so it counts as start-up and not as the first part
        torch.zeros(1, device=device)
    buses = {i: torch_device_bus(torch, i) for i in ordinals}
    PHASES.mark("startup")
    walls: dict[str, float] = {}
    parts: dict[str, dict[int, Any]] = {"matmul": {}, "membw": {}, "hostbw": {}}
    concurrent: HostbwConcurrent | None = None
    pairs: P2pMeasured | P2pBusy | None = None
    for part in args.parts:
        started = time.monotonic()
        if part == "matmul" and devices:
            parts["matmul"] = dict(zip(ordinals, _matmul(torch, pre, args, ordinals, devices), strict=True))
        elif part == "membw" and devices:
            figures = membw.measure_sizes(
                torch, pre, [args.membw_size], args.membw_repeats, args.membw_warmup, devices, ordinals, timer=PHASES
            )
            parts["membw"] = dict(zip(ordinals, figures, strict=True))
        elif part == "hostbw" and devices:
            links, concurrent = hostbw.measure_node(
                torch,
                pre,
                ordinals,
                size=args.hostbw_size,
                repeats=args.hostbw_repeats,
                warmup_s=args.hostbw_warmup,
                bind=not args.no_bind,
                timer=PHASES,
            )
            parts["hostbw"] = dict(zip(ordinals, links, strict=True))
        elif part == "p2p":
            pairs = _p2p(torch, pre, args, busy_gpus)
        walls[part] = round(time.monotonic() - started, 3)
    for device in devices:
        torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    # the window's second reading (the first is ``idle``): counters that grew under load
    end = {i: pre.sample(i) for i in ordinals}
    PHASES.mark("parts")
    per_gpu: list[BenchPerGpu] = [
        {
            "index": pre.gpus[i]["index"],
            "torch_bus": buses[i],
            "idle": idle[i],
            "end": end[i],
            "matmul": parts["matmul"].get(i),
            "membw": parts["membw"].get(i),
            "hostbw": parts["hostbw"].get(i),
        }
        for i in ordinals
    ]
    errors = _errors(per_gpu)
    result: GpuBenchRan = {
        "outcome": "measured",
        "gpus": pre.gpus,
        "busy": pre.busy,
        "parts": args.parts,
        "torch": torch.__version__,
        "per_gpu": per_gpu,
        "hostbw_concurrent": concurrent,
        "p2p": pairs,
        "phases": _phases(walls),
        "errors": errors,
    }
    emit(result, probe="gpubench")


def _errors(per_gpu: list[BenchPerGpu]) -> dict[str, str]:
    """Why each reading of ``per_gpu`` written None is None, by its path."""
    errors: dict[str, str] = {}
    for slot, entry in enumerate(per_gpu):
        if entry["torch_bus"] is None:
            errors[f"per_gpu.{slot}.torch_bus"] = "torch's device properties give no PCI bus id"
        link = entry["hostbw"]
        for key, getter in (
            ("gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
            ("width", "nvmlDeviceGetCurrPcieLinkWidth"),
        ):
            if link is not None and link[f"pcie_{key}_loaded"] is None:  # type: ignore[literal-required]
                errors[f"per_gpu.{slot}.hostbw.pcie_{key}_loaded"] = f"NVML's {getter} gave nothing under load"
    return errors


def _phases(walls: dict[str, float]) -> BenchPhases:
    """The process's phases, each written (a part that timed nothing adds 0 s of warm-up and timed batches)."""
    seconds = PHASES.as_dict()
    warmup, measure = seconds.get("warmup_s", 0.0), seconds.get("measure_s", 0.0)
    return {
        "startup_s": seconds["startup_s"],
        "warmup_s": warmup,
        "measure_s": measure,
        # the parts' wall beyond their warm-up and timed batches: allocations, checksums, NVML reads
        "other_s": round(seconds["parts_s"] - warmup - measure, 3),
        "process_wall_s": seconds["process_wall_s"],
        "by_part_s": {
            "matmul": walls.get("matmul"),
            "membw": walls.get("membw"),
            "hostbw": walls.get("hostbw"),
            "p2p": walls.get("p2p"),
        },
    }


def _matmul(
    torch: Any, pre: Any, args: argparse.Namespace, ordinals: list[int], devices: list[Any]
) -> list[MatmulFigures]:
    """Burst (before any warm-up), checksums, then every size: one lane per GPU, all at once."""
    bursts: list[float | None] = (
        [None] * len(devices) if args.no_burst else list(matmul.burst(torch, args.sizes[0], "normal", devices))
    )
    sums = matmul.checksums(torch, devices)
    best = matmul.measure(
        torch, pre, args.sizes, args.matmul_repeats, args.matmul_warmup, "normal", devices, ordinals, timer=PHASES
    )
    return [
        matmul.figures(figure, tflops_burst, checksum, "normal")
        for tflops_burst, checksum, figure in zip(bursts, sums, best, strict=True)
    ]


def _p2p(torch: Any, pre: Any, args: argparse.Namespace, busy_gpus: set[int]) -> P2pMeasured | P2pBusy:
    """Every ordered pair (rounds of disjoint pairs) with the NVLink counters around them; all or none."""
    if busy_gpus:
        return {
            "outcome": "busy",
            "size": args.p2p_size,
            "skipped": "GPU busy: other processes were running on some GPUs before the benchmark",
        }
    return p2p.measure_with_errors(
        torch, pre, args.p2p_size, args.p2p_repeats, args.p2p_warmup, serial=args.p2p_serial, timer=PHASES
    )


if __name__ == "__main__":
    main()
    quick_exit()
