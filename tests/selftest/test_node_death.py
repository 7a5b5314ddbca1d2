"""A slurmd dying mid-session costs only that node: its tests error naming it (then skip, giving the
reason), the three survivors' node-local tests all pass, also after Slurm has noticed the death
(past ``SlurmdTimeout``, when a job without ``--no-kill`` expires), no job is left, the record is written.
A node dead before the session is found by the fingerprints' step at its start: each of its tests errors with
that step's words, never FAILED, and the other nodes' tests run.
"""

from __future__ import annotations

import re
import subprocess
import time

from .conftest import REPO, run_inner, start_cluster, stop_cluster, write_suite

INNER = """
from gpuaccept.probes import specs
import os, subprocess, time

import pytest


def test_a_kill_node3(cluster):
    subprocess.run(["bash", os.environ["KILL_NODE"], "node3", os.environ["GPUACCEPT_DEV_CLUSTER"]], check=True)


def test_b_step(node, cluster, judge):
    record = cluster.run(specs.VISIBILITY, nodes=[node]).one()
    judge.expect("slurm_step_node", record.node, node, node=node)


def test_c_until_slurm_notices(cluster):
    # what ended every node's run before --no-kill: Slurm marking node3 down, past SlurmdTimeout
    deadline = time.monotonic() + float(os.environ["NOTICE_WITHIN_S"])
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-n", "node3", "-o", "%T"], capture_output=True, text=True).stdout
        if "down" in state:
            return
        time.sleep(1)
    pytest.fail(f"Slurm did not mark node3 down: {state!r}")


def test_d_limits(node, cluster, judge):
    data = cluster.run(specs.HYGIENE, nodes=[node]).one().data
    judge.check("dev_shm_gib", data["dev_shm_gib"], node=node)


def test_e_step_again(node, cluster, judge):
    record = cluster.run(specs.VISIBILITY, nodes=[node]).one()
    judge.expect("slurm_step_node", record.node, node, node=node)
"""


def test_killed_slurmd(tmp_path):
    cluster = start_cluster(4, {"KILL_NODE": str(REPO / "slurm" / "dev-cluster" / "kill-node.sh")})
    try:
        config = cluster.cmd("scontrol", "show", "config")
        timeout_s = int(re.search(r"^SlurmdTimeout\s*=\s*(\d+)", config, re.MULTILINE).group(1))  # type: ignore[union-attr]
        cluster.env["NOTICE_WITHIN_S"] = str(timeout_s * 2 + 10)
        run = run_inner(
            write_suite(tmp_path, INNER),
            "--launcher",
            "slurm",
            "--nodes",
            "4",
            "--probe-timeout",
            "60",
            env=cluster.env,
            timeout=300,
        )
        for _ in range(20):  # the allocation is released at session end; COMPLETING may linger a moment
            if not cluster.jobs():
                break
            time.sleep(0.5)
        left = cluster.jobs()
    finally:
        stop_cluster(cluster)
    tail = run.output[-4000:]
    verdicts, messages = run.verdicts(), run.messages()
    assert verdicts["test_c_until_slurm_notices"] == "passed", (verdicts, tail)
    for node in ("node1", "node2", "node4"):
        for test in ("test_b_step", "test_d_limits", "test_e_step_again"):
            assert verdicts[f"{test}[{node}]"] == "passed", (test, node, tail)
    assert verdicts["test_b_step[node3]"] == "error", tail
    assert "node3" in messages["test_b_step[node3]"] and "did not start on node3" in messages["test_b_step[node3]"]
    for test in ("test_d_limits", "test_e_step_again"):
        assert verdicts[f"{test}[node3]"] == "skipped", tail
        assert "node3 was lost during the run: its slurmd did not take a step" in messages[f"{test}[node3]"]
    assert left == [], left
    record = run.record
    assert record["status"] == "failed"
    assert list(record["cluster"]["lost_nodes"]) == ["node3"]
    assert "node3: lost during the run: its slurmd did not take a step" in run.output
    assert re.search(r"node3\s+ERROR", run.output), tail
    # one step per node-parametrized test whatever the node count: the fingerprints before any test, b, d, e
    assert record["cluster"]["srun_steps"] == 4


DEAD_AT_START = """
from gpuaccept.probes import specs


def test_limits(node, cluster, judge):
    data = cluster.run(specs.HYGIENE, nodes=[node]).one().data
    judge.check("dev_shm_gib", data["dev_shm_gib"], node=node)


def test_step(node, cluster, judge):
    record = cluster.run(specs.VISIBILITY, nodes=[node]).one()
    judge.expect("slurm_step_node", record.node, node, node=node)
"""


def test_a_node_dead_before_the_session_errors_each_of_its_tests_with_the_fingerprints_words(tmp_path):
    cluster = start_cluster(3)
    try:
        kill = REPO / "slurm" / "dev-cluster" / "kill-node.sh"
        subprocess.run(["bash", str(kill), "node2", cluster.env["GPUACCEPT_DEV_CLUSTER"]], check=True)
        suite = write_suite(tmp_path, DEAD_AT_START)
        run = run_inner(suite, "--launcher", "slurm", "--nodes", "3", "--probe-timeout", "60", env=cluster.env)
    finally:
        stop_cluster(cluster)
    tail = run.output[-4000:]
    verdicts, messages = run.verdicts(), run.messages()
    for test in ("test_limits", "test_step"):
        for node in ("node1", "node3"):
            assert verdicts[f"{test}[{node}]"] == "passed", (test, node, tail)
        assert verdicts[f"{test}[node2]"] == "error", (test, tail)  # could not measure: never FAILED
        said = messages[f"{test}[node2]"]
        assert "fingerprint of node2 could not be taken at session start" in said, (said, tail)
        assert "slurmd did not take a step" in said or "did not start on node2" in said, said
    assert run.record["fingerprints"]["node2"]["error"].startswith("probe fingerprint")
    assert sorted(n for n, fp in run.record["fingerprints"].items() if "error" not in fp) == ["node1", "node3"]
