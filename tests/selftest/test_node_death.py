"""A slurmd dying mid-session: that node's tests error naming it, the other node's pass, record written."""

from __future__ import annotations

from .conftest import REPO, run_inner, start_cluster, stop_cluster, write_suite

INNER = """
import os, subprocess

def test_a_kill_node2(cluster):
    subprocess.run(["bash", os.environ["KILL_NODE"], "node2", os.environ["GPUACCEPT_DEV_CLUSTER"]], check=True)

def test_b_step(node, cluster):
    record = cluster.run("visibility", nodes=[node]).one()
    assert record.node == node

def test_c_limits(node, cluster, judge):
    data = cluster.run("hygiene", nodes=[node]).one().data
    judge.check("dev_shm_gib", data["dev_shm_gib"], node=node)
    judge.verify()
"""


def test_killed_slurmd(tmp_path):
    cluster = start_cluster(2, {"KILL_NODE": str(REPO / "slurm" / "dev-cluster" / "kill-node.sh")})
    try:
        run = run_inner(
            write_suite(tmp_path, INNER),
            "--launcher",
            "slurm",
            "--nodes",
            "2",
            "--probe-timeout",
            "60",
            env=cluster.env,
            timeout=400,
        )
    finally:
        stop_cluster(cluster)
    verdicts = run.verdicts()
    assert verdicts["test_b_step[node1]"] == "passed", run.output[-3000:]
    assert verdicts["test_c_limits[node1]"] == "passed", run.output[-3000:]
    assert verdicts["test_b_step[node2]"] == "error", run.output[-3000:]
    assert verdicts["test_c_limits[node2]"] == "error", run.output[-3000:]
    assert "node2" in run.messages()["test_b_step[node2]"]
    assert "node2" in run.messages()["test_c_limits[node2]"]
    assert run.record["status"] == "failed"
    assert "node1" in run.record["fingerprints"]
