"""Memory bandwidth: judge the HBM copy, each GPU's host link (H2D/D2H and the PCIe link under that load)
and every GPU pair's copy, all from the node's ``gpubench`` step. Every figure is checked against the
SKU floor, then against the node's median (``judge.stragglers``).

PCIe replays: the replay counter counts since the driver loaded, so one reading says nothing about the
link now; its growth between the step's ``idle`` and ``end`` samples, per minute of that window, is
judged (the link's retransmissions while host copies and GPU pairs loaded it).
"""

from __future__ import annotations

from gpuaccept.contracts.bench import GpuBenchError, GpuBenchRan, HostLink, P2pMatrix, best_size_figure
from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.contracts.payloads import Sample
from gpuaccept.verdicts.bench import Part, bench_parts, p2p_result

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


def judge_membw(bench: GpuBenchRan | GpuBenchError, judge: JudgeLike, node: str) -> None:
    """HBM copy TB/s per GPU of the node's gpubench result against the floor and the node median."""
    for label, data in bench_parts(bench, "membw", lambda entry: entry["membw"], judge, node):
        judge.check(
            "membw_tbps",
            data["tbps"],
            node=node,
            gpu=label,
            size=data["best_size"],
            spread_pct=best_size_figure(data)["spread_pct"],
        )
    judge.stragglers("membw_tbps")


def judge_hostbw(bench: GpuBenchRan | GpuBenchError, judge: JudgeLike, node: str) -> None:
    """H2D/D2H GB/s of each GPU's link alone (NUMA-local buffer, the other GPUs idle) against the floor
    and the node median, the PCIe link as it runs under that load; then, reported, what each GPU and the
    node got with every GPU copying at once (they share the host's memory, root complexes and, on HGX
    boards, one PCIe switch uplink per two GPUs, so that figure depends on the board, not the link)."""
    parts = bench_parts(bench, "hostbw", lambda entry: entry["hostbw"], judge, node)
    for label, data in parts:
        _judge_link(label, data, judge, node)
    judge.stragglers("hostbw_h2d_gbps")
    judge.stragglers("hostbw_d2h_gbps")
    if bench["outcome"] == "error" or not parts:
        return
    # ``per_gpu`` holds the measured GPUs only, and ``bench_parts`` gives one part for each of them, in order
    for (label, _), entry in zip(parts, bench["per_gpu"], strict=True):
        judge_replay_window(entry["idle"], entry["end"], judge, node, label)
    _report_concurrent(bench, parts, judge, node)


def _judge_link(label: str | None, data: HostLink, judge: JudgeLike, node: str) -> None:
    """One GPU's link alone: each way against the floor, the PCIe generation and width under that load."""
    numa = data["numa"]
    judge.check(
        "hostbw_h2d_gbps",
        data["h2d_gbps"],
        node=node,
        gpu=label,
        numa=numa,
        min_max=[data["h2d_gbps_min"], data["h2d_gbps_max"]],
        spread_pct=data["h2d_spread_pct"],
    )
    judge.check(
        "hostbw_d2h_gbps",
        data["d2h_gbps"],
        node=node,
        gpu=label,
        min_max=[data["d2h_gbps_min"], data["d2h_gbps_max"]],
        spread_pct=data["d2h_spread_pct"],
    )
    judge.check("pcie_gen_loaded", data["pcie_gen_loaded"], node=node, gpu=label)
    judge.check("pcie_width_loaded", data["pcie_width_loaded"], node=node, gpu=label)
    judge.info(
        "hostbw_numa_bound",
        "yes" if numa["bound"] else f"no ({numa['why']})",
        node=node,
        gpu=label,
        gpu_numa_node=numa["gpu_numa_node"],
        cpus=numa["bound_cpus"],
    )


def _report_concurrent(bench: GpuBenchRan, parts: list[Part[HostLink]], judge: JudgeLike, node: str) -> None:
    """Every GPU of the node copying at once, reported (only when none was busy: then every GPU copied)."""
    concurrent = bench["hostbw_concurrent"]
    if concurrent is None or bench["busy"]:
        return
    for direction in ("h2d", "d2h"):
        per_gpu = concurrent["h2d_gbps_per_gpu" if direction == "h2d" else "d2h_gbps_per_gpu"]
        for (label, _), value in zip(parts, per_gpu, strict=False):
            judge.info(f"hostbw_{direction}_concurrent_gbps", value, node=node, gpu=label)
        total = concurrent["h2d_gbps_total" if direction == "h2d" else "d2h_gbps_total"]
        judge.info(f"hostbw_{direction}_concurrent_total_gbps", total, node=node, gpus=concurrent["gpus"])


def judge_p2p(bench: GpuBenchRan | GpuBenchError, judge: JudgeLike, node: str) -> P2pMatrix | None:
    """Every ordered GPU pair's copy GB/s; the slowest pair is named; returns the matrix (None: no pairs)."""
    found = p2p_result(bench, judge, node, "p2p_gbps")
    if found is None:
        return None
    data, labels = found
    pairs = data["pairs"]
    for pair in pairs:
        where = f"{labels[pair['src']]} -> {labels[pair['dst']]}"
        judge.check(
            "p2p_gbps",
            pair["gbps"],
            node=node,
            pair=where,
            peer_access=pair["peer_access"],
            spread_pct=pair["spread_pct"],
        )
    if pairs:
        slow = min(pairs, key=lambda p: p["gbps"])
        judge.info(
            "p2p_slowest_pair_gbps",
            slow["gbps"],
            node=node,
            pair=f"{slow['src']}->{slow['dst']}",
            matrix=data["matrix"],
            peer_access=slow["peer_access"],
        )
    judge.stragglers("p2p_gbps")
    return data["matrix"]


def replay_growth(first: Sample | None, last: Sample | None) -> tuple[int, float] | str:
    """(replays, seconds) between two samples of one GPU, or why the growth cannot be told."""
    if first is None or last is None:
        return "no NVML sample before or after the parts (NVML not loaded)"
    before, after = first["pcie_replay_counter"], last["pcie_replay_counter"]
    start, end = first["monotonic_s"], last["monotonic_s"]
    if before is None or after is None:
        return "PCIe replay counter unread (nvmlDeviceGetPcieReplayCounter gave no value)"
    if end <= start:
        return "PCIe replay counter's window has no time base"
    if after < before:
        return f"PCIe replay counter went down ({before} -> {after}: the driver reloaded during the window)"
    return after - before, end - start


def judge_replay_window(
    first: Sample | None, last: Sample | None, judge: JudgeLike, node: str, label: str | None
) -> None:
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
        counter=[first["pcie_replay_counter"] if first else None, last["pcie_replay_counter"] if last else None],
    )
