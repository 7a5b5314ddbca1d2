"""The frame every GPU benchmark probe shares: look at the GPU before touching it, then time on the device.

``preflight()`` runs *before* torch creates a CUDA context: it names the rank's GPU through NVML and
lists processes already on it. A benchmark on a GPU someone else is using measures the sharing, not
the GPU, so the test reports such a GPU as an error ("GPU busy"), not as a slow GPU.

``time_lanes()`` times on the devices with CUDA events: a warm-up of at least ``warmup_s`` seconds
(clocks ramp, cuBLAS picks its kernels), then ``repeats`` batches of ``batch`` calls each, one event
pair per batch so the launch gaps between calls do not count; callers take the median. Several lanes
(one per GPU, or one per GPU pair) run at once from one thread: their batches are queued round-robin,
so every GPU of the node is busy at the same time, as when one process per GPU measured it, without
paying torch's start-up once per GPU.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from gpuaccept.contracts.bench import BusyGpu
from gpuaccept.contracts.payloads import GpuIdentity, GpuProcess, Sample
from gpuaccept.probes._gpu import foreign_processes, handle_for_rank, identity, sample
from gpuaccept.probes._nvml import nvml

# CUDA numbers GPUs fastest-first unless told otherwise; NVML, Slurm and CUDA_VISIBLE_DEVICES indices
# follow PCI bus order. Set before torch initialises CUDA so ordinal N is the GPU NVML calls N.
os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")

__all__ = [
    "NO_NVML",
    "Lane",
    "Preflight",
    "median",
    "preflight",
    "spread",
    "time_lanes",
    "torch_device_bus",
    "visible_count",
]

#: Launches one lane may have queued before the enqueuing thread waits for that lane's oldest batch:
#: under the driver's queue depth (about 1024 launches per context), so a full queue never blocks the
#: thread on one GPU while the other lanes run dry.
MAX_QUEUED_LAUNCHES = 600


@dataclass
class Preflight:
    """The rank's GPUs as NVML names them and what was already running on them."""

    lib: Any
    handles: list[Any]
    gpus: list[GpuIdentity]
    busy: list[BusyGpu] = field(default_factory=list)

    def sample(self, ordinal: int = 0) -> Sample | None:
        """What GPU ``ordinal`` is doing now; None where NVML is not loaded (``NO_NVML`` says why)."""
        return cast(Sample, sample(self.lib, self.handles[ordinal])) if self.lib is not None else None

    def sampler(self, ordinals: list[int]) -> tuple[list[Sample | None], Callable[[], None]]:
        """One slot per ordinal and the ``during`` callback of ``time_lanes`` that fills them: a slot stays None
        where NVML is not loaded."""
        seen: list[Sample | None] = [None] * len(ordinals)

        def during() -> None:
            for slot, ordinal in enumerate(ordinals):
                seen[slot] = self.sample(ordinal)

        return seen, during


#: the ``errors`` entry of an NVML sample written None
NO_NVML = "NVML not loaded (nvidia-ml-py missing or the driver refused nvmlInit): no sample"


def preflight(count: int = 1) -> Preflight:
    """NVML identity and foreign processes of the first ``count`` CUDA-visible GPUs (before CUDA init)."""
    lib = nvml()
    if lib is None:
        return Preflight(None, [], [])
    handles = [handle_for_rank(lib, ordinal) for ordinal in range(count)]
    gpus = [cast(GpuIdentity, identity(lib, h)) for h in handles]
    busy: list[BusyGpu] = []
    for gpu, handle in zip(gpus, handles, strict=True):
        procs = cast(list[GpuProcess], foreign_processes(lib, handle))
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


@dataclass
class Lane:
    """One stream of timed work: ``call`` queues one unit on ``device`` (a ``torch.device``);
    ``sync`` lists every device the work touches (a GPU-to-GPU copy touches two)."""

    device: Any
    call: Callable[[], Any]
    sync: list[Any] = field(default_factory=list)

    def devices(self) -> list[Any]:
        return self.sync or [self.device]


def time_lanes(
    torch: Any,
    lanes: list[Lane],
    *,
    batch: int,
    repeats: int,
    warmup_s: float,
    during: Callable[[], Any] | None = None,
    timer: Any = None,
) -> list[list[float]]:
    """Seconds per call of each lane's ``repeats`` batches, all lanes at once, after ``warmup_s`` of warm-up.

    Batches are queued round-robin over the lanes, each between its own pair of CUDA events on its
    device's current stream, so every GPU runs back to back while the others do; a lane that has
    ``MAX_QUEUED_LAUNCHES`` queued waits for its oldest batch first. ``during`` runs once half of the
    batches are queued and the GPUs are busy with them (an NVML sample of clocks and links under load).
    ``timer`` (a ``_timing.Phases``) gets the warm-up and the timed batches' wall seconds.
    """
    devices = list(dict.fromkeys(d for lane in lanes for d in lane.devices()))

    def sync_all() -> None:
        for device in devices:
            torch.cuda.synchronize(device)

    start = time.monotonic()
    while True:
        for _ in range(batch):
            for lane in lanes:
                lane.call()
        sync_all()
        if time.monotonic() - start >= warmup_s:
            break
    measuring = time.monotonic()
    if timer is not None:
        timer.add("warmup", measuring - start)
    window = max(1, MAX_QUEUED_LAUNCHES // (batch + 2))
    events = [
        [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
        for _ in lanes
    ]
    streams = [torch.cuda.current_stream(lane.device) for lane in lanes]
    for index in range(repeats):
        for lane, stream, pairs in zip(lanes, streams, events, strict=True):
            if index >= window:
                pairs[index - window][1].synchronize()
            begin, end = pairs[index]
            begin.record(stream)
            for _ in range(batch):
                lane.call()
            end.record(stream)
        if during is not None and index == repeats // 2:
            during()
    sync_all()
    if timer is not None:
        timer.add("measure", time.monotonic() - measuring)
    return [[begin.elapsed_time(end) / 1000 / batch for begin, end in pairs] for pairs in events]


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def spread(samples: list[float], digits: int = 3) -> dict[str, Any]:
    """Median, min, max and (max-min)/median in percent of one figure's timed batches."""
    mid = median(samples)
    return {
        "median": round(mid, digits),
        "min": round(min(samples), digits),
        "max": round(max(samples), digits),
        "spread_pct": round((max(samples) - min(samples)) / mid * 100, 2) if mid else None,
        "batches": len(samples),
    }
