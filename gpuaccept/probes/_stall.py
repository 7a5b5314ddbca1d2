"""Filesystem calls under a stall limit, for the storage probes (fsmeta, coherency, mounts, checkpoint, fio).

A call on a hung mount (an NFS server gone, a Lustre OST evicted, a FUSE daemon stopped) blocks in the kernel
and never returns: a probe that made it itself would hang until its step's limit and report nothing, and the
test could not say which path or call hung. A thread is not enough either: a thread asleep uninterruptibly in
the kernel (state D) keeps its whole process from exiting, so the step would still wait out its limit. So the
probes' filesystem work runs in a forked child process (``run``), its standard streams on /dev/null (a child
left behind holds none of the step's output pipes open, which srun waits on), and the probe watches it: when
one call has been running longer than the limit, the child is sent SIGKILL and ``run`` raises ``Stalled``
naming the step, the call and the path, and (``stuck``) the child when the kill did not end it, by its pid
and its state. The probe emits that and returns; nothing waits on the child again.

The default limit is 60 s: NVIDIA's 2026 cloud requirements count an I/O request stalled beyond 60 s as
unavailability. The limit is per call, not per piece of work: a loop of a hundred thousand creates may run
for minutes as long as each create returns. A process per call would cost a fork, far more than a create on
a local disk, and would bend the rates fsmeta measures; so one child runs a whole loop and says before each
call what it is about to do (``Progress.at``: the operation, the path and a clock read written into a page of
memory the two processes share, no system call), and the parent reads that page at the call's deadline. A
single call has ``call``. The child's value, or its exception, comes back pickled through a pipe; what the work
found on the way (``Progress.keep``, the same pipe) is the exception's ``kept`` when the child stalls after it.
The child, its page and its pipe are ``_stall_child.py``.

A tool the probe runs as a process of its own (fio) is watched by what it reports (``watch``): the process
is killed, with its process group, once its progress stops for the limit, and what survives SIGKILL in
state D is named, not waited on.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gpuaccept.contracts.fsmeta import StallRecord, WaitTimeout
from gpuaccept.probes._stall_child import PAGE, Progress, current, receive, serve, step_of
from gpuaccept.timelimits import STALL_S

__all__ = [
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
#: how long a process sent SIGKILL (the I/O child, fio's) is given to exit before what is left of it is named
EXIT_WAIT_S = 2.0


class Stalled(Exception):
    """A filesystem call that did not return within the limit; ``record`` is what the probe emits, ``kept`` the
    last thing the work kept (``Progress.keep``) before it stalled, None when it kept nothing."""

    def __init__(self, record: StallRecord, kept: Any = None) -> None:
        left = f"; {record.stuck}" if record.stuck else ""
        super().__init__(
            f"{record.step}: {record.operation} {record.path} did not return within {record.limit_s:g} s{left}"
        )
        self.record = record
        self.kept = kept


class TimedOut(Exception):
    """A wait for the other rank that ran out while every call returned (``WaitTimeout``)."""

    def __init__(self, record: WaitTimeout) -> None:
        seen = f" (last look: {record.last_seen})" if record.last_seen else ""
        super().__init__(f"{record.step}: {record.path} not there after {record.waited_s:.1f} s{seen}")
        self.record = record

    def __reduce__(self) -> tuple[Any, ...]:  # raised in the child, pickled to the parent: rebuilt from its record
        return type(self), (self.record,)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _reaped(pid: int, within_s: float) -> bool:
    """Whether the child exited (and was reaped) within ``within_s``; one that has not is left, not waited on."""
    deadline = time.monotonic() + within_s
    gap = 0.0005
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(gap)
        gap = min(gap * 2, 0.05)


def _end(pid: int) -> str | None:
    """SIGKILL to the stalled child; what is left of it after ``EXIT_WAIT_S`` named (``stuck``), else None."""
    _kill(pid)
    if _reaped(pid, EXIT_WAIT_S):
        return None
    return stuck([(pid, "this probe's I/O child")], killed=True)


def run(work: Callable[[Progress], T], *, step: str, limit_s: float = STALL_LIMIT_S) -> T:
    """``work(progress)`` in a forked child; its value, or its exception raised here (both pickled).

    ``Stalled`` when one call ``work`` announced with ``progress.at`` has run ``limit_s`` without returning: the
    child is sent SIGKILL and, when it did not exit, named in the record and left. Between calls the parent
    sleeps until the current call's deadline (or the child's next message), so a loop of fast calls costs the
    watch nothing. ``work`` changes nothing of the parent's: what it found comes back as its value (or
    ``keep``)."""
    page = mmap.mmap(-1, PAGE)  # anonymous and shared: the child's writes are the parent's reads
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        serve(work, page, write_end)
    os.close(write_end)
    try:
        with open(read_end, "rb", buffering=0) as pipe:
            return _watch_child(pid, page, pipe, step, limit_s)  # type: ignore[no-any-return]
    except Stalled:
        raise  # the child was sent SIGKILL already, and what is left of it named
    except BaseException:
        if not _reaped(pid, 0.0):  # an interrupt, or a child that did not exit after its answer: not left running
            _end(pid)
        raise
    finally:
        page.close()


def _watch_child(pid: int, page: mmap.mmap, pipe: io.FileIO, step: str, limit_s: float) -> Any:
    kept: Any = None
    while True:
        seq, now = current(page)
        late = now is not None and time.monotonic() - now.since >= limit_s
        if now is None:
            timeout = min(limit_s, 1.0)
        else:
            timeout = 0.0 if late else limit_s - (time.monotonic() - now.since)
        if select.select([pipe], [], [], max(timeout, 0.0))[0]:
            message = receive(pipe)
            if message is None:  # killed by another, or its pickle cut short: an OSError the probe reports
                raise ChildProcessError(f"{step}: the I/O child (pid {pid}) ended without an answer")
            kind, value = message
            if kind == "kept":
                kept = value
                continue
            _reaped(pid, EXIT_WAIT_S)
            if kind == "error":
                raise value
            return value
        if late and now is not None and current(page)[0] == seq:
            raise Stalled(
                StallRecord(
                    step=step_of(page) or step,
                    operation=now.operation,
                    path=now.path,
                    limit_s=limit_s,
                    waited_s=round(time.monotonic() - now.since, 3),
                    stuck=_end(pid),
                ),
                kept,
            )


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
                _kill(pid)
            deadline = (
                time.monotonic() + EXIT_WAIT_S
            )  # their exits; one in the kernel is named below, never waited on again
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
    """End the process now, after the result line, for a probe with threads of its own that a stall can leave
    blocked (fio's output readers, on a pipe a fio job stuck in the kernel still holds): the interpreter's exit
    would wait on them, or on their streams' locks. Exit status 0 when the result says what stalled: the step's
    result is read only from a step that ended 0, and the stall is the finding, for the judge. The I/O under
    ``run`` leaves no thread behind: its child is a process of its own, and nothing waits on it."""
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
