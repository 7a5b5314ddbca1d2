"""HBM bandwidth of one GPU: a device-to-device copy, bytes read plus bytes written per second (TB/s).

One rank per GPU, all GPUs of a node at once. ``dst.copy_(src)`` of a buffer far larger than L2 (the
default 2 GiB against H100's 50 MB) moves every byte from and back to HBM, so 2·size per copy is the
memory traffic. Warm-up, then repeated batches timed with CUDA events; the median batch is
reported; ``measure_sizes`` takes several sizes and reports the best, for tuning.
The measurement runs inside ``python -m gpuaccept.probes.gpubench`` (``--membw-size``, ``--membw-repeats``,
``--parts membw`` to run it alone), which checks first that no other process uses the GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gpuaccept.contracts.bench import MembwFigures, MembwSize
from gpuaccept.contracts.payloads import Sample
from gpuaccept.probes._bench import Lane, Preflight, spread, time_lanes

__all__ = ["measure", "measure_sizes"]


def _batch(size: int) -> int:
    """Copies per timed batch: ~20 GiB of traffic, about 5 ms at H200 speed."""
    return max(1, round(10 * (2 << 30) / size))


def measure(
    torch: Any,
    size: int,
    repeats: int,
    warmup_s: float,
    during: Callable[[], None] | None,
    devices: list[Any],
    timer: Any,
    seen: list[Sample | None] | None,
) -> list[MembwSize]:
    """One device copy of ``size`` bytes per lane, every device at once; per device its median TB/s, with the
    NVML sample ``during`` took into ``seen`` (None per device when none was given)."""
    lanes = []
    for device in devices:
        src = torch.empty(size, dtype=torch.uint8, device=device).random_(0, 255)
        dst = torch.empty_like(src)
        lanes.append(Lane(device, functools.partial(dst.copy_, src)))
    batch = _batch(size)
    times = time_lanes(torch, lanes, batch=batch, repeats=repeats, warmup_s=warmup_s, during=during, timer=timer)
    del lanes
    torch.cuda.empty_cache()
    out: list[MembwSize] = []
    for index, lane_times in enumerate(times):
        figure = spread([2 * size / t / 1e12 for t in lane_times], 3)
        out.append(
            {
                "size": size,
                "tbps": figure["median"],
                "tbps_min": figure["min"],
                "tbps_max": figure["max"],
                "spread_pct": figure["spread_pct"],
                "batches": figure["batches"],
                "calls_per_batch": batch,
                "during": seen[index] if seen is not None else None,
            }
        )
    return out


def measure_sizes(
    torch: Any,
    pre: Preflight,
    sizes: list[int],
    repeats: int,
    warmup_s: float,
    devices: list[Any],
    ordinals: list[int],
    timer: Any,
) -> list[MembwFigures]:
    """Every size in turn on every device at once; per device the best size's TB/s and each size's figures."""
    by_size: list[list[MembwSize]] = [[] for _ in devices]
    for size in sizes:
        seen, sample = pre.sampler(ordinals)
        for slot, figure in zip(
            by_size, measure(torch, size, repeats, warmup_s, sample, devices, timer, seen), strict=True
        ):
            slot.append(figure)
    out: list[MembwFigures] = []
    for figures in by_size:
        best = max(figures, key=lambda f: f["tbps"])
        out.append({"tbps": best["tbps"], "best_size": best["size"], "sizes": figures})
    return out
