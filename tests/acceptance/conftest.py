"""What several acceptance tests measure together: the node's ``gpubench`` step.

One process drives every GPU of the node (matmul, HBM copies, host links, GPU pairs with their NVLink
counters) after one start-up; ``test_matmul``, ``test_membw``, ``test_hostbw``, ``test_p2p`` and
``test_nvlink_errors_under_load`` judge its parts. ``cluster.run_shared`` runs it once per session
and hands later callers the same result (or error), with the command in their record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from gpuaccept.contracts.bench import GpuBenchError, GpuBenchRan
from gpuaccept.fixtures import cluster, fingerprints, judge, settings, thresholds  # noqa: F401  (the tests' names)
from gpuaccept.probes.specs import GPUBENCH

if TYPE_CHECKING:
    from gpuaccept.state import SessionState


@pytest.fixture
def gpubench(gpuaccept_state: SessionState) -> Callable[[str], GpuBenchRan | GpuBenchError]:
    """``gpubench(node)``: the node's shared gpubench result, as its type (skips a node that declares no GPU). The
    step's wall is the dispatcher's, on the step's record."""

    def run(node: str) -> GpuBenchRan | GpuBenchError:
        gpus = gpuaccept_state.cluster.require_gpus(node)
        result = gpuaccept_state.cluster.run_shared(GPUBENCH, nodes=[node], tasks_per_node=1, gpus_per_task=gpus)
        return GPUBENCH.read(result.one()).root

    return run
