"""A storage step ends at the stall, not at its limit (issue 57 item 1): fio is watched by the bytes its
quarter-second reports say it moved, the clean-ups run under the stall limit, and what a kill cannot end is named:
fio's processes, and the forked child the probes' own I/O runs in (``_stall.run``).

fio here is a stand-in (``$GPUACCEPT_FIO``) that prints fio's JSON reports the way ``--status-interval=1`` does,
so the watch is timed without a filesystem to break; the real fault (a FUSE mount stopped mid-write) is in
``test_faults_storage.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import stat
import sys
import time
from pathlib import Path

import pytest

from gpuaccept.contracts.fsmeta import WaitTimeout
from gpuaccept.probes import _stall, fio

FAKE = """#!{python}
import json, sys, time
if "--version" in sys.argv:
    print("fio-3.33")
    sys.exit(0)
rw = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--rw="))
size = int(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--size=")))
def report(moved, ms):
    print(json.dumps({{"jobs": [{{rw: {{"io_bytes": moved, "runtime": ms}}}}]}}), flush=True)
for step in range({reports}):
    report((step + 1) << 20, 100 * (step + 1))
    time.sleep({every})
if {hang}:
    time.sleep(600)
report(size, 1000)
"""


def _fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, reports: int, every: float, hang: bool) -> None:
    script = tmp_path / "fio"
    script.write_text(FAKE.format(python=sys.executable, reports=reports, every=every, hang=hang))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("GPUACCEPT_FIO", str(script))


def _args(path: Path, stall_s: float, max_s: float = 120.0) -> argparse.Namespace:
    return argparse.Namespace(
        path=str(path),
        token="t",
        rw="write",
        peers="",
        jobs=1,
        file_mib=8,
        direct=False,
        max_s=max_s,
        stall_limit=stall_s,
    )


def test_fio_that_stops_moving_is_named_at_the_stall_limit_not_its_runtime_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake(tmp_path, monkeypatch, reports=2, every=0.2, hang=True)
    (tmp_path / "fs").mkdir()
    started = time.monotonic()
    payload = fio.measure(_args(tmp_path / "fs", stall_s=1.5))
    took = time.monotonic() - started
    assert payload.run is None and payload.problem is not None and payload.problem.kind == "stalled"
    detail = payload.problem.detail
    assert "fio write in " in detail and str(tmp_path / "fs") in detail, detail
    assert "at write, 2 of 8 MiB moved" in detail, detail
    # the stall limit (1.5 s) after its last report, plus the kill's 2 s: far below its 120 s runtime cap
    assert took < 1.5 + 0.4 + 2.0 + 3.0, took


def test_fio_that_keeps_moving_runs_past_the_stall_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, monkeypatch, reports=6, every=0.5, hang=False)
    (tmp_path / "fs").mkdir()
    payload = fio.measure(_args(tmp_path / "fs", stall_s=1.5))
    assert payload.problem is None and payload.run is not None, payload
    assert payload.run.bytes == 8 << 20 and payload.run.wall_s > 1.5


def test_the_clean_up_runs_under_the_stall_limit(tmp_path: Path) -> None:
    tree = tmp_path / "gpuaccept-t" / "node1"
    tree.mkdir(parents=True)
    (tree / "a").write_bytes(b"x")
    _stall.remove(tmp_path / "gpuaccept-t", 5.0)
    assert not (tmp_path / "gpuaccept-t").exists()
    _stall.remove(tmp_path / "gpuaccept-t", 5.0)  # nothing left to remove is not an error

    def hang(progress: _stall.Progress) -> None:
        progress.at("unlink", tmp_path / "x")
        time.sleep(30)

    started = time.monotonic()
    with pytest.raises(_stall.Stalled, match=r"unlink .*/x did not return within 0.5 s"):
        _stall.run(hang, step="clean-up", limit_s=0.5)
    assert time.monotonic() - started < 5


def test_what_a_kill_did_not_end_is_named() -> None:
    assert _stall.stuck([(os.getpid(), "this test")]) is None  # running, not in the kernel
    named = _stall.stuck([(os.getpid(), "this test")], killed=True)
    assert named is not None and f"this test (pid {os.getpid()}) in state R" in named
    assert _stall.stuck([(2**22 + 7, "gone")], killed=True) is None


def test_a_child_the_kill_does_not_end_is_named_and_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The I/O child blocks on a FIFO nobody writes; its SIGKILL is made to do nothing (a child asleep in the
    kernel, state D, is what cannot be made here): the watch still returns at the limit, plus the exit wait,
    naming the child's pid and the state /proc shows for it, and leaves it."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(_stall, "_kill", lambda pid: None)
    started = time.monotonic()
    with pytest.raises(_stall.Stalled) as stalled:
        _stall.call(lambda: os.open(fifo, os.O_RDONLY), step="open", operation="open", path=fifo, limit_s=0.5)
    took = time.monotonic() - started
    assert 0.5 <= took < 0.5 + _stall.EXIT_WAIT_S + 3.0  # 3 s for CI's loaded cores
    left = stalled.value.record.stuck
    assert left is not None, "the child the kill did not end is named"
    named = re.search(r"this probe's I/O child \(pid (\d+)\) in state (\w)\b", left)
    assert named is not None, left
    pid = int(named[1])
    try:
        assert named[2] == "S"  # asleep in the FIFO's open, as /proc/<pid>/stat says
        assert os.waitpid(pid, os.WNOHANG) == (0, 0), "left running, not waited on"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_the_child_hands_back_its_value_its_error_and_what_it_kept() -> None:
    """The work runs in another process: its value and its exception (a TimedOut with its record) come back
    pickled, the parent's objects are not changed by it, and what it kept before a stall is the stall's."""
    seen = [0]

    def counts(progress: _stall.Progress) -> int:
        seen[0] += 1  # the child's copy
        return 41 + seen[0]

    assert _stall.run(counts, step="s", limit_s=5) == 42 and seen == [0]
    record = WaitTimeout(step="wait", path="/x", limit_s=1.0, waited_s=1.0, last_seen="missing")

    def late(progress: _stall.Progress) -> None:
        raise _stall.TimedOut(record)

    with pytest.raises(_stall.TimedOut) as timed_out:
        _stall.run(late, step="s", limit_s=5)
    assert timed_out.value.record == record

    def keeps(progress: _stall.Progress) -> None:
        progress.keep({"rounds": 3})
        progress.step = "round 4"
        progress.at("open", "/x/a.4")
        time.sleep(30)

    with pytest.raises(_stall.Stalled) as stalled:
        _stall.run(keeps, step="s", limit_s=0.5)
    assert stalled.value.kept == {"rounds": 3}
    assert (stalled.value.record.step, stalled.value.record.path) == ("round 4", "/x/a.4")
