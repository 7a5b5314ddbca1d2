"""The shapes of what the GPU benchmark probes emit: ``probes.gpubench`` (every GPU of a node in one process:
matmul, HBM copy, host links, GPU pairs) and ``probes.matmul`` (one rank per GPU, the burn-in), for the judges
that read them (``verdicts.bench``, ``compute``, ``memory``, ``nvlink``'s errors under load).

Every key is required and every type strict (``contracts.strict``): a reading the GPU did not give is None with
an ``errors`` entry (its path, and why); an outcome that is not a reading (a busy GPU, a result that could not
measure) is its own shape, told apart by ``outcome``. TypedDicts and pydantic only: no torch, no NVML.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, RootModel

# pydantic validates these where a result arrives (probes/specs.py): before Python 3.12 it needs this TypedDict
from typing_extensions import TypedDict

from gpuaccept.contracts.payloads import GpuIdentity, GpuProcess, Sample
from gpuaccept.contracts.strict import strict

__all__ = [
    "BenchPerGpu",
    "BenchPhases",
    "BurnIn",
    "BurnInInterval",
    "BusyGpu",
    "GpuBench",
    "GpuBenchError",
    "GpuBenchOutcome",
    "GpuBenchRan",
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
    "NumaBinding",
    "NvlinkDelta",
    "P2pBusy",
    "P2pMatrix",
    "P2pMeasured",
    "P2pPair",
    "PartWalls",
    "PerLinkGrowth",
    "SizeFigure",
    "best_size_figure",
]


@strict
class BusyGpu(TypedDict):
    """A GPU someone else's processes were on before the benchmark: it is not measured (``_bench.preflight``)."""

    gpu: int
    pci_bus_id: str
    processes: list[GpuProcess]


@strict
class SizeFigure(TypedDict):
    """One matrix or buffer size's timed batches (``spread_pct`` None when the median was 0), and the GPU's NVML
    sample halfway through them (None: NVML was not loaded, ``errors`` says so). A row of a list, not a value
    keyed by its size: a size the probe measured and left out of its result cannot pass for one never measured."""

    size: int
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
    """A GPU's matmul figures: the best size's TFLOP/s and every size's (in the order measured), the burst
    before any warm-up (None: ``--no-burst``), and the exact integer checksum (``probes/matmul.checksum``)."""

    tflops: float
    best_size: int
    sizes: list[MatmulSize]
    tflops_burst: float | None
    checksum: int
    data: Literal["normal", "zeros"]


@strict
class MembwFigures(TypedDict):
    """A GPU's HBM copy figures, shaped like the matmul ones."""

    tbps: float
    best_size: int
    sizes: list[MembwSize]


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
class PerLinkGrowth(TypedDict):
    """Each CRC counter's growth by link number (as text), the links whose counter grew only."""

    crc_flit: dict[str, int]
    crc_data: dict[str, int]


@strict
class NvlinkDelta(TypedDict):
    """How much one GPU's NVLink error counters grew while the pairs copied (None: a counter unread)."""

    gpu: int
    seconds: float
    crc_flit: int | None
    crc_data: int | None
    replay: int | None
    recovery: int | None
    per_link: PerLinkGrowth
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
class PartWalls(TypedDict):
    """Each part's wall seconds (None: not asked for)."""

    matmul: float | None
    membw: float | None
    hostbw: float | None
    p2p: float | None


@strict
class BenchPhases(TypedDict):
    """Where the gpubench process's wall went (``probes._timing``): start-up, warm-up, timed batches, the rest, and
    each part's wall. The step's own wall is the dispatcher's, on the step record."""

    startup_s: float
    warmup_s: float
    measure_s: float
    other_s: float
    process_wall_s: float
    by_part_s: PartWalls


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
    """The figures of the size a part reported as its best (the probe writes ``best_size`` from ``sizes``)."""
    return next(figure for figure in figures["sizes"] if figure["size"] == figures["best_size"])
