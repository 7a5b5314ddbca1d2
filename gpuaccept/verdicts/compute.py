"""Compute: judge dense BF16 matmul (from the node's ``gpubench`` step) and the optional burn-in (one
``matmul`` rank per GPU). Every figure is checked against the SKU floor, then against the node's median
(``judge.stragglers``); checksums must agree across the node's GPUs (``bench.judge_checksums``).

The matmul is also the node's first sustained load: the NVML sample the probe takes halfway through each
size's timed batches must show no clock-event reason that means a physical limit (``gpu_health``'s
failing reasons: hardware slowdown, thermal slowdown, power brake). An idle GPU is cool and at rest, so
``test_gpu_health`` cannot see a board that throttles only once it draws its power; a matmul floor with
margin can hide it, and sustained training then runs at half clocks.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from gpuaccept.contracts.bench import (
    BurnInInterval,
    GpuBenchError,
    GpuBenchRan,
    MatmulBurnIn,
    MatmulBusy,
    MatmulSizes,
    best_size_figure,
)
from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.contracts.payloads import Sample
from gpuaccept.verdicts.bench import bench_parts, judge_checksums, rank_parts
from gpuaccept.verdicts.gpu_health import decode_reasons

__all__ = ["BURN_IN_METRICS", "MATMUL_METRICS", "judge_burn_in", "judge_matmul", "tflops_drop_pct"]

#: what ``judge_matmul`` and ``judge_burn_in`` judge: their tests' ``@pytest.mark.judges``
MATMUL_METRICS = ("matmul_bf16_tflops", "matmul_checksum", "matmul_clock_events_failing")
BURN_IN_METRICS = (
    "burnin_tflops",
    "burnin_tflops_drop_pct",
    "burnin_clock_events_failing",
    "burnin_checksum_stable",
    "burnin_checksum",
)


def judge_matmul(bench: GpuBenchRan | GpuBenchError, judge: JudgeLike, node: str) -> None:
    """BF16 TFLOP/s per GPU of the node's gpubench result against the floor and the node median;
    checksums agree."""
    parts = bench_parts(bench, "matmul", lambda entry: entry["matmul"], judge, node)
    for label, data in parts:
        best = best_size_figure(data)
        judge.check(
            "matmul_bf16_tflops",
            data["tflops"],
            node=node,
            gpu=label,
            size=data["best_size"],
            checksum=data["checksum"],
            by_size={str(f["size"]): f["tflops"] for f in data["sizes"]},
            spread_pct=best["spread_pct"],
            during=best["during"],
        )
        if data["tflops_burst"] is not None:
            judge.info("matmul_bf16_burst_tflops", data["tflops_burst"], node=node, gpu=label)
        samples = [f["during"] for f in data["sizes"]]
        judge_clock_events("matmul_clock_events_failing", samples, judge, node, label, "while the matmul ran")
    judge_checksums([(label, data["checksum"]) for label, data in parts], judge, node, "matmul_checksum")
    judge.stragglers("matmul_bf16_tflops")


def judge_clock_events(
    metric: str, samples: list[Sample | None], judge: JudgeLike, node: str, label: str | None, when: str
) -> None:
    """The failing clock-event reasons in the samples taken under load (the reported ones, such as the power cap
    a loaded board sits at, ride along). Samples NVML gave no mask for are left out; none read at all is
    unreadable: a GPU whose reasons could not be read has not shown that none were set."""
    masks = [s["clock_event_reasons"] if s is not None else None for s in samples]
    read = [int(m) for m in masks if m is not None]
    if not read:
        judge.unreadable(metric, f"NVML gave no clock-event reasons {when}", node=node, gpu=label)
        return
    failing = sorted({name for mask in read for name in decode_reasons(mask)[0]})
    reported = sorted({name for mask in read for name in decode_reasons(mask)[1]})
    extra = {"reported": "+".join(reported) or "none", "masks": read, "unread": len(masks) - len(read)}
    judge.check(metric, "+".join(failing) or "none", node=node, gpu=label, **extra)


def tflops_drop_pct(intervals: list[BurnInInterval]) -> float | None:
    """How far the last third of the run fell below the first third (median TFLOP/s), in percent."""
    values = [i["tflops"] for i in intervals]
    if len(values) < 2:
        return None
    third = max(1, len(values) // 3)
    first, last = statistics.median(values[:third]), statistics.median(values[-third:])
    return round(max(0.0, (first - last) / first * 100), 2) if first > 0 else None


def judge_burn_in(
    ranks: Iterable[tuple[str | None, MatmulBusy | MatmulSizes | MatmulBurnIn]], judge: JudgeLike, node: str
) -> None:
    """Sustained matmul (one rank per GPU: its GPU's label and its payload): no drop over time, no failing clock
    events, checksums stable and agreeing."""
    parts = rank_parts(ranks, judge, node, "burnin_tflops")
    for label, data in parts:
        intervals = data["burn_in"]["intervals"]
        judge.check("burnin_tflops_drop_pct", tflops_drop_pct(intervals), node=node, gpu=label, intervals=intervals)
        samples = [i["during"] for i in intervals]
        judge_clock_events("burnin_clock_events_failing", samples, judge, node, label, "during the burn-in")
        values = [i["tflops"] for i in intervals]
        judge.check(
            "burnin_tflops",
            round(statistics.mean(values), 1) if values else None,
            node=node,
            gpu=label,
            min=min(values, default=None),
            max=max(values, default=None),
        )
        read = [s for s in samples if s is not None]
        temps = [s["temperature_c"] for s in read if s["temperature_c"] is not None]
        powers = [s["power_w"] for s in read if s["power_w"] is not None]
        clocks = [s["sm_clock_mhz"] for s in read if s["sm_clock_mhz"] is not None]
        judge.info("burnin_max_temperature_c", max(temps, default=None), node=node, gpu=label)
        judge.info("burnin_max_power_w", max(powers, default=None), node=node, gpu=label)
        judge.info("burnin_min_sm_clock_mhz", min(clocks, default=None), node=node, gpu=label)
        stable = data["checksum"] == data["checksum_end"]
        judge.check(
            "burnin_checksum_stable",
            "match" if stable else "changed during the burn-in",
            node=node,
            gpu=label,
            start=data["checksum"],
            end=data["checksum_end"],
        )
    judge_checksums([(label, data["checksum_end"]) for label, data in parts], judge, node, "burnin_checksum")
    judge.stragglers("burnin_tflops")
