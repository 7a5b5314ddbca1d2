"""The neighbours probe's parts that run without a GPU: the halves, the barrier both halves meet at, the phases
each half's one process goes through (with a fake measure in place of the GPU's), the merge of their figures,
and the names it gives when there is nothing to split or a half does not come back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpuaccept.contracts.neighbours import FIGURES, ratio_pct
from gpuaccept.probes import _neighbour_halves as halves
from gpuaccept.probes import neighbours
from gpuaccept.probes._bench import Preflight
from gpuaccept.probes.specs import NEIGHBOURS
from gpuaccept.verdicts.neighbours import neighbours_absent

pytestmark = pytest.mark.selftest

#: a fake figure's window: long enough that the halves' windows together overlap on a busy CPU
WINDOW_S = 0.15


@pytest.mark.parametrize(
    ("devices", "a", "b"),
    [
        (["0", "1"], ["0"], ["1"]),
        (["0", "1", "2"], ["0"], ["1", "2"]),
        ([str(i) for i in range(8)], list("0123"), list("4567")),
    ],
)
def test_halves_are_disjoint_and_cover_the_node(devices: list[str], a: list[str], b: list[str]) -> None:
    assert halves.split(devices) == {"A": a, "B": b}


def test_barrier_waits_for_every_half(tmp_path: Path) -> None:
    arrived: list[float] = []

    def late() -> None:
        time.sleep(0.3)
        halves.barrier(tmp_path, "matmul", "B", 2, timeout_s=5)

    thread = threading.Thread(target=late)
    started = time.monotonic()
    thread.start()
    halves.barrier(tmp_path, "matmul", "A", 2, timeout_s=5)
    arrived.append(time.monotonic() - started)
    thread.join()
    assert arrived[0] >= 0.25


def test_barrier_names_who_arrived_when_a_half_never_does(tmp_path: Path) -> None:
    with pytest.raises(TimeoutError, match=r"barrier hbm: 2 halves expected within 0.2 s, arrived: \['A'\]"):
        halves.barrier(tmp_path, "hbm", "A", 2, timeout_s=0.2)


def test_barrier_gives_up_at_once_when_the_other_half_failed(tmp_path: Path) -> None:
    """A half that said it failed is not waited for: the barrier names it and its why long before the timeout;
    this half's own failure file does not stop it."""
    (tmp_path / "failed.B").write_text("neighbours half B: no CUDA device visible")
    (tmp_path / "failed.A").write_text("never read by A")
    started = time.monotonic()
    with pytest.raises(halves.HalfGone, match=r"barrier start: half B failed: neighbours half B: no CUDA device"):
        halves.barrier(tmp_path, "start", "A", 2, timeout_s=30, failed=tmp_path)
    assert time.monotonic() - started < 1


def test_each_half_measures_alone_once_then_both_together() -> None:
    """The schedule: A alone, B alone, both; every phase has a half measuring, and each half measures alone in
    exactly one phase and together in one."""
    assert [(name, kind, measuring) for name, kind, measuring in halves.PHASES] == [
        ("solo-A", "solo", ("A",)),
        ("solo-B", "solo", ("B",)),
        ("together", "together", ("A", "B")),
    ]
    for half in halves.HALVES:
        kinds = [kind for _, kind, measuring in halves.PHASES if half in measuring]
        assert kinds == ["solo", "together"]


def test_the_time_limits_cover_one_run_and_the_spec_covers_them() -> None:
    """One child per half for the whole run: start-up and the wait for the other half's paid once, then three
    phases of three figures (window + 1 s warm-up + 4 s buffers each); the step's limit holds that and the
    parent's start-up."""
    assert halves.phase_limit(3) == 3 * (3 + 5)
    assert halves.run_limit(3) == 60 + 60 + 3 * 24
    assert NEIGHBOURS.limit(["--seconds", "3"], 4).seconds >= halves.run_limit(3) + 30
    assert NEIGHBOURS.limit(["--seconds", "10"], 8).seconds >= halves.run_limit(10) + 30


class _Tape:
    """A fake GPU per half: what each ``measure`` did, in wall-clock time (when it touched its GPUs, when its
    window opened and closed), and how often each half looked for others' processes."""

    def __init__(self) -> None:
        self.calls: dict[str, list[tuple[str, float, float, float]]] = {"A": [], "B": []}
        self.looks: dict[str, int] = {"A": 0, "B": 0}

    def measure(self, half: str) -> halves.Measure:
        def measure(figure: str, ready: Any) -> tuple[list[float], int, float]:
            touched = time.monotonic()
            time.sleep(0.02)  # buffers and warm-up
            ready()
            opened = time.monotonic()
            time.sleep(WINDOW_S)
            closed = time.monotonic()
            self.calls[half].append((figure, touched, opened, closed))
            alone_or_not = 100.0 if len(self.calls[half]) <= len(FIGURES) else 90.0
            return [alone_or_not + (half == "B")], 7, round(closed - opened, 3)

        return measure

    def busy(self, half: str) -> Any:
        def busy() -> list[dict[str, Any]]:
            self.looks[half] += 1
            return [{"gpu": 0 if half == "A" else 1, "pci_bus_id": None, "processes": [{"pid": self.looks[half]}]}]

        return busy


def _both(folder: Path, tape: _Tape, late_b: float = 0.0) -> dict[str, dict[str, dict[str, Any]]]:
    """Both halves through every phase, each in a thread of its own (B starting ``late_b`` s after A)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    errors: list[BaseException] = []

    def half(name: str, delay: float) -> None:
        time.sleep(delay)
        try:
            out[name] = halves.run_half(name, folder, WINDOW_S, tape.measure(name), tape.busy(name))
        except BaseException as exc:  # the test thread's failure is the test's
            errors.append(exc)

    threads = [threading.Thread(target=half, args=(n, late_b if n == "B" else 0.0), daemon=True) for n in halves.HALVES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    return out


def test_a_half_never_touches_its_gpus_while_the_other_measures_alone(tmp_path: Path) -> None:
    """One process per half runs every phase: B waits (no measure call) until A's last window alone has closed,
    A waits until B's has, and only then do both measure together, each figure in overlapping windows."""
    tape = _Tape()
    out = _both(tmp_path, tape)
    a, b = tape.calls["A"], tape.calls["B"]
    assert [c[0] for c in a] == [c[0] for c in b] == list(FIGURES) * 2
    a_solo, a_together, b_solo, b_together = a[:3], a[3:], b[:3], b[3:]
    assert max(c[3] for c in a_solo) < min(c[1] for c in b_solo), "B touched its GPUs while A measured alone"
    assert max(c[3] for c in b_solo) < min(c[1] for c in a_together), "A touched its GPUs while B measured alone"
    assert max(c[3] for c in b_solo) < min(c[1] for c in b_together)
    for (figure, _, a_open, a_close), (_, _, b_open, b_close) in zip(a_together, b_together, strict=True):
        assert a_open < b_close and b_open < a_close, f"{figure}: the halves' windows together do not overlap"
        assert abs(a_open - b_open) < 0.1, f"{figure}: the windows together opened {a_open - b_open:+.3f} s apart"
    assert tape.looks == {"A": 2, "B": 2}  # others' processes looked for as each measuring phase began
    for name, first in (("A", 100.0), ("B", 101.0)):
        assert out[name]["solo"]["figures"] == {f: [first] for f in FIGURES}
        assert out[name]["together"]["figures"] == {f: [first - 10] for f in FIGURES}
        assert out[name]["solo"]["busy"][0]["processes"] == [{"pid": 1}]
        assert out[name]["together"]["busy"][0]["processes"] == [{"pid": 2}]
        assert set(out[name]["together"]["windows"]) == set(FIGURES)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["solo-A", "solo-B", "together"]


def test_a_half_waits_for_the_other_to_start(tmp_path: Path) -> None:
    """A starts measuring alone only once B has its CUDA contexts open (the start barrier): B's start-up is
    part of the node A is measured on."""
    tape = _Tape()
    started = time.monotonic()
    _both(tmp_path, tape, late_b=0.4)
    assert tape.calls["A"][0][1] - started >= 0.35


def _fake_torch() -> Any:
    """What ``child`` asks of torch before it measures: one CUDA device, a context opened on it."""
    cuda = SimpleNamespace(is_available=lambda: True, device_count=lambda: 1, synchronize=lambda device: None)
    return SimpleNamespace(cuda=cuda, device=lambda kind, index: f"{kind}:{index}", empty=lambda *a, **k: None)


def test_the_record_holds_each_half_alone_and_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each half's ``child`` (torch and the GPU's measure faked, threads for processes) writes its one run for
    the parent, and ``collect`` turns both into the record the judge reads: figures alone from the half's solo
    phase, together from the together phase."""
    tape = _Tape()

    def fake_measure(torch: Any, devices: list[Any], seconds: float, figure: str, ready: Any) -> Any:
        assert devices == ["cuda:0"]
        return tape.measure(threading.current_thread().name)(figure, ready)

    def fake_run(split: dict[str, list[str]], folder: Path, seconds: float) -> dict[str, dict[str, Any]]:
        assert split == {"A": ["0"], "B": ["1"]}
        monkeypatch.setattr(neighbours, "visible_devices", lambda: ["0"])  # each child sees its half only
        args = (folder, seconds)
        threads = [threading.Thread(target=neighbours.child, name=n, args=(n, *args), daemon=True) for n in split]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        return {name: json.loads((folder / f"{name}.json").read_text()) for name in split}

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setitem(sys.modules, "torch", _fake_torch())
    monkeypatch.setattr(neighbours, "_measure", fake_measure)
    monkeypatch.setattr(neighbours, "_run", fake_run)
    monkeypatch.setattr(neighbours, "preflight", lambda count: Preflight(None, [], []))
    record = neighbours.collect(seconds=WINDOW_S)
    assert record.why is None and record.halves == {"A": [0], "B": [0]}
    assert [(g.half, g.solo["matmul"], g.together["matmul"]) for g in record.gpus] == [
        ("A", 100.0, 90.0),
        ("B", 101.0, 91.0),
    ]
    assert record.gpus[0].ratio_pct == {f: 90.0 for f in FIGURES} and record.busy == []


class _Nvml:
    """NVML's process lists per GPU handle, as a test sets them."""

    def __init__(self, lists: dict[int, list[int]]) -> None:
        self.lists = lists

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in self.lists[handle]]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[Any]:
        return []

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        return f"proc{pid}"


def test_a_half_tells_its_own_context_from_a_neighbour(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a half's contexts are open NVML lists it on its GPUs; it must not be named busy on them, while a
    process of someone else's still is, whether NVML gives this namespace's pids or (a container) the host's."""
    gpus = [{"index": 0, "pci_bus_id": "b0"}, {"index": 1, "pci_bus_id": "b1"}]
    me, host_me, other = os.getpid(), 990001, 990002
    lib = _Nvml({0: [other], 1: []})
    pre = Preflight(lib, [0, 1], gpus)
    before = neighbours._pids(pre)
    lib.lists = {0: [other, me], 1: [me]}  # NVML in this pid namespace
    own = neighbours._own_pids(pre, before)
    assert own == {me}
    assert [(b["gpu"], [p["pid"] for p in b["processes"]]) for b in neighbours._busy(pre, own)] == [(0, [other])]
    lib.lists = {0: [other, host_me], 1: [host_me]}  # a container: NVML gives host pids
    own = neighbours._own_pids(pre, before)
    assert own == {host_me}
    assert [(b["gpu"], [p["pid"] for p in b["processes"]]) for b in neighbours._busy(pre, own)] == [(0, [other])]
    lib.lists = {0: [other, host_me, 990003], 1: [host_me]}  # a newcomer on one GPU is still someone else's
    assert neighbours._own_pids(pre, before) == {host_me}


def test_ratio_is_together_over_alone() -> None:
    assert ratio_pct(700.0, 385.0) == 55.0
    assert ratio_pct(None, 1.0) is None and ratio_pct(0.0, 1.0) is None


def test_fewer_than_two_gpus_is_said_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    record = neighbours.collect(seconds=1)
    assert record.gpus == [] and record.why == "1 GPU(s) visible: two halves need at least 2"
    assert neighbours_absent(1, "node1") == (
        "node1 declares 1 GPU: two tenants side by side need at least 2 GPUs (two halves)"
    )
    assert neighbours_absent(2, "node1") is None


def _proc(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def test_a_hung_half_is_killed_soon_after_the_other_failed() -> None:
    """The other half of a failed one is given ``grace`` to see the failure at its barrier, then killed: the
    probe never waits out the whole run's limit for a half that cannot finish."""
    procs = {"A": _proc("raise SystemExit(1)"), "B": _proc("import time; time.sleep(60)")}
    started = time.monotonic()
    wrong = neighbours._wait(procs, limit=60, grace=0.5)
    assert time.monotonic() - started < 10
    assert wrong == {"A": "exit status 1", "B": "still running 0.5 s after half A exited (1), killed"}


def test_a_half_stopped_by_the_other_and_one_past_the_limit_are_told_apart() -> None:
    procs = {"A": _proc(f"raise SystemExit({neighbours.STOPPED})"), "B": _proc("raise SystemExit(0)")}
    assert neighbours._wait(procs, limit=30, grace=30) == {"A": "stopped because the other half failed"}
    procs = {"A": _proc("import time; time.sleep(60)"), "B": _proc("raise SystemExit(0)")}
    assert neighbours._wait(procs, limit=0.5, grace=30) == {"A": "still running after 0.5 s, killed"}


def test_halves_without_cuda_give_a_why_naming_each_half(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real children started on a machine without CUDA: each exits saying so in its failure file, and the
    record's ``why`` names each half, its CUDA_VISIBLE_DEVICES and what it said (the judge's ERROR)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    record = neighbours.collect(seconds=0.1)
    assert record.gpus == []
    assert record.why == (
        "half A (CUDA_VISIBLE_DEVICES=0): exit status 1: neighbours half A: no CUDA device visible "
        "(CUDA_VISIBLE_DEVICES=0); half B (CUDA_VISIBLE_DEVICES=1): exit status 1: neighbours half B: no CUDA "
        "device visible (CUDA_VISIBLE_DEVICES=1)"
    )
