"""Idle re-validation through Slurm: slurm/revalidate-idle.sh submits slurm/revalidate.sbatch for an idle
node as a low-priority job; the run record lands in that node's history folder with its summary, and a
node revalidated recently is not submitted again."""

from __future__ import annotations

import json
import subprocess
import time

from .conftest import REPO

IDLE = REPO / "slurm" / "revalidate-idle.sh"


def test_idle_node_is_revalidated_into_its_history(tmp_path, dev_cluster):
    history = tmp_path / "history"
    env = {**dev_cluster.env, "GPUACCEPT_HISTORY": str(history), "PYTHONPATH": str(REPO)}
    (REPO / "reports" / "history").mkdir(parents=True, exist_ok=True)
    # only the GPU health tests: skipped on the loopback's CPU nodes, so the job is quick and passes
    argv = ["bash", str(IDLE), "--max", "1", "--", "-k", "test_gpu_health", "-p", "no:cacheprovider"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    node, _, job = done.stdout.strip().partition(": job ")
    assert node in dev_cluster.nodes and job.isdigit(), done.stdout
    info = dev_cluster.cmd("scontrol", "show", "job", job)
    assert "Nice=10000" in info and f"ReqNodeList={node}" in info, info
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and job in dev_cluster.cmd("squeue", "-h", "-o", "%i").split():
        time.sleep(1)
    records = sorted(p for p in (history / node).glob("*.json") if p.name != "latest.json")
    out = REPO / "reports" / "history" / f"slurm-{job}.out"
    assert len(records) == 1, out.read_text() if out.exists() else "no job output"
    assert json.loads(records[0].read_text())["cluster"]["nodes"] == [node]
    assert (history / node / "summary.html").is_file()
    again = subprocess.run(["bash", str(IDLE), "--dry-run"], env=env, capture_output=True, text=True, timeout=60)
    assert f"--nodelist={node} " not in again.stdout, "revalidated within the last 24 h: not again"
    out.unlink(missing_ok=True)
