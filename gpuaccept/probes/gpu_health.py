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

from gpuaccept.contracts.nvml import Nvml, nvml_fields
from gpuaccept.contracts.payloads import GpuHealth, PcieLink
from gpuaccept.probes import _inject
from gpuaccept.probes._gpu import cpu_affinity, field_values, foreign_processes, identity, numa_node, sample
from gpuaccept.probes._nvml import nvml, text
from gpuaccept.probes._protocol import emit

__all__ = ["NO_NVML", "collect", "declared_readings", "driver_versions", "read_gpu"]

#: the node's reading where NVML cannot be initialised (no driver, or nvidia-ml-py missing)
NO_NVML: dict[str, Any] = {
    "nvml": False,
    "driver": None,
    "cuda_driver": None,
    "nvml_version": None,
    "cuda_visible_devices": None,
    "gpus": [],
}


def _get(errors: dict[str, str], key: str, call: Any, *args: Any) -> Any:
    """One NVML getter; a failure is kept by name in ``errors`` (shown in the report) and reads as None."""
    try:
        return call(*args)
    except Exception as exc:
        errors[key] = type(exc).__name__
        return None


def _converted(value: Any, how: Nvml, kind: type[Any]) -> Any:
    """A getter's value in the field's type and unit (``Nvml``'s attribute or item, scale and rounding)."""
    if how.attr is not None:
        value = getattr(value, how.attr)
    if how.item is not None:
        value = value[how.item]
    if kind is str:
        return text(value)
    if kind is bool:
        return bool(value)
    value = value * how.scale if how.scale != 1.0 else value
    return round(value) if kind is int else round(value, how.digits) if how.digits is not None else value


def declared_readings(
    lib: Any, handle: Any, typed_dict: type[Any], errors: dict[str, str], prefix: str = ""
) -> dict[str, Any]:
    """Every field of ``typed_dict`` that declares its NVML reading (``contracts/nvml.py``), read from the GPU:
    a getter that raises reads None with its exception's name in ``errors`` under the field's name."""
    fields = nvml_fields(typed_dict)
    ids = {name: getattr(lib, how.field) for name, (how, _) in fields.items() if how.field and hasattr(lib, how.field)}
    values = field_values(lib, handle, ids)
    out: dict[str, Any] = {}
    for name, (how, kind) in fields.items():
        if how.field:
            out[name] = values[name] if name in values else None
            if out[name] is None:
                errors[prefix + name] = f"{how.field} not supported"
            continue

        # the getter and its constants are looked up inside the call: an older nvidia-ml-py without them is
        # that reading's error (AttributeError), never the whole probe's
        def call(how: Nvml = how) -> Any:
            return getattr(lib, how.call)(handle, *(getattr(lib, c) for c in how.consts))

        raw = _get(errors, prefix + name, call)
        out[name] = None if raw is None else _converted(raw, how, kind)
    return out


def read_gpu(lib: Any, handle: Any) -> dict[str, Any]:
    """Every health reading of one GPU: the fields ``GpuHealth`` marks with their NVML getter, then the
    readings that are not one getter's value; an unsupported reading is None with its error kept."""
    errors: dict[str, str] = {}
    gpu: dict[str, Any] = {**identity(lib, handle), **declared_readings(lib, handle, GpuHealth, errors)}
    rows = _get(errors, "remapped_rows", lib.nvmlDeviceGetRemappedRows, handle)
    gpu["remapped_rows"] = (
        {"correctable": rows[0], "uncorrectable": rows[1], "pending": bool(rows[2]), "failure": bool(rows[3])}
        if rows is not None
        else None
    )
    gpu["pcie"] = declared_readings(lib, handle, PcieLink, errors, "pcie.")
    now = sample(lib, handle)
    gpu["clocks"] = {"sm_clock_mhz": now["sm_clock_mhz"], "mem_clock_mhz": now["mem_clock_mhz"]}
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
        return dict(NO_NVML, gpus=[], cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
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
