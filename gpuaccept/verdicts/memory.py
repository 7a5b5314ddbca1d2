"""Memory bandwidth: judge the HBM copy, each GPU's host link (H2D/D2H and the PCIe link under that load)
and every GPU pair's copy, all from the node's ``gpubench`` step. Every figure is checked against the
SKU floor, then against the node's median (``judge.stragglers``).

PCIe replays: the replay counter counts since the driver loaded, so one reading says nothing about the
link now; its growth between the step's ``idle`` and ``end`` samples, per minute of that window, is
judged (the link's retransmissions while host copies and GPU pairs loaded it).
"""

from __future__ import annotations

from typing import Any, cast

from gpuaccept.contracts.judge import JudgeLike, gpu_label
from gpuaccept.contracts.payloads import Sample, best_size_figure
from gpuaccept.verdicts.bench import bench_parts, p2p_result, record_busy

__all__ = [
    "HOSTBW_METRICS",
    "MEMBW_METRICS",
    "P2P_METRICS",
    "judge_hostbw",
    "judge_membw",
    "judge_p2p",
    "judge_replay_window",
    "replay_growth",
]

#: what each judge here judges: its test's ``@pytest.mark.judges``
MEMBW_METRICS = ("membw_tbps",)
HOSTBW_METRICS = ("hostbw_h2d_gbps", "hostbw_d2h_gbps", "pcie_gen_loaded", "pcie_width_loaded", "pcie_replays_per_min")
P2P_METRICS = ("p2p_gbps",)


def judge_membw(bench: dict[str, Any], judge: JudgeLike, node: str) -> None:
    """HBM copy TB/s per GPU of the node's gpubench result against the floor and the node median."""
    for label, data in bench_parts(bench, "membw", judge, node):
        judge.check(
            "membw_tbps",
            data.get("tbps"),
            node=node,
            gpu=label,
            size=data.get("best_size"),
            spread_pct=best_size_figure(data).get("spread_pct"),
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
    measured = {label for label, _ in parts}
    for gpu, entry in zip(bench.get("gpus") or [], bench.get("per_gpu") or [], strict=False):
        if gpu_label(gpu) in measured:
            # a sample the step did not take is empty, its counter unread (Sample is total: every key required)
            idle, end = cast(Sample, entry.get("idle") or {}), cast(Sample, entry.get("end") or {})
            judge_replay_window(idle, end, judge, node, gpu_label(gpu))
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


def judge_p2p(bench: dict[str, Any], judge: JudgeLike, node: str) -> dict[str, Any]:
    """Every ordered GPU pair's copy GB/s; the slowest pair is named; returns the matrix."""
    data = p2p_result(bench, judge, node, "p2p_gbps")
    if data is None:
        return {}
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


def replay_growth(first: Sample, last: Sample) -> tuple[int, float] | str:
    """(replays, seconds) between two samples of one GPU, or why the growth cannot be told."""
    before, after = first.get("pcie_replay_counter"), last.get("pcie_replay_counter")
    start, end = first.get("monotonic_s"), last.get("monotonic_s")
    if before is None or after is None:
        return "PCIe replay counter unread (nvmlDeviceGetPcieReplayCounter gave no value)"
    if start is None or end is None or end <= start:
        return "PCIe replay counter's window has no time base"
    if after < before:
        return f"PCIe replay counter went down ({before} -> {after}: the driver reloaded during the window)"
    return after - before, end - start


def judge_replay_window(first: Sample, last: Sample, judge: JudgeLike, node: str, label: str | None) -> None:
    """``pcie_replays_per_min``: the counter's growth over the window, per minute (DCGM's rate)."""
    growth = replay_growth(first, last)
    if isinstance(growth, str):
        judge.unreadable("pcie_replays_per_min", growth, node=node, gpu=label)
        return
    replays, seconds = growth
    judge.check(
        "pcie_replays_per_min",
        round(replays / seconds * 60, 2),
        node=node,
        gpu=label,
        replays=replays,
        seconds=round(seconds, 1),
        counter=[first.get("pcie_replay_counter"), last.get("pcie_replay_counter")],
    )
