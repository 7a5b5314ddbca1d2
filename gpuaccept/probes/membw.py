"""HBM bandwidth of one GPU: a device-to-device copy, bytes read plus bytes written per second (TB/s).

One rank per GPU, all GPUs of a node at once. ``dst.copy_(src)`` of a buffer far larger than L2 (the
default 2 GiB against H100's 50 MB) moves every byte from and back to HBM, so 2·size per copy is the
memory traffic. Warm-up, then ``--repeats`` batches timed with CUDA events; the median batch is
reported. ``--sizes`` takes several sizes (``256M,1G,4G``) and reports the best, for tuning.
A GPU with other processes on it is reported busy and not measured (``--measure-busy`` overrides).
"""

from __future__ import annotations

import argparse
from typing import Any

from gpuaccept.probes._bench import median, preflight, time_batches, torch_device_bus
from gpuaccept.probes._protocol import emit

__all__ = ["main", "parse_size"]

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes from ``2G``, ``512M``, ``65536``."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    if text and text[-1] in _UNITS:
        return int(float(text[:-1]) * _UNITS[text[-1]])
    return int(text)


def _sizes(text: str) -> list[int]:
    return [parse_size(part) for part in text.split(",") if part.strip()]


def measure(torch: Any, size: int, repeats: int, warmup_s: float, during: Any) -> dict[str, Any]:
    src = torch.empty(size, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    batch = max(1, round(10 * (2 << 30) / size))
    times = time_batches(
        torch, lambda src=src, dst=dst: dst.copy_(src), batch=batch, repeats=repeats, warmup_s=warmup_s, during=during
    )
    samples = [2 * size / t / 1e12 for t in times]
    del src, dst
    torch.cuda.empty_cache()
    return {
        "tbps": round(median(samples), 3),
        "tbps_min": round(min(samples), 3),
        "tbps_max": round(max(samples), 3),
        "batches": len(samples),
        "calls_per_batch": batch,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, default=[2 << 30], help="copy sizes (e.g. 256M,2G); best reported")
    parser.add_argument("--repeats", type=int, default=20, help="timed batches (median reported)")
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds of warm-up per size")
    parser.add_argument("--measure-busy", action="store_true", help="measure even if other processes use the GPU")
    args = parser.parse_args(argv)

    pre = preflight(1)
    data: dict[str, Any] = {"busy": pre.busy}
    gpu = pre.gpus[0] if pre.gpus else None
    if pre.busy and not args.measure_busy:
        data["skipped"] = "GPU busy: other processes were running on it before the benchmark"
        emit(data, gpu=gpu, probe="membw")
        return
    import torch

    data["torch_bus"] = torch_device_bus(torch)
    by_size: dict[str, Any] = {}
    for size in args.sizes:
        seen: dict[str, Any] = {}
        by_size[str(size)] = measure(torch, size, args.repeats, args.warmup, lambda s=seen: s.update(pre.sample()))
        by_size[str(size)]["during"] = seen
    best = max(by_size, key=lambda k: by_size[k]["tbps"])
    data.update({"tbps": by_size[best]["tbps"], "best_size": int(best), "by_size": by_size})
    emit(data, gpu=gpu, probe="membw")


if __name__ == "__main__":
    main()
