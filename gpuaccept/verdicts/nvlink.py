"""Judge NVLink: the ``nvlink`` probe's links per GPU, link speed, error counters, pair topology and
affinity, and the error counters read around the ``gpubench`` step's GPU-pair copies (under load).

Topology per pair is asserted in NVLink terms because that is what an HGX SKU promises: every GPU pair
joined by all its links through the NVSwitch fabric (NV18 on H100/H200 SXM, NV12 on A100 SXM4) and
NVML reporting NVLink P2P as OK. The PCIe common ancestor (PIX/PXB/PHB/NODE/SYS) is reported beside
it, as is each GPU's NUMA node and its relation to every InfiniBand HCA (GPUDirect RDMA wants a NIC
behind the same PCIe switch).

The node check (``nodecheck.gate``) judges each GPU's links up and its replay and recovery counts through
the same ``judge_links_active`` and ``judge_link_errors``. Whether a node has NVLink to judge is its SKU's
declaration (``nvlink_absent``), and whether it has HCAs to be near (``affinity_absent``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from gpuaccept.contracts.bench import GpuBenchError, GpuBenchRan, NvlinkDelta
from gpuaccept.contracts.fabric import NvlinkErrors, NvlinkGpu, NvlinkPayload
from gpuaccept.contracts.judge import JudgeLike, gpu_label
from gpuaccept.thresholds.coverage import declares_absent
from gpuaccept.verdicts.bench import p2p_result
from gpuaccept.verdicts.infiniband import declares_no_ib

__all__ = [
    "AFFINITY_METRICS",
    "NVLINK_METRICS",
    "TOPOLOGY_METRICS",
    "UNDER_LOAD_METRICS",
    "affinity_absent",
    "judge_affinity",
    "judge_link_counters",
    "judge_link_errors",
    "judge_links_active",
    "judge_nvlink",
    "judge_nvlink_under_load",
    "judge_topology",
    "link_errors",
    "nvlink_absent",
    "pair_matrix",
    "unread_text",
]

#: what each judge here judges: its test's ``@pytest.mark.judges``
NVLINK_METRICS = ("nvlink_links_active", "nvlink_speed_mbps", "nvlink_replay_errors", "nvlink_recovery_errors")
UNDER_LOAD_METRICS = ("p2p_nvlink_crc_flit_per_s", "p2p_nvlink_replay_errors", "p2p_nvlink_recovery_errors")
TOPOLOGY_METRICS = ("nvlink_pair_links", "p2p_nvlink_status")
AFFINITY_METRICS = ("gpu_nic_pcie_distance",)


def nvlink_absent(judge: JudgeLike, node: str, data: NvlinkPayload | None = None) -> str | None:
    """Why an NVLink test does not apply to ``node``: its SKU declares no NVLink and (given the ``nvlink``
    reading ``data``) no GPU of the node has an active link (a link that is up is judged); None when it
    applies."""
    if not declares_absent(judge.declared("nvlink_links_active", node)):
        return None
    if data is None:
        return f"SKU {judge.sku(node)} declares no NVLink (nvlink_links_active)"
    if any(g["nvlink"]["active"] for g in data["gpus"]):
        return None
    return f"SKU {judge.sku(node)} declares no NVLink (nvlink_links_active) and {node} has none active"


def affinity_absent(judge: JudgeLike, node: str, data: NvlinkPayload) -> str | None:
    """Why ``test_gpu_nic_affinity`` does not apply: no GPU of the ``nvlink`` reading has an HCA near or far,
    and the SKU declares no InfiniBand; None when it applies."""
    if not any(g["nics"] for g in data["gpus"]) and declares_no_ib(judge, node):
        return f"SKU {judge.sku(node)} expects no InfiniBand HCA and {node} has none"
    return None


def judge_links_active(gpu: NvlinkGpu, judge: JudgeLike, node: str) -> None:
    """One GPU's active NVLinks against the SKU's count, the inactive ones named."""
    state = gpu["nvlink"]
    judge.check(
        "nvlink_links_active",
        state["active"],
        node=node,
        gpu=gpu_label(gpu),
        supported=state["supported"],
        inactive_links=[k["link"] for k in state["links"] if not k["active"]],
    )


def judge_link_counters(gpu: NvlinkGpu, judge: JudgeLike, node: str) -> None:
    """Whether NVLink telemetry is there from the GPU's side: each of the links the SKU has (the count
    ``nvlink_links_active`` declares, from its datasheet) up and giving NVML's per-link data counters.

    Passes as ``all N links``; else names how many did, the links down and the links whose counters NVML
    did not give (with its return code); none given on any link is could not measure (a driver without the
    fields), never a pass nor a link fault. The counters' KiB ride along (summed, and per link), so the report
    shows what a telemetry agent would sample."""
    limit = judge.declared("nvlink_links_active", node)
    want = None if limit is None or limit.min is None else int(limit.min)
    if want is None:
        why = f"SKU {judge.sku(node)} declares no NVLink count (nvlink_links_active) to read counters on"
        judge.unreadable("nvlink_link_counters", why, node=node, gpu=gpu_label(gpu))
        return
    state = gpu["nvlink"]
    telemetry = state["telemetry"]
    read = sorted(
        int(k) for k, v in telemetry["per_link"].items() if v["tx_kib"] is not None and v["rx_kib"] is not None
    )
    unread = sorted(int(k) for k in telemetry["per_link"] if int(k) not in read)
    if unread and not read:
        # no link gave counters: the driver does not offer the fields (NVML's code says so), not a link fault
        reasons = sorted({why for name, why in telemetry["errors"].items() if name != "link_count"})
        why = f"NVML gave no per-link data counters on links {unread} ({', '.join(reasons)})"
        judge.unreadable("nvlink_link_counters", why, node=node, gpu=gpu_label(gpu))
        return
    observed = f"all {want} links"
    if len(read) < want or unread:
        down = [k["link"] for k in state["links"] if not k["active"]]
        parts = [f"{len(read)} of {want} links"]
        if down and len(read) + len(unread) < want:
            parts.append(f"down: links {down}")
        if unread:
            reasons = sorted({why for name, why in telemetry["errors"].items() if name != "link_count"})
            parts.append(f"counters not given on links {unread} ({', '.join(reasons)})")
        observed = "; ".join(parts)
    data = [v for v in telemetry["per_link"].values() if v["tx_kib"] is not None and v["rx_kib"] is not None]
    judge.expect(
        "nvlink_link_counters",
        observed,
        f"all {want} links",
        node=node,
        gpu=gpu_label(gpu),
        link_count=telemetry["link_count"],
        tx_kib=sum(v["tx_kib"] or 0 for v in data),
        rx_kib=sum(v["rx_kib"] or 0 for v in data),
        per_link=telemetry["per_link"],
    )


def judge_link_errors(
    gpu: NvlinkGpu,
    judge: JudgeLike,
    node: str,
    metrics: Sequence[str] = (),
    earlier: NvlinkErrors | None = None,
    **extra: Any,
) -> None:
    """One GPU's NVLink error counts (``metrics``; none named: CRC, replay and recovery) against the SKU's
    bounds; a counter NVML did not read is unreadable, naming the links. ``earlier``: the counters an
    earlier node check kept, whose difference rides along as ``since_last_check``."""
    errors = gpu["nvlink"]["errors"]
    counts = link_errors(errors)
    was = None if earlier is None else link_errors(earlier)
    for metric in metrics or tuple(ERROR_COUNTERS):
        value = counts[metric]
        if value is None:
            judge.unreadable(metric, unread_text(errors), node=node, gpu=gpu_label(gpu))
            continue
        earlier_count = None if was is None else was[metric]
        since = {} if was is None else {"since_last_check": None if earlier_count is None else value - earlier_count}
        judge.check(metric, value, node=node, gpu=gpu_label(gpu), counted_by=errors["source"], **since, **extra)


def judge_nvlink(data: NvlinkPayload, judge: JudgeLike, node: str) -> None:
    """Active links, their per-link data counters, common link speed and CRC/replay/recovery counters of every
    GPU NVML lists. Whether it
    lists every GPU the node declares is ``test_gpu_health``'s one check (``gpu_health.judge_gpu_count``);
    a node where it lists none has no link to judge, which is named, never "nothing was judged"."""
    if not data["gpus"]:
        why = f"no GPU to judge the links of: NVML lists none on {node} (test_gpu_health judges the count, gpu_count)"
        judge.unreadable("nvlink_links_active", why, node=node)
    for gpu in data["gpus"]:
        judge_links_active(gpu, judge, node)
        judge_link_counters(gpu, judge, node)
        state = gpu["nvlink"]
        if state["active"]:
            speed = state["speed_mbps_common"]
            if speed is None:  # the SKU sets a speed: unreadable is "could not measure", never a pass
                judge.unreadable("nvlink_speed_mbps", "NVML gave no common link speed", node=node, gpu=gpu_label(gpu))
            else:
                judge.check("nvlink_speed_mbps", speed, node=node, gpu=gpu_label(gpu))
            judge_link_errors(gpu, judge, node)


#: the counters behind each NVLink error metric (CRC is flit + data)
ERROR_COUNTERS: dict[str, tuple[Literal["crc_flit", "crc_data", "replay", "recovery"], ...]] = {
    "nvlink_crc_errors": ("crc_flit", "crc_data"),
    "nvlink_replay_errors": ("replay",),
    "nvlink_recovery_errors": ("recovery",),
}


def link_errors(errors: NvlinkErrors) -> dict[str, int | None]:
    """One GPU's NVLink error counts by metric (None if a counter went unread)."""
    counts: dict[str, int | None] = {}
    for metric, keys in ERROR_COUNTERS.items():
        values = [errors[key] for key in keys]
        counts[metric] = None if None in values else sum(v for v in values if v is not None)
    return counts


def unread_text(errors: NvlinkErrors) -> str:
    """Which NVLink counters NVML did not read, and on which links: what an operator checks by hand
    with ``nvidia-smi nvlink -e -i <gpu>``."""
    return links_text(errors["unread_links"])


def links_text(unread: Mapping[str, list[int]]) -> str:
    """``unread_text`` of the counters NVML did not read, by counter name: the links of each."""
    if not unread:
        return "NVML gave no counter"
    return "could not read " + "; ".join(
        f"{name} on link(s) {', '.join(str(link) for link in links)}" for name, links in sorted(unread.items())
    )


def pair_matrix(data: NvlinkPayload) -> dict[str, Any]:
    """The nvidia-smi-style matrix (``X``, ``NV18``, ``SYS``...) for the report."""
    indices = [g["index"] for g in data["gpus"]]
    cells = {(i, j): ("X" if i == j else "") for i in indices for j in indices}
    for pair in data["pairs"]:
        cells[(pair["a"], pair["b"])] = cells[(pair["b"], pair["a"])] = pair["label"] or "?"
    return {"gpus": indices, "labels": [[cells[(i, j)] for j in indices] for i in indices]}


def judge_topology(data: NvlinkPayload, judge: JudgeLike, node: str) -> dict[str, Any]:
    """Every GPU pair: NVLinks joining it and NVML's NVLink P2P status, against the SKU. A node whose GPUs
    NVML lists fewer than two of has no pair: that is named (the count itself is test_gpu_health's gpu_count to
    judge), never "nothing was judged"."""
    gpus = {g["index"]: gpu_label(g) or str(g["index"]) for g in data["gpus"]}
    if not data["pairs"]:
        judge.unreadable(
            "nvlink_pair_links",
            f"no GPU pair to judge: NVML lists {len(gpus)} GPU(s) on {node} "
            "(test_gpu_health judges the count, gpu_count)",
            node=node,
        )
    for pair in data["pairs"]:
        where = f"{gpus[pair['a']]} <-> {gpus[pair['b']]}"
        judge.info("gpu_pair_topology", pair["label"] or "?", node=node, pair=where, pcie=pair["pcie"], via=pair["via"])
        judge.check("nvlink_pair_links", pair["nvlinks"], node=node, pair=where)
        judge.check("p2p_nvlink_status", pair["p2p_nvlink_status"], node=node, pair=where)
    return pair_matrix(data)


#: nvidia-smi topo -m's PCIe relations, nearest first; the index is ``gpu_nic_pcie_distance``.
PCIE_RELATIONS = ("PIX", "PXB", "PHB", "NODE", "SYS")


def judge_affinity(data: NvlinkPayload, judge: JudgeLike, node: str) -> None:
    """Each GPU's nearest HCA judged by PCIe distance; its NUMA node and local CPUs shown beside it."""
    for gpu in data["gpus"]:
        label = gpu_label(gpu)
        numa = gpu["numa_node"]
        if numa is None:
            judge.unreadable("gpu_nic_pcie_distance", "NUMA node (sysfs numa_node unreadable)", node=node, gpu=label)
            continue
        nics = {n["name"]: n["relation"] for n in gpu["nics"]}
        known = {name: rel for name, rel in nics.items() if rel in PCIE_RELATIONS}
        judge.info("gpu_numa_node", numa, node=node, gpu=label, local_cpus=len(gpu["cpu_affinity"]), nics=nics)
        if nics and not known:
            judge.unreadable(
                "gpu_nic_pcie_distance", f"PCIe relation to its HCAs unreadable ({nics})", node=node, gpu=label
            )
            continue
        nearest = min(known, key=lambda name: PCIE_RELATIONS.index(known[name])) if known else None
        judge.info("gpu_nearest_nic", f"{nearest} ({known[nearest]})" if nearest else "none", node=node, gpu=label)
        judge.check(
            "gpu_nic_pcie_distance",
            PCIE_RELATIONS.index(known[nearest]) if nearest else "no HCA",
            node=node,
            gpu=label,
            nic=nearest,
            relation=known[nearest] if nearest else None,
        )


def _link_split(entry: NvlinkDelta, kind: str) -> str:
    """Where a GPU's CRC errors sat: one link (a cable/port to reseat) or spread over all of them."""
    per_link = entry["per_link"]["crc_flit" if kind == "flit" else "crc_data"]
    if not per_link:
        return ""
    worst, count = max(per_link.items(), key=lambda item: item[1])
    return f"on {len(per_link)} of {entry['links'] or '?'} links, most on link {worst} ({count})"


def judge_nvlink_under_load(bench: GpuBenchRan | GpuBenchError, judge: JudgeLike, node: str) -> None:
    """NVLink errors that appeared while the P2P copies ran: CRC as a rate, replay/recovery as counts.

    DCGM judges the flit and data CRC counters each as a rate, FAIL at >= 100/s (health watch
    ``MonitorNVLink`` and the diag pcie plugin's per-second check, Hopper included); replay and
    recovery are failures at any count. The failure names the links the errors sat on.
    """
    found = p2p_result(bench, judge, node, UNDER_LOAD_METRICS[0])
    if found is None:
        return
    data, labels = found
    for entry in data["nvlink_errors"]:
        label = labels.get(entry["gpu"]) or str(entry["gpu"])
        counts = {
            "crc_flit": entry["crc_flit"],
            "crc_data": entry["crc_data"],
            "replay": entry["replay"],
            "recovery": entry["recovery"],
        }
        seconds = max(entry["seconds"], 1e-3)
        for kind in ("flit", "data"):
            count = counts[f"crc_{kind}"]
            metric = f"p2p_nvlink_crc_{kind}_per_s"
            if count is None:  # the SKU has NVLink (else the test skips): unreadable is not clean
                judge.unreadable(
                    metric,
                    f"CRC {kind} counter unread while the copies ran ({links_text(entry['unread_links'])})",
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
                links=entry["per_link"]["crc_flit" if kind == "flit" else "crc_data"],
                details=[f"{count} CRC {kind} errors in {seconds:.1f} s {where}"] if count and where else [],
            )
        for kind in ("replay", "recovery"):
            metric = f"p2p_nvlink_{kind}_errors"
            if counts[kind] is None:
                judge.unreadable(
                    metric,
                    f"{kind} counter unread while the copies ran ({links_text(entry['unread_links'])})",
                    node=node,
                    gpu=label,
                )
            else:
                judge.check(metric, counts[kind], node=node, gpu=label, seconds=seconds)
