"""What the node probes emit: the fingerprint, hygiene (OS limits, the clock), what a task may touch
(visibility), the shared-filesystem check and the kernel log's Xid lines.

TypedDicts, read off each probe's ``collect``: a key the probe always writes is required, one it writes only
on some paths is ``NotRequired``, and a reading it could not take is None, never a default. Keys a probe
adds later pass (pydantic ignores a TypedDict's extra keys), so a new reading needs no change here until a
judge reads it.
"""

from __future__ import annotations

from typing import Literal

# pydantic validates these where a result arrives (probes/specs.py): before Python 3.12 it needs this TypedDict
from typing_extensions import NotRequired, TypedDict

from gpuaccept.contracts.fabric_state import FabricState
from gpuaccept.contracts.payloads import GpuIdentity
from gpuaccept.contracts.strict import strict

__all__ = [
    "FingerprintCpu",
    "FingerprintGpu",
    "FingerprintGpus",
    "FingerprintPayload",
    "FingerprintStack",
    "HygienePayload",
    "SharedfsPayload",
    "VisibilityPayload",
    "WhereInfo",
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
class WhereInfo(TypedDict):
    """What the process ran in (``probes/_where.where``): the image's marker, OS, runtime, Python."""

    image: str | None
    os: str | None
    runtime: str | None
    python: str


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
    container: WhereInfo
    python_executable: str


# ---- hygiene (probes/hygiene.py): the OS limits a training job meets, and the node's clock


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


class SharedfsPayload(TypedDict):
    """One mode's result: ``write`` and ``read`` give the SHA-256 and size of what the node read back (None
    when ``read`` found no file), ``rename`` the new name, ``remove`` nothing more."""

    mode: Literal["write", "read", "rename", "remove"]
    path: str
    sha256: NotRequired[str | None]
    bytes: NotRequired[int | None]
    exists: NotRequired[bool]
    read_back: NotRequired[bool]
    to: NotRequired[str]


# ---- xid (probes/xid.py): the kernel log's Xid lines since boot


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
