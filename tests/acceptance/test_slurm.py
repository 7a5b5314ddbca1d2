"""Slurm: the controller answers, the partition is up, every node runs a step, GPUs are isolated."""

from __future__ import annotations

import itertools

import pytest

from gpuaccept.dispatch.slurm_cli import node_info, partition_info, slurm_cmd
from gpuaccept.errors import MeasurementError
from gpuaccept.hardware.cpus import GRANTED, cpus_granted_observed

pytestmark = [pytest.mark.acceptance, pytest.mark.slurm]


@pytest.fixture()
def slurm_only(cluster):
    if cluster.kind != "slurm":
        pytest.skip("local launcher: this run does not go through Slurm")


def test_controller_answers(slurm_only, cluster, judge):
    out = cluster.scheduler(slurm_cmd, ["scontrol", "ping"])
    controller = out.split("Slurmctld(primary) at ")[-1].split()[0] if "Slurmctld(primary) at " in out else "slurmctld"
    judge.expect("slurm_controller_ping", "UP" if "UP" in out else out.strip(), "UP", node=controller)


def test_partition_up(slurm_only, cluster, settings, judge):
    part = cluster.scheduler(partition_info, settings.partition)
    judge.expect("slurm_partition_state", part.available, "up", node=part.name, partition=part.name)


def test_node_usable(node, slurm_only, cluster, judge):
    info = cluster.scheduler(node_info, node)
    observed = "usable" if info.usable else f"{info.state}" + (f" (reason: {info.reason})" if info.reason else "")
    judge.expect("slurm_node_state", observed, "usable", node=node, state=info.state)


def test_step_runs(node, cluster, judge):
    """A step lands on the node it was sent to, and its task may run on every CPU the allocation granted it."""
    record = cluster.run("visibility", nodes=[node]).one()
    judge.expect("slurm_step_node", record.node, node, node=node)
    usable, granted, host = len(record.data["cpus"]), record.data.get("granted_cpus"), record.data.get("host_cpus")
    if granted is not None:  # under Slurm: the mask against the grant (">= 1 CPU" holds for any process)
        judge.expect(
            "usable_cpus_granted",
            cpus_granted_observed(usable, granted, host),
            GRANTED,
            node=node,
            usable_cpus=usable,
            granted_cpus=granted,
            host_cpus=host,
            cpu_bind=record.data["slurm_cpu_bind"],
        )


@pytest.mark.judges("gpu_foreign_devices_openable", "task_cpu_overlap_pairs", gpus="gpu")
def test_gpu_isolation(node, cluster, fingerprints, judge):
    """One task per declared GPU: each sees exactly its GPU, the sets are disjoint and cover the node,
    no task can open another task's GPU, and the tasks' CPU sets do not overlap."""
    gpus = cluster.require_gpus(node)
    result = cluster.run("visibility", nodes=[node], tasks_per_node=gpus, gpus_per_task=1)
    node_uuids = {d["uuid"] for d in fingerprints.get(node)["gpus"]["devices"]}
    holders: dict[str, list[int]] = {}
    for record in result.records:
        for uuid in record.data["visible_uuids"]:
            holders.setdefault(uuid, []).append(record.rank)
    for record in result.records:
        where = {"node": node, "rank": record.rank}
        uuids = record.data["visible_uuids"]
        judge.expect(
            "gpu_task_visible_gpus", len(uuids), 1, **where, cuda_visible_devices=record.data["cuda_visible_devices"]
        )
        others = sorted({r for uuid in uuids for r in holders[uuid] if r != record.rank})
        judge.expect("gpu_task_shares_gpu", ", ".join(f"rank {r}" for r in others) or "none", "none", **where)
        openable = record.data.get("devices_openable")
        if openable is None:
            raise MeasurementError(f"{node} rank {record.rank}: the probe could not list the device files it can open")
        foreign = sorted(set(openable) - set(record.data.get("own_minors") or []))
        judge.check("gpu_foreign_devices_openable", len(foreign), **where, foreign=[f"/dev/nvidia{m}" for m in foreign])
    judge.expect(
        "gpu_unassigned", len(node_uuids - set(holders)), 0, node=node, missing=sorted(node_uuids - set(holders))
    )
    cpus = {r.rank: set(r.data["cpus"]) for r in result.records}
    overlapping = [(a, b) for a, b in itertools.combinations(sorted(cpus), 2) if cpus[a] & cpus[b]]
    judge.check(
        "task_cpu_overlap_pairs",
        len(overlapping),
        node=node,
        pairs=[f"ranks {a}+{b}" for a, b in overlapping],
        binding={rank: f"{min(c)}-{max(c)} ({len(c)} cpus)" if c else "none" for rank, c in cpus.items()},
        cpu_bind=result.records[0].data["slurm_cpu_bind"],
    )
