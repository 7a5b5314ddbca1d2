"""The node check as Slurm runs it: HealthCheckProgram, Prolog and Epilog in a loopback cluster's
slurm.conf, faults injected into each node's recorded readings (fixtures/nvml, fixtures/sysfs).

One 2-node cluster with two declared GPUs per node (gres files that stand in for /dev/nvidia*) serves
the module; each node's check reads its own copy of the 2 x H200 SXM 141GB NVML dump (2026-11-22). Proven here through
Slurm's own mechanisms, not by calling our functions: a failed prolog drains the node with our reason
and the job is requeued onto the other node; the health check drains a faulty node (``sinfo -R``
shows the reason), resumes it once the fault is gone, never resumes another tool's drain, and turns a
hung read into a drain naming it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO, DevCluster, start_cluster, stop_cluster
from .nvml_recordings import older_gpu_health_file, older_nvlink_file
from .test_nodecheck import host_site

NDR = REPO / "fixtures" / "sysfs" / "hgx-h100-ndr"
CLEAN_LOG = REPO / "fixtures" / "kernel-log" / "dmesg-h100-clean.txt"
HEALTH_INTERVAL_S = 5

WRAPPER = """#!/bin/bash
# slurmd runs this with almost no environment: say where Slurm, Python and the recorded readings are.
export SLURM_CONF={conf} PYTHONPATH={repo}
rec={rec}/$SLURMD_NODENAME
exec {python} -m gpuaccept.nodecheck --drain --state-dir {rec}/state --thresholds {site} \\
  --nvml-load $rec/gpu_health.json --nvlink-load $rec/nvlink.json --sysfs-root {ndr} \\
  --kernel-log $rec/dmesg.txt --expected {rec}/expected.json --check-timeout 5 --timeout 20
"""


def _restart_controller(cluster: DevCluster) -> None:
    """Restart slurmctld (keeping state): the requeue delay (cred_expire) is read at its start only."""
    pids = (cluster.directory / "pids").read_text().splitlines()
    old = int(next(line.split()[1] for line in pids if line.startswith("slurmctld ")))
    os.kill(old, 15)
    for _ in range(100):
        if not Path(f"/proc/{old}").exists() or "slurmctld" not in Path(f"/proc/{old}/cmdline").read_text():
            break
        time.sleep(0.1)
    conf = cluster.env["SLURM_CONF"]
    env = {**cluster.env, "GPUACCEPT_DEV_CLUSTER": str(cluster.directory)}
    with open(cluster.directory / "log" / "slurmctld.out", "a") as out:
        subprocess.run(["slurmctld", "-f", conf], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, check=True)
    pid_file = cluster.directory / "run" / "slurmctld.pid"
    for _ in range(100):
        new = pid_file.read_text().strip() if pid_file.exists() else ""
        if new and new != str(old) and Path(f"/proc/{new}").exists():
            break
        time.sleep(0.1)
    lines = [f"slurmctld {new}" if line.startswith("slurmctld ") else line for line in pids]
    (cluster.directory / "pids").write_text("\n".join(lines) + "\n")


def wait_for(what: str, probe: Callable[[], Any], timeout_s: float = 40) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout_s:g} s: {what}")


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("gate")
    cluster = start_cluster(2, gpus_per_node=2, gpu_files=tmp)
    try:
        rec = tmp / "rec"
        for node in cluster.nodes:
            (rec / node).mkdir(parents=True)
            shutil.copy(older_gpu_health_file(), rec / node / "gpu_health.json")
            shutil.copy(older_nvlink_file(), rec / node / "nvlink.json")
            shutil.copy(CLEAN_LOG, rec / node / "dmesg.txt")
        wrapper = tmp / "nodecheck.sh"
        site = host_site(tmp / "site.yaml")
        conf = cluster.env["SLURM_CONF"]
        wrapper.write_text(WRAPPER.format(conf=conf, repo=REPO, rec=rec, python=sys.executable, site=site, ndr=NDR))
        wrapper.chmod(0o755)
        with open(conf, "a") as handle:
            handle.write(
                "# gate selftest (tests/selftest/test_nodecheck_slurm.py)\n"
                f"HealthCheckProgram={wrapper}\nHealthCheckInterval=0\nHealthCheckNodeState=ANY\n"
                f"Prolog={wrapper}\nEpilog={wrapper}\nPrologFlags=Alloc\n"
                # a failed prolog requeues the job without holding it; the requeue waits cred_expire s
                "SchedulerParameters=nohold_on_prolog_fail,bf_interval=1,sched_interval=1\n"
                "AuthInfo=cred_expire=5\n"
            )
        _restart_controller(cluster)
        cluster.cmd("scontrol", "reconfigure")
        wait_for(
            "both nodes idle", lambda: cluster.cmd("sinfo", "-h", "-N", "-o", "%T", check=False).split() == ["idle"] * 2
        )
        yield {"cluster": cluster, "rec": rec, "conf": Path(conf), "tmp": tmp}
    finally:
        stop_cluster(cluster)


def reasons(cluster: DevCluster) -> dict[str, str]:
    """``sinfo -R``: node -> drain reason, as an operator reads it."""
    out = cluster.cmd("sinfo", "-R", "-h", "-N", "-o", "%N|%E", check=False)
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def set_interval(gated: dict[str, Any], seconds: int) -> None:
    conf = gated["conf"]
    lines = [
        f"HealthCheckInterval={seconds}" if ln.startswith("HealthCheckInterval=") else ln
        for ln in conf.read_text().splitlines()
    ]
    conf.write_text("\n".join(lines) + "\n")
    gated["cluster"].cmd("scontrol", "reconfigure")


def quiet(cluster: DevCluster) -> None:
    """Wait until no job is queued and no node is still completing one: a fault injected while an earlier
    test's job runs its epilog on that node would fail the epilog, and Slurm drains it "Epilog error".

    Then start from two undrained nodes: a drain left by an earlier test (CI 2026-11-28: node2 drained
    "Epilog error" before this test injected anything, the requeued job's epilog on a loaded machine) would
    otherwise be read as this test's verdict; it is printed and resumed, as an operator clears a stale drain."""
    wait_for(
        "no job left and no node completing",
        lambda: (
            not cluster.cmd("squeue", "-h", check=False).strip()
            and "comp" not in cluster.cmd("sinfo", "-h", "-N", "-o", "%T", check=False)
        ),
        timeout_s=90,
    )
    for node, reason in reasons(cluster).items():
        print(f"quiet: {node} was left drained by an earlier test ({reason}): resumed")
        cluster.cmd("scontrol", "update", f"nodename={node}", "state=resume")
    wait_for("no node drained", lambda: not reasons(cluster))


def ecc_fault(gated: dict[str, Any], node: str, count: int) -> None:
    path = gated["rec"] / node / "gpu_health.json"
    data = json.loads(path.read_text())
    data["gpus"][1]["ecc_uncorrected_volatile"] = count
    path.write_text(json.dumps(data))


ECC_REASON = "gpuaccept: gpu_ecc_uncorrected_volatile GPU1 2 (limit <= 0)"


def test_failed_prolog_drains_with_our_reason_and_the_job_runs_elsewhere(gated):
    cluster = gated["cluster"]
    ecc_fault(gated, "node1", 2)  # appeared since the last health check: only the prolog can catch it
    out = gated["tmp"] / "job.out"
    job = cluster.cmd("sbatch", "--parsable", "-N1", "-o", str(out), "--wrap", "echo ran on $SLURMD_NODENAME").strip()
    wait_for("the requeued job ran", lambda: out.exists() and "ran on" in out.read_text(), timeout_s=60)
    assert out.read_text().strip() == "ran on node2"
    info = cluster.cmd("scontrol", "show", "job", job)
    assert "Restarts=1" in info, info
    assert reasons(cluster).get("node1") == ECC_REASON
    assert "node2" not in reasons(cluster)


def test_health_check_resumes_our_drain_once_the_fault_is_gone(gated):
    cluster = gated["cluster"]
    if "node1" not in reasons(cluster):  # run alone: drain it the way the prolog test left it
        cluster.cmd("scontrol", "update", "nodename=node1", "state=drain", f"reason={ECC_REASON}")
    set_interval(gated, HEALTH_INTERVAL_S)
    ecc_fault(gated, "node1", 0)
    wait_for("node1 resumed by the health check", lambda: "node1" not in reasons(cluster))


def test_health_check_drains_a_faulty_node_and_sinfo_shows_why(gated):
    cluster = gated["cluster"]
    quiet(cluster)
    set_interval(gated, HEALTH_INTERVAL_S)
    ecc_fault(gated, "node2", 2)
    assert wait_for("node2 drained", lambda: reasons(cluster).get("node2")) == ECC_REASON
    ecc_fault(gated, "node2", 0)
    wait_for("node2 back", lambda: "node2" not in reasons(cluster))


def test_another_tools_drain_is_left_alone(gated):
    """NHC's drain, and the suite's own (a slow check the node check cannot clear), stay drained."""
    cluster = gated["cluster"]
    set_interval(gated, HEALTH_INTERVAL_S)
    others = {"node2": "NHC: check_fs_mount /scratch", "node1": "gpuaccept: test_matmul matmul_bf16_tflops"}
    for node, reason in others.items():
        cluster.cmd("scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}")
    try:
        time.sleep(2 * HEALTH_INTERVAL_S + 2)  # two health checks of two healthy nodes
        assert reasons(cluster) == others
    finally:
        for node in others:
            cluster.cmd("scontrol", "update", f"nodename={node}", "state=resume")


def test_hung_read_drains_with_a_timeout_naming_it(gated):
    cluster = gated["cluster"]
    quiet(cluster)
    set_interval(gated, HEALTH_INTERVAL_S)
    health = gated["rec"] / "node2" / "gpu_health.json"
    saved = health.read_text()
    health.unlink()
    os.mkfifo(health)  # a read that never returns, as on a hung filesystem
    try:
        reason = wait_for("node2 drained for the hung read", lambda: reasons(cluster).get("node2"))
        assert reason.startswith(f"gpuaccept: timeout gpus reading {health} (limit 5"), reason
    finally:
        health.unlink()
        health.write_text(saved)
    wait_for("node2 back", lambda: "node2" not in reasons(cluster))
