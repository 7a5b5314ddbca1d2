"""The markers gpuaccept registers: the suite's areas (also the report's epics) and the ones it adds.

Kept apart from the plugin so the report (which sorts tests by area) and the plugin read one list
without importing each other.
"""

from __future__ import annotations

__all__ = ["AREA_MARKERS", "MARKERS"]

#: ``name: description``; the areas a test belongs to, in the order a report lists them.
AREA_MARKERS: tuple[str, ...] = (
    "acceptance: the acceptance suite users run against a cluster",
    "environment: node fingerprints and cross-node consistency",
    "slurm: scheduler state, step launch and GPU isolation",
    "storage: shared filesystem",
    "hygiene: OS limits and node configuration",
    "gpu_health: NVML/sysfs health of each GPU",
    "interconnect: NVLink and InfiniBand",
    "compute: GPU compute throughput",
    "memory: GPU memory and host bandwidth",
    "nccl: collective communication",
    "training: end-to-end fine-tuning",
    "multinode: needs several nodes at once (holds them exclusively)",
)

#: Registered whatever else is installed: the plugin marks node-local tests with ``xdist_group`` and must
#: not depend on pytest-xdist being there to register it (``--strict-markers`` would stop the run).
MARKERS: tuple[str, ...] = (
    *AREA_MARKERS,
    "xdist_group(name): tests of one node run in one pytest-xdist worker (--dist loadgroup)",
    "judges(*metrics, gpus, nodes, absent, optional, scaled): the metrics with limits a test judges and when it "
    "runs (gpuaccept/thresholds/coverage.py reads it: SKU coverage, docs/thresholds.md)",
)
