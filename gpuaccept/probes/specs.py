"""Every probe the suite launches, one contract each: its module, the type of what each rank hands back, its
time limit (pytest-xdist's ``scheduler/protocol.py`` shape: the spec is the one thing both sides agree on).

A test passes the spec (``cluster.run(specs.HYGIENE, nodes=...)``), never a name; dispatch launches the spec's
module; ``Cluster`` validates every rank's ``data`` against the spec's payload type where the result arrives, so a
missing or mistyped field is an ERROR naming the probe, node, rank and field (``PayloadError``), never a
``KeyError`` in a judge. The limit comes from here (``Cluster`` reads it), never from the
test, so ``--probe-timeout`` reaches every step (``gpuaccept.timelimits.TimeoutRule``), the launcher's container
steps too (``CONTAINER_HOST_QUERY``, ``container_start``). A probe whose work
depends on its arguments derives its limit from them (the burn-in's seconds; the fine-tune's from the plan its
launch carries, ``--plan``: ``gpuaccept.training.budget.limit_of_args``), and an argument derived from the limit is
the spec's too (NCCL's ``--op-timeout``: ``gpuaccept.nccl.plan.op_timeout_args``). The fixed limits below are the
probe's start-up (torch's imports and CUDA's initialisation took 4-7 s per process on H100/H200 hosts,
docs/measurements.md) plus its work, with a wide margin: a step near its limit on a healthy node is a false
failure waiting to happen, and every step's record keeps its limit, wall and their ratio, so a limit that
runs tight shows there first. The standard library and pydantic only (the payload types are ``gpuaccept.contracts``'):
the table is read on the login node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpuaccept.contracts.bench import GpuBench, MatmulRecord
from gpuaccept.contracts.container import ContainerPayload
from gpuaccept.contracts.fabric import GdrPayload, InfinibandPayload, NvlinkPayload, PerftestPayload
from gpuaccept.contracts.finetune import FinetunePayload, FinetuneRun
from gpuaccept.contracts.fsmeta import CoherencyPayload, FsmetaPayload, MountsPayload
from gpuaccept.contracts.imex import ImexRecord
from gpuaccept.contracts.nccl_payloads import NcclRecord, NcclTestsRecord
from gpuaccept.contracts.neighbours import NeighboursRecord
from gpuaccept.contracts.node import (
    FingerprintPayload,
    HygienePayload,
    SharedfsPayload,
    VisibilityPayload,
    XidPayload,
)
from gpuaccept.contracts.payloads import HealthRecord
from gpuaccept.contracts.storage import CheckpointPayload, FioPayload
from gpuaccept.contracts.tenant import AgentRecord, ResidueRecord, SoftwareRecord, TrustRecord
from gpuaccept.nccl.plan import op_timeout_args
from gpuaccept.probes.probe_spec import PayloadError, ProbeSpec
from gpuaccept.timelimits import STALL_S, TimeLimit
from gpuaccept.training.budget import limit_of_args

__all__ = [
    "AGENT",
    "CHECKPOINT",
    "COHERENCY",
    "CONTAINER",
    "CONTAINER_HOST_QUERY",
    "CPUBENCH",
    "FAULTS",
    "FINETUNE",
    "FINGERPRINT",
    "FIO",
    "FSMETA",
    "GDR",
    "GPUBENCH",
    "GPU_HEALTH",
    "HYGIENE",
    "IMEX",
    "INFINIBAND",
    "MATMUL",
    "MOUNTS",
    "NCCL",
    "NCCL_TESTS",
    "NEIGHBOURS",
    "NVLINK",
    "PERFTEST",
    "RESIDUE",
    "SELFTEST_SPECS",
    "SHAREDFS",
    "SOFTWARE",
    "SPECS",
    "TRUST",
    "VISIBILITY",
    "XID",
    "PayloadError",
    "ProbeSpec",
    "container_start",
]

#: where every probe module lives: a spec's module is ``gpuaccept.probes.<name>``, its name what records show
PACKAGE = "gpuaccept.probes"


def _fixed(seconds: float, basis: str) -> Callable[[Sequence[str], int], TimeLimit]:
    def limit(args: Sequence[str], gpus: int) -> TimeLimit:
        return TimeLimit(seconds, basis)

    return limit


def _arg(args: Sequence[str], flag: str, default: float) -> float:
    """A numeric ``--flag value`` or ``--flag=value`` of ``args``."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return float(args[i + 1])
        if arg.startswith(flag + "="):
            return float(arg.split("=", 1)[1])
    return default


def _matmul(args: Sequence[str], gpus: int) -> TimeLimit:
    """The GEMM sizes (a few seconds each) or a burn-in of the seconds asked for, plus start-up."""
    burn = _arg(args, "--burn-in", 0.0)
    if burn:
        return TimeLimit(burn + 180, f"--burn-in {burn:g} s + 180 s (start-up, warm-up, the sizes before it)")
    return TimeLimit(300, "start-up + 3 sizes x (1 s warm-up + 20 timed batches) + the burst figure")


def _gpubench(args: Sequence[str], gpus: int) -> TimeLimit:
    """One process drives every GPU: start-up, per-GPU matmul and HBM parts, host links one GPU at a time,
    and rounds of GPU pairs (7 rounds of 4 pairs on 8 GPUs, each both ways)."""
    seconds = max(300, 120 + 25 * max(1, gpus))
    return TimeLimit(
        seconds,
        f"the larger of 300 s and 120 s (start-up, CUDA contexts) + 25 s per GPU x {max(1, gpus)} (matmul, HBM, "
        "host links, pair rounds); each run's wall and ratio are on its record",
    )


_HOST_SECONDS = "a host-side read (sysfs, NVML, /proc) that took under 10 s wherever it ran"

FINGERPRINT: ProbeSpec[FingerprintPayload] = ProbeSpec(
    f"{PACKAGE}.fingerprint", FingerprintPayload, _fixed(120, "start-up + NVML and driver reads")
)
HYGIENE: ProbeSpec[HygienePayload] = ProbeSpec(f"{PACKAGE}.hygiene", HygienePayload, _fixed(120, _HOST_SECONDS))
VISIBILITY: ProbeSpec[VisibilityPayload] = ProbeSpec(
    f"{PACKAGE}.visibility", VisibilityPayload, _fixed(120, "start-up + one CUDA context per rank")
)
SHAREDFS: ProbeSpec[SharedfsPayload] = ProbeSpec(
    f"{PACKAGE}.sharedfs", SharedfsPayload, _fixed(120, "a few MB written, renamed and read back")
)
INFINIBAND: ProbeSpec[InfinibandPayload] = ProbeSpec(
    f"{PACKAGE}.infiniband", InfinibandPayload, _fixed(60, _HOST_SECONDS)
)
NVLINK: ProbeSpec[NvlinkPayload] = ProbeSpec(
    f"{PACKAGE}.nvlink", NvlinkPayload, _fixed(120, "NVML link reads before and after P2P copies")
)
GDR: ProbeSpec[GdrPayload] = ProbeSpec(
    f"{PACKAGE}.gdr",
    GdrPayload,
    _fixed(120, _HOST_SECONDS),
    host_side="reads PCIe extended config space (ACS), which only the host's root can read past 64 bytes",
)
GPU_HEALTH: ProbeSpec[HealthRecord] = ProbeSpec(f"{PACKAGE}.gpu_health", HealthRecord, _fixed(120, _HOST_SECONDS))
XID: ProbeSpec[XidPayload] = ProbeSpec(
    f"{PACKAGE}.xid",
    XidPayload,
    _fixed(120, "the kernel log read for the window"),
    host_side="reads the kernel log (/dev/kmsg), closed to a container's user namespace",
)
GPUBENCH: ProbeSpec[GpuBench] = ProbeSpec(f"{PACKAGE}.gpubench", GpuBench, _gpubench)
MATMUL: ProbeSpec[MatmulRecord] = ProbeSpec(f"{PACKAGE}.matmul", MatmulRecord, _matmul)
NCCL: ProbeSpec[NcclRecord] = ProbeSpec(
    f"{PACKAGE}.nccl",
    NcclRecord,
    _fixed(300, "start-up + rendezvous + 5 collectives x sizes 1 MiB-8 GiB, 3 trials each"),
    derived_args=op_timeout_args,
)
NCCL_TESTS: ProbeSpec[NcclTestsRecord] = ProbeSpec(
    f"{PACKAGE}.nccl_tests", NcclTestsRecord, _fixed(300, "nccl-tests' binaries over the same sweep")
)
PERFTEST: ProbeSpec[PerftestPayload] = ProbeSpec(
    f"{PACKAGE}.perftest",
    PerftestPayload,
    _fixed(150, "one round of ib_write_bw/ib_read_lat pairs, side by side"),
    host_side="runs scontrol and the host's perftest tools (ib_write_bw) against the HCAs",
)
FINETUNE: ProbeSpec[FinetunePayload] = ProbeSpec(
    f"{PACKAGE}.finetune",
    FinetunePayload,
    limit_of_args,
    stage=FinetuneRun,
)


# ---- storage: each limit is the probe's work at a slow filesystem plus the stall limit (timelimits.STALL_S), so a
# ---- call that stops answering is named by the probe itself, inside its step's limit


def _fio(args: Sequence[str], gpus: int) -> TimeLimit:
    """fio's runtime cap (``--max-s``: a slower phase stops there and is judged on what it moved) plus the stall
    limit (``--stall-s``: an I/O that stops answering is named), plus start-up."""
    cap, stall = _arg(args, "--max-s", 60.0), _arg(args, "--stall-limit", STALL_S)
    return TimeLimit(cap + stall + 60, f"fio's runtime cap {cap:g} s + the stall limit {stall:g} s + 60 s start-up")


def _fsmeta(args: Sequence[str], gpus: int) -> TimeLimit:
    files, large, stall = _arg(args, "--files", 1000), _arg(args, "--large", 1000), _arg(args, "--stall-limit", STALL_S)
    ops = 6 * files + 3 * large
    return TimeLimit(
        60 + ops / 100 + 2 * stall,
        f"60 s start-up and barriers + {ops:g} metadata calls at 100/s per rank (a slow shared filesystem) "
        f"+ 2 x the {stall:g} s stall limit (a call or barrier reported stalled, then the clean-up)",
    )


def _coherency(args: Sequence[str], gpus: int) -> TimeLimit:
    rounds, stall = _arg(args, "--rounds", 5), _arg(args, "--stall-limit", STALL_S)
    wait = _arg(args, "--wait", stall)
    return TimeLimit(
        60 + 2 * rounds + 2 * wait + stall,
        f"60 s start-up + {rounds:g} ping-pong rounds (ms each on a healthy mount, 2 s allowed) + two waits for "
        f"the other rank of {wait:g} s (hello; one that runs out) + the {stall:g} s stall limit",
    )


def _mounts(args: Sequence[str], gpus: int) -> TimeLimit:
    paths = max(1, sum(a == "--path" or a.startswith("--path=") for a in args))
    stall = _arg(args, "--stall-limit", STALL_S)
    return TimeLimit(
        60 + stall + 10 * paths,
        f"60 s start-up + 10 s per declared path x {paths} (stat, statvfs, a 4 KiB fsynced write) + the {stall:g} s "
        "stall limit (after one path stalls the rest are not looked at)",
    )


def _checkpoint(args: Sequence[str], gpus: int) -> TimeLimit:
    mib, stall = _arg(args, "--mib", 2048), _arg(args, "--stall-limit", STALL_S)
    moved = mib * 1.1 / 1024  # GiB: the weights and the adapter with its optimizer state
    return TimeLimit(
        90 + moved / 0.1 + stall,
        f"90 s start-up (torch, safetensors, random weights drawn) + {moved:.2f} GiB at 0.1 GiB/s (a filesystem at a "
        f"twentieth of the SuperPOD 'good' write) + the {stall:g} s stall limit",
    )


FIO: ProbeSpec[FioPayload] = ProbeSpec(f"{PACKAGE}.fio", FioPayload, _fio)
CHECKPOINT: ProbeSpec[CheckpointPayload] = ProbeSpec(f"{PACKAGE}.checkpoint", CheckpointPayload, _checkpoint)
FSMETA: ProbeSpec[FsmetaPayload] = ProbeSpec(f"{PACKAGE}.fsmeta", FsmetaPayload, _fsmeta)
COHERENCY: ProbeSpec[CoherencyPayload] = ProbeSpec(f"{PACKAGE}.coherency", CoherencyPayload, _coherency)
MOUNTS: ProbeSpec[MountsPayload] = ProbeSpec(f"{PACKAGE}.mounts", MountsPayload, _mounts)

# ---- tenant safety


def _neighbours(args: Sequence[str], gpus: int) -> TimeLimit:
    """Three phases one after another (half A alone, half B alone, both at once), each a child process per half
    that the probe itself stops at ``probes/neighbours.phase_limit`` (start-up, a barrier wait, the windows)."""
    seconds = _arg(args, "--seconds", 3.0)
    phase = 60 + 60 + 3 * (seconds + 5)
    return TimeLimit(
        3 * phase + 30,
        f"3 phases (half A alone, half B alone, both at once) x ({phase:g} s: 60 s start-up of torch and CUDA + 60 s "
        f"the longest wait for the other half + 3 figures x ({seconds:g} s window + 1 s warm-up + 4 s buffers)) "
        "+ 30 s the parent's start-up",
    )


NEIGHBOURS: ProbeSpec[NeighboursRecord] = ProbeSpec(f"{PACKAGE}.neighbours", NeighboursRecord, _neighbours)


RESIDUE: ProbeSpec[ResidueRecord] = ProbeSpec(
    f"{PACKAGE}.residue",
    ResidueRecord,
    _fixed(
        300,
        "start-up + per GPU one after another: allocate its free memory, fill or scan it on the GPU (one H100 80GB "
        "HBM3: fill 0.13 s, scan 1.2-1.5 s of 84 GB, the whole process 6.4-7.7 s; docs/measurements.md)",
    ),
)
TRUST: ProbeSpec[TrustRecord] = ProbeSpec(f"{PACKAGE}.trust", TrustRecord, _fixed(60, _HOST_SECONDS))
AGENT: ProbeSpec[AgentRecord] = ProbeSpec(
    f"{PACKAGE}.agent",
    AgentRecord,
    _fixed(120, "a /proc scan, each declared URL at most 5 s, dcgmi/nv-hostengine --version at most 10 s each"),
)


def _imex(args: Sequence[str], gpus: int) -> TimeLimit:
    """The settle window asked for, then two nvidia-imex-ctl calls (-N -H, then -N) of at most 20 s each."""
    settle = _arg(args, "--settle-s", 0.0)
    return TimeLimit(
        settle + 90, f"--settle-s {settle:g} s + 90 s (start-up, two nvidia-imex-ctl calls of 20 s at most)"
    )


IMEX: ProbeSpec[ImexRecord] = ProbeSpec(f"{PACKAGE}.imex", ImexRecord, _imex)
SOFTWARE: ProbeSpec[SoftwareRecord] = ProbeSpec(
    f"{PACKAGE}.software",
    SoftwareRecord,
    _fixed(120, "NVML reads, os-release, three tool --version calls at most 10 s each"),
)

CONTAINER: ProbeSpec[ContainerPayload] = ProbeSpec(
    f"{PACKAGE}.container",
    ContainerPayload,
    _fixed(300, "an image bundle on a shared path: the runtime's start + python3 importing gpuaccept"),
)

#: every spec by its name (what a selftest's inner suite or an operator's string names)
SPECS: dict[str, ProbeSpec[Any]] = {
    spec.name: spec
    for spec in (
        FINGERPRINT,
        HYGIENE,
        VISIBILITY,
        SHAREDFS,
        INFINIBAND,
        NVLINK,
        GDR,
        GPU_HEALTH,
        XID,
        GPUBENCH,
        MATMUL,
        NCCL,
        NCCL_TESTS,
        PERFTEST,
        FINETUNE,
        FIO,
        CHECKPOINT,
        FSMETA,
        COHERENCY,
        MOUNTS,
        RESIDUE,
        TRUST,
        AGENT,
        SOFTWARE,
        NEIGHBOURS,
        IMEX,
        CONTAINER,
    )
}

# ---- the selftests' own probes: launched only by tests/selftest (a failure on demand, a CPU figure), never by
# ---- the product; their ranks' data crosses untyped, as the selftests write it

FAULTS: ProbeSpec[None] = ProbeSpec(
    f"{PACKAGE}._faults",
    None,
    _fixed(300, "a selftest's fault on demand: the slowest (slow, hang) waits for its limit"),
)
CPUBENCH: ProbeSpec[None] = ProbeSpec(
    f"{PACKAGE}._cpubench", None, _fixed(300, "a selftest's CPU memory copy of a few MiB, a few repeats")
)
#: the selftests' own probes by name: not in ``SPECS``, which holds what the product launches
SELFTEST_SPECS: dict[str, ProbeSpec[None]] = {spec.name: spec for spec in (FAULTS, CPUBENCH)}

# ---- the launcher's own steps before the first test (``dispatch/slurm.start_container``): no test asks for them,
# ---- but their limits live here with every other step's, so ``--probe-timeout`` reaches them too

#: the host-side look at every node (the image's paths, runc/crun, the host's Python): a shell line under srun
CONTAINER_HOST_QUERY = TimeLimit(120, "one srun step of a shell line per node: stat of the image's paths, `command -v`")


def container_start(local: bool) -> TimeLimit:
    """The image's first start on every node, the ``container`` probe inside it: a bundle on a shared path
    starts in seconds; a registry image is pulled and squashed once per node on first use (tens of GB)."""
    if local:
        return CONTAINER.limit((), 0)
    return TimeLimit(1800, "a registry image pulled and squashed once per node on first use: tens of GB take minutes")
