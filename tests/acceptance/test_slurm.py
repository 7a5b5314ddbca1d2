"""Slurm: the controller answers, the partition is up, every node runs a step, GPUs are isolated."""

from __future__ import annotations

import pytest

from gpuaccept.dispatch.slurm_cli import node_info, partition_info, slurm_cmd

pytestmark = [pytest.mark.acceptance, pytest.mark.slurm]


@pytest.fixture()
def slurm_only(cluster):
    if cluster.kind != "slurm":
        pytest.skip("local launcher: this run does not go through Slurm")


def test_controller_answers(slurm_only):
    out = slurm_cmd(["scontrol", "ping"])
    assert "UP" in out, f"scontrol ping: {out.strip()}"


def test_partition_up(slurm_only, settings):
    part = partition_info(settings.partition)
    assert part.available == "up", f"partition {part.name} is {part.available}"


def test_node_usable(node, slurm_only):
    info = node_info(node)
    assert info.usable, f"{node}: state {info.state}" + (f", reason: {info.reason}" if info.reason else "")


def test_step_runs(node, cluster, limits):
    """A step lands on the node it was sent to; its CPU binding is recorded."""
    record = cluster.run("visibility", nodes=[node]).one()
    assert record.node == node, f"step sent to {node} ran on {record.node}"
    assert record.data["cpus"], f"{node}: the task may run on no CPU at all"
    limits.report("usable_cpus", len(record.data["cpus"]), node=node, cpu_bind=record.data["slurm_cpu_bind"])
    limits.verify()


def test_gpu_isolation(node, cluster, fingerprints):
    """One task per declared GPU: each sees exactly one GPU, the sets are disjoint and cover the node."""
    gpus = cluster.require_gpus(node)
    result = cluster.run("visibility", nodes=[node], tasks_per_node=gpus, gpus_per_task=1)
    node_uuids = {d["uuid"] for d in fingerprints.get(node)["gpus"]["devices"]}
    seen: dict[str, int] = {}
    problems = []
    for record in result.records:
        uuids = record.data["visible_uuids"]
        if len(uuids) != 1:
            problems.append(f"rank {record.rank} sees {len(uuids)} GPUs ({record.data['cuda_visible_devices']!r})")
        for uuid in uuids:
            if uuid in seen:
                problems.append(f"ranks {seen[uuid]} and {record.rank} share {uuid}")
            seen[uuid] = record.rank
    missing = node_uuids - set(seen)
    if missing:
        problems.append(f"GPUs given to no task: {', '.join(sorted(missing))}")
    binding = {
        r.rank: (r.data["cpus"][:1] + r.data["cpus"][-1:], r.data["nvml_devices_openable"]) for r in result.records
    }
    print(f"{node}: CPU binding (first,last cpu) and NVML-openable devices per rank: {binding}")
    assert not problems, f"{node}: GPU isolation broken: " + "; ".join(problems)
