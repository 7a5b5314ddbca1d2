"""NVLink state, GPU-pair topology and GPU<->NIC<->NUMA affinity of every GPU on the node, via NVML.

One task per node. Per GPU: every NVLink's state, version and remote end (GPU or NVSwitch, remote PCI
address), the common per-link speed, the CRC / replay / recovery error counters, and each active link's
data counters (KiB sent and received, what ``nvidia-smi nvlink -gt d`` prints) beside the link count NVML
gives. Per GPU pair:
the PCIe common ancestor (``nvmlDeviceGetTopologyCommonAncestor``), NVML's NVLink P2P status, and the
number of NVLinks joining them, counted the way ``nvidia-smi topo -m`` labels NV#: direct links to the
peer, or on NVSwitch systems the links both GPUs have into the switch fabric. Affinity: each GPU's
NUMA node and CPUs, and each InfiniBand HCA's NUMA node and PCIe relation to the GPU (from sysfs).

Nothing is judged here (``gpuaccept.verdicts.nvlink`` does that). ``--dump``/``--load`` write or
replay the raw readings as JSON; ``--sysfs-root`` points the NIC lookup at a recorded tree.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from gpuaccept.probes import _inject
from gpuaccept.probes._gpu import (
    bus_key,
    cpu_affinity,
    field_readings,
    field_values,
    identity,
    numa_node,
    nvlink_error_counters,
)
from gpuaccept.probes._nvml import nvml, text
from gpuaccept.probes._protocol import emit

__all__ = ["collect", "link_telemetry", "nic_relation", "read_links"]

#: nvmlGpuTopologyLevel_t -> the label nvidia-smi topo prints.
TOPOLOGY_LABELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
REMOTE_TYPES = {0: "GPU", 1: "IBMNPU", 2: "SWITCH", 255: "UNKNOWN"}


def read_links(lib: Any, handle: Any) -> list[dict[str, Any]]:
    """Every NVLink the GPU reports: active or not, version, remote device type and PCI address."""
    links: list[dict[str, Any]] = []
    for link in range(lib.NVML_NVLINK_MAX_LINKS):
        try:
            state = lib.nvmlDeviceGetNvLinkState(handle, link)
        except lib.NVMLError_NotSupported:
            break  # no NVLink on this GPU at all, or past its last link
        except Exception:
            continue
        entry: dict[str, Any] = {
            "link": link,
            "active": bool(state),
            "version": None,
            "remote_type": None,
            "remote_pci": None,
            "errors": {},
        }
        if state:
            getters = {
                "version": lib.nvmlDeviceGetNvLinkVersion,
                "remote_type": lambda h, k: REMOTE_TYPES.get(lib.nvmlDeviceGetNvLinkRemoteDeviceType(h, k)),
                "remote_pci": lambda h, k: text(lib.nvmlDeviceGetNvLinkRemotePciInfo(h, k).busId),
            }
            for key, call in getters.items():
                try:
                    entry[key] = call(handle, link)
                except Exception as exc:
                    entry["errors"][key] = type(exc).__name__
        links.append(entry)
    return links


def link_telemetry(lib: Any, handle: Any, active: list[int]) -> dict[str, Any]:
    """Each active link's data counters and the GPU's NVLink count, as NVML's field values give them.

    ``tx_kib``/``rx_kib``: ``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX``/``_RX`` scoped by link, KiB of payload
    (no protocol headers) since the driver loaded, the per-link counters ``nvidia-smi nvlink -gt d`` prints
    and a telemetry agent samples for NVLink utilization. ``link_count``: ``NVML_FI_DEV_NVLINK_LINK_COUNT``,
    shown, not judged: NVML's link slots can outnumber the links a board wires (a B300 answers per-link
    queries for 36 slots and has 18 links, flashinfer-ai/flashinfer PR #3990). A value NVML did
    not give is None with its reason in ``errors`` (``link_count``, ``<link>.tx_kib``), never a zero.
    """
    ids: dict[str, int | tuple[int, int]] = {"link_count": lib.NVML_FI_DEV_NVLINK_LINK_COUNT}
    for link in active:
        ids[f"{link}.tx_kib"] = (lib.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link)
        ids[f"{link}.rx_kib"] = (lib.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link)
    read = field_readings(lib, handle, ids)
    errors = {name: why for name, (_value, why) in read.items() if why is not None}

    def whole(name: str) -> int | None:
        value = read[name][0]
        return None if value is None else int(value)

    return {
        "link_count": whole("link_count"),
        "per_link": {str(k): {"tx_kib": whole(f"{k}.tx_kib"), "rx_kib": whole(f"{k}.rx_kib")} for k in active},
        "errors": errors,
    }


def _pair(lib: Any, handles: list[Any], gpus: list[dict[str, Any]], i: int, j: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"a": gpus[i]["index"], "b": gpus[j]["index"], "pcie_error": None}
    try:
        level = lib.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
        entry["pcie"] = TOPOLOGY_LABELS.get(level, str(level))
    except Exception as exc:
        entry["pcie"] = None
        entry["pcie_error"] = type(exc).__name__
    try:
        status = lib.nvmlDeviceGetP2PStatus(handles[i], handles[j], lib.NVML_P2P_CAPS_INDEX_NVLINK)
        entry["p2p_nvlink_status"] = "OK" if status == lib.NVML_P2P_STATUS_OK else f"status {status}"
    except Exception as exc:
        entry["p2p_nvlink_status"] = f"unavailable ({type(exc).__name__})"
    peer_a, peer_b = bus_key(gpus[j]["pci_bus_id"]), bus_key(gpus[i]["pci_bus_id"])
    links_a, links_b = gpus[i]["nvlink"]["links"], gpus[j]["nvlink"]["links"]
    direct = sum(1 for k in links_a if k["active"] and k.get("remote_pci") and bus_key(k["remote_pci"]) == peer_a)
    direct_back = sum(1 for k in links_b if k["active"] and k.get("remote_pci") and bus_key(k["remote_pci"]) == peer_b)
    switched_a = sum(1 for k in links_a if k["active"] and k.get("remote_type") == "SWITCH")
    switched_b = sum(1 for k in links_b if k["active"] and k.get("remote_type") == "SWITCH")
    via_switch = min(switched_a, switched_b) if entry["p2p_nvlink_status"] == "OK" else 0
    entry["nvlinks"] = max(direct, direct_back) + via_switch
    entry["via"] = "NVSwitch" if via_switch else ("direct" if direct or direct_back else "PCIe")
    entry["label"] = f"NV{entry['nvlinks']}" if entry["nvlinks"] else entry["pcie"]
    return entry


def _pci_path(root: Path, bus: str) -> list[str]:
    """The chain of PCI devices from the root complex down to ``bus`` (sysfs symlink target)."""
    try:
        real = os.path.realpath(root / "bus" / "pci" / "devices" / bus)
    except OSError:
        return []
    return [part for part in real.split("/") if part.startswith("pci") or ":" in part]


def nic_relation(gpu_path: list[str], nic_path: list[str], gpu_numa: int | None, nic_numa: int | None) -> str:
    """PXB (behind a shared PCIe switch), PHB (same host bridge), NODE (same NUMA node) or SYS, as topo -m.

    Paths run root complex, root port, switch upstream port, ...: sharing three or more components means
    both devices hang off one PCIe switch (the GPUDirect RDMA-friendly layout of HGX boards).
    """
    if not gpu_path or not nic_path:
        return "unknown"
    common = 0
    for a, b in zip(gpu_path, nic_path, strict=False):
        if a != b:
            break
        common += 1
    if common >= 3:
        return "PXB"
    if common >= 1:
        return "PHB"
    if gpu_numa is not None and gpu_numa == nic_numa and gpu_numa >= 0:
        return "NODE"
    return "SYS"


def _hcas(root: Path) -> list[dict[str, Any]]:
    base = root / "class" / "infiniband"
    if not base.is_dir():
        return []
    out = []
    for dev in sorted(base.iterdir()):
        try:
            numa: int | None = int((dev / "device" / "numa_node").read_text().strip())
        except (OSError, ValueError):
            numa = None
        real = os.path.realpath(dev / "device")
        out.append({"name": dev.name, "numa_node": numa, "pci": Path(real).name if ":" in real else None})
    return out


_SMI_SPEED = re.compile(r"Link (\d+): ([\d.]+) GB/s")


def link_speed(lib: Any, handle: Any, active: list[int], index: int) -> tuple[int | None, dict[int, int], str]:
    """``(common speed MB/s, per-link MB/s, where it came from)`` for the GPU's active links.

    NVML's ``SPEED_MBPS_COMMON`` field answers "not supported" on some drivers (580 on H200, seen
    2026-11-22); the per-link ``NVLINK_GET_SPEED`` field (scoped by link) and then ``nvidia-smi nvlink
    -s`` (which prints each link's speed in GB/s) say the same thing another way. The common speed is
    the slowest active link's: one link trained at a lower speed is the finding.
    """
    if not active:
        return None, {}, "no active link"
    common = field_values(lib, handle, {"speed": lib.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON})["speed"]
    per_link: dict[int, int] = {}
    scoped = getattr(lib, "NVML_FI_DEV_NVLINK_GET_SPEED", None)
    if scoped is not None:
        values = field_values(lib, handle, {str(link): (scoped, link) for link in active})
        per_link = {int(k): int(v) for k, v in values.items() if v}
    source = "nvml per-link field"
    if len(per_link) != len(active):
        per_link, source = _smi_speeds(index), "nvidia-smi nvlink -s"
        per_link = {k: v for k, v in per_link.items() if k in active}
    if len(per_link) == len(active):
        return min(per_link.values()), per_link, source
    if common:
        return int(common), {}, "nvml common field"
    return None, per_link, "unreadable"


def _smi_speeds(index: int) -> dict[int, int]:
    try:
        out = subprocess.run(
            ["nvidia-smi", "nvlink", "-s", "-i", str(index)], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(m.group(1)): round(float(m.group(2)) * 1000) for m in _SMI_SPEED.finditer(out)}


def collect(sysfs_root: Path = Path("/sys")) -> dict[str, Any]:
    """NVLink, pair topology and affinity readings for every GPU NVML shows."""
    injected = _inject.reading("nvlink")  # test hook, off by default (probes/_inject.py)
    if injected is not None:
        return injected
    sysfs_root = _inject.sysfs_root(sysfs_root)
    lib = nvml()
    if lib is None:
        return {"nvml": False, "gpus": [], "pairs": [], "hcas": _hcas(sysfs_root)}
    handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(lib.nvmlDeviceGetCount())]
    gpus: list[dict[str, Any]] = []
    for handle in handles:
        gpu = identity(lib, handle)
        links = read_links(lib, handle)
        active = [k["link"] for k in links if k["active"]]
        speed, per_link, speed_source = link_speed(lib, handle, active, gpu["index"])
        gpu["nvlink"] = {
            "links": links,
            "active": len(active),
            "supported": len(links),
            "speed_mbps_common": speed,
            "speed_mbps_per_link": per_link,
            "speed_source": speed_source,
            "errors": nvlink_error_counters(lib, handle, active),
            "telemetry": link_telemetry(lib, handle, active),
        }
        gpu["numa_node"] = numa_node(gpu["pci_bus_id"], sysfs_root)
        gpu["cpu_affinity"] = cpu_affinity(lib, handle)
        gpus.append(gpu)
    pairs = [_pair(lib, handles, gpus, i, j) for i in range(len(gpus)) for j in range(i + 1, len(gpus))]
    hcas = _hcas(sysfs_root)
    for gpu in gpus:
        gpu_path = _pci_path(sysfs_root, _sysfs_name(gpu["pci_bus_id"]))
        gpu["nics"] = [
            {
                "name": h["name"],
                "relation": nic_relation(
                    gpu_path, _pci_path(sysfs_root, h["pci"]) if h["pci"] else [], gpu["numa_node"], h["numa_node"]
                ),
            }
            for h in hcas
        ]
    return {"nvml": True, "gpus": gpus, "pairs": pairs, "hcas": hcas}


def _sysfs_name(pci_bus_id: str) -> str:
    return bus_key(pci_bus_id) + "." + (pci_bus_id.split(".")[-1].lower() if "." in pci_bus_id else "0")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sysfs-root", type=Path, default=Path("/sys"), help="sysfs to read NICs from")
    parser.add_argument("--dump", type=Path, help="also write the raw readings to this JSON file")
    parser.add_argument("--load", type=Path, help="emit readings from this JSON file instead of NVML")
    args = parser.parse_args(argv)
    data = json.loads(args.load.read_text()) if args.load else collect(args.sysfs_root)
    if args.dump:
        args.dump.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    emit(data, probe="nvlink")


if __name__ == "__main__":
    main()
