"""Node fingerprint: what this node is (OS, kernel, CPU, memory, GPUs, driver, CUDA, NCCL, HCAs) and where its GPUs
sit in an NVLink fabric (NVML's fabric state, read by the sentinel method: probes/_fabric_state.py).

Run by hand: ``python -m gpuaccept.probes.fingerprint``. The tests compare fingerprints across nodes
(configuration drift) and the report shows them; nothing here judges.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import importlib.metadata
import importlib.util
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

from gpuaccept.probes import _inject
from gpuaccept.probes._cpus import granted_cpus
from gpuaccept.probes._fabric_state import read_fabric
from gpuaccept.probes._gpu import identity
from gpuaccept.probes._nvml import nvml, safe, text
from gpuaccept.probes._protocol import emit, node_name
from gpuaccept.probes._where import where

__all__ = ["ARM_IMPLEMENTERS", "collect", "cpu_model"]


def _os_release() -> str:
    try:
        fields = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
        return fields.get("PRETTY_NAME", "unknown").strip('"')
    except OSError:
        return "unknown"


#: lscpu's names (util-linux sys-utils/lscpu-arm.c) for the aarch64 implementers and parts a GPU node carries:
#: aarch64 kernels print no "model name", only these codes, so they are the CPU's name there
ARM_IMPLEMENTERS: dict[str, tuple[str, dict[str, str]]] = {
    "0x41": (
        "ARM",
        {
            "0xd0c": "Neoverse-N1",
            "0xd40": "Neoverse-V1",
            "0xd49": "Neoverse-N2",
            "0xd4f": "Neoverse-V2",  # NVIDIA Grace (GH200, GB200, GB300)
            "0xd84": "Neoverse-V3",
            "0xd8e": "Neoverse-N3",
        },
    ),
    "0x4e": ("NVIDIA", {"0x004": "Carmel"}),
}


def cpu_model(cpuinfo: str) -> str:
    """The CPU's name from ``/proc/cpuinfo``: its "model name" (x86), else the aarch64 implementer and part named
    as lscpu names them ("Neoverse-V2" for Grace's 0x41/0xd4f), else the raw codes ("ARM part 0xd99"), so two
    nodes with different cores never share a name; "unknown" only when the text names neither."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    if fields.get("model name"):
        return fields["model name"]
    implementer, part = fields.get("CPU implementer", "").lower(), fields.get("CPU part", "").lower()
    if not implementer or not part:
        return "unknown"
    vendor, parts = ARM_IMPLEMENTERS.get(implementer, (f"implementer {implementer}", {}))
    return parts.get(part, f"{vendor} part {part}")


def _cpu() -> dict[str, Any]:
    sockets, cores = set(), set()
    physical = None
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "physical id":
            physical = value
            sockets.add(value)
        elif key == "core id":
            cores.add((physical, value))
    numa = sorted(p.name for p in Path("/sys/devices/system/node").glob("node[0-9]*"))
    return {
        "model": cpu_model(text),
        "sockets": len(sockets) or 1,
        "cores": len(cores) or os.cpu_count(),
        "threads": os.cpu_count(),
        "numa_nodes": len(numa) or 1,
        "usable_cpus": len(os.sched_getaffinity(0)),
        "granted_cpus": granted_cpus(),
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


def _injected_gpus() -> dict[str, Any] | None:
    """The GPUs and driver of the injected ``gpu_health`` reading (test hook, off by default: probes/_inject.py)."""
    data = _inject.reading("gpu_health")
    if data is None:
        return None
    devices = [
        {
            "index": g.get("index"),
            "name": g.get("name"),
            "uuid": g.get("uuid"),
            "pci_bus_id": g.get("pci_bus_id"),
            "vbios": g.get("vbios"),
            "memory_gib": None if g.get("memory_total_mib") is None else round(g["memory_total_mib"] / 1024, 2),
        }
        for g in data.get("gpus") or []
    ]
    return {
        "count": len(devices),
        "driver": data.get("driver"),
        "cuda_driver": data.get("cuda_driver"),
        "devices": devices,
    }


def _gpus() -> tuple[dict[str, Any], dict[str, Any]]:
    """The node's GPUs and driver, and each GPU's NVLink fabric state (read here, with the NVML handles)."""
    injected = _injected_gpus()
    if injected is not None:
        return injected, dict(read_fabric(None, []))
    lib = nvml()
    if lib is None:
        return {"count": 0, "driver": None, "cuda_driver": None, "devices": []}, dict(read_fabric(None, []))
    count = lib.nvmlDeviceGetCount()
    devices, handles = [], []
    for index in range(count):
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        device = {
            **identity(lib, handle),
            "vbios": safe(functools.partial(_vbios, lib, handle)),
            "memory_gib": round(lib.nvmlDeviceGetMemoryInfo(handle).total / 2**30, 2),
        }
        devices.append(device)
        handles.append((handle, index, device.get("uuid")))
    cuda = safe(lib.nvmlSystemGetCudaDriverVersion)
    gpus = {
        "count": count,
        "driver": text(lib.nvmlSystemGetDriverVersion()),
        "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else cuda,
        "devices": devices,
    }
    return gpus, dict(read_fabric(lib, handles))


def _python_stack(has_gpus: bool) -> dict[str, Any]:
    """Versions of the training stack, read without importing torch.

    Importing torch costs 4-5 s of CPU on an H200 host, paid by every node before its first test; the
    package metadata, torch's own ``version.py`` (read as Python source, not run) and NCCL's
    ``ncclGetVersion`` from the library torch would load say the same. A torch that is installed but
    does not import is found by the first GPU probe, which imports it.
    """
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": None,
        "torch_cuda": None,
        "nccl": None,
        "torch_error": None,
    }
    for package in ("torch", "transformers", "peft"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = None
    if out["torch"] is None:
        out["torch_error"] = "torch is not installed"
        return out
    out["torch_cuda"] = _torch_cuda()
    if has_gpus and out["torch_cuda"]:
        out["nccl"] = _nccl_version()
    return out


def _torch_cuda() -> str | None:
    """``torch.version.cuda`` read from torch/version.py's assignments (None for a CPU build)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        target: ast.expr
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "cuda" and value is not None:
            found = ast.literal_eval(value)
            return str(found) if found else None
    return None


def _nccl_version() -> str | None:
    """NCCL's version from ``ncclGetVersion`` in the libnccl that torch loads (the nvidia-nccl wheel's, or
    the system's): no CUDA context, no torch import."""
    candidates = []
    spec = importlib.util.find_spec("nvidia.nccl") if importlib.util.find_spec("nvidia") else None
    if spec is not None and spec.submodule_search_locations:
        candidates.append(Path(next(iter(spec.submodule_search_locations))) / "lib" / "libnccl.so.2")
    candidates.append(Path("libnccl.so.2"))
    for candidate in candidates:
        try:
            lib = ctypes.CDLL(str(candidate))
        except OSError:
            continue
        code = ctypes.c_int(0)
        if lib.ncclGetVersion(ctypes.byref(code)) != 0:
            continue
        # NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + ... before
        major, rest = divmod(code.value, 10000 if code.value >= 10000 else 1000)
        minor, patch = divmod(rest, 100)
        return f"{major}.{minor}.{patch}"
    return None


def _hcas() -> list[str]:
    root = _inject.sysfs_root(Path("/sys")) / "class" / "infiniband"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def collect() -> dict[str, Any]:
    """The fingerprint as a plain dict."""
    gpus, fabric = _gpus()
    return {
        "hostname": socket.gethostname(),
        "node": node_name(),
        "os": _os_release(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpu": _cpu(),
        "memory_gib": _mem_total_gib(),
        "gpus": gpus,
        "fabric": fabric,
        "stack": _python_stack(bool(gpus["count"])),
        "ib_hcas": _hcas(),
        "container": where(),  # the image's marker, OS, runtime and Python, as every result line has it
        "python_executable": sys.executable,
    }


def main() -> None:
    emit(collect(), probe="fingerprint")


if __name__ == "__main__":
    main()
