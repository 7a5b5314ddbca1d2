"""Ctrl-C or SIGTERM to pytest: the step and the allocation are cancelled, the run record written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .conftest import REPO, write_suite

INNER = """
def test_hangs(cluster):
    cluster.run("_faults", nodes=[cluster.nodes[0]], args=["--fault", "hang"])
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_cancels_allocation(tmp_path, dev_cluster, sig):
    suite = write_suite(tmp_path, INNER)
    record = tmp_path / "record.json"
    env = {**dev_cluster.env, "GPUACCEPT_SELFTEST": "1", "PYTHONPATH": str(REPO)}
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "--launcher",
        "slurm",
        "--probe-timeout",
        "300",
        "--run-record",
        str(record),
    ]
    proc = subprocess.Popen(argv, cwd=suite, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not dev_cluster.steps():
            time.sleep(0.5)
        assert dev_cluster.steps(), "the hanging step never started"
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, output[-2000:]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and dev_cluster.jobs():
        time.sleep(0.5)
    assert dev_cluster.jobs() == [], f"allocation left behind: {dev_cluster.jobs()}"
    data = json.loads(record.read_text())
    assert data["status"] == "interrupted"
    assert data["cluster"]["launcher"] == "slurm" and data["cluster"]["job_id"]
    assert os.path.exists(record.parent / "latest.json")
