"""The shapes of what the hardware and NCCL probes emit, for the area judges that read them
(``gpuaccept.verdicts``).

TypedDicts only: no torch, no NVML, nothing run. ``total=False`` where a reading may be left out (a busy
GPU, a part not asked for, an older fixture); a value NVML could not give is None, never a default.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, RootModel

# pydantic validates these where a result arrives (probes/specs.py): before Python 3.12 it needs this TypedDict
from typing_extensions import TypedDict

from gpuaccept.contracts.strict import strict

__all__ = [
    "AllGatherRow",
    "AllReduceRow",
    "AlltoallRow",
    "BenchPerGpu",
    "BenchPhases",
    "BroadcastRow",
    "BurnIn",
    "BurnInInterval",
    "BusyGpu",
    "CappedSizes",
    "FirstWrong",
    "GpuBench",
    "GpuBenchError",
    "GpuBenchOutcome",
    "GpuBenchRan",
    "GpuHealth",
    "GpuIdentity",
    "GpuProcess",
    "HealthRecord",
    "HostLink",
    "HostbwConcurrent",
    "MatmulBurnIn",
    "MatmulBusy",
    "MatmulFigures",
    "MatmulOutcome",
    "MatmulPhases",
    "MatmulRan",
    "MatmulRecord",
    "MatmulSize",
    "MatmulSizes",
    "MembwFigures",
    "MembwSize",
    "NcclRecord",
    "NcclRow",
    "NcclTestsRecord",
    "NcclTestsRow",
    "NcclTestsRun",
    "NumaBinding",
    "NvlinkDelta",
    "P2pBusy",
    "P2pMatrix",
    "P2pMeasured",
    "P2pPair",
    "PcieLink",
    "ReduceScatterRow",
    "RemappedRows",
    "Sample",
    "SizeFigure",
    "best_size_figure",
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


# ---- the GPU benchmarks: ``probes.gpubench`` (every GPU of a node in one process) and ``probes.matmul`` (one rank
# per GPU). Every key is written; a reading the GPU did not give is None with its ``errors`` entry (the path, why).


@strict
class GpuProcess(TypedDict):
    """A process already on a GPU before the benchmark (``_gpu.foreign_processes``); ``used_mib`` None where NVML
    hides it (inside a container, or a driver that does not account per process)."""

    pid: int
    name: str
    used_mib: float | None


@strict
class BusyGpu(TypedDict):
    """A GPU someone else's processes were on before the benchmark: it is not measured (``_bench.preflight``)."""

    gpu: int
    pci_bus_id: str
    processes: list[GpuProcess]


@strict
class SizeFigure(TypedDict):
    """One matrix or buffer size's timed batches (``spread_pct`` None when the median was 0), and the GPU's NVML
    sample halfway through them (None: NVML was not loaded, ``errors`` says so)."""

    spread_pct: float | None
    batches: int
    calls_per_batch: int
    during: Sample | None


@strict
class MatmulSize(SizeFigure):
    """One square size's BF16 TFLOP/s: the median batch, the slowest and the fastest."""

    tflops: float
    tflops_min: float
    tflops_max: float


@strict
class MembwSize(SizeFigure):
    """One buffer size's HBM copy TB/s (read plus write): the median batch, the slowest and the fastest."""

    tbps: float
    tbps_min: float
    tbps_max: float


@strict
class MatmulFigures(TypedDict):
    """A GPU's matmul figures: the best size's TFLOP/s and every size's (keyed by the size as text), the burst
    before any warm-up (None: ``--no-burst``), and the exact integer checksum (``probes/matmul.checksum``)."""

    tflops: float
    best_size: int
    by_size: dict[str, MatmulSize]
    tflops_burst: float | None
    checksum: int
    data: Literal["normal", "zeros"]


@strict
class MembwFigures(TypedDict):
    """A GPU's HBM copy figures, shaped like the matmul ones."""

    tbps: float
    best_size: int
    by_size: dict[str, MembwSize]


@strict
class NumaBinding(TypedDict):
    """Where a GPU's host-link thread ran (``hostbw.bind_local``): ``why`` None when it was bound to the GPU's
    NUMA-local CPUs; ``gpu_numa_node`` None where sysfs does not say."""

    bound: bool
    why: str | None
    gpu_numa_node: int | None
    local_cpus: int
    allowed_cpus: int
    bound_cpus: int
    all_local: bool


@strict
class HostLink(TypedDict):
    """One GPU's pinned host link alone, each way (GB/s: median, min, max of the best attempt; every attempt as
    [median, spread]); the PCIe generation and width NVML read under that load (None: never read)."""

    numa: NumaBinding
    h2d_gbps: float
    h2d_gbps_min: float
    h2d_gbps_max: float
    h2d_spread_pct: float | None
    h2d_attempts: list[tuple[float, float | None]]
    h2d_during: Sample | None
    d2h_gbps: float
    d2h_gbps_min: float
    d2h_gbps_max: float
    d2h_spread_pct: float | None
    d2h_attempts: list[tuple[float, float | None]]
    d2h_during: Sample | None
    pcie_gen_loaded: int | None
    pcie_width_loaded: int | None


@strict
class HostbwConcurrent(TypedDict):
    """Every GPU copying to and from the host at once: per GPU (in ``per_gpu`` order) and summed."""

    gpus: int
    h2d_gbps_per_gpu: list[float]
    h2d_gbps_total: float
    h2d_spread_pct_per_gpu: list[float | None]
    d2h_gbps_per_gpu: list[float]
    d2h_gbps_total: float
    d2h_spread_pct_per_gpu: list[float | None]


@strict
class BenchPerGpu(TypedDict):
    """One measured GPU of a ``gpubench`` result; ``idle`` is sampled before any part, ``end`` after all (the PCIe
    replay counter's window). A part not asked for (``--parts``) is None; ``GpuBenchRan.parts`` names those run."""

    index: int
    torch_bus: str | None
    idle: Sample | None
    end: Sample | None
    matmul: MatmulFigures | None
    membw: MembwFigures | None
    hostbw: HostLink | None


@strict
class P2pPair(TypedDict):
    """One ordered GPU pair's copy (GB/s, src to dst), its round and whether CUDA had peer access."""

    src: int
    dst: int
    src_bus: str
    dst_bus: str
    gbps: float
    gbps_min: float
    gbps_max: float
    spread_pct: float | None
    round: int
    peer_access: bool


@strict
class P2pMatrix(TypedDict):
    """The pairs as a matrix for the report: rows the source, columns the destination (None on the diagonal)."""

    gpus: list[int]
    gbps: list[list[float | None]]


@strict
class NvlinkDelta(TypedDict):
    """How much one GPU's NVLink error counters grew while the pairs copied (None: a counter unread)."""

    gpu: int
    seconds: float
    crc_flit: int | None
    crc_data: int | None
    replay: int | None
    recovery: int | None
    per_link: dict[str, dict[str, int]]
    links: int
    unread_links: dict[str, list[int]]


@strict
class P2pMeasured(TypedDict):
    """Every ordered GPU pair (none on a one-GPU node) with the NVLink counters around the copies."""

    outcome: Literal["measured"]
    size: int
    pairs: list[P2pPair]
    matrix: P2pMatrix
    nvlink_errors: list[NvlinkDelta]


@strict
class P2pBusy(TypedDict):
    """The pairs were not copied: a GPU of the node was busy (all pairs or none, so no pair measures sharing)."""

    outcome: Literal["busy"]
    size: int
    skipped: str


@strict
class BenchPhases(TypedDict):
    """Where the gpubench process's wall went (``probes._timing``): start-up, warm-up, timed batches, the rest, and
    each part's wall. The step's own wall is the dispatcher's, on the step record."""

    startup_s: float
    warmup_s: float
    measure_s: float
    other_s: float
    process_wall_s: float
    by_part_s: dict[str, float]


@strict
class GpuBenchRan(TypedDict):
    """A node's ``gpubench`` that found its GPUs: each measured GPU's parts (``per_gpu``; a busy GPU is in ``busy``
    only), every GPU at once on the host links (None: fewer than two measured, or hostbw not asked for), the
    pairs (None: p2p not asked for). ``errors``: each reading written None, by its path, and why."""

    outcome: Literal["measured"]
    gpus: list[GpuIdentity]
    busy: list[BusyGpu]
    parts: list[Literal["matmul", "membw", "hostbw", "p2p"]]
    torch: str
    per_gpu: list[BenchPerGpu]
    hostbw_concurrent: HostbwConcurrent | None
    p2p: Annotated[P2pMeasured | P2pBusy, Field(discriminator="outcome")] | None
    phases: BenchPhases
    errors: dict[str, str]


@strict
class GpuBenchError(TypedDict):
    """A node's ``gpubench`` that could not measure: why (no GPU visible); its checks are ERROR, never FAILED."""

    outcome: Literal["error"]
    error: str


#: what a node's gpubench result is, told apart by ``outcome``
GpuBenchOutcome = Annotated[GpuBenchRan | GpuBenchError, Field(discriminator="outcome")]


class GpuBench(RootModel[GpuBenchOutcome]):
    """A node's ``gpubench`` result line (``probes.gpubench``): ``root`` is the shape it is. A root model holds no
    keys of its own (pydantic refuses ``extra=`` on one); every shape it holds is strict."""


@strict
class MatmulPhases(TypedDict):
    """Where a ``matmul`` rank's wall went (``probes._timing``)."""

    startup_s: float
    warmup_s: float
    measure_s: float
    process_wall_s: float


@strict
class MatmulBusy(TypedDict):
    """A ``matmul`` rank whose GPU had others' processes on it: not measured (``--measure-busy`` measures)."""

    outcome: Literal["busy"]
    busy: list[BusyGpu]
    idle: Sample | None
    skipped: str
    errors: dict[str, str]


@strict
class MatmulRan(TypedDict):
    """What every measured ``matmul`` rank writes: its GPU as torch and NVML see it, the checksum, the phases."""

    busy: list[BusyGpu]
    idle: Sample | None
    torch_bus: str | None
    torch: str
    checksum: int
    phases: MatmulPhases
    errors: dict[str, str]


@strict
class MatmulSizes(MatmulRan, MatmulFigures):
    """A ``matmul`` rank that measured square sizes: the figures ``gpubench`` writes per GPU."""

    outcome: Literal["sizes"]


@strict
class BurnInInterval(TypedDict):
    """One interval of the burn-in: when it ended, its TFLOP/s, the NVML sample halfway through (None: unread)."""

    t_s: float
    tflops: float
    during: Sample | None


@strict
class BurnIn(TypedDict):
    """Sustained matmul of one size for ``duration_s``, one figure per ``interval_s``."""

    size: int
    duration_s: float
    interval_s: float
    intervals: list[BurnInInterval]


@strict
class MatmulBurnIn(MatmulRan):
    """A ``matmul`` rank that ran the burn-in: the intervals and the checksum after them (``checksum`` before)."""

    outcome: Literal["burn_in"]
    burn_in: BurnIn
    checksum_end: int


#: what one ``matmul`` rank's result is, told apart by ``outcome``
MatmulOutcome = Annotated[MatmulBusy | MatmulSizes | MatmulBurnIn, Field(discriminator="outcome")]


class MatmulRecord(RootModel[MatmulOutcome]):
    """One ``matmul`` rank's result line (``probes.matmul``): ``root`` is the shape it is (see ``GpuBench``)."""


def best_size_figure(figures: MatmulFigures | MembwFigures) -> MatmulSize | MembwSize:
    """The figures of the size a part reported as its best (the probe writes ``best_size`` from ``by_size``)."""
    return figures["by_size"][str(figures["best_size"])]


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
