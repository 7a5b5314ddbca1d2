"""Environment: what each node is, and whether the nodes agree with each other."""

from __future__ import annotations

import pytest

from gpuaccept.verdicts.environment import judge_fingerprint, judge_versions

pytestmark = [pytest.mark.acceptance, pytest.mark.environment]


def test_fingerprint(node, cluster, fingerprints, judge):
    """The node answers with a complete fingerprint (every declared GPU present is test_gpu_health's check)."""
    judge_fingerprint(fingerprints.get(node), judge, node)


@pytest.mark.judges(nodes=2)
@pytest.mark.multinode
def test_versions_consistent(cluster, fingerprints, judge):
    """Driver, CUDA, NCCL, torch, Python, kernel, OS and GPU model are the same everywhere; name the odd node."""
    nodes = cluster.nodes
    if len(nodes) < 2:
        pytest.skip("single-node allocation: nothing to compare")
    fingerprints.prefetch(nodes)  # all nodes at once, not a step time per node
    judge_versions({node: fingerprints.get(node) for node in nodes}, judge)
