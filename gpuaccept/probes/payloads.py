"""The shapes of what the hardware probes emit, for the area judges that read them (``gpuaccept.hardware``).

TypedDicts only: no torch, no NVML, nothing run. ``total=False`` where a reading may be left out (a busy
GPU, a part not asked for, an older fixture); a value NVML could not give is None, never a default.
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = [
    "BenchPerGpu",
    "GpuBench",
    "GpuHealth",
    "GpuIdentity",
    "HealthRecord",
    "MatmulFigures",
    "MembwFigures",
    "PcieLink",
    "RemappedRows",
    "Sample",
    "SizeFigure",
    "best_size_figure",
]


class GpuIdentity(TypedDict):
    """How a failure names a GPU (``_gpu.identity``): NVML index, UUID, PCI bus id, model."""

    index: int
    uuid: str
    pci_bus_id: str
    name: str


class Sample(TypedDict, total=False):
    """What a GPU was doing at one instant (``_gpu.sample``)."""

    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    temperature_c: int | None
    power_w: float | None
    clock_event_reasons: int | None
    pcie_gen: int | None
    pcie_width: int | None
    pcie_replay_counter: int | None  # cumulative since the driver loaded
    monotonic_s: float  # when it was read (time.monotonic on the node)


class PcieLink(TypedDict, total=False):
    """The GPU's PCIe link as ``gpu_health`` reads it; ``replay_counter`` counts since the driver loaded."""

    gen_current: int | None
    width_current: int | None
    gen_max: int | None
    width_max: int | None
    gen_gpu_max: int | None
    replay_counter: int | None


class RemappedRows(TypedDict):
    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


class GpuHealth(TypedDict, total=False):
    """One GPU of ``gpu_health`` (``gpu_health.read_gpu``): identity plus its health readings."""

    index: int
    uuid: str
    pci_bus_id: str
    name: str
    memory_total_mib: int | None
    ecc_mode_current: int | None
    ecc_mode_pending: int | None
    ecc_uncorrected_volatile: int | None
    ecc_corrected_volatile: int | None
    ecc_uncorrected_aggregate: int | None
    remapped_rows: RemappedRows | None
    retired_pages_pending: bool | None
    clock_event_reasons: int | None
    pcie: PcieLink
    temperature_c: int | None
    temperature_slowdown_c: int | None
    memory_temperature_c: float | int | None
    power_w: float | None
    power_limit_w: float | None
    power_default_limit_w: float | None
    persistence_mode: int | None
    processes: list[dict[str, Any]]
    nvlink: dict[str, Any] | None  # the node check adds the NVLink counters (``nodecheck.readers``)
    errors: dict[str, str]


class HealthRecord(TypedDict, total=False):
    """A node's ``gpu_health`` result."""

    nvml: bool
    driver: str | None
    cuda_driver: str | None
    gpus: list[GpuHealth]


class SizeFigure(TypedDict, total=False):
    """One matrix or buffer size's timed batches, and the GPU's state while they ran."""

    tflops: float
    tbps: float
    spread_pct: float | None
    during: Sample


class MatmulFigures(TypedDict, total=False):
    """A GPU's matmul part: the best size's TFLOP/s and every size's figures (keyed by the size as text)."""

    tflops: float
    best_size: int
    by_size: dict[str, SizeFigure]
    tflops_burst: float | None
    checksum: str | None


class MembwFigures(TypedDict, total=False):
    """A GPU's HBM copy part, shaped like the matmul part."""

    tbps: float
    best_size: int
    by_size: dict[str, SizeFigure]


class BenchPerGpu(TypedDict, total=False):
    """One GPU's parts of a ``gpubench`` result; ``idle`` is sampled before any part, ``end`` after all."""

    index: int
    idle: Sample
    end: Sample
    matmul: MatmulFigures
    membw: MembwFigures
    hostbw: dict[str, Any]


class GpuBench(TypedDict, total=False):
    """A node's ``gpubench`` result (``probes.gpubench``)."""

    gpus: list[GpuIdentity]
    busy: list[dict[str, Any]]
    per_gpu: list[BenchPerGpu]
    hostbw_concurrent: dict[str, Any] | None
    p2p: dict[str, Any]
    phases: dict[str, Any]
    error: str
    step_s: float


def best_size_figure(figures: MatmulFigures | MembwFigures | dict[str, Any]) -> SizeFigure:
    """The figures of the size a part reported as its best (empty if it reported none)."""
    by_size: dict[str, SizeFigure] = figures.get("by_size") or {}
    return by_size.get(str(figures.get("best_size"))) or SizeFigure()
