"""What the fabric probes emit: InfiniBand ports from sysfs, NVLink and GPU-pair topology from NVML, the
GPUDirect RDMA path, and perftest's RDMA pairs.

TypedDicts, read off each probe's ``collect`` (conventions as ``contracts/node.py``: a key written on every
path is required, one written on some is ``NotRequired``, a reading not taken is None, extra keys pass).
Values the kernel writes pass on as its text (``"4: ACTIVE"``); the judges parse them (``contracts/ib.py``).
JSON keys are text: a per-link table keyed by link number arrives keyed ``"0"``, ``"1"``...
"""

from __future__ import annotations

from typing import Literal

# pydantic validates these where a result arrives (probes/specs.py): before Python 3.12 it needs this TypedDict
from typing_extensions import NotRequired, TypedDict

from gpuaccept.contracts.strict import strict

__all__ = [
    "AcsBridge",
    "BwReport",
    "DmabufReading",
    "GdrGpu",
    "GdrPath",
    "GdrPayload",
    "IbHca",
    "IbPort",
    "InfinibandPayload",
    "LatReport",
    "NvlinkErrors",
    "NvlinkGpu",
    "NvlinkHca",
    "NvlinkLink",
    "NvlinkNic",
    "NvlinkPair",
    "NvlinkPayload",
    "NvlinkState",
    "PerftestEndpoint",
    "PerftestPayload",
]


# ---- infiniband (probes/infiniband.py): sysfs as the kernel writes it


@strict
class IbPort(TypedDict):
    """One port's files as the kernel writes them (None: the driver writes no such file, or it could not be
    read); a counter whose file is not an integer passes on as its text."""

    state: str | None
    phys_state: str | None
    rate: str | None
    link_layer: str | None
    lid: str | None
    sm_lid: str | None
    counters: dict[str, int | str | None]  # every file under counters/, by name


@strict
class IbHca(TypedDict):
    """One HCA: its identity files (None as the port's), NUMA node (None: unreadable), PCI address, ports by number."""

    node_type: str | None
    hca_type: str | None
    fw_ver: str | None
    board_id: str | None
    node_guid: str | None
    numa_node: int | None
    pci: str | None
    ports: dict[str, IbPort]


@strict
class InfinibandPayload(TypedDict):
    """A node's HCAs (``present`` False and no HCA without ``class/infiniband``); ``sampled_at`` (wall clock)
    and ``monotonic`` bracket a counter window (``fabric/counters.py``): two readings are a window."""

    present: bool
    path: str
    hcas: dict[str, IbHca]
    sampled_at: float
    monotonic: float


# ---- nvlink (probes/nvlink.py): NVLink state, GPU pairs, GPU-NIC affinity


class NvlinkLink(TypedDict):
    """One NVLink; an active link's getters each give None (and a name in ``errors``) when NVML refused."""

    link: int
    active: bool
    version: NotRequired[int | None]
    remote_type: NotRequired[str | None]
    remote_pci: NotRequired[str | None]
    errors: NotRequired[dict[str, str]]


class NvlinkErrors(TypedDict):
    """Counts since the driver loaded, summed over the active links; None where a link did not answer
    (``unread_links`` names it); ``per_link`` each link's counts (older recordings have neither)."""

    crc_flit: NotRequired[int | None]
    crc_data: NotRequired[int | None]
    replay: NotRequired[int | None]
    recovery: NotRequired[int | None]
    ecc_data: NotRequired[int | None]
    per_link: NotRequired[dict[str, dict[str, int]]]
    unread_links: NotRequired[dict[str, list[int]]]
    source: NotRequired[str]


class NvlinkState(TypedDict):
    """A GPU's links, the common speed (the slowest active link's, None when unreadable) and where it came from."""

    links: list[NvlinkLink]
    active: int
    supported: int
    speed_mbps_common: int | None
    speed_mbps_per_link: NotRequired[dict[str, int]]
    speed_source: NotRequired[str]
    errors: NvlinkErrors


class NvlinkNic(TypedDict):
    """An HCA as seen from one GPU: PXB, PHB, NODE, SYS (as ``nvidia-smi topo -m``), or unknown."""

    name: str
    relation: str


class NvlinkGpu(TypedDict):
    """One GPU: its identity, links, NUMA node (-1 or None where the platform does not say), CPUs and NICs."""

    index: int
    uuid: str
    pci_bus_id: str
    name: str
    nvlink: NvlinkState
    numa_node: int | None
    cpu_affinity: list[int]
    nics: list[NvlinkNic]


class NvlinkPair(TypedDict):
    """Two GPUs: PCIe common ancestor, NVML's NVLink P2P status, the NVLinks joining them and the label."""

    a: int
    b: int
    pcie: str | None
    pcie_error: NotRequired[str]
    p2p_nvlink_status: str
    nvlinks: int
    via: Literal["NVSwitch", "direct", "PCIe"]
    label: str | None


class NvlinkHca(TypedDict):
    name: str
    numa_node: int | None
    pci: str | None


class NvlinkPayload(TypedDict):
    """A node's ``nvlink`` result (``nvml`` False, no GPU and no pair without NVML)."""

    nvml: bool
    gpus: list[NvlinkGpu]
    pairs: list[NvlinkPair]
    hcas: list[NvlinkHca]


# ---- gdr (probes/gdr.py): GPUDirect RDMA readiness


class AcsBridge(TypedDict):
    """One bridge between a GPU and its HCA: its ACS Control register (None: no ACS capability), or why
    the config space could not be read."""

    bdf: str
    acs_ctl: NotRequired[int | None]
    error: NotRequired[str]


class GdrPath(TypedDict):
    hca: str
    hca_bdf: str | None
    iommu_hca: str
    bridges: list[AcsBridge]


class GdrGpu(TypedDict):
    """One NVIDIA GPU on the PCI bus: its PCI chain, IOMMU group type and the paths to its nearest HCAs."""

    bdf: str
    chain: list[str]
    iommu: str
    shared_prefix: int
    paths: list[GdrPath]


class DmabufReading(TypedDict):
    """CUDA's DMA-BUF attribute per device (``"0000:18:00"``: 1, 0, or -1 when unreadable), or why not asked."""

    devices: NotRequired[dict[str, int]]
    error: NotRequired[str]


class GdrPayload(TypedDict):
    """A node's ``gdr`` result (``fabric/gdr.py`` holds the rules)."""

    sysfs_root: str
    peermem: dict[str, bool]
    kernel: str | None
    cmdline_iommu: list[str]
    iommu_devices: list[str]
    nvidia_open_module: bool | None
    hcas: dict[str, str | None]
    gpus: list[GdrGpu]
    cuda_dmabuf: DmabufReading
    euid: int


# ---- perftest (probes/perftest.py): RDMA bandwidth and latency per HCA pair


class BwReport(TypedDict):
    """``ib_write_bw``'s report (``fabric.perftest.BwResult``) and its average in Gb/s."""

    size: int
    iterations: int
    peak: float
    average: float
    msg_rate_mpps: float
    unit: str
    info: dict[str, str]
    gpu_memory: bool
    cuda_device: int | None
    average_gbps: float


class LatReport(TypedDict):
    """``ib_write_lat``'s report in microseconds (``fabric.perftest.LatResult``)."""

    size: int
    iterations: int
    t_min: float
    t_max: float
    t_typical: float
    t_avg: float
    t_stdev: float
    p99: float
    p999: float
    info: dict[str, str]


class PerftestEndpoint(TypedDict):
    """One HCA's side of one pair; ``bw``/``lat`` when the tool's report was read, ``error`` when not."""

    hca: str
    role: Literal["server", "client"]
    partner: str
    port: int
    memory: Literal["cuda", "host"]
    gpu_bus: str | None
    server_addr: str
    bw_tail: str
    bw: NotRequired[BwReport]
    lat_tail: str
    lat: NotRequired[LatReport]
    error: NotRequired[str]
    seconds: float


class PerftestPayload(TypedDict):
    """One node's round: its endpoints; ``idle`` when the round has no test for it, ``missing`` (with the
    install ``hint``) when perftest's tools or their CUDA build are not there."""

    plan_tests: int
    endpoints: list[PerftestEndpoint]
    idle: NotRequired[bool]
    missing: NotRequired[list[str]]
    hint: NotRequired[str]
    cuda_build: NotRequired[bool]
