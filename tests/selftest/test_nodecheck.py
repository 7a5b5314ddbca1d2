"""The node check on recorded readings: 2 x H200 SXM 141GB, 2026-11-22 (fixtures/nvml/), the HGX H100 NDR sysfs tree
and saved kernel logs. Healthy passes; each fault is one edited reading and must be named (check, GPU,
value, limit); a reading that hangs is a timeout naming it, well inside the watchdog.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.fleet.node import REASON_MAX, from_node_check, ours, reason_text
from gpuaccept.nodecheck.cli import main

from .nvml_recordings import older_gpu_health, older_nvlink

REPO = Path(__file__).resolve().parents[2]
NDR = REPO / "fixtures" / "sysfs" / "hgx-h100-ndr"
CLEAN_LOG = REPO / "fixtures" / "kernel-log" / "dmesg-h100-clean.txt"


@pytest.fixture()
def rec(tmp_path: Path) -> dict[str, Any]:
    """A recorded node in tmp_path: files the test edits, and the arguments that point the check at them."""
    health = tmp_path / "gpu_health.json"
    health.write_text(json.dumps(older_gpu_health()))  # an older recording: a field added since "not recorded"
    links = tmp_path / "nvlink.json"
    links.write_text(json.dumps(older_nvlink()))
    log = tmp_path / "dmesg.txt"
    log.write_text(CLEAN_LOG.read_text())
    sysfs = tmp_path / "sysfs"
    shutil.copytree(NDR, sysfs)
    proc = tmp_path / "proc"  # this host's jobs (other selftests' loopback clusters) are not the node's
    proc.mkdir()
    args = [
        "--node",
        "nodeA",
        "--gpus",
        "2",
        "--state-dir",
        str(tmp_path / "state"),
        "--nvml-load",
        str(health),
        "--nvlink-load",
        str(links),
        "--sysfs-root",
        str(sysfs),
        "--kernel-log",
        str(log),
        "--expected",
        str(tmp_path / "expected.json"),
        "--thresholds",
        str(host_site(tmp_path / "site.yaml")),
        "--proc-root",
        str(proc),
    ]
    return {"proc": proc, "dir": tmp_path, "health": health, "links": links, "log": log, "sysfs": sysfs, "args": args}


def memlock_kib() -> int:
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    return -1 if soft == resource.RLIM_INFINITY else soft // 1024


def host_site(path: Path) -> Path:
    """This host's locked-memory limit, declared: the GPU SKUs ask for unlimited (RDMA pins memory) and
    the check reads its own limit, which a CI container without CAP_SYS_RESOURCE cannot raise."""
    path.write_text(
        "schema_version: 1\nskus:\n  H200:\n    limits:\n      memlock_kib:\n"
        f'        equal: {memlock_kib()}\n        source: "the selftest host\'s own RLIMIT_MEMLOCK"\n'
    )
    return path


def run(args: list[str], capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    code = main([*args, *extra, "--json"])
    return code, json.loads(capsys.readouterr().out)


def edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_recorded_h200_is_healthy(rec, capsys):
    code, out = run(rec["args"], capsys)
    assert code == 0, out["failed"] + out["errors"]
    judged = {(r["metric"], r["subject"]): r["verdict"] for r in out["results"]}
    gpu1 = "1 (00000000:00:07.0)"
    for metric in ("gpu_ecc_uncorrected_volatile", "gpu_remapped_rows_pending", "nvlink_links_active"):
        assert judged[(metric, gpu1)] == "pass", metric
    assert judged[("gpu_foreign_processes", gpu1)] == "pass"
    assert judged[("gpu_count", None)] == "pass"
    assert judged[("xid_hardware_events", gpu1)] == "pass"
    assert judged[("ib_port_state", "mlx5_0 port 1")] == "pass"
    assert judged[("dev_shm_free_gib", None)] == "pass"
    assert out["sku"] == "H200" and out["verdict"] == "PASSED"


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (
            lambda n: edit(n["health"], lambda d: d["gpus"][1].update(ecc_uncorrected_volatile=2)),
            "gpu_ecc_uncorrected_volatile GPU1 2 (limit <= 0)",
        ),
        (
            lambda n: edit(n["health"], lambda d: d["gpus"][0]["remapped_rows"].update(pending=True)),
            "gpu_remapped_rows_pending GPU0 1 (limit <= 0)",
        ),
        (lambda n: edit(n["health"], lambda d: d["gpus"].pop()), "gpu_count 1 (limit == 2)"),
        (
            lambda n: edit(n["links"], lambda d: d["gpus"][1]["nvlink"].update(active=17)),
            "nvlink_links_active GPU1 17 (limit >= 18)",
        ),
        (
            lambda n: edit(n["links"], lambda d: d["gpus"][0]["nvlink"]["errors"].update(replay=3)),
            "nvlink_replay_errors GPU0 3 (limit <= 0)",
        ),
        (
            lambda n: (n["sysfs"] / "class/infiniband/mlx5_3/ports/1/state").write_text("1: DOWN\n"),
            "ib_port_state mlx5_3:1 DOWN (limit == ACTIVE)",
        ),
        (
            lambda n: (n["sysfs"] / "class/infiniband/mlx5_2/ports/1/rate").write_text("200 Gb/sec (4X HDR)\n"),
            "ib_port_rate_gbps mlx5_2:1 200.0 (limit >= 400)",
        ),
        (
            lambda n: (n["dir"] / "expected.json").write_text(
                json.dumps(
                    {"schema": "gpuaccept.expected-fingerprint/1", "fields": {"driver": "570.86.15", "CUDA": "13.0"}}
                )
            ),
            "versions_consistent driver 580.159.04 (limit == 570.86.15)",
        ),
    ],
)
def test_each_fault_is_named(rec, capsys, fault, expected):
    fault(rec)
    code, out = run(rec["args"], capsys)
    assert code == 1
    assert expected in out["failed"], out["failed"]


def test_failure_lines_and_reason(rec, capsys):
    edit(rec["health"], lambda d: d["gpus"][1].update(ecc_uncorrected_volatile=2))
    assert main(rec["args"]) == 1
    out = capsys.readouterr().out
    assert "gpuaccept: nodeA FAIL gpu_ecc_uncorrected_volatile GPU1 2 (limit <= 0)" in out
    assert "nodeA healthcheck FAILED" in out
    reason = reason_text(["gpu_ecc_uncorrected_volatile GPU1 2 (limit <= 0)", "x", "y"])
    assert reason == "gpuaccept: gpu_ecc_uncorrected_volatile GPU1 2 (limit <= 0) (+2 more)" and ours(reason)
    assert len(reason_text(["z" * 300])) == REASON_MAX
    assert not ours("NHC: check_fs_mount failed")
    assert from_node_check(reason) and not from_node_check("gpuaccept: test_matmul matmul_bf16_tflops")


def test_memlock_is_judged_against_the_sku(rec, capsys):
    """Without the host's declaration the packaged H200 limit (unlimited, for RDMA) applies."""
    if memlock_kib() == -1:
        pytest.skip("RLIMIT_MEMLOCK is unlimited here: nothing to miss")
    args = rec["args"][: rec["args"].index("--thresholds")]
    code, out = run(args, capsys)
    assert code == 1 and f"memlock_kib {memlock_kib()} (limit == -1.0)" in out["failed"]


def fake_process(proc: Path, pid: int, comm: str, parent: int, cmdline: str = "") -> None:
    """One process as /proc shows it: comm, stat (with its parent) and cmdline."""
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "comm").write_text(comm + "\n")
    (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) S {parent} {pid} {pid} 0 -1\n")
    (proc / str(pid) / "cmdline").write_text((cmdline or comm).replace(" ", "\0") + "\0")


def test_foreign_process_is_named_job_process_is_not(rec, capsys):
    """A process outside every Slurm job on a GPU fails; one under a job's slurmstepd does not."""
    fake_process(rec["proc"], 500, "slurmstepd", 1, "slurmstepd: [42.batch]")
    fake_process(rec["proc"], 501, "python3", 500)  # the job's training process
    fake_process(rec["proc"], 600, "python3", 1)  # a process of no job
    procs = [{"pid": 501, "name": "python3"}, {"pid": 600, "name": "python3"}]
    edit(rec["health"], lambda d: d["gpus"][0].update(processes=procs))
    code, out = run(rec["args"], capsys)
    assert code == 1
    assert out["failed"] == ["gpu_foreign_processes GPU0 600 python3 (limit == none)"], out["failed"]
    assert "dev_shm_free_gib: job(s) 42 running here" in out["skipped"]


def _stamp(seconds: float) -> str:
    return f"[{seconds:12.6f}] NVRM: Xid (PCI:0000:00:07): 79, pid='<unknown>', GPU has fallen off the bus.\n"


def test_xid_window_holds_until_acknowledged(rec, capsys):
    assert run(rec["args"], capsys)[0] == 0  # clean log: the window now starts at this run's uptime
    position = json.loads((rec["dir"] / "state" / "nodeA" / "xid.json").read_text())["uptime_s"]
    with rec["log"].open("a") as log:
        log.write(_stamp(position + 0.001))
    code, out = run(rec["args"], capsys)
    assert code == 1 and "xid_hardware_events GPU1 1 (limit <= 0)" in out["failed"], out["failed"]
    assert run(rec["args"], capsys)[0] == 1, "a hardware Xid stays in the window until acknowledged"
    code, out = run(rec["args"], capsys, "--acknowledge-xids")
    assert code == 0, out["failed"]  # the operator repaired the GPU: the window starts now
    assert run(rec["args"], capsys)[0] == 0
    with rec["log"].open("a") as log:
        log.write(_stamp(position + 10**6))  # a new Xid after the acknowledged position
    assert run(rec["args"], capsys)[0] == 1


def test_hung_read_is_a_timeout_that_names_it(rec, capsys):
    """A FIFO nobody writes is a read that never returns: the check ends at its per-check watchdog."""
    fifo = rec["dir"] / "hung.json"
    os.mkfifo(fifo)
    args = [a if a != str(rec["health"]) else str(fifo) for a in rec["args"]]
    start = time.monotonic()
    code, out = run(args, capsys, "--check-timeout", "2")
    took = time.monotonic() - start
    assert code == 1
    assert any(f.startswith(f"timeout gpus reading {fifo} (limit 2") for f in out["failed"]), out["failed"]
    assert took < 20, f"{took:.1f} s: the watchdog did not cut the hung read (it hangs forever without it)"


def test_prolog_error_does_not_drain_but_healthcheck_says_so(rec, capsys, monkeypatch):
    """A reading that could not be taken (not a timeout): exit 0 in a prolog, 2 in the health check."""
    rec["health"].unlink()
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "prolog_slurmd")
    code, out = run(rec["args"], capsys)
    assert (code, out["context"], out["verdict"]) == (0, "prolog", "could not check")
    monkeypatch.delenv("SLURM_SCRIPT_CONTEXT")
    code, out = run(rec["args"], capsys)
    assert (code, out["context"]) == (2, "healthcheck")


def test_epilog_counts_the_ending_jobs_leftovers(rec, capsys, monkeypatch):
    """Job 7's process on a GPU is its own business while job 7 runs; in job 7's epilog it is a leftover."""
    fake_process(rec["proc"], 500, "slurmstepd", 1, "slurmstepd: [7.0]")
    fake_process(rec["proc"], 501, "python3", 500)
    edit(rec["health"], lambda d: d["gpus"][1].update(processes=[{"pid": 501, "name": "python3"}]))
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    code, out = run(rec["args"], capsys, "--context", "healthcheck")
    assert (code, out["context"]) == (0, "healthcheck"), out["failed"]
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "epilog_slurmd")
    code, out = run(rec["args"], capsys)
    assert (code, out["context"]) == (1, "epilog")
    assert out["failed"] == ["gpu_foreign_processes GPU1 501 python3 (limit == none)"], out["failed"]


def test_console_script_runs_without_pytest_collection(rec):
    """``python -m gpuaccept.nodecheck`` as slurmd runs it: a bare environment, no pytest session."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "SLURMD_NODENAME": "nodeA"}
    done = subprocess.run(
        [sys.executable, "-m", "gpuaccept.nodecheck", *rec["args"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "nodeA healthcheck" in done.stdout, done.stdout + done.stderr


def test_expected_fingerprint_is_the_majority_of_the_run(tmp_path):
    """The acceptance run writes what most nodes had; one odd node does not become the expectation."""
    from gpuaccept.nodecheck.expected import read_expected, write_expected

    def fp(driver: str) -> dict[str, Any]:
        return {"gpus": {"driver": driver, "cuda_driver": "13.0"}, "stack": {"nccl": "2.28.9"}, "kernel": "6.8"}

    prints = {"n1": fp("580.159.04"), "n2": fp("580.159.04"), "n3": fp("570.86.15"), "n4": {"error": "down"}}
    path = write_expected(prints, tmp_path / "expected-fingerprint.json", tmp_path / "run.json", "failed")
    fields = read_expected(path)
    assert (fields["driver"], fields["CUDA"], fields["NCCL"]) == ("580.159.04", "13.0", "2.28.9")
    assert json.loads(path.read_text())["nodes"] == ["n1", "n2", "n3"]
    assert write_expected({"n4": {"error": "down"}}, tmp_path / "none.json", tmp_path / "run.json", "failed") is None


def test_history_of_a_nodes_folder_in_the_summary(tmp_path):
    """Re-validation runs of one node, one record each in its folder: the summary lists them over time."""
    from gpuaccept.fleet.history import history
    from gpuaccept.report.summary import build_summary
    from gpuaccept.results.record import read_record

    from .report_records import gpu_record

    folder = tmp_path / "history" / "gpu-a01"
    folder.mkdir(parents=True)
    for day, status in ((1, "passed"), (2, "failed"), (3, "passed")):
        record = gpu_record()
        record["started"] = f"2026-11-0{day}T03:00:00+00:00"
        record["status"] = status
        path = folder / f"2026110{day}T030000Z.json"
        path.write_text(json.dumps(record))
        os.utime(path, (day * 1000, day * 1000))
    rows = history(folder)
    assert [r.started for r in rows] == ["2026-11-01 03:00:00", "2026-11-02 03:00:00", "2026-11-03 03:00:00"]
    assert [r.status for r in rows] == ["passed", "failed", "passed"]
    html = build_summary(read_record(path), record_path=path)
    assert "History of the runs recorded beside this one" in html
    assert html.count("2026110") >= 3


def test_overall_watchdog_ends_a_check_that_hangs_outside_the_readers(rec):
    """The last resort: the check's own state file behind a FIFO hangs the main process; --timeout ends it."""
    state = rec["dir"] / "state" / "nodeA"
    state.mkdir(parents=True)
    os.mkfifo(state / "xid.json")
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpuaccept.nodecheck", *rec["args"], "--timeout", "4", "--check-timeout", "2"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - start
    assert done.returncode == 2, done.stdout + done.stderr
    assert "node check watchdog: no verdict after 4 s" in done.stderr
    assert took < 20, f"{took:.1f} s (it hangs forever without the watchdog)"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "SLURM_JOB_ID": "3"}, "prolog"),
        ({"SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "SLURM_JOB_ID": "3"}, "epilog"),
        ({"SLURMD_NODENAME": "node1"}, "healthcheck"),
        ({"SLURM_JOB_ID": "3"}, "prolog"),  # a Slurm without SLURM_SCRIPT_CONTEXT: a job script's exit codes
    ],
)
def test_context_from_slurms_environment(monkeypatch, env, expected):
    from gpuaccept.nodecheck.cli import _context

    for name in ("SLURM_SCRIPT_CONTEXT", "SLURM_JOB_ID", "SLURMD_NODENAME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _context("auto") == expected
    assert _context("epilog") == "epilog"


@pytest.mark.parametrize("faulty", [False, True], ids=["healthy", "ecc"])
def test_the_node_check_gives_no_verdict_under_a_test_hook(rec, capsys, monkeypatch, tmp_path, faulty) -> None:
    """The node check (Slurm prolog, health check) with a test hook set judged what the hook made: it
    neither passes the node (which would resume it) nor drains it; it says which hook was set."""
    inject = tmp_path / "inject.json"
    inject.write_text("{}")  # no readings: the readers read the recorded node as without the hook
    monkeypatch.setenv("GPUACCEPT_TEST_INJECT", str(inject))
    monkeypatch.delenv("GPUACCEPT_SELFTEST", raising=False)
    if faulty:
        edit(rec["health"], lambda d: d["gpus"][1].update(ecc_uncorrected_volatile=2))
    code, out = run(rec["args"], capsys)
    assert code != 1 and out["verdict"] == "could not check" and out["failed"] == [], out
    why = "none set on a node being checked; GPUACCEPT_TEST_INJECT made what was judged, not the node"
    assert f"test_hooks GPUACCEPT_TEST_INJECT (limit {why})" in out["errors"], out


def test_pcie_replay_growth_is_judged_between_checks(rec, capsys):
    """The replay counter counts since the driver loaded: the node check judges its growth since the
    reading an earlier check kept, per minute, with the suite's judge (``verdicts.memory``)."""
    state = rec["dir"] / "state" / "nodeA" / "pcie.json"
    code, out = run(rec["args"], capsys)  # the first check opens the window: nothing to judge yet
    assert code == 0 and not [r for r in out["results"] if r["metric"] == "pcie_replays_per_min"]
    assert any("pcie_replays_per_min GPU1: the window opens" in s for s in out["skipped"]), out["skipped"]

    def earlier(seconds: float) -> None:  # the kept readings taken `seconds` before this check
        edit(state, lambda d: [s.update(monotonic_s=s["monotonic_s"] - seconds) for s in d["samples"].values()])

    earlier(300)
    code, out = run(rec["args"], capsys)
    judged = {r["subject"]: r for r in out["results"] if r["metric"] == "pcie_replays_per_min"}
    assert code == 0 and judged["1 (00000000:00:07.0)"]["verdict"] == "pass", judged
    earlier(300)
    edit(rec["health"], lambda d: d["gpus"][1]["pcie"].update(replay_counter=100))  # 100 replays in 5 minutes
    code, out = run(rec["args"], capsys)
    [failed] = out["failed"]  # 20 per minute (less the few ms between the checks)
    assert code == 1 and failed.startswith("pcie_replays_per_min GPU1 ") and failed.endswith("(limit <= 8)"), failed
    assert 19.9 <= float(failed.split()[2]) <= 20.0, failed
    earlier(10)  # a window of seconds is kept open, never extrapolated
    edit(rec["health"], lambda d: d["gpus"][1]["pcie"].update(replay_counter=101))
    code, out = run(rec["args"], capsys)
    assert code == 0 and any("GPU1: window 1" in s and "judged from 60 s" in s for s in out["skipped"]), out["skipped"]
    earlier(120)  # the driver reloaded: the counter went down (from the reading kept open), said, never judged
    edit(rec["health"], lambda d: d["gpus"][1]["pcie"].update(replay_counter=3))
    code, out = run(rec["args"], capsys)
    assert any("went down (100 -> 3" in e for e in out["errors"]), out["errors"]
