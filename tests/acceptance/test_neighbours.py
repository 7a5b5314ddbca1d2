"""Neighbours that don't slow each other (VMAAS03): two tenants on one node, each given half of its GPUs; what
one half does must not slow the other. One step holds every GPU of the node; the probe measures each half alone,
then both at once (``gpuaccept/probes/neighbours.py``), and ``gpuaccept/verdicts/neighbours.py`` judges each
GPU's figures together as a share of alone.
"""

from __future__ import annotations

import pytest

from gpuaccept.probes.specs import NEIGHBOURS
from gpuaccept.verdicts.neighbours import NEIGHBOUR_METRICS, judge_neighbours, neighbours_absent

pytestmark = [pytest.mark.acceptance, pytest.mark.tenant]

#: each figure's timed window, alone and together (both halves overlap for the whole window)
SECONDS = 3


@pytest.mark.judges(*NEIGHBOUR_METRICS, gpus="pair")
def test_neighbours_do_not_slow_each_other(node, cluster, judge):
    """bf16 matmul, HBM copy and pinned host-to-device copy of each GPU with the other half busy, as a share of
    the same GPU with the other half idle."""
    gpus = cluster.require_gpus(node)
    if why := neighbours_absent(gpus, node):
        pytest.skip(why)
    args = ["--seconds", SECONDS]
    result = cluster.run(NEIGHBOURS, nodes=[node], tasks_per_node=1, gpus_per_task=gpus, args=args)
    judge_neighbours(NEIGHBOURS.read(result.one()), judge, node)
