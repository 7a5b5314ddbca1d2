"""Memory bandwidth: HBM copy per GPU, pinned host<->device per GPU link (NUMA-local), GPU<->GPU for every pair.

All three come from the node's ``gpubench`` step (one process drives every GPU after one start-up; the
matmul test judges its first part): HBM copies on every GPU at once; each GPU's host link alone with the
other GPUs idle, then all at once (reported); GPU pairs in rounds of disjoint pairs, the slowest named.
"""

from __future__ import annotations

import pytest

from gpuaccept.verdicts.memory import (
    HOSTBW_METRICS,
    MEMBW_METRICS,
    P2P_METRICS,
    judge_hostbw,
    judge_membw,
    judge_p2p,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.memory]


@pytest.mark.judges(*MEMBW_METRICS, gpus="gpu")
def test_membw(node, gpubench, judge):
    """Device copy (read + write counted) per GPU above the SKU floor and within the straggler margin."""
    judge_membw(gpubench(node), judge, node)


@pytest.mark.judges(*HOSTBW_METRICS, gpus="gpu")
def test_hostbw(node, gpubench, judge):
    """Pinned H2D and D2H per GPU link alone, from its NUMA node; the PCIe link under that load at the SKU's
    gen/width; every GPU at once reported beside it."""
    judge_hostbw(gpubench(node), judge, node)


@pytest.mark.judges(*P2P_METRICS, gpus="pair")
def test_p2p(node, cluster, gpubench, judge):
    """Copy bandwidth of every ordered GPU pair above the SKU floor; the slowest pair is named."""
    gpus = cluster.require_gpus(node)
    if gpus < 2:
        pytest.skip(f"{node} declares one GPU: there is no GPU pair")
    judge_p2p(gpubench(node), judge, node)
