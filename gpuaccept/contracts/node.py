"""What the node probes emit: the fingerprint, hygiene (OS limits, the clock), what a task may touch
(visibility), the shared-filesystem check and the kernel log's Xid lines.

TypedDicts, read off each probe's ``collect``. Hygiene, visibility, sharedfs and xid bite: ``@strict`` (an
undeclared key is refused), every key required, a reading not taken None. The fingerprint's types (helper
``nvlgpu``'s) still say ``NotRequired`` where a key is written on some paths only.
"""

from __future__ import annotations

from typing import Literal

# pydantic validates these where a result arrives (probes/specs.py): before Python 3.12 it needs this TypedDict
from typing_extensions import TypedDict

from gpuaccept.contracts.container import Where
from gpuaccept.contracts.fabric_state import FabricState
from gpuaccept.contracts.payloads import GpuIdentity, GpuProcess
from gpuaccept.contracts.strict import strict

__all__ = [
    "FingerprintCpu",
    "FingerprintGpu",
    "FingerprintGpus",
    "FingerprintPayload",
    "FingerprintStack",
    "HygienePayload",
    "JobProcess",
    "SharedfsPayload",
    "VisibilityPayload",
    "XidPayload",
]


# ---- fingerprint (probes/fingerprint.py): what the node is


@strict
class FingerprintCpu(TypedDict):
    """``/proc/cpuinfo`` and the affinity mask; ``granted_cpus`` is None outside a Slurm step."""

    model: str
    sockets: int
    cores: int | None
    threads: int | None
    numa_nodes: int
    usable_cpus: int
    granted_cpus: int | None


@strict
class FingerprintGpu(TypedDict):
    """One GPU NVML lists; an injected reading (``probes/_inject.py``) may leave any field None. ``vbios``
    is NVML's text, or ``"unavailable (...)"``."""

    index: int | None
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    vbios: str | None
    memory_gib: float | None


@strict
class FingerprintGpus(TypedDict):
    """The node's GPUs and driver (``count`` 0 and the rest None without NVML)."""

    count: int
    driver: str | None
    cuda_driver: str | None  # "13.0", or NVML's "unavailable (...)"
    devices: list[FingerprintGpu]


@strict
class FingerprintStack(TypedDict):
    """The training stack's versions, read without importing torch (None: not installed)."""

    python: str
    torch: str | None
    torch_cuda: str | None
    nccl: str | None
    transformers: str | None
    peft: str | None
    torch_error: str | None  # why torch is missing (None when installed)


@strict
class FingerprintPayload(TypedDict):
    """A node's ``fingerprint`` result (``probes.fingerprint.collect``)."""

    hostname: str
    node: str
    os: str
    kernel: str
    arch: str
    cpu: FingerprintCpu
    memory_gib: float | None
    gpus: FingerprintGpus
    fabric: FabricState
    stack: FingerprintStack
    ib_hcas: list[str]
    container: Where  # what the process ran in (``probes/_where.where``)
    python_executable: str


# ---- the node check's readings (nodecheck/readers.py): gpu_health's, and the Slurm job of each process


@strict
class JobProcess(GpuProcess):
    """A process on a GPU with the Slurm job its cgroup places it in (None: outside every job)."""

    job: str | None


# ---- hygiene (probes/hygiene.py): the OS limits a training job meets, and the node's clock


@strict
class HygienePayload(TypedDict):
    """A node's ``hygiene`` result; ``-1`` is an unlimited ``nofile``/``memlock_kib``; the /dev/shm figures
    are None when ``statvfs`` failed."""

    clock_unix_s: float
    dev_shm_gib: float | None
    dev_shm_free_gib: float | None
    memory_gib: float
    nofile: int
    memlock_kib: int
    swap_total_gib: float
    hugepages_total: int
    hugepage_size_kib: int
    transparent_hugepages: str


# ---- visibility (probes/visibility.py): what one task may touch


@strict
class VisibilityPayload(TypedDict):
    """One task's GPUs and CPUs. ``visible_uuids`` holds ``"unresolvable <token>: <error>"`` for a token NVML
    could not resolve; the Slurm fields are None outside a step."""

    cuda_visible_devices: str | None
    visible_uuids: list[str]
    nvml_devices: int
    own_minors: list[int]
    devices_openable: list[int]
    cpus: list[int]
    granted_cpus: int | None
    host_cpus: int | None
    slurm_cpu_bind: str | None
    slurm_job_id: str | None
    slurm_step_id: str | None


# ---- sharedfs (probes/sharedfs.py): one file written on one node, read on the others


@strict
class SharedfsPayload(TypedDict):
    """One mode's result and what is at its target afterwards, as this node reads it: ``path`` (``to`` after a
    rename). ``write`` reads its own file back (cached pages dropped first); ``sha256`` and ``bytes`` are None
    where no file is there (``read`` of a missing file, after ``remove``)."""

    mode: Literal["write", "read", "rename", "remove"]
    path: str
    to: str | None
    exists: bool
    sha256: str | None
    bytes: int | None


# ---- xid (probes/xid.py): the kernel log's Xid lines since boot


@strict
class XidPayload(TypedDict):
    """The raw ``NVRM: Xid`` / ``SXid`` lines and the window they cover (``verdicts.gpu_health`` parses them);
    ``readable`` False when no source gave kernel lines (``errors`` says why each failed)."""

    readable: bool
    source: str | None
    errors: dict[str, str]
    lines_total: int
    log_start_s: float | None
    uptime_s: float | None
    xid_lines: list[str]
    xid_lines_total: int
    gpus: list[GpuIdentity]
