"""Node fingerprint: what this node is (OS, kernel, CPU, memory, GPUs, driver, CUDA, NCCL, HCAs).

Run by hand: ``python -m gpuaccept.probes.fingerprint``. The tests compare fingerprints across nodes
(configuration drift) and the report shows them; nothing here judges.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

from gpuaccept.probes._nvml import nvml, safe, text
from gpuaccept.probes._protocol import emit, node_name

__all__ = ["collect"]


def _os_release() -> str:
    try:
        fields = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
        return fields.get("PRETTY_NAME", "unknown").strip('"')
    except OSError:
        return "unknown"


def _cpu() -> dict[str, Any]:
    model, sockets, cores = "unknown", set(), set()
    physical = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "model name":
                model = value
            elif key == "physical id":
                physical = value
                sockets.add(value)
            elif key == "core id":
                cores.add((physical, value))
    except OSError:
        pass
    numa = sorted(p.name for p in Path("/sys/devices/system/node").glob("node[0-9]*"))
    return {
        "model": model,
        "sockets": len(sockets) or 1,
        "cores": len(cores) or os.cpu_count(),
        "threads": os.cpu_count(),
        "numa_nodes": len(numa) or 1,
        "usable_cpus": len(os.sched_getaffinity(0)),
    }


def _mem_total_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 2)
    except OSError:
        pass
    return None



def _vbios(lib: Any, handle: Any) -> str:
    return text(lib.nvmlDeviceGetVbiosVersion(handle))

def _gpus() -> dict[str, Any]:
    lib = nvml()
    if lib is None:
        return {"count": 0, "driver": None, "cuda_driver": None, "devices": []}
    count = lib.nvmlDeviceGetCount()
    devices = []
    for index in range(count):
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        devices.append(
            {
                "index": index,
                "name": text(lib.nvmlDeviceGetName(handle)),
                "uuid": text(lib.nvmlDeviceGetUUID(handle)),
                "pci_bus_id": text(lib.nvmlDeviceGetPciInfo(handle).busId),
                "vbios": safe(functools.partial(_vbios, lib, handle)),
                "memory_gib": round(lib.nvmlDeviceGetMemoryInfo(handle).total / 2**30, 2),
            }
        )
    cuda = safe(lib.nvmlSystemGetCudaDriverVersion)
    return {
        "count": count,
        "driver": text(lib.nvmlSystemGetDriverVersion()),
        "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else cuda,
        "devices": devices,
    }


def _python_stack(has_gpus: bool) -> dict[str, Any]:
    """Versions of the training stack; torch is imported only where NCCL's version needs it.

    Importing torch costs seconds of CPU; on a CPU node the package metadata says enough, which keeps
    a fingerprint of many loopback nodes sharing a few cores fast.
    """
    out: dict[str, Any] = {"python": platform.python_version(), "torch": None, "torch_cuda": None, "nccl": None}
    for package in ("transformers", "peft"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = None
    if not has_gpus:
        try:
            out["torch"] = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            out["torch_error"] = "torch is not installed"
        return out
    try:
        import torch

        out["torch"] = torch.__version__
        out["torch_cuda"] = torch.version.cuda
        # NCCL's version comes from the library torch loaded (ncclGetVersion), which needs no CUDA
        # context: ``torch.cuda.is_available()`` would initialise the driver on every GPU (seconds,
        # and serialised across the processes of a node) just to decide to ask.
        if torch.version.cuda:
            version = torch.cuda.nccl.version()
            out["nccl"] = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    except Exception as exc:
        out["torch_error"] = f"{type(exc).__name__}: {exc}"
    return out


def _hcas(root: Path = Path("/sys/class/infiniband")) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def collect() -> dict[str, Any]:
    """The fingerprint as a plain dict."""
    gpus = _gpus()
    return {
        "hostname": socket.gethostname(),
        "node": node_name(),
        "os": _os_release(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpu": _cpu(),
        "memory_gib": _mem_total_gib(),
        "gpus": gpus,
        "stack": _python_stack(bool(gpus["count"])),
        "ib_hcas": _hcas(),
        "container": os.environ.get("GPUACCEPT_CONTAINER_IMAGE") or os.environ.get("SLURM_CONTAINER") or None,
        "python_executable": sys.executable,
    }


def main() -> None:
    emit(collect(), probe="fingerprint")


if __name__ == "__main__":
    main()
