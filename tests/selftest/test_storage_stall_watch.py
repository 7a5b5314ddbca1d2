"""A storage step ends at the stall, not at its limit (issue 57 item 1): fio is watched by the bytes its
quarter-second reports say it moved, the clean-ups run under the stall limit, and what a kill cannot end is named.

fio here is a stand-in (``$GPUACCEPT_FIO``) that prints fio's JSON reports the way ``--status-interval=1`` does,
so the watch is timed without a filesystem to break; the real fault (a FUSE mount stopped mid-write) is in
``test_faults_storage.py``.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import time
from pathlib import Path

import pytest

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
