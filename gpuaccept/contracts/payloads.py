"""The shapes of what the hardware probes emit, for the area judges that read them (``gpuaccept.verdicts``).

TypedDicts only: no torch, no NVML, nothing run; the NCCL types live in ``contracts.nccl_payloads``. The GPU-health
types bite (``@strict``, every key required; ``GpuHealth``'s NVML readings declare their getter, ``contracts/nvml.py``);
the others still say ``total=False`` where a reading may be left out (a busy GPU, a part not asked for).
A value NVML could not give is None, never a default.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

# pydantic validates these where a result arrives (probes/specs.py): before Python 3.12 it needs this TypedDict
from typing_extensions import TypedDict

from gpuaccept.contracts.nvml import Nvml, unexplained_nulls
from gpuaccept.contracts.strict import strict

__all__ = [
    "Clocks",
    "GpuHealth",
    "GpuIdentity",
    "GpuProcess",
    "HealthRecord",
    "PcieLink",
    "RemappedRows",
    "Sample",
]


@strict
class GpuIdentity(TypedDict):
    """How a failure names a GPU (``_gpu.identity``): NVML index, UUID, PCI bus id, model."""

    index: int
    uuid: str
    pci_bus_id: str
    name: str


@strict
class Sample(TypedDict):
    """What a GPU was doing at one instant (``_gpu.sample``); a getter NVML refused reads None."""

    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    temperature_c: int | None
    power_w: float | None
    clock_event_reasons: int | None
    pcie_gen: int | None
    pcie_width: int | None
    pcie_replay_counter: int | None  # cumulative since the driver loaded
    monotonic_s: float  # when it was read (time.monotonic on the node)


@strict
class PcieLink(TypedDict):
    """The GPU's PCIe link as ``gpu_health`` reads it; ``replay_counter`` counts since the driver loaded."""

    gen_current: Annotated[int | None, Nvml("nvmlDeviceGetCurrPcieLinkGeneration")]
    width_current: Annotated[int | None, Nvml("nvmlDeviceGetCurrPcieLinkWidth")]
    gen_max: Annotated[int | None, Nvml("nvmlDeviceGetMaxPcieLinkGeneration")]
    width_max: Annotated[int | None, Nvml("nvmlDeviceGetMaxPcieLinkWidth")]
    gen_gpu_max: Annotated[int | None, Nvml("nvmlDeviceGetGpuMaxPcieLinkGeneration")]
    replay_counter: Annotated[int | None, Nvml("nvmlDeviceGetPcieReplayCounter")]


@strict
class RemappedRows(TypedDict):
    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


@strict
class Clocks(TypedDict):
    """The SM and memory clocks at the instant of the reading (MHz)."""

    sm_clock_mhz: int | None
    mem_clock_mhz: int | None


@strict
class GpuProcess(TypedDict):
    """A process already on the GPU (``_gpu.foreign_processes``); ``used_mib`` None where NVML hides it."""

    pid: int
    name: str
    used_mib: float | None


_ECC = ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC")
_THRESHOLD = "nvmlDeviceGetTemperatureThreshold"


@strict
class GpuHealth(GpuIdentity):
    """One GPU of ``gpu_health`` (``gpu_health.read_gpu``): identity plus its health readings, every one written.
    A field marked ``Nvml`` is filled from that getter (``contracts/nvml.py``); one NVML refused is None with the
    getter's error in ``errors`` under the field's name (``pcie.<field>`` for the link's), and a None no entry
    explains is refused (``HealthRecord``)."""

    memory_total_mib: Annotated[int | None, Nvml("nvmlDeviceGetMemoryInfo", attr="total", scale=2**-20)]
    serial: Annotated[str | None, Nvml("nvmlDeviceGetSerial")]
    vbios: Annotated[str | None, Nvml("nvmlDeviceGetVbiosVersion")]
    persistence_mode: Annotated[int | None, Nvml("nvmlDeviceGetPersistenceMode")]
    ecc_mode_current: Annotated[int | None, Nvml("nvmlDeviceGetEccMode", item=0)]
    ecc_mode_pending: Annotated[int | None, Nvml("nvmlDeviceGetEccMode", item=1)]
    ecc_uncorrected_volatile: Annotated[int | None, Nvml("nvmlDeviceGetTotalEccErrors", *_ECC)]
    ecc_corrected_volatile: Annotated[
        int | None, Nvml("nvmlDeviceGetTotalEccErrors", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC")
    ]
    ecc_uncorrected_aggregate: Annotated[
        int | None, Nvml("nvmlDeviceGetTotalEccErrors", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC")
    ]
    remapped_rows: RemappedRows | None  # nvmlDeviceGetRemappedRows' four numbers (``errors["remapped_rows"]``)
    retired_pages_pending: Annotated[bool | None, Nvml("nvmlDeviceGetRetiredPagesPendingStatus")]
    clock_event_reasons: Annotated[int | None, Nvml("nvmlDeviceGetCurrentClocksEventReasons")]
    clock_event_reasons_supported: Annotated[int | None, Nvml("nvmlDeviceGetSupportedClocksEventReasons")]
    pcie: PcieLink
    temperature_c: Annotated[int | None, Nvml("nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU")]
    temperature_slowdown_c: Annotated[int | None, Nvml(_THRESHOLD, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN")]
    temperature_shutdown_c: Annotated[int | None, Nvml(_THRESHOLD, "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN")]
    memory_temperature_c: Annotated[float | int | None, Nvml(field="NVML_FI_DEV_MEMORY_TEMP")]
    power_w: Annotated[float | None, Nvml("nvmlDeviceGetPowerUsage", scale=1e-3, digits=1)]
    power_limit_w: Annotated[float | None, Nvml("nvmlDeviceGetEnforcedPowerLimit", scale=1e-3, digits=1)]
    power_default_limit_w: Annotated[
        float | None, Nvml("nvmlDeviceGetPowerManagementDefaultLimit", scale=1e-3, digits=1)
    ]
    clocks: Clocks
    utilization_gpu_pct: Annotated[int | None, Nvml("nvmlDeviceGetUtilizationRates", attr="gpu")]
    processes: list[GpuProcess]
    numa_node: int | None  # sysfs: -1 where the platform gives none (one NUMA node, many VMs), None unreadable
    cpu_affinity: list[int]  # empty where NVML gave no mask
    errors: dict[str, str]


def _explained(gpu: GpuHealth) -> GpuHealth:
    """Refuses a GPU whose NVML reading is None with no ``errors`` entry saying why."""
    unexplained = unexplained_nulls(GpuHealth, dict(gpu), gpu["errors"])
    unexplained += unexplained_nulls(PcieLink, dict(gpu["pcie"]), gpu["errors"], "pcie.")
    if gpu["remapped_rows"] is None and "remapped_rows" not in gpu["errors"]:
        unexplained.append("remapped_rows")
    if unexplained:
        raise ValueError(f"None with no errors entry saying why: {', '.join(unexplained)}")
    return gpu


@strict
class HealthRecord(TypedDict):
    """A node's ``gpu_health`` result: ``nvml`` False (no driver, or nvidia-ml-py missing) with every
    version None and no GPU."""

    nvml: bool
    driver: str | None
    cuda_driver: str | None
    nvml_version: str | None
    cuda_visible_devices: str | None
    gpus: list[Annotated[GpuHealth, AfterValidator(_explained)]]
