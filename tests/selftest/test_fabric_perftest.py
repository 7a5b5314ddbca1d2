"""perftest: output parsing (fixtures/perftest/), the pairing schedule at 64 x 8, the second pass, the probe.

The probe runs against stand-in ``ib_write_bw``/``ib_write_lat`` scripts that replay the fixtures (no
machine here has an RDMA device): what is tested is the plan, roles, retries, deadlines and parsing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuaccept.dispatch.result import parse_records
from gpuaccept.fabric import schedule
from gpuaccept.fabric.perftest import PerftestError, failure_kind, parse_bw, parse_lat, supports_cuda
from gpuaccept.fabric.rdma import PairResult, missing_tools, pair_results
from gpuaccept.judging.judge import Judge
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.verdicts.fabric import blame, judge_hca_blame, judge_rdma_pairs, judge_rdma_unpaired

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "fixtures" / "perftest"


def text(name: str) -> str:
    return (FIX / f"{name}.txt").read_text()


def test_parse_bandwidth_in_both_units() -> None:
    gpu = parse_bw(text("ib_write_bw-client-ndr-cuda"))
    figures = (gpu["size"], gpu["average"], gpu["unit"], gpu["gpu_memory"], gpu["cuda_device"], gpu["average_gbps"])
    assert figures == (8388608, 391.62, "Gb/sec", True, 0, 391.62)
    assert gpu["info"]["Device"] == "mlx5_0" and gpu["info"]["Link type"] == "IB"
    host = parse_bw(text("ib_write_bw-client-host-mibs-degraded"))
    assert host["unit"] == "MiB/sec" and not host["gpu_memory"] and round(host["average_gbps"], 2) == 195.97
    assert parse_bw(text("ib_write_bw-server-ndr-cuda"))["average"] == 391.62


def test_parse_latency() -> None:
    lat = parse_lat(text("ib_write_lat-client-ndr"))
    assert (lat["size"], lat["iterations"], lat["t_typical"], lat["p99"], lat["p999"]) == (2, 10000, 1.06, 1.24, 3.91)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("debian-4.5-0.17-no-device", "no RDMA device visible"),
        ("ib_write_bw-client-connect-fail", "could not reach the server's port"),
        ("ib_write_bw-client-killed", "killed at the deadline"),
    ],
)
def test_failed_runs_are_errors_with_perftest_reason(name: str, why: str) -> None:
    with pytest.raises(PerftestError):
        parse_bw(text(name))
    assert failure_kind(text(name)).startswith(why)


def test_cuda_support_from_help() -> None:
    assert not supports_cuda(text("debian-4.5-0.17-ib_write_bw-help"))  # the real Debian build
    assert supports_cuda("      --use_cuda=<cuda device id> Use CUDA specific device for GPUDirect RDMA testing")


def test_schedule_64_nodes_8_hcas_two_rounds_no_hca_twice() -> None:
    hcas = {f"gpu-{i:03d}": [f"mlx5_{k}" for k in range(8)] for i in range(64)}
    rounds = schedule.first_pass(hcas)
    assert len(rounds) == 2 and [len(r) for r in rounds] == [256, 256]
    for batch in rounds:
        ends = [e for p in batch for e in (p.server, p.client)]
        assert len(ends) == len(set(ends)) == 512  # every HCA exactly once per round
        ports = [(p.server[0], p.port) for p in batch]
        assert len(ports) == len(set(ports))  # no two servers on one node share a port
        assert all(p.server[1] == p.client[1] for p in batch)  # rail-aligned
    partners: dict[tuple[str, str], set[str]] = {}
    for batch in rounds:
        for p in batch:
            partners.setdefault(p.server, set()).add(p.client[0])
            partners.setdefault(p.client, set()).add(p.server[0])
    assert all(len(v) == 2 for v in partners.values())  # two different partner nodes each
    assert schedule.untested(hcas, rounds) == []


def test_schedule_odd_and_tiny_allocations() -> None:
    three = {n: ["mlx5_0", "mlx5_1"] for n in ("a", "b", "c")}
    rounds = schedule.first_pass(three)
    assert len(rounds) == 3 and schedule.untested(three, rounds) == []
    two = {"a": ["mlx5_0", "mlx5_1"], "b": ["mlx5_0"]}
    assert schedule.untested(two, schedule.first_pass(two)) == [("a", "mlx5_1")]
    assert schedule.first_pass({"a": ["mlx5_0"]}) == []


def test_second_pass_convicts_the_bad_hca_not_its_partners() -> None:
    hcas = {n: [f"mlx5_{k}" for k in range(2)] for n in ("n1", "n2", "n3", "n4")}
    first = {p: p.label().count("n3 mlx5_1") == 0 for batch in schedule.first_pass(hcas) for p in batch}
    assert sum(not ok for ok in first.values()) == 2  # n3 mlx5_1 failed with both neighbours
    rounds = schedule.second_pass(first, hcas)
    retests = [p for batch in rounds for p in batch]
    for batch in rounds:
        ends = [e for p in batch for e in (p.server, p.client)]
        assert len(ends) == len(set(ends))
    second = {p: ("n3", "mlx5_1") not in (p.server, p.client) for p in retests}
    verdicts = blame(first, second)
    assert verdicts[("n3", "mlx5_1")].verdict == "at_fault"
    assert {e for e, b in verdicts.items() if b.verdict == "cleared"} == {("n2", "mlx5_1"), ("n4", "mlx5_1")}


def test_plan_round_trip_and_bad_entry() -> None:
    batch = schedule.first_pass({"a": ["mlx5_0"], "b": ["mlx5_0"]})[0]
    assert schedule.parse_plan(schedule.format_plan(batch)) == batch
    with pytest.raises(ValueError, match="bad perftest plan entry 'a/mlx5_0-b'"):
        schedule.parse_plan("a/mlx5_0-b")


def test_results_from_both_ends_and_missing_tools() -> None:
    p = schedule.Pairing(("n1", "mlx5_0"), ("n2", "mlx5_0"), 18515)
    client = {
        "hca": "mlx5_0",
        "role": "client",
        "partner": "n1/mlx5_0",
        "port": 18515,
        "memory": "cuda",
        "bw": {"average_gbps": 391.6},
        "lat": {"p99": 1.24, "t_typical": 1.06},
    }
    server = {"hca": "mlx5_0", "role": "server", "partner": "n2/mlx5_0", "port": 18515, "bw": {"average_gbps": 391.6}}
    recs = [
        SimpleNamespace(node="n1", data={"endpoints": [server]}),
        SimpleNamespace(node="n2", data={"endpoints": [client]}),
    ]
    got = pair_results(recs)[p]
    assert got.ran and got.bw_gbps == 391.6 and got.lat_p99_us == 1.24 and got.memory == "cuda" and not got.errors
    gap = missing_tools(
        [SimpleNamespace(node="n3", data={"missing": ["ib_write_bw"], "hint": "apt-get install perftest"})]
    )
    assert gap == {"n3": "ib_write_bw not found (apt-get install perftest)"}


def test_pairs_and_blame_judged_by_the_area_module() -> None:
    """test_rdma_perftest's judging (``verdicts.fabric``) on four nodes whose n3 HCA writes at half rate:
    its pairs fail by bandwidth, the second pass convicts it and clears its partners, a node without an
    HCA fails ``rdma_pair_ran``."""
    limits = Judge(load_thresholds(), lambda node: "H100-SXM-80GB", lambda result: None, "selftest")
    hcas = {n: ["mlx5_0"] for n in ("n1", "n2", "n3", "n4")}
    rates = {n: {"mlx5_0": 400.0} for n in hcas}

    def measured(batch: list[schedule.Pairing]) -> dict[schedule.Pairing, PairResult]:
        slow = [("n3", "mlx5_0") in (p.server, p.client) for p in batch]
        return {p: PairResult(p, 195.0 if s else 391.6, 1.2, 1.0, "cuda") for p, s in zip(batch, slow, strict=True)}

    plan = schedule.first_pass(hcas)
    first = judge_rdma_pairs(limits, {p: r for b in plan for p, r in measured(b).items()}, rates, gpu_memory=True)
    assert {p.label() for p, ok in first.items() if not ok} == {p.label() for p in first if "n3" in p.label()}
    second: dict[schedule.Pairing, bool] = {}
    for batch in schedule.second_pass(first, hcas):
        second.update(judge_rdma_pairs(limits, measured(batch), rates, gpu_memory=True))
    judge_hca_blame(limits, first, second, lost=())
    judge_rdma_unpaired(limits, ["n5"], [], {})
    verdicts = {(r.node, r.metric): r.value for r in limits.results if r.metric.endswith(("_verdict", "_ran"))}
    assert verdicts[("n3", "rdma_hca_verdict")] == "at fault"
    assert verdicts[("n2", "rdma_hca_verdict")] == verdicts[("n4", "rdma_hca_verdict")] == "not at fault"
    assert verdicts[("n5", "rdma_pair_ran")].startswith("no active compute HCA")
    slow = [f for f in limits.failures() if f.metric.startswith("rdma_write_bw")]
    assert {f.node for f in slow} == {"n1", "n2", "n3", "n4"}  # both ends of a pair get its figure...
    assert all(f.node == "n3" or "(with n3 mlx5_0)" in str(f.subject) for f in slow)  # ...only pairs with n3


STANDIN = """#!/usr/bin/env python3
import sys, time, os
args = sys.argv[1:]
if args == ["-h"]:
    print("      --use_cuda=<cuda device id> Use CUDA specific device"); sys.exit(0)
client = not args[-1].startswith("-") and args[-2] not in ("-d", "-p", "-s", "-D", "-n")
tool = os.path.basename(sys.argv[0])
with open(os.environ["STANDIN_LOG"], "a") as fh:
    fh.write(tool + " " + ("client " if client else "server ") + " ".join(args) + "\\n")
fix = os.environ["STANDIN_FIX"]
def refuse_once():
    # O_EXCL: the two clients run at once, and only the first to get here is refused (exists-then-create
    # let both through once, and the test counted four client calls instead of three).
    try:
        os.close(os.open(os.environ["STANDIN_LOG"] + ".retried", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False
if tool == "ib_write_lat":
    print(open(fix + "/ib_write_lat-client-ndr.txt").read())
elif client and refuse_once():
    sys.stderr.write("Couldn't connect to 127.0.0.1:18515\\n"); sys.exit(1)
else:
    print(open(fix + ("/ib_write_bw-client-ndr-cuda.txt" if client else "/ib_write_bw-server-ndr-cuda.txt")).read())
"""


def test_probe_runs_server_and_client_with_retry(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ib_write_bw", "ib_write_lat"):
        (bin_dir / tool).write_text(STANDIN)
        (bin_dir / tool).chmod(0o755)
    plan = "node1/mlx5_0>node2/mlx5_0@18515,node1/mlx5_1>node2/mlx5_1@18516"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "STANDIN_LOG": str(tmp_path / "calls.log"),
        "STANDIN_FIX": str(FIX),
    }
    out = {}
    for node in ("node1", "node2"):
        done = subprocess.run(
            [sys.executable, "-m", "gpuaccept.probes.perftest", f"--plan={plan}", "--timeout=20"],
            env={**env, "GPUACCEPT_NODE": node, "SLURMD_NODENAME": node},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        out[node] = parse_records("perftest", done.stdout, 1, (node,))[0].data
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert sum(c.startswith("ib_write_bw client") for c in calls) == 3  # one refused, retried
    assert any("-d mlx5_1 -p 18516" in c for c in calls) and any("-p 18580" in c for c in calls)  # lat port +64
    records = [SimpleNamespace(node=n, data=d) for n, d in out.items()]
    results = pair_results(records)
    assert len(results) == 2 and all(r.ran and r.bw_gbps == 391.62 and r.lat_p99_us == 1.24 for r in results.values())
    assert {e["role"] for e in out["node2"]["endpoints"]} == {"client"} and out["node1"]["cuda_build"] is True
