"""Every probe the suite launches, in one table: its module, the type of what it hands back, its time limit.

A test says which probe to run and on what; the limit comes from here (``Cluster`` reads it), never from the
test, so ``--probe-timeout`` reaches every step (``gpuaccept.timelimits.TimeoutRule``). A probe whose work
depends on its arguments derives its limit from them (the burn-in's seconds); the fine-tune's depends on
the SKU's floors and the model, which only the test knows, so its test derives it from the launch's plan
(``gpuaccept.training.budget``) and hands that over instead. The fixed limits below are the probe's
start-up (torch's imports and CUDA's initialisation took 4-7 s per process on H100/H200 hosts,
docs/measurements.md) plus its work, with a wide margin: a step near its limit on a healthy node is a false
failure waiting to happen, and every step's record keeps its limit, wall and their ratio, so a limit that
runs tight shows there first. Only the standard library: the table is read on the login node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuaccept.timelimits import TimeLimit

__all__ = ["SPECS", "ProbeSpec", "declared_limit"]


@dataclass(frozen=True)
class ProbeSpec:
    """One probe: ``python -m <module>``, the TypedDict of its ``data`` (in ``gpuaccept.contracts.payloads``,
    None where the judges read a plain dict), and its time limit from its arguments and the GPUs per task."""

    module: str
    payload: str | None
    limit: Callable[[Sequence[str], int], TimeLimit]


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

SPECS: dict[str, ProbeSpec] = {
    "fingerprint": ProbeSpec("gpuaccept.probes.fingerprint", None, _fixed(120, "start-up + NVML and driver reads")),
    "hygiene": ProbeSpec("gpuaccept.probes.hygiene", None, _fixed(120, _HOST_SECONDS)),
    "visibility": ProbeSpec("gpuaccept.probes.visibility", None, _fixed(120, "start-up + one CUDA context per rank")),
    "sharedfs": ProbeSpec("gpuaccept.probes.sharedfs", None, _fixed(120, "a few MB written, renamed and read back")),
    "infiniband": ProbeSpec("gpuaccept.probes.infiniband", None, _fixed(60, _HOST_SECONDS)),
    "nvlink": ProbeSpec("gpuaccept.probes.nvlink", None, _fixed(120, "NVML link reads before and after P2P copies")),
    "gdr": ProbeSpec("gpuaccept.probes.gdr", None, _fixed(120, _HOST_SECONDS)),
    "gpu_health": ProbeSpec("gpuaccept.probes.gpu_health", "HealthRecord", _fixed(120, _HOST_SECONDS)),
    "xid": ProbeSpec("gpuaccept.probes.xid", None, _fixed(120, "the kernel log read for the window")),
    "gpubench": ProbeSpec("gpuaccept.probes.gpubench", "GpuBench", _gpubench),
    "matmul": ProbeSpec("gpuaccept.probes.matmul", "MatmulFigures", _matmul),
    "nccl": ProbeSpec(
        "gpuaccept.probes.nccl",
        "NcclRecord",
        _fixed(300, "start-up + rendezvous + 5 collectives x sizes 1 MiB-8 GiB, 3 trials each"),
    ),
    "nccl_tests": ProbeSpec(
        "gpuaccept.probes.nccl_tests", "NcclTestsRecord", _fixed(300, "nccl-tests' binaries over the same sweep")
    ),
    "perftest": ProbeSpec(
        "gpuaccept.probes.perftest", None, _fixed(150, "one round of ib_write_bw/ib_read_lat pairs, side by side")
    ),
    "finetune": ProbeSpec(
        "gpuaccept.probes.finetune",
        None,
        _fixed(600, "no plan given: a launch's limit follows from its plan (gpuaccept.training.budget)"),
    ),
}


def declared_limit(probe: str, args: Sequence[str] = (), gpus: int = 0) -> TimeLimit:
    """The limit ``probe`` declares for these arguments; a probe not in the table (a selftest's own) gets
    the fine-tune's fallback, named so."""
    spec = SPECS.get(probe)
    if spec is None:
        return TimeLimit(300, f"probe {probe!r} declares no limit (not in gpuaccept.probes.specs)")
    return spec.limit(args, gpus)
