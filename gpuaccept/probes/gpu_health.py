"""GPU health of every GPU on the node, read through NVML (never by parsing nvidia-smi text).

One task per node. For each GPU: model, memory, persistence and ECC mode, uncorrectable volatile ECC
errors, remapped rows (pending / failed), retired pages pending, current clock-event (throttle)
reasons, PCIe link (current and maximum), temperature against the board's own slowdown threshold,
power against its limit, and the processes already on it. Nothing is judged here: the test does that
against thresholds.yaml (``gpuaccept.verdicts.gpu_health``).

PCIe note: at idle many boards drop the link to Gen1 to save power, so the *current* generation at
idle says little. This probe reports it, but what is judged here is the link's maximum (the lower of
what the GPU and its slot can train to); the ``hostbw`` probe reads the current generation and width
*under load*, which is where a degraded link shows.

``--dump FILE`` also writes the raw readings as JSON; ``--load FILE`` emits readings from such a file
instead of NVML (replaying a recorded node, as the selftests do with fixtures/nvml/).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from gpuaccept.probes import _inject
from gpuaccept.probes._gpu import cpu_affinity, field_values, foreign_processes, identity, numa_node, sample
from gpuaccept.probes._nvml import nvml, text
from gpuaccept.probes._protocol import emit

__all__ = ["NO_NVML", "collect", "driver_versions", "read_gpu"]

#: the node's reading where NVML cannot be initialised (no driver, or nvidia-ml-py missing)
NO_NVML: dict[str, Any] = {"nvml": False, "driver": None, "cuda_driver": None, "gpus": []}


def _get(errors: dict[str, str], key: str, call: Any, *args: Any) -> Any:
    """One NVML getter; a failure is kept by name in ``errors`` (shown in the report) and reads as None."""
    try:
        return call(*args)
    except Exception as exc:
        errors[key] = type(exc).__name__
        return None


def read_gpu(lib: Any, handle: Any) -> dict[str, Any]:
    """Every health reading of one GPU; an unsupported reading is None with its error kept."""
    errors: dict[str, str] = {}
    gpu: dict[str, Any] = identity(lib, handle)
    memory = _get(errors, "memory", lib.nvmlDeviceGetMemoryInfo, handle)
    gpu["memory_total_mib"] = round(memory.total / 2**20) if memory is not None else None
    gpu["serial"] = _get(errors, "serial", lambda: text(lib.nvmlDeviceGetSerial(handle)))
    gpu["vbios"] = _get(errors, "vbios", lambda: text(lib.nvmlDeviceGetVbiosVersion(handle)))
    gpu["persistence_mode"] = _get(errors, "persistence_mode", lib.nvmlDeviceGetPersistenceMode, handle)
    ecc = _get(errors, "ecc_mode", lib.nvmlDeviceGetEccMode, handle)
    gpu["ecc_mode_current"], gpu["ecc_mode_pending"] = (ecc[0], ecc[1]) if ecc is not None else (None, None)
    uncorrected, corrected = lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, lib.NVML_MEMORY_ERROR_TYPE_CORRECTED
    gpu["ecc_uncorrected_volatile"] = _get(
        errors, "ecc_uncorrected_volatile", lib.nvmlDeviceGetTotalEccErrors, handle, uncorrected, lib.NVML_VOLATILE_ECC
    )
    gpu["ecc_corrected_volatile"] = _get(
        errors, "ecc_corrected_volatile", lib.nvmlDeviceGetTotalEccErrors, handle, corrected, lib.NVML_VOLATILE_ECC
    )
    aggregate = lib.NVML_AGGREGATE_ECC
    gpu["ecc_uncorrected_aggregate"] = _get(
        errors, "ecc_uncorrected_aggregate", lib.nvmlDeviceGetTotalEccErrors, handle, uncorrected, aggregate
    )
    rows = _get(errors, "remapped_rows", lib.nvmlDeviceGetRemappedRows, handle)
    gpu["remapped_rows"] = (
        {"correctable": rows[0], "uncorrectable": rows[1], "pending": bool(rows[2]), "failure": bool(rows[3])}
        if rows is not None
        else None
    )
    pending = _get(errors, "retired_pages_pending", lib.nvmlDeviceGetRetiredPagesPendingStatus, handle)
    gpu["retired_pages_pending"] = None if pending is None else bool(pending)
    gpu["clock_event_reasons"] = _get(errors, "clock_event_reasons", lib.nvmlDeviceGetCurrentClocksEventReasons, handle)
    gpu["clock_event_reasons_supported"] = _get(
        errors, "clock_event_reasons_supported", lib.nvmlDeviceGetSupportedClocksEventReasons, handle
    )
    gpu["pcie"] = {
        "gen_current": _get(errors, "pcie_gen_current", lib.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "width_current": _get(errors, "pcie_width_current", lib.nvmlDeviceGetCurrPcieLinkWidth, handle),
        "gen_max": _get(errors, "pcie_gen_max", lib.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        "width_max": _get(errors, "pcie_width_max", lib.nvmlDeviceGetMaxPcieLinkWidth, handle),
        "gen_gpu_max": _get(errors, "pcie_gen_gpu_max", lib.nvmlDeviceGetGpuMaxPcieLinkGeneration, handle),
        "replay_counter": _get(errors, "pcie_replay_counter", lib.nvmlDeviceGetPcieReplayCounter, handle),
    }
    gpu["temperature_c"] = _get(errors, "temperature", lib.nvmlDeviceGetTemperature, handle, lib.NVML_TEMPERATURE_GPU)
    gpu["temperature_slowdown_c"] = _get(
        errors,
        "temperature_slowdown",
        lib.nvmlDeviceGetTemperatureThreshold,
        handle,
        lib.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
    )
    gpu["temperature_shutdown_c"] = _get(
        errors,
        "temperature_shutdown",
        lib.nvmlDeviceGetTemperatureThreshold,
        handle,
        lib.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
    )
    gpu["memory_temperature_c"] = field_values(lib, handle, {"t": lib.NVML_FI_DEV_MEMORY_TEMP}).get("t")
    power = _get(errors, "power", lib.nvmlDeviceGetPowerUsage, handle)
    limit = _get(errors, "power_limit", lib.nvmlDeviceGetEnforcedPowerLimit, handle)
    default = _get(errors, "power_default_limit", lib.nvmlDeviceGetPowerManagementDefaultLimit, handle)
    gpu["power_w"] = None if power is None else round(power / 1000, 1)
    gpu["power_limit_w"] = None if limit is None else round(limit / 1000, 1)
    gpu["power_default_limit_w"] = None if default is None else round(default / 1000, 1)
    gpu["clocks"] = {k: v for k, v in sample(lib, handle).items() if k.endswith("_mhz")}
    gpu["utilization_gpu_pct"] = _get(errors, "utilization", lambda: lib.nvmlDeviceGetUtilizationRates(handle).gpu)
    gpu["processes"] = foreign_processes(lib, handle)
    gpu["numa_node"] = numa_node(gpu["pci_bus_id"])
    gpu["cpu_affinity"] = cpu_affinity(lib, handle)
    gpu["errors"] = errors
    return gpu


def driver_versions(lib: Any) -> dict[str, Any]:
    """The driver's version and the CUDA version it supports (``13.0``), as the node check reads them too."""
    cuda = lib.nvmlSystemGetCudaDriverVersion()
    return {
        "nvml": True,
        "driver": text(lib.nvmlSystemGetDriverVersion()),
        "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
    }


def collect() -> dict[str, Any]:
    """The node's driver versions and every GPU's readings (``{"gpus": []}`` without a driver)."""
    injected = _inject.reading("gpu_health")  # test hook, off by default (probes/_inject.py)
    if injected is not None:
        return injected
    lib = nvml()
    if lib is None:
        return dict(NO_NVML, gpus=[])
    return {
        **driver_versions(lib),
        "nvml_version": text(lib.nvmlSystemGetNVMLVersion()),
        "gpus": [read_gpu(lib, lib.nvmlDeviceGetHandleByIndex(i)) for i in range(lib.nvmlDeviceGetCount())],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, help="also write the raw readings to this JSON file")
    parser.add_argument("--load", type=Path, help="emit readings from this JSON file instead of NVML")
    args = parser.parse_args(argv)
    data = json.loads(args.load.read_text()) if args.load else collect()
    if args.dump:
        args.dump.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    emit(data, probe="gpu_health")


if __name__ == "__main__":
    main()
