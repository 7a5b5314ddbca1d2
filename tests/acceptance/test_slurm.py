"""Slurm: the controller answers, the partition is up, every node runs a step, GPUs are isolated.

Each test asks the scheduler or runs the ``visibility`` probe and hands what it got to the area's
judge, ``gpuaccept/verdicts/slurm.py``."""

from __future__ import annotations

import pytest

from gpuaccept.dispatch.slurm_cli import node_info, partition_info, slurm_cmd
from gpuaccept.probes.specs import VISIBILITY
from gpuaccept.verdicts.slurm import (
    ISOLATION_METRICS,
    judge_controller,
    judge_gpu_isolation,
    judge_node_state,
    judge_partition,
    judge_step,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.slurm]


@pytest.fixture()
def slurm_only(cluster):
    if cluster.kind != "slurm":
        pytest.skip("local launcher: this run does not go through Slurm")


def test_controller_answers(slurm_only, cluster, judge):
    judge_controller(cluster.scheduler(slurm_cmd, ["scontrol", "ping"]), judge)


def test_partition_up(slurm_only, cluster, settings, judge):
    part = cluster.scheduler(partition_info, settings.partition)
    judge_partition(part.name, part.available, judge)


def test_node_usable(node, slurm_only, cluster, judge):
    info = cluster.scheduler(node_info, node)
    judge_node_state(node, info.usable, info.state, info.reason, judge)


def test_step_runs(node, cluster, judge):
    """A step lands on the node it was sent to, and its task may run on every CPU the allocation granted it."""
    record = cluster.run(VISIBILITY, nodes=[node]).one()
    judge_step(record.node, VISIBILITY.read(record), judge, node)


@pytest.mark.judges(*ISOLATION_METRICS, gpus="gpu")
def test_gpu_isolation(node, cluster, fingerprints, judge):
    """One task per declared GPU: each sees exactly its GPU, the sets are disjoint and cover the node,
    no task can open another task's GPU, and the tasks' CPU sets do not overlap."""
    gpus = cluster.require_gpus(node)
    result = cluster.run(VISIBILITY, nodes=[node], tasks_per_node=gpus, gpus_per_task=1)
    node_uuids = [d["uuid"] for d in fingerprints.get(node)["gpus"]["devices"]]
    judge_gpu_isolation({r.rank: VISIBILITY.read(r) for r in result.records}, node_uuids, judge, node)
