"""The shapes of what the NCCL probes emit (``probes.nccl``: one row per collective and size; ``probes.nccl_tests``:
a table per collective), for the NCCL judges (``verdicts.nccl*``).

Every type is ``@strict`` and every key required: a fact NCCL's log did not state is None, and what is not a
reading (a rank left out of every communicator, an nccl-tests binary killed at its timeout) is a union tagged by
``outcome``, so a judge indexes what the probe wrote and nothing drops silently on the way.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from typing_extensions import TypedDict

from gpuaccept.contracts.strict import strict

__all__ = [
    "AllGatherRow",
    "AllReduceRow",
    "AlltoallRow",
    "BroadcastRow",
    "CappedSizes",
    "FirstWrong",
    "NcclFacts",
    "NcclFaults",
    "NcclInGroup",
    "NcclNoGroup",
    "NcclRecord",
    "NcclRow",
    "NcclTestsDevice",
    "NcclTestsRan",
    "NcclTestsRecord",
    "NcclTestsRow",
    "NcclTestsRun",
    "NcclTestsTimedOut",
    "NetChannels",
    "NetFacts",
    "ReduceScatterRow",
]


@strict
class FirstWrong(TypedDict):
    """The first wrong element of a verified result: its block, index, what it held and what it should."""

    row: int
    index: int
    got: float
    want: float


@strict
class _CollectiveRow(TypedDict):
    """One size of one collective on one rank; ``bytes`` is nccl-tests' size column (``contracts.nccl_formulas``)."""

    bytes: int
    time_us: float  # this rank's median over the trials (the group's figure is the mean over its ranks)
    trials_us: list[float]
    wrong: int  # elements of this rank's output that differ from the pattern (``nccl.patterns``)
    first_wrong: FirstWrong | None


@strict
class AllReduceRow(_CollectiveRow):
    """all_reduce, in place: ``bytes`` is the buffer; busbw = algbw x 2(n-1)/n."""

    collective: Literal["all_reduce"]


@strict
class AllGatherRow(_CollectiveRow):
    """all_gather, out of place: ``bytes`` is the gathered output (each rank sends bytes/n); x (n-1)/n."""

    collective: Literal["all_gather"]


@strict
class ReduceScatterRow(_CollectiveRow):
    """reduce_scatter: ``bytes`` is the input (each rank keeps bytes/n of the sum); x (n-1)/n."""

    collective: Literal["reduce_scatter"]


@strict
class AlltoallRow(_CollectiveRow):
    """alltoall: ``bytes`` is one rank's buffer of n blocks; x (n-1)/n."""

    collective: Literal["alltoall"]


@strict
class BroadcastRow(_CollectiveRow):
    """broadcast from rank 0, in place: ``bytes`` is the buffer; busbw = algbw."""

    collective: Literal["broadcast"]


#: one row of the ``nccl`` probe's ``results``, told apart by ``collective``
NcclRow = AllReduceRow | AllGatherRow | ReduceScatterRow | AlltoallRow | BroadcastRow


@strict
class CappedSizes(TypedDict):
    """A collective whose larger sizes did not fit in GPU memory: the largest that did (0: none)."""

    largest: int
    free_bytes: int


@strict
class NcclFaults(TypedDict):
    """The selftest faults this rank was told to show (``probes._nccl_faults``; refused outside selftests)."""

    slow_s: float
    hang: bool
    corrupt: bool


@strict
class NetChannels(TypedDict):
    """NET connections over one plugin's device (``nccl.ncclinfo.parse_net_facts``)."""

    send: int
    recv: int
    gdr: int
    pxn: int  # sends relayed through another local GPU's NIC
    proxies: list[int]  # those GPUs' ranks


@strict
class NetFacts(TypedDict):
    """One rank's network path from its NCCL INFO log; a fact the log did not state is None (or empty)."""

    channels: dict[str, dict[str, NetChannels]]  # plugin -> device index -> its connections
    devices: dict[str, dict[str, list[str]]]  # plugin -> device index -> HCA name(s)
    gdr_hca: dict[str, bool]
    dmabuf: bool
    nvml_dev: int | None
    bus_id: str | None


@strict
class NcclFacts(TypedDict):
    """What NCCL said about itself under ``NCCL_DEBUG=INFO`` (``nccl.ncclinfo.collect_facts``); None where the
    log did not say (a line NCCL did not print is no reading)."""

    version: str | None
    network: str | None
    ranks: int | None
    nodes: int | None
    local_ranks: int | None
    mnnvl: bool | None  # the communicator line's ``MNNVL 1``/``MNNVL 0`` (NCCL 2.27+)
    nvls_available: bool | None  # "NVLS multicast support is (not) available": hardware only, not transport
    nvls_comm: bool  # an ``NVLS comm 0x... headRank`` line: NVLS buffers were set up for the communicator
    nics: list[str]
    nics_by_plugin: dict[str, list[str]]
    transports: dict[str, int]
    env: dict[str, str]
    algorithms: dict[str, dict[str, str]]  # collective -> nccl-tests size -> "RING/SIMPLE"
    net: NetFacts | None


@strict
class NcclInGroup(TypedDict):
    """A rank in a communicator: its group, the group's nodes and ranks, and its rows."""

    outcome: Literal["in_group"]
    group: int
    rail: int | None
    group_nodes: list[str]
    group_ranks: list[int]
    results: list[NcclRow]
    capped: dict[str, CappedSizes]
    free_bytes: int


@strict
class NcclNoGroup(TypedDict):
    """A rank the ``--groups`` split left out of every communicator: it only joins the barriers."""

    outcome: Literal["no_group"]


@strict
class NcclRecord(TypedDict):
    """One rank's ``nccl`` result (``probes.nccl``); ``communicator`` tells a rank in one from a rank left out."""

    backend: Literal["nccl", "gloo"]
    torch: str
    world_size: int
    groups: int
    local_rank: int
    ring: bool
    iters: int
    warmup: int
    trials: int
    faults: NcclFaults | None
    nccl_version: str | None  # None on gloo
    env: dict[str, str]  # NCCL_* of the rank's environment (none on gloo)
    communicator: Annotated[NcclInGroup | NcclNoGroup, Field(discriminator="outcome")]
    nccl: NcclFacts | None  # None: NCCL_DEBUG was not asked for (``--no-nccl-debug``) or the backend is gloo


@strict
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


@strict
class NcclTestsDevice(TypedDict):
    """One ``#  Rank  0 Group  0 Pid ... on host device 0 [0x18] NVIDIA H200`` line of nccl-tests' header."""

    rank: int
    host: str
    device: int
    bus: str
    name: str


@strict
class NcclTestsRan(TypedDict):
    """One collective's nccl-tests binary that exited: its command, exit code and table (None: not printed)."""

    outcome: Literal["ran"]
    command: list[str]
    returncode: int
    rows: list[NcclTestsRow]
    avg_busbw: float | None
    out_of_bounds: int | None
    version: str | None
    nccl: str | None
    devices: list[NcclTestsDevice]
    stderr_tail: str


@strict
class NcclTestsTimedOut(TypedDict):
    """One collective's nccl-tests binary killed at the probe's ``--timeout``."""

    outcome: Literal["timed_out"]
    command: list[str]
    error: str


#: one collective's nccl-tests binary, told apart by ``outcome``
NcclTestsRun = Annotated[NcclTestsRan | NcclTestsTimedOut, Field(discriminator="outcome")]


@strict
class NcclTestsRecord(TypedDict):
    """The ``nccl_tests`` probe's result: whether a binary was found, where it looked, a run per collective."""

    found: bool
    searched: list[str]
    runs: dict[str, NcclTestsRun]
