"""Environment: what each node is, and whether the nodes agree with each other."""

from __future__ import annotations

import pytest

from gpuaccept.hardware.cpus import GRANTED, cpus_granted_observed
from gpuaccept.judging.fields import drift

pytestmark = [pytest.mark.acceptance, pytest.mark.environment]


def test_fingerprint(node, cluster, fingerprints, judge):
    """The node answers with a complete fingerprint and shows every GPU it declares."""
    fp = fingerprints.get(node)
    judge.expect("slurm_step_node", fp["node"], node, node=node, probe="fingerprint")
    declared, shown = cluster.gpus_on(node), fp["gpus"]["count"]
    missing = [name for name, ok in (("kernel", fp["kernel"]), ("OS", fp["os"] != "unknown")) if not ok]
    if shown:
        missing += [
            name for name, ok in (("GPU driver", fp["gpus"]["driver"]), ("torch", fp["stack"]["torch"])) if not ok
        ]
    observed = "complete" if not missing else "missing: " + ", ".join(missing)
    judge.expect("fingerprint_complete", observed, "complete", node=node, torch_error=fp["stack"].get("torch_error"))
    judge.expect("gpu_count", shown, declared, node=node, pci_bus_ids=[d["pci_bus_id"] for d in fp["gpus"]["devices"]])
    judge.info("memory_gib", fp["memory_gib"], node=node)
    judge.info("cpu_cores", fp["cpu"]["cores"], node=node)
    usable, granted, host = fp["cpu"]["usable_cpus"], fp["cpu"].get("granted_cpus"), fp["cpu"]["threads"]
    if granted is not None:  # under Slurm: the mask against the grant (">= 1 CPU" holds for any process)
        judge.expect(
            "usable_cpus_granted",
            cpus_granted_observed(usable, granted, host),
            GRANTED,
            node=node,
            usable_cpus=usable,
            granted_cpus=granted,
            host_cpus=host,
        )


@pytest.mark.judges(nodes=2)
@pytest.mark.multinode
def test_versions_consistent(cluster, fingerprints, judge):
    """Driver, CUDA, NCCL, torch, Python, kernel, OS and GPU model are the same everywhere; name the odd node."""
    nodes = cluster.nodes
    if len(nodes) < 2:
        pytest.skip("single-node allocation: nothing to compare")
    fingerprints.prefetch(nodes)  # all nodes at once, not a step time per node
    values, odd = drift({node: fingerprints.get(node) for node in nodes})
    majority = {d.field: d.majority for d in odd}
    for field, per_node in values.items():
        reference = majority.get(field, next(iter(per_node.values())))
        for node, value in per_node.items():
            judge.expect(
                "versions_consistent",
                "absent" if value is None else value,
                "absent" if reference is None else reference,
                node=node,
                field=field,
            )
