"""NVML helpers shared by the GPU probes: the rank's own GPU, foreign processes, live samples, NUMA binding.

Kept apart from ``_nvml`` (shared with the fingerprint) because these are what the hardware probes need
to judge a measurement's context: was someone else's process on the GPU before we started (a busy GPU
is an error, not a slow GPU), which clocks/temperature/power/clock-event reasons held while we
measured, and which CPUs are local to the GPU's PCIe root. Nothing here imports torch: a probe must
look at the GPU through NVML *before* it creates a CUDA context of its own, so that it never counts
itself as a foreign process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from gpuaccept.fabric.affinity import bus_key
from gpuaccept.probes._nvml import text

__all__ = [
    "active_nvlinks",
    "bus_key",
    "cpu_affinity",
    "field_readings",
    "field_values",
    "foreign_processes",
    "handle_for_rank",
    "identity",
    "numa_node",
    "nvlink_error_counters",
    "sample",
]


def identity(lib: Any, handle: Any) -> dict[str, Any]:
    """Index, UUID, PCI bus and model of one GPU, as failure messages name it."""
    return {
        "index": int(lib.nvmlDeviceGetIndex(handle)),
        "uuid": text(lib.nvmlDeviceGetUUID(handle)),
        "pci_bus_id": text(lib.nvmlDeviceGetPciInfo(handle).busId),
        "name": text(lib.nvmlDeviceGetName(handle)),
    }


def handle_for_rank(lib: Any, ordinal: int = 0) -> Any:
    """The NVML handle of CUDA ordinal ``ordinal`` as ``CUDA_VISIBLE_DEVICES`` maps it (index or UUID)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        tokens = [t.strip() for t in visible.split(",") if t.strip()]
        token = tokens[ordinal]
        if token.startswith(("GPU-", "MIG-")):
            return lib.nvmlDeviceGetHandleByUUID(token)
        return lib.nvmlDeviceGetHandleByIndex(int(token))
    return lib.nvmlDeviceGetHandleByIndex(ordinal)


def _process_name(lib: Any, pid: int) -> str:
    try:
        return text(lib.nvmlSystemGetProcessName(pid))
    except Exception:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return "?"


def foreign_processes(lib: Any, handle: Any, own: set[int] | None = None) -> list[dict[str, Any]]:
    """Compute and graphics processes already on the GPU, other than ``own`` pids.

    Call it before this process touches CUDA: inside a container NVML may report host PIDs, so our own
    context could not be told apart from someone else's afterwards.
    """
    mine = own if own is not None else {os.getpid()}
    seen: dict[int, dict[str, Any]] = {}
    for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            procs = getattr(lib, getter)(handle)
        except Exception:
            continue
        for proc in procs:
            pid = int(proc.pid)
            if pid in mine or pid in seen:
                continue
            used = getattr(proc, "usedGpuMemory", None)
            seen[pid] = {
                "pid": pid,
                "name": _process_name(lib, pid),
                "used_mib": round(used / 2**20, 1) if isinstance(used, int) and used < 2**62 else None,
            }
    return list(seen.values())


def field_values(lib: Any, handle: Any, ids: dict[str, int | tuple[int, int]]) -> dict[str, float | int | None]:
    """NVML field values by name (an id, or ``(id, scope)`` for a per-link field); a field the GPU or
    driver does not support reads as None."""
    return {name: value for name, (value, _why) in field_readings(lib, handle, ids).items()}


def field_readings(
    lib: Any, handle: Any, ids: dict[str, int | tuple[int, int]]
) -> dict[str, tuple[float | int | None, str | None]]:
    """NVML field values by name as ``(value, None)``, or ``(None, why)`` where NVML gave none: the field's
    own return code (``nvmlReturn 3``: not supported) or the whole call's error, so a strict payload can
    carry the reason beside its null."""
    if not ids:
        return {}
    names = list(ids)
    try:
        raw = lib.nvmlDeviceGetFieldValues(handle, [ids[n] for n in names])
    except Exception as exc:
        return dict.fromkeys(names, (None, type(exc).__name__))
    kinds = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    out: dict[str, tuple[float | int | None, str | None]] = {}
    for name, value in zip(names, raw, strict=True):
        if value.nvmlReturn != 0:
            out[name] = (None, f"nvmlReturn {int(value.nvmlReturn)}")
            continue
        out[name] = (getattr(value.value, kinds.get(int(value.valueType), "ullVal")), None)
    return out


def sample(lib: Any, handle: Any) -> dict[str, Any]:
    """What the GPU is doing right now: clocks, temperature, power, clock-event reasons, PCIe link, and
    the PCIe replay counter (cumulative since the driver loaded) with the monotonic time it was read at,
    so two samples give its growth over the window between them."""

    def get(call: Any, *args: Any) -> Any:
        try:
            return call(handle, *args)
        except Exception:
            return None

    power = get(lib.nvmlDeviceGetPowerUsage)
    reasons = get(lib.nvmlDeviceGetCurrentClocksEventReasons)
    if reasons is None:
        reasons = get(lib.nvmlDeviceGetCurrentClocksThrottleReasons)
    return {
        "sm_clock_mhz": get(lib.nvmlDeviceGetClockInfo, lib.NVML_CLOCK_SM),
        "mem_clock_mhz": get(lib.nvmlDeviceGetClockInfo, lib.NVML_CLOCK_MEM),
        "temperature_c": get(lib.nvmlDeviceGetTemperature, lib.NVML_TEMPERATURE_GPU),
        "power_w": round(power / 1000, 1) if isinstance(power, int) else None,
        "clock_event_reasons": reasons,
        "pcie_gen": get(lib.nvmlDeviceGetCurrPcieLinkGeneration),
        "pcie_width": get(lib.nvmlDeviceGetCurrPcieLinkWidth),
        "pcie_replay_counter": get(lib.nvmlDeviceGetPcieReplayCounter),
        "monotonic_s": round(time.monotonic(), 3),
    }


def cpu_affinity(lib: Any, handle: Any) -> list[int]:
    """CPUs NVML calls ideal for the GPU (its NUMA node's cores), from the affinity bitmask."""
    words = max(1, ((os.cpu_count() or 64) + 63) // 64)
    try:
        mask = lib.nvmlDeviceGetCpuAffinity(handle, words)
    except Exception:
        return []
    cpus: list[int] = []
    for word_index, word in enumerate(mask):
        for bit in range(64):
            if int(word) >> bit & 1:
                cpus.append(word_index * 64 + bit)
    return cpus


def numa_node(pci_bus_id: str, sysfs_root: Path = Path("/sys")) -> int | None:
    """The GPU's NUMA node from sysfs (-1 on single-node machines and many VMs), or None if unreadable."""
    path = sysfs_root / "bus" / "pci" / "devices" / _sysfs_bus(pci_bus_id) / "numa_node"
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _sysfs_bus(pci_bus_id: str) -> str:
    """sysfs spells PCI addresses ``0000:18:00.0``: 4-digit domain, lower case, function kept."""
    key = bus_key(pci_bus_id)
    function = pci_bus_id.strip().split(".")[-1] if "." in pci_bus_id else "0"
    return f"{key}.{function.lower()}"


def nvlink_error_counters(lib: Any, handle: Any, active_links: list[int]) -> dict[str, Any]:
    """NVLink CRC (flit, data), replay, recovery and ECC-data counts since the driver loaded, summed over links.

    Only the per-link ``nvmlDeviceGetNvLinkErrorCounter`` values count (the API ``nvidia-smi nvlink -e``
    reads), summed when every active link answered. A counter some active link did not answer is None
    ("could not measure"), and ``unread_links`` names those links: the per-GPU ``*_TOTAL`` field values
    are never a stand-in, because on Hopper those legacy fields answer N/A (NVIDIA/DCGM#173) or success
    with zero (DataDog/datadog-agent#55966), a false zero. ``per_link`` holds each link's counts as
    well, so a rate can be pinned on a link (one bad cable/port) or seen spread over all.
    """
    counters = {
        "crc_flit": lib.NVML_NVLINK_ERROR_DL_CRC_FLIT,
        "crc_data": lib.NVML_NVLINK_ERROR_DL_CRC_DATA,
        "replay": lib.NVML_NVLINK_ERROR_DL_REPLAY,
        "recovery": lib.NVML_NVLINK_ERROR_DL_RECOVERY,
        # NVLink 4+ protects data with FEC; nvidia-smi nvlink -e prints this as "ECC Data Errors"
        "ecc_data": lib.NVML_NVLINK_ERROR_DL_ECC_DATA,
    }
    per_link: dict[str, dict[int, int]] = {}
    unread: dict[str, list[int]] = {}
    for name, counter in counters.items():
        per_link[name] = {}
        for link in active_links:
            try:
                per_link[name][link] = int(lib.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))
            except Exception:
                unread.setdefault(name, []).append(link)
    out: dict[str, Any] = {
        "per_link": per_link,
        "unread_links": unread,
        "source": "per_link" if active_links else "no active link",
    }
    for name, links in per_link.items():
        # no active link is no count (None), never a zero summed over nothing
        out[name] = sum(links.values()) if active_links and name not in unread else None
    return out


def active_nvlinks(lib: Any, handle: Any) -> list[int]:
    """Indices of the GPU's active NVLinks (empty without NVLink)."""
    active = []
    for link in range(lib.NVML_NVLINK_MAX_LINKS):
        try:
            if lib.nvmlDeviceGetNvLinkState(handle, link):
                active.append(link)
        except lib.NVMLError_NotSupported:
            break
        except Exception:
            continue
    return active
