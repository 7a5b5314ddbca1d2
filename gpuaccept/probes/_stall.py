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
filesystem whose waits are not would keep the process until the call returns, but the result line is out
by then.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
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
    "run",
    "step_token",
]

T = TypeVar("T")

#: the longest one filesystem call may take before the probe reports it stalled (``timelimits.STALL_S``)
STALL_LIMIT_S = STALL_S
#: where that limit comes from, for the probes' specs and docs
STALL_BASIS = "NVIDIA's 2026 cloud requirements: an I/O request stalled beyond 60 s counts as unavailability"


class Stalled(Exception):
    """A filesystem call that did not return within the limit; ``record`` is what the probe emits."""

    def __init__(self, record: StallRecord) -> None:
        super().__init__(f"{record.step}: {record.operation} {record.path} did not return within {record.limit_s:g} s")
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

    threading.Thread(target=target, name=f"fs:{step}", daemon=True).start()
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
