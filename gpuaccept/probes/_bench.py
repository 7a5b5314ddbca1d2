"""The frame every GPU benchmark probe shares: look at the GPU before touching it, then time on the device.

``preflight()`` runs *before* torch creates a CUDA context: it names the rank's GPU through NVML and
lists processes already on it. A benchmark on a GPU someone else is using measures the sharing, not
the GPU, so the test reports such a GPU as an error ("GPU busy"), not as a slow GPU.

``time_batches()`` times on the device with CUDA events: a warm-up of at least ``warmup_s`` seconds
(clocks ramp, cuBLAS picks its kernels), then ``repeats`` batches of ``batch`` calls each, one event
pair per batch so the launch gaps between calls do not count; callers take the median.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuaccept.probes._gpu import foreign_processes, handle_for_rank, identity, sample
from gpuaccept.probes._nvml import nvml

# CUDA numbers GPUs fastest-first unless told otherwise; NVML, Slurm and CUDA_VISIBLE_DEVICES indices
# follow PCI bus order. Set before torch initialises CUDA so ordinal N is the GPU NVML calls N.
os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")

__all__ = ["Preflight", "median", "preflight", "time_batches", "torch_device_bus", "visible_count"]


@dataclass
class Preflight:
    """The rank's GPUs as NVML names them and what was already running on them."""

    lib: Any
    handles: list[Any]
    gpus: list[dict[str, Any]]
    busy: list[dict[str, Any]] = field(default_factory=list)

    def sample(self, ordinal: int = 0) -> dict[str, Any]:
        return sample(self.lib, self.handles[ordinal]) if self.lib is not None else {}


def preflight(count: int = 1) -> Preflight:
    """NVML identity and foreign processes of the first ``count`` CUDA-visible GPUs (before CUDA init)."""
    lib = nvml()
    if lib is None:
        return Preflight(None, [], [])
    handles = [handle_for_rank(lib, ordinal) for ordinal in range(count)]
    gpus = [identity(lib, h) for h in handles]
    busy = []
    for gpu, handle in zip(gpus, handles, strict=True):
        procs = foreign_processes(lib, handle)
        if procs:
            busy.append({"gpu": gpu["index"], "pci_bus_id": gpu["pci_bus_id"], "processes": procs})
    return Preflight(lib, handles, gpus, busy)


def visible_count() -> int:
    """GPUs this process may use according to CUDA_VISIBLE_DEVICES (NVML's count if unset)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([v for v in visible.split(",") if v.strip()])
    lib = nvml()
    return int(lib.nvmlDeviceGetCount()) if lib is not None else 0


def torch_device_bus(torch: Any, ordinal: int = 0) -> str | None:
    """The PCI address torch's device ``ordinal`` sits at, to cross-check NVML's mapping."""
    props = torch.cuda.get_device_properties(ordinal)
    domain, bus, device = (getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    if bus is None:
        return None
    return f"{int(domain or 0):04x}:{int(bus):02x}:{int(device or 0):02x}"


def time_batches(
    torch: Any,
    call: Callable[[], Any],
    *,
    batch: int,
    repeats: int,
    warmup_s: float,
    sync: Callable[[], Any] | None = None,
    during: Callable[[], Any] | None = None,
) -> list[float]:
    """Seconds per call for each of ``repeats`` batches, after at least ``warmup_s`` of warm-up.

    ``sync`` waits for the work (default: the current device; a copy between GPUs needs both), and
    ``during`` runs once all batches are queued and the GPU is busy with them (an NVML sample of the
    clocks and PCIe link *under load*).
    """
    sync = sync or torch.cuda.synchronize
    stream = torch.cuda.current_stream()
    start = time.monotonic()
    while True:
        for _ in range(batch):
            call()
        sync()
        if time.monotonic() - start >= warmup_s:
            break
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for begin, end in events:
        begin.record(stream)
        for _ in range(batch):
            call()
        end.record(stream)
    if during is not None:
        during()
    sync()
    return [begin.elapsed_time(end) / 1000 / batch for begin, end in events]


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
