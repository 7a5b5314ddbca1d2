"""Memory bandwidth: HBM copy per GPU, pinned host<->device per GPU (NUMA-local), GPU<->GPU for every pair.

HBM and host bandwidth run one srun task per GPU, all GPUs at once; P2P runs one task that drives
every GPU of the node, pair after pair, and names the slowest pair.
"""

from __future__ import annotations

import pytest

from gpuaccept.hardware.perf import judge_hostbw, judge_membw, judge_p2p, p2p_record

pytestmark = [pytest.mark.acceptance, pytest.mark.memory]


def test_membw(node, cluster, judge):
    """Device copy (read + write counted) per GPU above the SKU floor and within the straggler margin."""
    gpus = cluster.require_gpus(node)
    result = cluster.run("membw", nodes=[node], tasks_per_node=gpus, gpus_per_task=1, timeout_s=180)
    judge_membw(result.records, judge, node)


def test_hostbw(node, cluster, judge):
    """Pinned H2D and D2H per GPU from its NUMA node; the PCIe link under that load at the SKU's gen/width."""
    gpus = cluster.require_gpus(node)
    result = cluster.run("hostbw", nodes=[node], tasks_per_node=gpus, gpus_per_task=1, timeout_s=180)
    judge_hostbw(result.records, judge, node)


def test_p2p(node, cluster, judge):
    """Copy bandwidth of every ordered GPU pair above the SKU floor; the slowest pair is named."""
    gpus = cluster.require_gpus(node)
    if gpus < 2:
        pytest.skip(f"{node} declares one GPU: there is no GPU pair")
    judge_p2p(p2p_record(cluster, node), judge, node)
