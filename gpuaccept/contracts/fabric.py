"""What the fabric probes emit: InfiniBand ports from sysfs, NVLink and GPU-pair topology from NVML, the
GPUDirect RDMA path, and perftest's RDMA pairs.

TypedDicts, read off each probe's ``collect``, every one ``@strict`` (an undeclared key is refused) with every
key required and a reading not taken None (the older H200 recordings reach these types through the named edits
of ``tests/selftest/nvml_recordings.older_nvlink``).
Values the kernel writes pass on as its text (``"4: ACTIVE"``); the judges parse them (``contracts/ib.py``).
JSON keys are text: a per-link table keyed by link number arrives keyed ``"0"``, ``"1"``...
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator

# pydantic validates these where a result arrives (probes/specs.py): before Python 3.12 it needs this TypedDict
from typing_extensions import TypedDict

from gpuaccept.contracts.strict import strict

__all__ = [
    "AcsBridge",
    "BwReport",
    "DmabufReading",
    "GdrGpu",
    "GdrPath",
    "GdrPayload",
    "GdrPeermem",
    "IbHca",
    "IbPort",
    "InfinibandPayload",
    "LatReport",
    "NvlinkErrors",
    "NvlinkGpu",
    "NvlinkHca",
    "NvlinkLink",
    "NvlinkLinkData",
    "NvlinkNic",
    "NvlinkPair",
    "NvlinkPayload",
    "NvlinkState",
    "NvlinkTelemetry",
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


@strict
class NvlinkLink(TypedDict):
    """One NVLink. An active link's getters each give None, with the getter's error in ``errors``, when NVML
    refused; an inactive link's are None (not read: nothing is at the other end)."""

    link: int
    active: bool
    version: int | None
    remote_type: str | None
    remote_pci: str | None
    errors: dict[str, str]


@strict
class NvlinkErrors(TypedDict):
    """Counts since the driver loaded, summed over the active links (``_gpu.nvlink_error_counters``); None where
    a link did not answer (``unread_links`` names it) or no link is active (``source`` says so); ``per_link``
    keeps each link's counts."""

    crc_flit: int | None
    crc_data: int | None
    replay: int | None
    recovery: int | None
    ecc_data: int | None
    per_link: dict[str, dict[str, int]]
    unread_links: dict[str, list[int]]
    source: Literal["per_link", "no active link"]


@strict
class NvlinkLinkData(TypedDict):
    """One active link's data counters, KiB since the driver loaded (None: NVML gave none, ``errors`` says why)."""

    tx_kib: int | None
    rx_kib: int | None


@strict
class NvlinkTelemetry(TypedDict):
    """A GPU's NVLink counters read per link (``probes/nvlink.link_telemetry``): NVML's link count (None: not
    given) and every active link's data counters keyed by link number; ``errors`` names each value NVML did
    not give (``link_count``, ``<link>.tx_kib``, ``<link>.rx_kib``) with its return code."""

    link_count: int | None
    per_link: dict[str, NvlinkLinkData]
    errors: dict[str, str]


def _telemetry_explained(telemetry: NvlinkTelemetry) -> NvlinkTelemetry:
    """Refuses a per-link read whose None has no ``errors`` entry saying why (a zero is a count, a None is not)."""
    unexplained = [] if telemetry["link_count"] is not None or "link_count" in telemetry["errors"] else ["link_count"]
    for link, data in telemetry["per_link"].items():
        for name in ("tx_kib", "rx_kib"):
            if data[name] is None and f"{link}.{name}" not in telemetry["errors"]:
                unexplained.append(f"{link}.{name}")
    if unexplained:
        raise ValueError(f"None with no errors entry saying why: {', '.join(unexplained)}")
    return telemetry


@strict
class NvlinkState(TypedDict):
    """A GPU's links, the common speed (the slowest active link's, None when unreadable) and where it came from,
    the error counters and the per-link data counters."""

    links: list[NvlinkLink]
    active: int
    supported: int
    speed_mbps_common: int | None
    speed_mbps_per_link: dict[str, int]
    speed_source: str
    errors: NvlinkErrors
    telemetry: Annotated[NvlinkTelemetry, AfterValidator(_telemetry_explained)]


@strict
class NvlinkNic(TypedDict):
    """An HCA as seen from one GPU: PXB, PHB, NODE, SYS (as ``nvidia-smi topo -m``), or unknown."""

    name: str
    relation: str


@strict
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


@strict
class NvlinkPair(TypedDict):
    """Two GPUs: PCIe common ancestor (None, with ``pcie_error``, when NVML refused), NVML's NVLink P2P status,
    the NVLinks joining them and the label."""

    a: int
    b: int
    pcie: str | None
    pcie_error: str | None
    p2p_nvlink_status: str
    nvlinks: int
    via: Literal["NVSwitch", "direct", "PCIe"]
    label: str | None


@strict
class NvlinkHca(TypedDict):
    name: str
    numa_node: int | None
    pci: str | None


@strict
class NvlinkPayload(TypedDict):
    """A node's ``nvlink`` result (``nvml`` False, no GPU and no pair without NVML)."""

    nvml: bool
    gpus: list[NvlinkGpu]
    pairs: list[NvlinkPair]
    hcas: list[NvlinkHca]


# ---- gdr (probes/gdr.py): GPUDirect RDMA readiness


@strict
class AcsBridge(TypedDict):
    """One bridge between a GPU and its HCA: its ACS Control register (None: no ACS capability, or the config
    space could not be read, ``error`` saying why; ``error`` None when it was read)."""

    bdf: str
    acs_ctl: int | None
    error: str | None


@strict
class GdrPath(TypedDict):
    hca: str
    hca_bdf: str | None
    iommu_hca: str
    bridges: list[AcsBridge]


@strict
class GdrGpu(TypedDict):
    """One NVIDIA GPU on the PCI bus: its PCI chain, IOMMU group type and the paths to its nearest HCAs."""

    bdf: str
    chain: list[str]
    iommu: str
    shared_prefix: int
    paths: list[GdrPath]


@strict
class DmabufReading(TypedDict):
    """CUDA's DMA-BUF attribute per device (``"0000:18:00"``: 1, 0, or -1 when unreadable); ``error`` why CUDA
    was not asked or did not answer (then ``devices`` is empty), None when it answered."""

    devices: dict[str, int]
    error: str | None


#: whether each file of the RDMA stack's GPU-memory peer is there, by its path under /sys (NCCL checks the
#: first; the other two are the legacy ``nv_peer_mem``'s); the probe reads exactly these (``probes/gdr.py``)
GdrPeermem = TypedDict(
    "GdrPeermem",
    {
        "module/nvidia_peermem/version": bool,
        "kernel/mm/memory_peers/nv_mem/version": bool,
        "kernel/mm/memory_peers/nv_mem_nc/version": bool,
    },
)
strict(GdrPeermem)  # the functional form (its keys are paths) is decorated in place


@strict
class GdrPayload(TypedDict):
    """A node's ``gdr`` result (``fabric/gdr.py`` holds the rules)."""

    sysfs_root: str
    peermem: GdrPeermem
    kernel: str | None
    cmdline_iommu: list[str]
    iommu_devices: list[str]
    nvidia_open_module: bool | None
    hcas: dict[str, str | None]
    gpus: list[GdrGpu]
    cuda_dmabuf: DmabufReading
    euid: int


# ---- perftest (probes/perftest.py): RDMA bandwidth and latency per HCA pair


@strict
class BwReport(TypedDict):
    """``ib_write_bw``'s report (``fabric.perftest.parse_bw``) and its average in Gb/s."""

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


@strict
class LatReport(TypedDict):
    """``ib_write_lat``'s report in microseconds (``fabric.perftest.parse_lat``)."""

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


@strict
class PerftestEndpoint(TypedDict):
    """One HCA's side of one pair; ``bw``/``lat`` the tool's report, None when it could not be read, ``error``
    saying why (None when both were read)."""

    hca: str
    role: Literal["server", "client"]
    partner: str
    port: int
    memory: Literal["cuda", "host"]
    gpu_bus: str | None
    server_addr: str
    bw_tail: str
    bw: BwReport | None
    lat_tail: str
    lat: LatReport | None
    error: str | None
    seconds: float


@strict
class PerftestPayload(TypedDict):
    """One node's round, by ``outcome``: ``ran`` its endpoints; ``idle`` the round has no test for it;
    ``missing`` perftest's tools (or their CUDA build) are not there, ``missing`` naming them and ``hint`` how
    to install them. ``cuda_build`` is None where ``ib_write_bw`` was not asked (idle, or missing)."""

    outcome: Literal["ran", "idle", "missing"]
    plan_tests: int
    endpoints: list[PerftestEndpoint]
    missing: list[str]
    hint: str | None
    cuda_build: bool | None
