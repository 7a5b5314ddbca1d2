"""What this task may touch: its CUDA_VISIBLE_DEVICES, the GPUs NVML shows it, and its CPU binding.

The Slurm test launches one task per declared GPU and asserts the visible sets are disjoint and
complete. NVML is asked for the UUIDs behind ``CUDA_VISIBLE_DEVICES`` (what CUDA will use), and also
how many devices the task *can* open at all: without device cgroups every task sees all boards,
which is worth reporting even when the assignment itself is right.
"""

from __future__ import annotations

import os
from typing import Any

from gpuaccept.probes._nvml import nvml, text
from gpuaccept.probes._protocol import emit

__all__ = ["collect"]


def collect() -> dict[str, Any]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    tokens = [t.strip() for t in visible.split(",") if t.strip()] if visible else []
    lib = nvml()
    uuids: list[str] = []
    openable = 0
    if lib is not None:
        openable = lib.nvmlDeviceGetCount()
        for token in tokens:
            try:
                handle = (
                    lib.nvmlDeviceGetHandleByUUID(token)
                    if token.startswith(("GPU-", "MIG-"))
                    else lib.nvmlDeviceGetHandleByIndex(int(token))
                )
                uuids.append(text(lib.nvmlDeviceGetUUID(handle)))
            except Exception as exc:
                uuids.append(f"unresolvable {token}: {type(exc).__name__}")
    return {
        "cuda_visible_devices": visible,
        "visible_uuids": uuids,
        "nvml_devices_openable": openable,
        "cpus": sorted(os.sched_getaffinity(0)),
        "slurm_cpu_bind": os.environ.get("SLURM_CPU_BIND"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_step_id": os.environ.get("SLURM_STEP_ID"),
    }


def main() -> None:
    emit(collect(), probe="visibility")


if __name__ == "__main__":
    main()
