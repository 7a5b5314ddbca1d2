"""Filesystem calls under a stall limit, for the storage probes (fsmeta, coherency, mounts).

A call on a hung mount (an NFS server gone, a Lustre OST evicted) blocks in the kernel and never returns:
a probe that made it in its main thread would hang until its step's limit and report nothing, and the
test could not say which path or call hung. So the probes' filesystem work runs in a daemon worker thread
and the main thread waits on it: when one call has been running longer than the limit, ``run`` raises
``Stalled`` naming the step, the call and the path; the probe emits that and leaves with ``os._exit``
(``leave``), since the stuck thread cannot be joined and the interpreter's normal exit would wait on it.

The default limit is 60 s: NVIDIA's 2026 cloud requirements count an I/O request stalled beyond 60 s as
unavailability. The limit is per call, not per piece of work: a loop of a hundred thousand creates may run
for minutes as long as each create returns. Starting a thread per call would cost tens of microseconds, as
much as a create on a local disk, and would bend the rates fsmeta measures; so one worker runs a whole
loop and says before each call what it is about to do (``Progress.at``, an attribute store and a clock
read), and the watching thread times that call. A single call has ``call``.

On Linux an NFS call blocked in the kernel still dies with the process (its waits are killable); a
filesystem whose waits are not (a FUSE request its daemon had already taken when it stopped) keeps the
thread in uninterruptible sleep (state D) until the call returns: ``stuck`` names it in the record, and the
result line is out before the probe leaves.

A tool the probe runs as a process of its own (fio) is watched by what it reports (``watch``): the process
is killed, with its process group, once its progress stops for the limit, and what survives SIGKILL in
state D is named, not waited on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from gpuaccept.contracts.fsmeta import StallRecord, WaitTimeout
from gpuaccept.timelimits import STALL_S

__all__ = [
    "STALL_BASIS",
    "STALL_LIMIT_S",
    "Progress",
    "Stalled",
    "TimedOut",
    "call",
    "leave",
    "remove",
    "run",
    "step_token",
    "stuck",
    "watch",
]

T = TypeVar("T")

#: the longest one filesystem call may take before the probe reports it stalled (``timelimits.STALL_S``)
STALL_LIMIT_S = STALL_S
#: where that limit comes from, for the probes' specs and docs
STALL_BASIS = "NVIDIA's 2026 cloud requirements: an I/O request stalled beyond 60 s counts as unavailability"


class Stalled(Exception):
    """A filesystem call that did not return within the limit; ``record`` is what the probe emits."""

    def __init__(self, record: StallRecord) -> None:
        left = f"; {record.stuck}" if record.stuck else ""
        super().__init__(
            f"{record.step}: {record.operation} {record.path} did not return within {record.limit_s:g} s{left}"
        )
        self.record = record


class TimedOut(Exception):
    """A wait for the other rank that ran out while every call returned (``WaitTimeout``)."""

    def __init__(self, record: WaitTimeout) -> None:
        seen = f" (last look: {record.last_seen})" if record.last_seen else ""
        super().__init__(f"{record.step}: {record.path} not there after {record.waited_s:.1f} s{seen}")
        self.record = record


@dataclass(frozen=True)
class _Now:
    operation: str
    path: str
    since: float  # time.monotonic() when the call started


class Progress:
    """What the worker is doing: ``at`` before each filesystem call, ``idle`` while it sleeps between looks
    (a sleep is not a call, and a wait's own deadline, not the stall limit, bounds it). ``step``, when the work
    sets it, names the part of a longer piece of work a stall is reported in ("round 3: wait for b.3")."""

    __slots__ = ("_now", "step")

    def __init__(self) -> None:
        self._now: _Now | None = None
        self.step: str | None = None

    def at(self, operation: str, path: str | os.PathLike[str]) -> None:
        # one reference store: the watching thread reads a whole _Now or the previous one, never a mix
        self._now = _Now(operation, os.fspath(path), time.monotonic())

    def idle(self) -> None:
        self._now = None

    @property
    def now(self) -> _Now | None:
        return self._now


class _Outcome(Generic[T]):
    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: T | None = None
        self.error: BaseException | None = None


def run(work: Callable[[Progress], T], *, step: str, limit_s: float = STALL_LIMIT_S) -> T:
    """``work(progress)`` in a daemon thread; its value, or its exception raised here.

    ``Stalled`` when one call ``work`` announced with ``progress.at`` has run ``limit_s`` without returning
    (the thread is left behind, blocked: leave the process soon after). Between calls the watch sleeps until
    the current call's deadline, so a loop of fast calls costs the watch nothing.
    """
    progress = Progress()
    outcome: _Outcome[T] = _Outcome()

    def target() -> None:
        try:
            outcome.value = work(progress)
        except BaseException as exc:  # handed to the waiting thread, which raises it
            outcome.error = exc
        finally:
            outcome.done.set()

    worker = threading.Thread(target=target, name=f"fs:{step}", daemon=True)
    worker.start()
    while not outcome.done.is_set():
        now = progress.now
        if now is None:
            outcome.done.wait(min(limit_s, 1.0))
            continue
        waited = time.monotonic() - now.since
        if waited >= limit_s:
            if outcome.done.is_set() or progress.now is not now:
                continue  # it returned just now
            raise Stalled(
                StallRecord(
                    step=progress.step or step,
                    operation=now.operation,
                    path=now.path,
                    limit_s=limit_s,
                    waited_s=round(waited, 3),
                    stuck=stuck([(worker.native_id, "this probe's worker thread")] if worker.native_id else []),
                )
            )
        outcome.done.wait(limit_s - waited)
    if outcome.error is not None:
        raise outcome.error
    return outcome.value  # type: ignore[return-value]  # set whenever no error was


def call(
    fn: Callable[[], T], *, step: str, operation: str, path: str | os.PathLike[str], limit_s: float = STALL_LIMIT_S
) -> T:
    """One filesystem call under the limit: ``fn()``, or ``Stalled`` naming ``operation`` on ``path``."""

    def work(progress: Progress) -> T:
        progress.at(operation, path)
        return fn()

    return run(work, step=step, limit_s=limit_s)


def _stat(task: int) -> list[str] | None:
    """A process's or thread's ``/proc/<id>/stat`` fields after its name (state, parent, ...), None when gone."""
    try:
        return Path(f"/proc/{task}/stat").read_text().rsplit(")", 1)[1].split()  # the name may hold spaces
    except OSError:
        return None


def stuck(tasks: list[tuple[int, str]], *, killed: bool = False) -> str | None:
    """Which of ``tasks`` (id, what it is) a kill cannot end: asleep uninterruptibly in the kernel (state D), or
    (``killed``: SIGKILL already sent) alive at all. They are named and left; None when there is none."""
    found = []
    for task, what in tasks:
        state = (_stat(task) or ["gone"])[0]
        if state == "D" or (killed and state not in ("gone", "Z", "X")):
            found.append(f"{what} (pid {task}) in state {state}")
    return "; ".join(found) + ": in the kernel, a kill does not end it, left" if found else None


def _descendants(pid: int) -> list[int]:
    """``pid``'s children and theirs (fio's job processes), from /proc: each one's parent is field 4 of its stat."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = int(stat[1])
    found, frontier = [], [pid]
    while frontier:
        kids = [child for child, parent in parents.items() if parent in frontier]
        found += kids
        frontier = kids
    return found


def watch(
    proc: subprocess.Popen[str],
    progress: Callable[[], tuple[float, str]],
    *,
    step: str,
    path: str,
    limit_s: float,
    cap_s: float,
) -> StallRecord | None:
    """Wait for ``proc``; ``progress()`` says when it last moved (``time.monotonic()``) and what it was doing.

    When it has not moved for ``limit_s`` (or has run ``cap_s`` in all), its process group (``proc`` must be
    started with ``start_new_session``) is killed and the stall returned, naming what did not die; None when
    ``proc`` ended by itself."""
    started = time.monotonic()
    while proc.poll() is None:
        moved, doing = progress()
        now = time.monotonic()
        idle = now - max(moved, started)
        if idle >= limit_s or now - started >= cap_s:
            # fio's job processes each call setsid(): killed one by one, not only by the group
            family = [(proc.pid, "fio"), *((child, "a fio job") for child in _descendants(proc.pid))]
            for pid, _ in reversed(family):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 2.0  # their exits; one in the kernel is named below, never waited on again
            while time.monotonic() < deadline and (
                proc.poll() is None or any((_stat(pid) or ["Z"])[0] not in "ZX" for pid, _ in family[1:])
            ):
                time.sleep(0.1)
            return StallRecord(
                step=step,
                operation=doing,
                path=path,
                limit_s=limit_s,
                waited_s=round(idle if idle >= limit_s else now - started, 3),
                stuck=stuck(family, killed=True),
            )
        time.sleep(min(0.5, max(0.05, limit_s - idle)))
    return None


def remove(folder: Path, stall_s: float) -> None:
    """``folder`` and what it holds removed, each call under the stall limit: a clean-up on a mount that stopped
    answering is named at the stall limit, not left to hang its step (missing is nothing to remove)."""

    def work(progress: Progress) -> None:
        progress.at("stat", folder)
        if not folder.exists():
            return
        for root, dirs, files in os.walk(folder, topdown=False):
            for name in files:
                progress.at("unlink", os.path.join(root, name))
                with contextlib.suppress(OSError):  # gone already, or not ours to remove: left
                    os.unlink(os.path.join(root, name))
            for name in dirs:
                progress.at("rmdir", os.path.join(root, name))
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(root, name))
            progress.at("scandir", root)
        progress.at("rmdir", folder)
        with contextlib.suppress(OSError):
            os.rmdir(folder)
        progress.idle()

    run(work, step="clean-up", limit_s=stall_s)


def leave(code: int = 0) -> None:
    """End the process now, after the result line: a stalled call's thread cannot be joined, and the
    interpreter's exit would wait on it. Exit status 0 when the result says what stalled: the step's
    result is read only from a step that ended 0, and the stall is the finding, for the judge."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def step_token() -> str:
    """A name every rank of one step computes alike, for the directory they share: the Slurm job and step,
    else the parent process (the local launcher's ranks are its children). A test passes ``--token``."""
    job, step = os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_STEP_ID")
    if job:
        return f"{job}.{step or 0}"
    return f"ppid{os.getppid()}"
