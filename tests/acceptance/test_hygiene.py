"""Node hygiene: /dev/shm, open-file and locked-memory limits as a job step sees them."""

from __future__ import annotations

import pytest

from gpuaccept.probes.specs import HYGIENE
from gpuaccept.verdicts.hygiene import HYGIENE_METRICS, judge_hygiene

pytestmark = [pytest.mark.acceptance, pytest.mark.hygiene]


@pytest.mark.judges(*HYGIENE_METRICS)
def test_node_limits(node, cluster, judge):
    """/dev/shm size and the open-file limit everywhere; locked memory where the SKU needs RDMA pinning."""
    judge_hygiene(HYGIENE.read(cluster.run(HYGIENE, nodes=[node]).one()), judge, node)
