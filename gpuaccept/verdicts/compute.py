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
from typing import Any

from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.contracts.payloads import best_size_figure
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


def judge_matmul(bench: dict[str, Any], judge: JudgeLike, node: str) -> None:
    """BF16 TFLOP/s per GPU of the node's gpubench result against the floor and the node median;
    checksums agree."""
    parts = bench_parts(bench, "matmul", judge, node)
    for label, data in parts:
        judge.check(
            "matmul_bf16_tflops",
            data.get("tflops"),
            node=node,
            gpu=label,
            size=data.get("best_size"),
            checksum=data.get("checksum"),
            by_size={k: v["tflops"] for k, v in data.get("by_size", {}).items()},
            spread_pct=best_size_figure(data).get("spread_pct"),
            during=best_size_figure(data).get("during"),
        )
        if data.get("tflops_burst") is not None:
            judge.info("matmul_bf16_burst_tflops", data["tflops_burst"], node=node, gpu=label)
        judge_clock_events_under_load(data, judge, node, label)
    judge_checksums(parts, judge, node, "matmul_checksum", "checksum")
    judge.stragglers("matmul_bf16_tflops")


def judge_clock_events_under_load(data: dict[str, Any], judge: JudgeLike, node: str, label: str | None) -> None:
    """``matmul_clock_events_failing``: the failing clock-event reasons in any size's sample under load."""
    masks = [f["during"].get("clock_event_reasons") for f in (data.get("by_size") or {}).values() if f.get("during")]
    judge_clock_events("matmul_clock_events_failing", masks, judge, node, label, "while the matmul ran")


def judge_clock_events(
    metric: str, masks: list[Any], judge: JudgeLike, node: str, label: str | None, when: str
) -> None:
    """The failing clock-event reasons in the samples taken under load (the reported ones, such as the power cap
    a loaded board sits at, ride along). Samples NVML gave no mask for are left out; none read at all is
    unreadable: a GPU whose reasons could not be read has not shown that none were set."""
    read = [int(m) for m in masks if m is not None]
    if not read:
        judge.unreadable(metric, f"NVML gave no clock-event reasons {when}", node=node, gpu=label)
        return
    failing = sorted({name for mask in read for name in decode_reasons(mask)[0]})
    reported = sorted({name for mask in read for name in decode_reasons(mask)[1]})
    extra = {"reported": "+".join(reported) or "none", "masks": read, "unread": len(masks) - len(read)}
    judge.check(metric, "+".join(failing) or "none", node=node, gpu=label, **extra)


def tflops_drop_pct(intervals: list[dict[str, Any]]) -> float | None:
    """How far the last third of the run fell below the first third (median TFLOP/s), in percent."""
    values = [i["tflops"] for i in intervals if isinstance(i.get("tflops"), (int, float))]
    if len(values) < 2:
        return None
    third = max(1, len(values) // 3)
    first, last = statistics.median(values[:third]), statistics.median(values[-third:])
    return round(max(0.0, (first - last) / first * 100), 2) if first > 0 else None


def judge_burn_in(records: Iterable[Any], judge: JudgeLike, node: str) -> None:
    """Sustained matmul (one rank per GPU): no drop over time, no failing clock events, checksums
    stable and agreeing."""
    parts = rank_parts(records, judge, node)
    for label, data in parts:
        intervals = (data.get("burn_in") or {}).get("intervals") or []
        judge.check("burnin_tflops_drop_pct", tflops_drop_pct(intervals), node=node, gpu=label, intervals=intervals)
        masks = [i.get("clock_event_reasons") for i in intervals]
        judge_clock_events("burnin_clock_events_failing", masks, judge, node, label, "during the burn-in")
        values = [i["tflops"] for i in intervals]
        judge.check(
            "burnin_tflops",
            round(statistics.mean(values), 1) if values else None,
            node=node,
            gpu=label,
            min=min(values, default=None),
            max=max(values, default=None),
        )
        temps = [i["temperature_c"] for i in intervals if i.get("temperature_c") is not None]
        powers = [i["power_w"] for i in intervals if i.get("power_w") is not None]
        clocks = [i["sm_clock_mhz"] for i in intervals if i.get("sm_clock_mhz") is not None]
        judge.info("burnin_max_temperature_c", max(temps, default=None), node=node, gpu=label)
        judge.info("burnin_max_power_w", max(powers, default=None), node=node, gpu=label)
        judge.info("burnin_min_sm_clock_mhz", min(clocks, default=None), node=node, gpu=label)
        stable = data.get("checksum") == data.get("checksum_end")
        judge.check(
            "burnin_checksum_stable",
            "match" if stable else "changed during the burn-in",
            node=node,
            gpu=label,
            start=data.get("checksum"),
            end=data.get("checksum_end"),
        )
    judge_checksums(parts, judge, node, "burnin_checksum", "checksum_end")
    judge.stragglers("burnin_tflops")
