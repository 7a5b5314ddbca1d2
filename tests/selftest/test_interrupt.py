"""Ctrl-C or SIGTERM to pytest: the step and the allocation are cancelled, the run record written.

The inner pytest must start with default signal dispositions whatever this process inherited: CI
started in the background (``nohup bash .ci/run &``) ignores SIGINT, an ignored SIGINT is inherited
across exec, and the inner run then never sees the Ctrl-C this test sends. The signal is sent only
once the inner run's own step runs (its SIGTERM handler is installed in ``pytest_configure``, long
before), and every case ends with an empty queue, so one case can never signal another's leftovers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .conftest import REPO, DevCluster, write_suite

INNER = """
from gpuaccept.probes import specs

def test_hangs(cluster):
    cluster.run(specs.FAULTS, nodes=[cluster.nodes[0]], args=["--fault", "hang"])
"""


def _default_signals() -> None:
    """In the child before exec: SIGINT and SIGTERM back to their defaults (Python then installs its
    KeyboardInterrupt handler for SIGINT, and the plugin its SIGTERM handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _new_jobs(cluster: DevCluster, after: int) -> list[str]:
    """Ids of jobs submitted after ``after`` that are still in the queue."""
    return [line.split()[0] for line in cluster.jobs() if int(line.split()[0]) > after]


def _running_step_of(cluster: DevCluster, after: int) -> bool:
    """A step of a job newer than ``after`` (the inner run's allocation) is running."""
    rows = [
        row.split() for row in cluster.cmd("squeue", "-h", "-s", "-O", "StepId,StepState", check=False).splitlines()
    ]
    return any(len(row) == 2 and int(row[0].split(".")[0]) > after and row[1] == "RUNNING" for row in rows)


def _wait_empty(cluster: DevCluster, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (cluster.jobs() or cluster.steps()):
        time.sleep(0.5)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_cancels_allocation(tmp_path, dev_cluster, sig):
    _wait_empty(dev_cluster)
    assert dev_cluster.jobs() == [] and dev_cluster.steps() == [], "queue not empty before the case"
    before = dev_cluster.last_job_id()
    suite = write_suite(tmp_path, INNER)
    record = tmp_path / "record.json"
    env = {**dev_cluster.env, "GPUACCEPT_SELFTEST": "1", "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "pytest", "-q", "--launcher", "slurm", "--probe-timeout", "300"]
    argv += ["--run-record", str(record)]
    proc = subprocess.Popen(
        argv,
        cwd=suite,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_default_signals,
        start_new_session=True,  # signals reach it only from this test, never from the outer terminal
    )
    output = ""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and not _running_step_of(dev_cluster, before):
            time.sleep(0.2)
        assert proc.poll() is None, f"the inner run ended early:\n{proc.communicate()[0][-3000:]}"
        assert _running_step_of(dev_cluster, before), "the inner run's hanging step never started"
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            output += proc.communicate()[0]
        _wait_empty(dev_cluster)  # the inner run's own scancel, given time to complete
        leftovers = _new_jobs(dev_cluster, before)
        if leftovers:  # never leave a job or a step to the next case, whatever failed above
            dev_cluster.cmd("scancel", *leftovers, check=False)
            _wait_empty(dev_cluster)
    assert proc.returncode == 2, output[-2000:]
    assert leftovers == [], f"allocation left behind by the inner run: {leftovers}\n{output[-2000:]}"
    assert dev_cluster.jobs() == [] and dev_cluster.steps() == []
    data = json.loads(record.read_text())
    assert data["status"] == "interrupted"
    assert data["cluster"]["launcher"] == "slurm" and data["cluster"]["job_id"]
    assert os.path.exists(record.parent / "latest.json")
