"""The markers gpuaccept registers, and the one table of the suite's areas.

An area is a category marker (``pytest.mark.nccl``), what it covers (Allure's feature), the title the
report files it under (Allure's epic, a column of the summary page's matrix) and its severity. Kept
apart from the plugin so the plugin (which registers the markers), the Allure labels and the summary
page read one table without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["AREAS", "MARKERS", "Area", "area_named"]

Severity = Literal["blocker", "critical", "normal"]


@dataclass(frozen=True)
class Area:
    """One area of the suite: its marker, what it covers, the report's title for it, its severity.

    Severity: *blocker*, nothing can run on the node (no scheduler, a broken GPU); *critical*, jobs
    run but are wrong or slow (drift, links, FLOPs, bandwidth, collectives, training); *normal*, a
    misconfiguration that bites some workloads (limits, shared filesystem).
    """

    marker: str
    covers: str
    title: str
    severity: Severity

    @property
    def line(self) -> str:
        """``nccl: collective communication``: how pytest registers (and ``--markers`` lists) it."""
        return f"{self.marker}: {self.covers}"


#: In the order the report lists them (the summary's matrix columns follow the titles' first appearance).
AREAS: tuple[Area, ...] = (
    Area("environment", "node fingerprints and cross-node consistency", "Environment", "critical"),
    Area("slurm", "scheduler state, step launch and GPU isolation", "Environment", "blocker"),
    Area(
        "storage",
        "declared filesystems: bytes, throughput, metadata, coherency, mounts, checkpoints",
        "Storage",
        "critical",
    ),
    Area(
        "tenant",
        "what the next tenant inherits: GPU memory, vulnerable software, root of trust, agents",
        "Tenant safety",
        "critical",
    ),
    Area("hygiene", "OS limits and node configuration", "Environment", "normal"),
    Area("gpu_health", "NVML/sysfs health of each GPU", "GPU health", "blocker"),
    Area("interconnect", "NVLink and InfiniBand", "Interconnect", "critical"),
    Area("compute", "GPU compute throughput", "Compute", "critical"),
    Area("memory", "GPU memory and host bandwidth", "Memory", "critical"),
    Area("nccl", "collective communication", "NCCL", "critical"),
    Area("training", "end-to-end fine-tuning", "Training", "critical"),
)
_BY_MARKER = {area.marker: area for area in AREAS}


def area_named(marker: str) -> Area | None:
    """The area of a category marker (None for a marker that is not one: ``acceptance``, a site's own)."""
    return _BY_MARKER.get(marker)


#: Registered whatever else is installed: the plugin marks node-local tests with ``xdist_group`` and must
#: not depend on pytest-xdist being there to register it (``--strict-markers`` would stop the run).
MARKERS: tuple[str, ...] = (
    "acceptance: the acceptance suite users run against a cluster",
    *(area.line for area in AREAS),
    "multinode: needs several nodes at once (holds them exclusively)",
    "xdist_group(name): tests of one node run in one pytest-xdist worker (--dist loadgroup)",
    "judges(*metrics, gpus, nodes, absent, optional, scaled): the metrics with limits a test judges and when it "
    "runs (the SKU coverage selftest reads it for gpuaccept/thresholds/coverage.py, docs/thresholds.md)",
)
