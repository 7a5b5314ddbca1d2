"""Fleet behaviour on the loopback cluster: draining failed nodes, xdist across nodes, containers."""

from __future__ import annotations

import pytest

from gpuaccept.dispatch.allocation import Allocation
from gpuaccept.dispatch.slurm import SlurmLauncher
from gpuaccept.dispatch.step import Step

from .conftest import run_inner, write_suite

# node2's /dev/shm is judged against a site limit it cannot meet: a real threshold miss on one node
DRAIN_SUITE = """
def test_shm(node, cluster, limits):
    data = cluster.run("hygiene", nodes=[node]).one().data
    limits.check("dev_shm_gib", data["dev_shm_gib"] if node == "node1" else data["dev_shm_gib"] / 1e6, node=node)
    limits.verify()
"""


@pytest.mark.parametrize("mode", ["print", "yes"])
def test_drain_on_fail(tmp_path, dev_cluster, mode):
    run = run_inner(
        write_suite(tmp_path, DRAIN_SUITE),
        "--launcher",
        "slurm",
        "--nodes",
        "2",
        "--drain-on-fail",
        mode,
        env=dev_cluster.env,
    )
    try:
        assert run.verdicts() == {"test_shm[node1]": "passed", "test_shm[node2]": "failed"}, run.output[-3000:]
        state = dev_cluster.cmd("scontrol", "show", "node", "node2")
        expected = "reason=gpuaccept: test_shm dev_shm_gib"
        if mode == "print":
            line = f"would drain (use --drain-on-fail yes): scontrol update nodename=node2 state=drain '{expected}'"
            assert line in run.output
            assert "DRAIN" not in state
        else:
            assert "drained: scontrol update nodename=node2" in run.output, run.output[-2000:]
            assert "DRAIN" in state and "Reason=gpuaccept: test_shm dev_shm_gib" in state, state
        assert "node1" not in run.output.split("gpuaccept verdict per node")[1].split("drain")[0].replace(
            "node1                PASSED", ""
        )
    finally:
        dev_cluster.cmd("scontrol", "update", "nodename=node2", "state=resume", check=False)
    assert "DRAIN" not in dev_cluster.cmd("scontrol", "show", "node", "node2")


XDIST_SUITE = """
import time
def test_a(node, cluster):
    assert cluster.run("visibility", nodes=[node]).one().node == node
def test_b(node, cluster):
    assert cluster.run("hygiene", nodes=[node]).one().node == node
"""


def test_xdist_shares_one_allocation(tmp_path, dev_cluster):
    before = dev_cluster.last_job_id()
    run = run_inner(
        write_suite(tmp_path, XDIST_SUITE),
        "--launcher",
        "slurm",
        "--nodes",
        "2",
        "-n",
        "2",
        "--dist",
        "loadgroup",
        env=dev_cluster.env,
    )
    assert run.returncode == 0, run.output[-3000:]
    assert run.verdicts() == {f"test_{t}[node{n}]": "passed" for t in "ab" for n in (1, 2)}
    assert dev_cluster.last_job_id() == before + 1, "workers must reuse the controller's single allocation"
    assert dev_cluster.jobs() == []


def test_container_flags_reach_srun():
    launcher = SlurmLauncher(
        Allocation("42", ["n1"], owned=False),
        container_image="nvcr.io#nvidia/pytorch:24.05-py3",
        container_mounts="/shared:/shared",
    )
    argv = launcher.command(Step("hygiene", ("n1",)))
    assert "--container-image=nvcr.io#nvidia/pytorch:24.05-py3" in argv
    assert "--container-mounts=/shared:/shared" in argv
    assert argv[argv.index("-m") - 1] == "python3"
