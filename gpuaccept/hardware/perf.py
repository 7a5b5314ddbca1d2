"""Judge the GPU performance probes: matmul, burn-in, HBM copy, host<->device and GPU<->GPU bandwidth.

matmul, HBM, host and GPU-pair figures come from one ``gpubench`` step per node (one process drives
every GPU, so torch's start-up is paid once; the tests run it once per session through
``cluster.run_shared`` and hand its result here); the burn-in from one ``matmul`` task per GPU. This
module judges and never dispatches.

Common rules: a GPU that had someone else's processes on it before the benchmark is not measured and
is recorded busy (``judge.busy``: the test is an error naming it), while the node's other GPUs are
still judged; every figure is checked against the SKU floor and then against the node's median
(``judge.stragglers``). A fixed-seed product must give the same checksum on every GPU of a node:
identical GPUs running identical inputs through the same cuBLAS agree bit for bit, so the odd one out
computes wrong results.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from gpuaccept.errors import MeasurementError
from gpuaccept.hardware.health import decode_reasons
from gpuaccept.hardware.nvlink import unread_text
from gpuaccept.hardware.protocol import JudgeLike, gpu_label

__all__ = [
    "BENCH_TIMEOUT_S",
    "agreement",
    "bench_parts",
    "judge_burn_in",
    "judge_hostbw",
    "judge_matmul",
    "judge_membw",
    "judge_nvlink_under_load",
    "judge_p2p",
    "rank_parts",
    "record_busy",
    "tflops_drop_pct",
]


#: The one-process node benchmark: start-up plus a few seconds per part on 2 GPUs; 8 GPUs add host links
#: measured one at a time and 14 rounds of GPU pairs.
BENCH_TIMEOUT_S = 300

#: One GPU's figures: its label (``3 (0000:9A:00.0)``) and what the probe measured on it.
Part = tuple[str | None, dict[str, Any]]


def record_busy(
    judge: JudgeLike,
    node: str,
    busy: Iterable[dict[str, Any]],
    labels: Mapping[Any, str | None] | None = None,
    label: str | None = None,
) -> set[Any]:
    """Record every GPU the probe found others' processes on (``judge.busy``), and return their indices:
    the one place the busy-GPU preamble is written. A GPU is named by ``label`` (a per-GPU rank's own
    GPU), else by its index in ``labels`` (a node-wide probe's GPUs), else by its index."""
    found = set()
    for entry in busy:
        procs = ", ".join(f"pid {p['pid']} {p.get('name')} ({p.get('used_mib')} MiB)" for p in entry["processes"])
        judge.busy(procs, node=node, gpu=label or (labels or {}).get(entry.get("gpu")) or entry.get("gpu"))
        found.add(entry.get("gpu"))
    return found


def bench_parts(data: dict[str, Any], part: str, judge: JudgeLike, node: str) -> list[Part]:
    """Each measured GPU's ``part`` (matmul, membw, hostbw) of a node's gpubench result; a busy GPU is
    recorded busy and left out."""
    labels = {g["index"]: gpu_label(g) for g in data.get("gpus") or []}
    busy = record_busy(judge, node, data.get("busy") or [], labels)
    parts: list[Part] = []
    for gpu, entry in zip(data.get("gpus") or [], data.get("per_gpu") or [], strict=False):
        if gpu["index"] in busy:
            continue
        if part not in entry:
            raise MeasurementError(f"{node} GPU {gpu_label(gpu)}: the gpubench result holds no {part} figures")
        parts.append((gpu_label(gpu), entry[part]))
    if not parts and not busy:
        raise MeasurementError(f"{node}: gpubench measured no GPU ({data.get('error') or 'no GPU in its result'})")
    return parts


def rank_parts(records: Iterable[Any], judge: JudgeLike, node: str) -> list[Part]:
    """Each measured GPU of a per-GPU probe (one rank per GPU); a busy GPU is recorded busy and left out."""
    parts: list[Part] = []
    for record in records:
        record_busy(judge, node, record.data.get("busy") or [], label=record.gpu_label)
        if "skipped" not in record.data:
            parts.append((record.gpu_label, record.data))
    return parts


def agreement(values: dict[str, Any]) -> dict[str, str]:
    """Per GPU: ``match`` if its checksum equals the majority's, else why not (2 GPUs: both named)."""
    if len(values) < 2:
        return dict.fromkeys(values, "match")
    counts = Counter(values.values())
    top, top_count = counts.most_common(1)[0]
    if top_count * 2 > len(values):
        return {
            label: "match" if value == top else f"differs from the other {top_count} GPUs"
            for label, value in values.items()
        }
    return {label: "no majority: " + ", ".join(f"{k}={v}" for k, v in values.items()) for label in values}


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
            spread_pct=data.get("by_size", {}).get(str(data.get("best_size")), {}).get("spread_pct"),
            during=data.get("by_size", {}).get(str(data.get("best_size")), {}).get("during"),
        )
        if data.get("tflops_burst") is not None:
            judge.info("matmul_bf16_burst_tflops", data["tflops_burst"], node=node, gpu=label)
    _checksums(parts, judge, node, "matmul_checksum", "checksum")
    judge.stragglers("matmul_bf16_tflops")


def _checksums(parts: list[Part], judge: JudgeLike, node: str, metric: str, key: str) -> None:
    values = {str(label): data.get(key) for label, data in parts}
    if len(values) < 2:
        return  # one GPU: nothing to compare it with (its checksum rides on its throughput check)
    for label, verdict in agreement(values).items():
        judge.check(metric, verdict, node=node, gpu=label, checksum=values[label])


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
        failing = sorted({name for i in intervals for name in decode_reasons(i.get("clock_event_reasons"))[0]})
        judge.check("burnin_clock_events_failing", "+".join(failing) or "none", node=node, gpu=label)
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
    _checksums(parts, judge, node, "burnin_checksum", "checksum_end")
    judge.stragglers("burnin_tflops")


def judge_membw(bench: dict[str, Any], judge: JudgeLike, node: str) -> None:
    """HBM copy TB/s per GPU of the node's gpubench result against the floor and the node median."""
    for label, data in bench_parts(bench, "membw", judge, node):
        judge.check(
            "membw_tbps",
            data.get("tbps"),
            node=node,
            gpu=label,
            size=data.get("best_size"),
            spread_pct=data.get("by_size", {}).get(str(data.get("best_size")), {}).get("spread_pct"),
        )
    judge.stragglers("membw_tbps")


def judge_hostbw(bench: dict[str, Any], judge: JudgeLike, node: str) -> None:
    """H2D/D2H GB/s of each GPU's link alone (NUMA-local buffer, the other GPUs idle) against the floor
    and the node median, the PCIe link as it runs under that load; then, reported, what each GPU and the
    node got with every GPU copying at once (they share the host's memory, root complexes and, on HGX
    boards, one PCIe switch uplink per two GPUs, so that figure depends on the board, not the link)."""
    parts = bench_parts(bench, "hostbw", judge, node)
    concurrent = bench.get("hostbw_concurrent")
    for label, data in parts:
        numa = data.get("numa") or {}
        judge.check(
            "hostbw_h2d_gbps",
            data.get("h2d_gbps"),
            node=node,
            gpu=label,
            numa=numa,
            min_max=[data.get("h2d_gbps_min"), data.get("h2d_gbps_max")],
            spread_pct=data.get("h2d_spread_pct"),
        )
        judge.check(
            "hostbw_d2h_gbps",
            data.get("d2h_gbps"),
            node=node,
            gpu=label,
            min_max=[data.get("d2h_gbps_min"), data.get("d2h_gbps_max")],
            spread_pct=data.get("d2h_spread_pct"),
        )
        judge.check("pcie_gen_loaded", data.get("pcie_gen_loaded"), node=node, gpu=label)
        judge.check("pcie_width_loaded", data.get("pcie_width_loaded"), node=node, gpu=label)
        judge.info(
            "hostbw_numa_bound",
            "yes" if numa.get("bound") else f"no ({numa.get('why')})",
            node=node,
            gpu=label,
            gpu_numa_node=numa.get("gpu_numa_node"),
            cpus=numa.get("bound_cpus"),
        )
    judge.stragglers("hostbw_h2d_gbps")
    judge.stragglers("hostbw_d2h_gbps")
    if concurrent and not bench.get("busy"):  # every GPU of the node copied at once
        for direction in ("h2d", "d2h"):
            for (label, _), value in zip(parts, concurrent.get(f"{direction}_gbps_per_gpu") or [], strict=False):
                judge.info(f"hostbw_{direction}_concurrent_gbps", value, node=node, gpu=label)
            judge.info(
                f"hostbw_{direction}_concurrent_total_gbps",
                concurrent.get(f"{direction}_gbps_total"),
                node=node,
                gpus=concurrent.get("gpus"),
            )


def _link_split(entry: dict[str, Any], kind: str) -> str:
    """Where a GPU's CRC errors sat: one link (a cable/port to reseat) or spread over all of them."""
    per_link = (entry.get("per_link") or {}).get(f"crc_{kind}") or {}
    if not per_link:
        return ""
    worst, count = max(per_link.items(), key=lambda item: item[1])
    return f"on {len(per_link)} of {entry.get('links') or '?'} links, most on link {worst} ({count})"


def _p2p(bench: dict[str, Any], node: str) -> dict[str, Any]:
    """The GPU-pair copies of the node's gpubench result: judged by the bandwidth and the NVLink-error
    tests, one measurement, so the two verdicts speak of the same load."""
    if "p2p" not in bench:
        raise MeasurementError(f"{node}: the gpubench result holds no GPU-pair figures", nodes=(node,))
    data: dict[str, Any] = bench["p2p"]
    return data


def judge_nvlink_under_load(bench: dict[str, Any], judge: JudgeLike, node: str) -> None:
    """NVLink errors that appeared while the P2P copies ran: CRC as a rate, replay/recovery as counts.

    DCGM judges the flit and data CRC counters each as a rate, FAIL at >= 100/s (health watch
    ``MonitorNVLink`` and the diag pcie plugin's per-second check, Hopper included); replay and
    recovery are failures at any count. The failure names the links the errors sat on.
    """
    data = _p2p(bench, node)
    labels = {g["index"]: gpu_label(g) for g in data.get("gpus") or []}
    record_busy(judge, node, data.get("busy") or [], labels)
    for entry in data.get("nvlink_errors") or []:
        label = labels.get(entry["gpu"], str(entry["gpu"]))
        counts = {k: entry.get(k) for k in ("crc_flit", "crc_data", "replay", "recovery")}
        seconds = max(float(entry.get("seconds") or 0), 1e-3)
        for kind in ("flit", "data"):
            count = counts[f"crc_{kind}"]
            metric = f"p2p_nvlink_crc_{kind}_per_s"
            if count is None:  # the SKU has NVLink (else the test skips): unreadable is not clean
                judge.unreadable(
                    metric,
                    f"CRC {kind} counter unread while the copies ran ({unread_text(entry)})",
                    node=node,
                    gpu=label,
                )
                continue
            where = _link_split(entry, kind)
            judge.check(
                metric,
                round(count / seconds, 2),
                node=node,
                gpu=label,
                count=count,
                seconds=seconds,
                links=(entry.get("per_link") or {}).get(f"crc_{kind}"),
                details=[f"{count} CRC {kind} errors in {seconds:.1f} s {where}"] if count and where else [],
            )
        for kind in ("replay", "recovery"):
            metric = f"p2p_nvlink_{kind}_errors"
            if counts[kind] is None:
                judge.unreadable(
                    metric, f"{kind} counter unread while the copies ran ({unread_text(entry)})", node=node, gpu=label
                )
            else:
                judge.check(metric, counts[kind], node=node, gpu=label, seconds=seconds)


def judge_p2p(bench: dict[str, Any], judge: JudgeLike, node: str) -> dict[str, Any]:
    """Every ordered GPU pair's copy GB/s; the slowest pair is named; returns the matrix."""
    data = _p2p(bench, node)
    labels = {g["index"]: gpu_label(g) for g in data.get("gpus") or []}
    record_busy(judge, node, data.get("busy") or [], labels)
    pairs = data.get("pairs") or []
    for pair in pairs:
        where = f"{labels.get(pair['src'], pair['src'])} -> {labels.get(pair['dst'], pair['dst'])}"
        judge.check(
            "p2p_gbps",
            pair.get("gbps"),
            node=node,
            pair=where,
            peer_access=pair.get("peer_access"),
            spread_pct=pair.get("spread_pct"),
        )
    if pairs:
        slow = min(pairs, key=lambda p: p["gbps"])
        judge.info(
            "p2p_slowest_pair_gbps",
            slow["gbps"],
            node=node,
            pair=f"{slow['src']}->{slow['dst']}",
            matrix=data.get("matrix"),
            peer_access=slow.get("peer_access"),
        )
    judge.stragglers("p2p_gbps")
    return data.get("matrix") or {}
