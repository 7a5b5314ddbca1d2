"""Judge the GPU performance probes: matmul, burn-in, HBM copy, host<->device and GPU<->GPU bandwidth.

matmul, HBM, host and GPU-pair figures come from one ``gpubench`` step per node (one process drives
every GPU, so torch's start-up is paid once): ``gpubench_result`` runs it once per session for every
test that judges a part of it, and ``gpu_views`` gives each GPU's part the shape the judges read
(``.data`` and ``.gpu_label``, as a per-GPU rank's record has).

Common rules: a GPU that had someone else's processes on it before the benchmark is not measured and
ends the test as an error naming it ("GPU busy"), while the node's other GPUs are still judged; every
figure is checked against the SKU floor and then against the node's median (``judge.stragglers``).
A fixed-seed product must give the same checksum on every GPU of a node: identical GPUs running
identical inputs through the same cuBLAS agree bit for bit, so the odd one out computes wrong results.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuaccept.errors import MeasurementError
from gpuaccept.hardware.health import decode_reasons
from gpuaccept.hardware.nvlink import unread_text
from gpuaccept.hardware.verdict import JudgeLike, conclude, gpu_label

__all__ = [
    "GpuView",
    "agreement",
    "bench_figures",
    "busy_lines",
    "gpu_views",
    "gpubench_result",
    "judge_burn_in",
    "judge_hostbw",
    "judge_matmul",
    "judge_membw",
    "judge_nvlink_under_load",
    "judge_p2p",
    "p2p_record",
    "tflops_drop_pct",
]


#: The one-process node benchmark: start-up plus a few seconds per part on 2 GPUs; 8 GPUs add host links
#: measured one at a time and 14 rounds of GPU pairs.
BENCH_TIMEOUT_S = 300
_FIGURES_RECORDED: set[int] = set()


@dataclass(frozen=True)
class GpuView:
    """One GPU's share of a node-wide probe result, shaped like a per-GPU rank record."""

    node: str
    gpu: dict[str, Any] | None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def gpu_label(self) -> str | None:
        return gpu_label(self.gpu)


def gpubench_result(cluster: Any, node: str) -> Any:
    """The node's ``gpubench`` step (every GPU in one process), run once per session and shared."""
    gpus = cluster.require_gpus(node)
    return cluster.run_shared("gpubench", nodes=[node], tasks_per_node=1, gpus_per_task=gpus, timeout_s=BENCH_TIMEOUT_S)


def gpu_views(result: Any, node: str, part: str) -> list[GpuView]:
    """Each GPU's ``part`` (matmul, membw, hostbw) of the node's gpubench result; a busy GPU keeps only
    its busy entry and a ``skipped`` note, as a per-GPU probe would have reported it."""
    data = result.one().data
    busy = {entry["gpu"]: entry for entry in data.get("busy") or []}
    views = []
    for gpu, entry in zip(data.get("gpus") or [], data.get("per_gpu") or [], strict=False):
        if gpu["index"] in busy:
            views.append(GpuView(node, gpu, {"busy": [busy[gpu["index"]]], "skipped": "GPU busy"}))
        elif part not in entry:
            raise MeasurementError(f"{node} GPU {gpu_label(gpu)}: the gpubench result holds no {part} figures")
        else:
            views.append(GpuView(node, gpu, {**entry[part], "busy": []}))
    if not views:
        raise MeasurementError(f"{node}: gpubench measured no GPU ({data.get('error') or 'no GPU in its result'})")
    return views


def bench_figures(result: Any, judge: JudgeLike, node: str, metric: str) -> None:
    """Record a node-wide probe step's wall time and phases once (by the first test that reads it)."""
    if id(result) in _FIGURES_RECORDED:
        return
    _FIGURES_RECORDED.add(id(result))
    phases = result.one().data.get("phases") or {}
    judge.info(metric, phases.get("process_wall_s"), node=node, phases=phases, step_s=round(result.duration_s, 3))


def busy_lines(label: str | None, busy: list[dict[str, Any]]) -> list[str]:
    """``GPU 1 (..): pid 4242 python3 (1234 MiB)`` for each foreign process the probe found."""
    out = []
    for entry in busy:
        procs = ", ".join(f"pid {p['pid']} {p.get('name')} ({p.get('used_mib')} MiB)" for p in entry["processes"])
        out.append(f"GPU {label or entry.get('gpu')}: {procs}")
    return out


def _split(records: Iterable[Any]) -> tuple[list[Any], list[str]]:
    """(measured records, busy lines) of a per-GPU probe."""
    measured, busy = [], []
    for record in records:
        if record.data.get("busy"):
            busy += busy_lines(record.gpu_label, record.data["busy"])
        if "skipped" not in record.data:
            measured.append(record)
    return measured, busy


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


def judge_matmul(records: list[Any], judge: JudgeLike, node: str) -> None:
    """BF16 TFLOP/s per GPU against the floor and the node median; checksums agree."""
    measured, busy = _split(records)
    for record in measured:
        data = record.data
        judge.check(
            "matmul_bf16_tflops",
            data.get("tflops"),
            node=node,
            gpu=record.gpu_label,
            size=data.get("best_size"),
            checksum=data.get("checksum"),
            by_size={k: v["tflops"] for k, v in data.get("by_size", {}).items()},
            spread_pct=data.get("by_size", {}).get(str(data.get("best_size")), {}).get("spread_pct"),
            during=data.get("by_size", {}).get(str(data.get("best_size")), {}).get("during"),
        )
        if data.get("tflops_burst") is not None:
            judge.info("matmul_bf16_burst_tflops", data["tflops_burst"], node=node, gpu=record.gpu_label)
    _checksums(measured, judge, node, "matmul_checksum", "checksum")
    judge.stragglers("matmul_bf16_tflops")
    conclude(judge, node, busy=busy)


def _checksums(measured: list[Any], judge: JudgeLike, node: str, metric: str, key: str) -> None:
    values = {record.gpu_label: record.data.get(key) for record in measured}
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


def judge_burn_in(records: list[Any], judge: JudgeLike, node: str) -> None:
    """Sustained matmul: no drop over time, no failing clock events, checksums stable and agreeing."""
    measured, busy = _split(records)
    for record in measured:
        label, data = record.gpu_label, record.data
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
    _checksums(measured, judge, node, "burnin_checksum", "checksum_end")
    judge.stragglers("burnin_tflops")
    conclude(judge, node, busy=busy)


def judge_membw(records: list[Any], judge: JudgeLike, node: str) -> None:
    measured, busy = _split(records)
    for record in measured:
        data = record.data
        judge.check(
            "membw_tbps",
            data.get("tbps"),
            node=node,
            gpu=record.gpu_label,
            size=data.get("best_size"),
            spread_pct=data.get("by_size", {}).get(str(data.get("best_size")), {}).get("spread_pct"),
        )
    judge.stragglers("membw_tbps")
    conclude(judge, node, busy=busy)


def judge_hostbw(records: list[Any], judge: JudgeLike, node: str, concurrent: dict[str, Any] | None = None) -> None:
    """H2D/D2H GB/s of each GPU's link alone (NUMA-local buffer, the other GPUs idle) against the floor
    and the node median, the PCIe link as it runs under that load; then, reported, what each GPU and the
    node got with every GPU copying at once (they share the host's memory, root complexes and, on HGX
    boards, one PCIe switch uplink per two GPUs, so that figure depends on the board, not the link)."""
    measured, busy = _split(records)
    for record in measured:
        label, data = record.gpu_label, record.data
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
    if concurrent and not busy:
        for direction in ("h2d", "d2h"):
            for record, value in zip(measured, concurrent.get(f"{direction}_gbps_per_gpu") or [], strict=False):
                judge.info(f"hostbw_{direction}_concurrent_gbps", value, node=node, gpu=record.gpu_label)
            judge.info(
                f"hostbw_{direction}_concurrent_total_gbps",
                concurrent.get(f"{direction}_gbps_total"),
                node=node,
                gpus=concurrent.get("gpus"),
            )
    conclude(judge, node, busy=busy)


def _link_split(entry: dict[str, Any], kind: str) -> str:
    """Where a GPU's CRC errors sat: one link (a cable/port to reseat) or spread over all of them."""
    per_link = (entry.get("per_link") or {}).get(f"crc_{kind}") or {}
    if not per_link:
        return ""
    worst, count = max(per_link.items(), key=lambda item: item[1])
    return f"on {len(per_link)} of {entry.get('links') or '?'} links, most on link {worst} ({count})"


def judge_nvlink_under_load(record: Any, judge: JudgeLike, node: str) -> None:
    """NVLink errors that appeared while the P2P copies ran: CRC as a rate, replay/recovery as counts.

    DCGM judges the flit and data CRC counters each as a rate, FAIL at >= 100/s (health watch
    ``MonitorNVLink`` and the diag pcie plugin's per-second check, Hopper included); replay and
    recovery are failures at any count. The failure names the links the errors sat on.
    """
    data = record.data
    labels = {g["index"]: gpu_label(g) for g in data.get("gpus") or []}
    busy = [line for entry in data.get("busy") or [] for line in busy_lines(labels.get(entry["gpu"]), [entry])]
    missing, details = [], []
    for entry in data.get("nvlink_errors") or []:
        label = labels.get(entry["gpu"], str(entry["gpu"]))
        counts = {k: entry.get(k) for k in ("crc_flit", "crc_data", "replay", "recovery")}
        if any(v is None for v in counts.values()):
            # A node whose SKU has no NVLink never gets here (the test skips it): unreadable is not clean.
            unread = sorted(k for k, v in counts.items() if v is None)
            missing.append(f"{node} GPU {label}: NVLink counters {unread} while the copies ran ({unread_text(entry)})")
            continue
        seconds = max(float(entry.get("seconds") or 0), 1e-3)
        for kind in ("flit", "data"):
            count = counts[f"crc_{kind}"]
            where = _link_split(entry, kind)
            judge.check(
                f"p2p_nvlink_crc_{kind}_per_s",
                round(count / seconds, 2),
                node=node,
                gpu=label,
                count=count,
                seconds=seconds,
                links=(entry.get("per_link") or {}).get(f"crc_{kind}"),
            )
            if count and where:
                details.append(f"GPU {label}: {count} CRC {kind} errors in {seconds:.1f} s {where}")
        judge.check("p2p_nvlink_replay_errors", counts["replay"], node=node, gpu=label, seconds=seconds)
        judge.check("p2p_nvlink_recovery_errors", counts["recovery"], node=node, gpu=label, seconds=seconds)
    conclude(judge, node, busy=busy, details=details, missing=missing)


def p2p_record(cluster: Any, node: str) -> GpuView:
    """The node's GPU-pair copies (part of its gpubench step), judged by the bandwidth and the NVLink-error
    tests: one measurement, so the two verdicts speak of the same load."""
    data = gpubench_result(cluster, node).one().data
    if "p2p" not in data:
        raise MeasurementError(f"{node}: the gpubench result holds no GPU-pair figures", nodes=(node,))
    return GpuView(node, None, data["p2p"])


def judge_p2p(record: Any, judge: JudgeLike, node: str) -> dict[str, Any]:
    """Every ordered GPU pair's copy GB/s; the slowest pair is named; returns the matrix."""
    data = record.data
    labels = {g["index"]: gpu_label(g) for g in data.get("gpus") or []}
    busy = [line for entry in data.get("busy") or [] for line in busy_lines(labels.get(entry["gpu"]), [entry])]
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
    details = []
    if pairs:
        slow = min(pairs, key=lambda p: p["gbps"])
        judge.info(
            "p2p_slowest_pair_gbps",
            slow["gbps"],
            node=node,
            pair=f"{slow['src']}->{slow['dst']}",
            matrix=data.get("matrix"),
        )
        details.append(
            f"slowest pair: GPU {slow['src']} -> GPU {slow['dst']} at {slow['gbps']} GB/s"
            + ("" if slow.get("peer_access") else " (no peer access: copied through the host)")
        )
    judge.stragglers("p2p_gbps")
    conclude(judge, node, busy=busy, details=details)
    return data.get("matrix") or {}
