"""GPU health: what NVML says about each GPU, and the Xid faults the driver logged since boot.

Run before the benchmarks (alphabetical order puts test_compute first; select ``-m gpu_health`` to run
these alone). Every failure names the node and the GPU (index and PCI bus) an operator must pull.
"""

from __future__ import annotations

import pytest

from gpuaccept.probes.specs import GPU_HEALTH, XID
from gpuaccept.verdicts.gpu_health import HEALTH_METRICS, XID_METRICS, judge_health, judge_xid

pytestmark = [pytest.mark.acceptance, pytest.mark.gpu_health]


@pytest.mark.judges(*HEALTH_METRICS, gpus="gpu")
def test_gpu_health(node, cluster, judge):
    """Every declared GPU present; ECC on and clean; no pending/failed row remaps; no hardware clock events;
    PCIe link capable of the SKU's generation and width; cool; power limit not capped."""
    gpus = cluster.require_gpus(node)
    record = cluster.run(GPU_HEALTH, nodes=[node], tasks_per_node=1, gpus_per_task=gpus).one()
    judge_health(GPU_HEALTH.read(record), judge, node, declared_gpus=gpus)


@pytest.mark.judges(*XID_METRICS, gpus="gpu")
def test_xid(node, cluster, judge):
    """No hardware Xid (codes listed in thresholds.yaml) in the kernel log since boot; unreadable log = error."""
    gpus = cluster.require_gpus(node)
    record = cluster.run(XID, nodes=[node], tasks_per_node=1, gpus_per_task=gpus).one()
    judge_xid(XID.read(record), judge, node)
