"""The shapes of what the hardware and NCCL probes emit, for the area judges that read them
(``gpuaccept.verdicts``).

TypedDicts only: no torch, no NVML, nothing run. ``total=False`` where a reading may be left out (a busy
GPU, a part not asked for, an older fixture); a value NVML could not give is None, never a default.
"""

from __future__ import annotations

from typing import Any, Literal

# pydantic validates these where a result arrives (probes/specs.py): before Python 3.12 it needs this TypedDict
from typing_extensions import TypedDict

from gpuaccept.contracts.strict import strict

__all__ = [
    "AllGatherRow",
    "AllReduceRow",
    "AlltoallRow",
    "BroadcastRow",
    "CappedSizes",
    "FirstWrong",
    "GpuHealth",
    "GpuIdentity",
    "HealthRecord",
    "NcclRecord",
    "NcclRow",
    "NcclTestsRecord",
    "NcclTestsRow",
    "NcclTestsRun",
    "PcieLink",
    "ReduceScatterRow",
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


# ---- NCCL: ``probes.nccl`` (one row per collective and size) and ``probes.nccl_tests`` (a table per collective)


class FirstWrong(TypedDict):
    """The first wrong element of a verified result: its block, index, what it held and what it should."""

    row: int
    index: int
    got: float
    want: float


class _CollectiveRow(TypedDict):
    """One size of one collective on one rank; ``bytes`` is nccl-tests' size column (``contracts.nccl_formulas``)."""

    bytes: int
    time_us: float  # this rank's median over the trials (the group's figure is the mean over its ranks)
    trials_us: list[float]
    wrong: int  # elements of this rank's output that differ from the pattern (``nccl.patterns``)
    first_wrong: FirstWrong | None


class AllReduceRow(_CollectiveRow):
    """all_reduce, in place: ``bytes`` is the buffer; busbw = algbw x 2(n-1)/n."""

    collective: Literal["all_reduce"]


class AllGatherRow(_CollectiveRow):
    """all_gather, out of place: ``bytes`` is the gathered output (each rank sends bytes/n); x (n-1)/n."""

    collective: Literal["all_gather"]


class ReduceScatterRow(_CollectiveRow):
    """reduce_scatter: ``bytes`` is the input (each rank keeps bytes/n of the sum); x (n-1)/n."""

    collective: Literal["reduce_scatter"]


class AlltoallRow(_CollectiveRow):
    """alltoall: ``bytes`` is one rank's buffer of n blocks; x (n-1)/n."""

    collective: Literal["alltoall"]


class BroadcastRow(_CollectiveRow):
    """broadcast from rank 0, in place: ``bytes`` is the buffer; busbw = algbw."""

    collective: Literal["broadcast"]


#: one row of the ``nccl`` probe's ``results``, told apart by ``collective``
NcclRow = AllReduceRow | AllGatherRow | ReduceScatterRow | AlltoallRow | BroadcastRow


class CappedSizes(TypedDict):
    """A collective whose larger sizes did not fit in GPU memory: the largest that did (0: none)."""

    largest: int
    free_bytes: int


class NcclRecord(TypedDict, total=False):
    """One rank's ``nccl`` result (``probes.nccl``); ``group``/``results`` only for a rank in a communicator."""

    backend: str  # nccl or gloo
    torch: str
    world_size: int
    group: int | None
    groups: int
    rail: int | None
    local_rank: int
    ring: bool
    iters: int
    warmup: int
    trials: int
    faults: dict[str, Any] | None
    nccl_version: str
    env: dict[str, str]
    group_nodes: list[str]
    group_ranks: list[int]
    results: list[NcclRow]
    capped: dict[str, CappedSizes]
    free_bytes: int
    nccl: dict[str, Any]  # NCCL_DEBUG=INFO facts (``nccl.ncclinfo.collect_facts``): algorithms, transports, net


class NcclTestsRow(TypedDict):
    """One size of an nccl-tests run, out of place and in place (what ``nccl.nccltests`` reads from its table)."""

    size: int
    count: int
    oop_time_us: float
    oop_algbw: float
    oop_busbw: float
    oop_wrong: int | None
    ip_time_us: float
    ip_algbw: float
    ip_busbw: float
    ip_wrong: int | None


class NcclTestsRun(TypedDict, total=False):
    """One collective's nccl-tests binary: its command, exit code and table (``error``: it timed out)."""

    command: list[str]
    returncode: int | None
    rows: list[NcclTestsRow]
    avg_busbw: float
    out_of_bounds: int
    version: str
    nccl: str
    devices: list[dict[str, Any]]
    stderr_tail: str
    error: str


class NcclTestsRecord(TypedDict):
    """The ``nccl_tests`` probe's result: whether a binary was found, where it looked, a run per collective."""

    found: bool
    searched: list[str]
    runs: dict[str, NcclTestsRun]
