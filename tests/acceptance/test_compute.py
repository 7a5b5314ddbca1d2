"""Compute: dense BF16 matmul throughput on every GPU of a node at once, and the optional burn-in.

The matmul figures come from the node's ``gpubench`` step (one process drives every GPU: matmul, HBM,
host links and GPU pairs after one start-up; the memory tests judge the rest of it). The burn-in is one
srun task per GPU. A GPU that someone else was using before the benchmark is an error ("GPU busy"), not
a slow GPU; the node's other GPUs are still judged and shown.
"""

from __future__ import annotations

import pytest

from gpuaccept.probes.specs import MATMUL
from gpuaccept.verdicts.bench import record_step
from gpuaccept.verdicts.compute import BURN_IN_METRICS, MATMUL_METRICS, judge_burn_in, judge_matmul

pytestmark = [pytest.mark.acceptance, pytest.mark.compute]


@pytest.mark.judges(*MATMUL_METRICS, gpus="gpu")
def test_matmul(node, gpubench, judge):
    """BF16 TFLOP/s per GPU above the SKU floor and within the straggler margin; checksums agree. The
    node's gpubench step's wall time and phases are recorded here (the memory tests read the same step)."""
    bench = gpubench(node)
    record_step(bench, judge, node)
    judge_matmul(bench, judge, node)


@pytest.mark.judges(*BURN_IN_METRICS, gpus="gpu", optional="--burn-in SECONDS")
def test_burn_in(node, cluster, judge, settings):
    """``--burn-in SECONDS`` of sustained matmul: no drop over time, no throttling, identical results."""
    gpus = cluster.require_gpus(node)
    if settings.burn_in <= 0:
        pytest.skip("burn-in not requested (--burn-in SECONDS)")
    interval = max(1.0, min(30.0, settings.burn_in / 10))
    result = cluster.run(
        MATMUL,
        nodes=[node],
        tasks_per_node=gpus,
        gpus_per_task=1,
        args=["--burn-in", settings.burn_in, "--interval", interval],
    )
    judge_burn_in([(record.gpu_label, MATMUL.read(record).root) for record in result.records], judge, node)
