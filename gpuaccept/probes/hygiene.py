"""Node hygiene: the OS limits that break training jobs long before any GPU does.

/dev/shm too small (or filled by files earlier jobs left) kills DataLoader workers and NCCL's
shared-memory transport; a low ``ulimit -n`` fails large NCCL jobs; a capped ``ulimit -l`` (locked
memory) breaks RDMA registration. Measured
inside the step, because under srun the job's limits (propagated from the submit host by default) are
what a training job really gets. The node's wall clock (``clock_unix_s``) is read here too: a test
brackets the step with the login host's clock to bound how far the node's clock is off.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Any

from gpuaccept.probes import _inject
from gpuaccept.probes._protocol import emit

__all__ = ["collect"]

UNLIMITED = -1


def _limit(which: int) -> int:
    soft, _hard = resource.getrlimit(which)
    return UNLIMITED if soft == resource.RLIM_INFINITY else int(soft)


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                out[key] = int(parts[0])
    except OSError:
        pass
    return out


def collect(shm: str = "/dev/shm") -> dict[str, Any]:
    try:
        stat = os.statvfs(shm)
        shm_gib: float | None = round(stat.f_blocks * stat.f_frsize / 2**30, 3)
        shm_free_gib: float | None = round(stat.f_bavail * stat.f_frsize / 2**30, 3)
    except OSError:
        shm_gib = shm_free_gib = None
    info = _meminfo()
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    data: dict[str, Any] = {
        "clock_unix_s": time.time() + _inject.clock_offset_s(),  # the offset: test hook, 0 unless injected
        "dev_shm_gib": shm_gib,
        "dev_shm_free_gib": shm_free_gib,
        "memory_gib": round(info.get("MemTotal", 0) / 2**20, 3),
        "nofile": _limit(resource.RLIMIT_NOFILE),
        "memlock_kib": (lambda v: v if v == UNLIMITED else v // 1024)(_limit(resource.RLIMIT_MEMLOCK)),
        "swap_total_gib": round(info.get("SwapTotal", 0) / 2**20, 3),
        "hugepages_total": info.get("HugePages_Total", 0),
        "hugepage_size_kib": info.get("Hugepagesize", 0),
        "transparent_hugepages": thp.read_text().strip() if thp.exists() else "unavailable",
    }
    data.update(_inject.values("hygiene"))  # test hook, off by default (probes/_inject.py)
    return data


def main() -> None:
    emit(collect(), probe="hygiene")


if __name__ == "__main__":
    main()
