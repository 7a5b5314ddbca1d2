"""Slurm cannot give the run its nodes: the run stops early and loudly, naming why, on a real cluster.

A down node, a drained node, a mistyped partition, a dead controller: each is a usage error (exit 4)
before any test runs, quoting Slurm (state, Reason field, its own error). Busy nodes: the pending
reason is printed while salloc waits, and after ``--alloc-wait`` the job is cancelled. An ``scontrol``
failure on a node is that node's ERROR, never "0 GPUs, skipped". No Slurm installed at all is the only
case ``--launcher auto`` runs locally.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from gpuaccept.judging.verdict import EXIT_TEST_HOOKS

from .conftest import REPO, DevCluster, InnerRun, run_inner, start_cluster, stop_cluster, write_suite

KILL_NODE = REPO / "slurm" / "dev-cluster" / "kill-node.sh"


def _acceptance(tmp_path: Path, *args: str, env: dict[str, str], timeout: float = 180) -> InnerRun:
    """README's ``pytest -m acceptance`` in the repository, its record and Allure results kept in tmp_path."""
    record = tmp_path / "record.json"
    argv = [sys.executable, "-m", "pytest", "-m", "acceptance", "-p", "no:cacheprovider", *args]
    argv += ["--run-record", str(record), "--alluredir", str(tmp_path / "allure")]
    start = time.monotonic()
    done = subprocess.run(
        argv,
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return InnerRun(done.returncode, done.stdout + done.stderr, record, time.monotonic() - start)


def _wait_state(cluster: DevCluster, node: str, unusable: bool, timeout_s: float = 90) -> str:
    """Wait until the controller sees ``node`` as unusable (``*`` = not responding, down, drained) or not."""
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        state = cluster.cmd("sinfo", "-h", "-N", "-n", node, "-o", "%T").strip()
        bad = state.endswith("*") or state.startswith(("down", "drain"))
        if bad == unusable:
            return state
        time.sleep(1)
    raise AssertionError(f"{node} still {state} after {timeout_s} s")


def test_down_node_stops_the_run_naming_it(tmp_path):
    """README's scenario: 2 loopback nodes, one slurmd killed, --nodes 2: exit 4 naming node2, well within 120 s."""
    cluster = start_cluster(2)
    try:
        subprocess.run(["bash", str(KILL_NODE), "node2", str(cluster.directory)], env=cluster.env, check=True)
        state = _wait_state(cluster, "node2", unusable=True)
        run = _acceptance(tmp_path, "--launcher", "slurm", "--nodes", "2", env=cluster.env)
        assert cluster.jobs() == [], f"a job was submitted or left behind: {cluster.jobs()}"
    finally:
        stop_cluster(cluster)
    print(f"down node: exit {run.returncode} after {run.duration_s:.1f} s")
    assert run.returncode == 4, run.output[-3000:]
    assert run.duration_s < 120, run.duration_s
    error = next(line for line in run.output.splitlines() if line.startswith("ERROR: "))
    assert "node2 (" + state in error and "2 node(s) wanted" in error and "usable (node1)" in error, error
    assert run.record["status"] == "usage error" and "node2" in run.record["errors"][0]


def test_drained_node_is_named_with_its_reason(tmp_path, dev_cluster):
    dev_cluster.cmd("scontrol", "update", "nodename=node2", "state=drain", "reason=gpu3 Xid 79 | after burn-in")
    try:
        _wait_state(dev_cluster, "node2", unusable=True)
        suite = write_suite(tmp_path, "def test_x(node, cluster):\n    pass\n")
        run = run_inner(suite, "--launcher", "slurm", "--nodes", "2", env=dev_cluster.env, timeout=120)
        pinned = run_inner(suite, "--launcher", "slurm", "--nodelist", "node1,node2", env=dev_cluster.env)
    finally:
        dev_cluster.cmd("scontrol", "update", "nodename=node2", "state=resume")
        _wait_state(dev_cluster, "node2", unusable=False)
    assert run.returncode == 4, run.output[-3000:]
    assert "node2 (drained, reason: gpu3 Xid 79 | after burn-in)" in run.output, run.output[-3000:]
    assert pinned.returncode == 4 and "--nodelist (command line) names nodes" in pinned.output, pinned.output[-3000:]
    assert dev_cluster.jobs() == []


def test_busy_nodes_print_the_pending_reason_then_give_up(tmp_path, dev_cluster):
    """Both nodes held by another job: the reason shows while waiting; after --alloc-wait our job is gone."""
    blocker = subprocess.run(
        ["salloc", "--no-shell", "--nodes=2", "--exclusive", "--job-name=blocker"],
        env=dev_cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    blocker_id = blocker.stderr.split("Granted job allocation")[1].split()[0]
    suite = write_suite(tmp_path, "def test_x(node, cluster):\n    pass\n")
    argv = [sys.executable, "-m", "pytest", "-q", "--launcher", "slurm", "--nodes", "2", "--alloc-wait", "8"]
    env = {**dev_cluster.env, "PYTHONPATH": str(REPO)}
    lines: list[tuple[float, str]] = []
    try:
        proc = subprocess.Popen(
            [*argv, "--run-record", str(tmp_path / "record.json")],
            cwd=suite,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        reader = threading.Thread(target=lambda: lines.extend((time.monotonic(), ln) for ln in proc.stdout or ()))
        reader.start()
        proc.wait(timeout=90)
        ended = time.monotonic()
        reader.join(10)
        jobs_after = dev_cluster.jobs()
    finally:
        dev_cluster.cmd("scancel", blocker_id, check=False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and dev_cluster.jobs():
            time.sleep(0.5)
    output = "".join(text for _, text in lines)
    notes = [(t, text) for t, text in lines if text.startswith("gpuaccept: waiting for Slurm job")]
    assert proc.returncode == 4, output[-3000:]
    assert len(notes) >= 2 and all("reason Resources" in text for _, text in notes), output[-3000:]
    assert ended - notes[0][0] > 4, "the pending reason must show while waiting, not at the end"
    error = next(text for _, text in lines if text.startswith("ERROR: "))
    assert "within 8 s (--alloc-wait (command line))" in error and "cancelled" in error, error
    assert "node1 (allocated)" in error and f"Held by: job {blocker_id} (blocker" in error, error
    assert [j.split()[0] for j in jobs_after] == [blocker_id], f"our pending job was not cancelled: {jobs_after}"


def test_mistyped_partition_is_usage_error(tmp_path, dev_cluster):
    run = _acceptance(tmp_path, "--launcher", "auto", "--partition", "nosuchpart", env=dev_cluster.env, timeout=90)
    print(f"mistyped partition: exit {run.returncode} after {run.duration_s:.1f} s")
    assert run.returncode == 4, run.output[-3000:]
    assert run.duration_s < 60, run.duration_s
    error = next(line for line in run.output.splitlines() if line.startswith("ERROR: "))
    assert "partition 'nosuchpart' (--partition (command line))" in error, error
    assert "Partition nosuchpart not found" in error and "--launcher local" in error, error


def test_controller_down_is_usage_error(tmp_path):
    cluster = start_cluster(1)
    try:
        pids = dict(line.split() for line in (cluster.directory / "pids").read_text().splitlines())
        os.kill(int(pids["slurmctld"]), signal.SIGKILL)
        suite = write_suite(tmp_path, "def test_x(node, cluster):\n    pass\n")
        run = run_inner(suite, "--launcher", "auto", env=cluster.env, timeout=90)
    finally:
        stop_cluster(cluster)
    assert run.returncode == 4, run.output[-3000:]
    assert run.duration_s < 60, run.duration_s
    assert "the Slurm controller does not answer" in run.output and "is DOWN" in run.output, run.output[-3000:]


INNER_LOCAL = """
from gpuaccept.probes import specs

def test_x(cluster):
    assert cluster.kind == "local"
    cluster.run(specs.FAULTS, nodes=cluster.nodes, args=["--fault", "ok"])
"""


def test_auto_without_slurm_installed_runs_locally(tmp_path):
    """No srun/sinfo on PATH at all: the only case in which auto picks the local launcher."""
    bare = tmp_path / "bin"
    bare.mkdir()
    assert shutil.which("sinfo", path=str(bare)) is None
    suite = write_suite(tmp_path / "suite", INNER_LOCAL)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GPUACCEPT_"))}
    run = run_inner(suite, env={**env, "PATH": str(bare)})
    assert run.returncode == EXIT_TEST_HOOKS and run.verdicts() == {"test_x": "passed"}, run.output[-3000:]
    assert run.record["cluster"]["launcher"] == "local"


INNER_SCONTROL = """
import os, signal, time

def test_a_stop_controller(cluster):
    pids = dict(line.split() for line in open(os.environ["GPUACCEPT_DEV_CLUSTER"] + "/pids"))
    os.kill(int(pids["slurmctld"]), signal.SIGKILL)

def test_b_gpus(node, cluster):
    cluster.require_gpus(node)
"""


def test_scontrol_failure_is_an_error_naming_the_node(tmp_path):
    """The controller dies mid-run: reading a node's declared GPUs fails -> that node's ERROR, not a skip."""
    cluster = start_cluster(1)  # every scontrol against a dead controller takes ~10 s: one node is enough
    try:
        run = run_inner(write_suite(tmp_path, INNER_SCONTROL), "--launcher", "slurm", env=cluster.env)
    finally:
        stop_cluster(cluster)
    assert run.verdicts()["test_b_gpus[node1]"] == "error", run.output[-3000:]
    assert "node1: cannot read its declared GPUs from Slurm" in run.messages()["test_b_gpus[node1]"]
    # the allocation could not be released either: said, with the command to do it by hand
    assert "gpuaccept: releasing the allocation: could not cancel job" in run.output, run.output[-3000:]
