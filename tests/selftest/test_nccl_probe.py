"""The nccl probe end to end with gloo (2 local ranks), and its test-only faults: slow node, wrong result, hang.

Each case starts two ranks the way the local launcher does (RANK/WORLD_SIZE/MASTER_*), with tiny sizes so
the whole file takes seconds on two CPU cores.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import get_args, get_type_hints

import pytest

from gpuaccept.contracts.nccl_formulas import COLLECTIVES
from gpuaccept.contracts.nccl_payloads import NcclRecord, NcclRow
from gpuaccept.contracts.nccl_sweep import group_tables
from gpuaccept.dispatch.result import parse_records
from gpuaccept.nccl.watchdog import HANG_EXIT, Position, Watchdog, describe_hang
from gpuaccept.probes.specs import NCCL

pytestmark = pytest.mark.selftest

TINY = ["--min-bytes=4K", "--max-bytes=16K", "--iters=2", "--warmup=1", "--trials=1"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args: list[str], env_extra: dict[str, str], timeout: float = 60) -> list[subprocess.CompletedProcess[str]]:
    port = str(_port())
    procs = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "GPUACCEPT_NODE": "fake-node",
            "CUDA_VISIBLE_DEVICES": "",
            **env_extra,
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "gpuaccept.probes.nccl", "--backend=gloo", *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout)
        out.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return out


def _tables(done: list[subprocess.CompletedProcess[str]]):
    stdout = "".join(d.stdout for d in done)
    records = parse_records("nccl", stdout, 2, ("fake-node",))
    return group_tables([SimpleNamespace(rank=r.rank, node=r.node, data=r.data) for r in records])


def test_sweep_runs_and_verifies():
    done = _run([*TINY, "--collectives=all_reduce,all_gather,reduce_scatter,alltoall,broadcast"], {})
    assert [d.returncode for d in done] == [0, 0], done[0].stderr[-2000:]
    (table,) = _tables(done)
    assert table.nodes == ("fake-node",) and len(table.rows) == 10  # 5 collectives x 2 sizes
    assert table.wrong_results() == [] and all(r.busbw > 0 for r in table.rows)
    # what the probe emitted is what its payload types say: each row has exactly its collective's keys
    rows = {get_args(get_type_hints(t)["collective"])[0]: t for t in get_args(NcclRow)}
    assert set(rows) == set(COLLECTIVES)
    for record in parse_records("nccl", "".join(d.stdout for d in done), 2, ("fake-node",)):
        assert set(record.data) == NcclRecord.__required_keys__, set(record.data) ^ NcclRecord.__required_keys__
        comm = NCCL.read(NCCL.validate(record))["communicator"]
        assert comm["outcome"] == "in_group"
        for row in comm["results"]:
            assert set(row) == rows[row["collective"]].__required_keys__, row


def test_slow_node_and_wrong_result_are_seen():
    env = {
        "GPUACCEPT_SELFTEST": "1",
        "GPUACCEPT_FAULT_SLOW_NODE": "fake-node",
        "GPUACCEPT_FAULT_SLOW_S": "0.03",
        "GPUACCEPT_FAULT_CORRUPT_RANK": "1",
    }
    done = _run([*TINY, "--collectives=all_reduce,alltoall"], env)
    assert [d.returncode for d in done] == [0, 0], done[1].stderr[-2000:]
    (table,) = _tables(done)
    assert all(r.time_us >= 30_000 for r in table.rows), "the slowed node sleeps 30 ms per launch"
    wrong = table.wrong_results()
    assert {(w[0], w[2]) for w in wrong} == {("all_reduce", 1), ("alltoall", 1)}, wrong
    assert all(w[3] == 1 and w[4]["index"] == 0 for w in wrong)


def test_hang_ends_every_rank_and_names_the_one_behind():
    env = {"GPUACCEPT_SELFTEST": "1", "GPUACCEPT_FAULT_HANG_RANK": "1"}
    start = time.monotonic()
    done = _run([*TINY, "--collectives=all_reduce", "--op-timeout=3"], env, timeout=40)
    assert time.monotonic() - start < 30
    assert [d.returncode for d in done] == [HANG_EXIT, HANG_EXIT]
    line = next(x for x in done[0].stderr.splitlines() if x.startswith("GPUACCEPT_NCCL_HANG"))
    assert "all_reduce 4 KiB" in line and "behind: rank 1 (fake-node)" in line and "0 ops launched" in line


def test_faults_are_refused_outside_selftests(monkeypatch):
    from gpuaccept.probes import _nccl_faults

    monkeypatch.setenv("GPUACCEPT_FAULT_SLOW_NODE", "x")
    monkeypatch.delenv("GPUACCEPT_SELFTEST", raising=False)
    with pytest.raises(SystemExit, match="is a selftest knob"):
        _nccl_faults.selftest_faults("x", 0, 0)


class _DictStore:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str | bytes) -> None:
        self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)


def test_watchdog_fires_reports_and_exits():
    store, stream, exits = _DictStore(), io.StringIO(), []
    peer = Position(rank=1, node="n2", step=0, what="all_gather 1 MiB", phase="trial 1/3", launched=20)
    store.set("gpuaccept/final/1", __import__("json").dumps(peer.__dict__))
    dog = Watchdog(0, "n1", poll_s=0.05, grace_s=0.3, exit_fn=exits.append, stream=stream)
    dog.set_group([0, 1, 2], ["n1", "n2", "n3"], lambda: store)
    dog.arm("all_gather 1 MiB", 0.1)
    dog.phase("warmup")
    deadline = time.monotonic() + 5
    while not exits and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exits == [HANG_EXIT]
    text = stream.getvalue()
    assert "behind: rank 0 (n1) at all_gather 1 MiB warmup, 0 ops launched" in text
    assert "no answer (dead, stopped or stuck outside Python): rank 2 (n3)" in text
    assert store.check(["gpuaccept/hang"])


def test_watchdog_disarmed_stays_quiet():
    exits: list[int] = []
    dog = Watchdog(0, "n1", poll_s=0.02, exit_fn=exits.append, stream=io.StringIO())
    dog.arm("x", 0.05)
    dog.disarm()
    time.sleep(0.2)
    dog.close()
    assert exits == []


def test_describe_hang_when_every_rank_waits():
    finals = {
        r: Position(rank=r, node=f"n{r}", step=4, what="alltoall 8 GiB", phase="trial 2/3", launched=27) for r in (0, 1)
    }
    text = describe_hang("alltoall 8 GiB", 120, [0, 1], ["n0", "n1"], finals)
    assert "every rank reached alltoall 8 GiB trial 2/3 and launched 27 ops" in text
