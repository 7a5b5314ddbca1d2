"""Node state a job inherits: free space in /dev/shm, and a wall clock that agrees with the login host's.

/dev/shm can be large enough (``test_node_limits``) and still full of files earlier jobs left behind:
NCCL's shared-memory transport and DataLoader workers then fail on that node only. A node whose clock
is off breaks time-checked credentials (MUNGE, Kerberos) and every cross-node log timeline. Both are
judged in ``gpuaccept/verdicts/hygiene.py``.
"""

from __future__ import annotations

import time

import pytest

from gpuaccept.errors import MeasurementError
from gpuaccept.probes.specs import HYGIENE
from gpuaccept.verdicts.hygiene import judge_dev_shm_free, judge_node_clocks

pytestmark = [pytest.mark.acceptance, pytest.mark.hygiene]


@pytest.mark.judges("dev_shm_free_gib")
def test_dev_shm_free(node, cluster, judge):
    """Free space in /dev/shm inside a job step, not only its size."""
    judge_dev_shm_free(HYGIENE.read(cluster.run(HYGIENE, nodes=[node]).one()), judge, node)


@pytest.mark.judges("node_clock_offset_s")
def test_node_clocks(cluster, judge):
    """Every node's wall clock within the tolerance of this host's: read in one step on all nodes at once,
    bracketed by this host's clock, so each node is judged and named alone."""
    before = time.time()
    results = cluster.run_each(HYGIENE, cluster.nodes)
    after = time.time()
    errors = []
    readings = {}
    for node, result in results.items():
        if isinstance(result, MeasurementError):
            if node not in cluster.lost:  # lost during the step: named by its own next case, not here
                errors.append(str(result))
            continue
        readings[node] = HYGIENE.read(result.one())["clock_unix_s"]
    judge_node_clocks(readings, before, after, judge)
    if errors:
        raise MeasurementError("; ".join(errors))
