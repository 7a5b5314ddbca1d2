"""Run each reading in a child process that can be abandoned, so a hung NVML call or filesystem is a
timeout that names it, never a hang of the node check.

A thread stuck in a driver call or an uninterruptible read cannot be stopped; a forked child can be
killed (or, if it sits in uninterruptible sleep, left behind: the check exits without waiting for it).
Each child reports the step it is on (``progress``) before each call that could block, so a timeout
says which call hung: ``gpus: nvmlDeviceGetHandleByIndex(3)``. Readers run side by side; the node
check's wall time is the slowest reader's, not their sum.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Outcome", "progress", "run_readers"]

_PROGRESS: list[int] = []  # the child's pipe (write end), set in the child only


def progress(step: str) -> None:
    """Tell the parent which call comes next (no-op outside a watchdog child)."""
    if _PROGRESS:
        os.write(_PROGRESS[0], (json.dumps({"step": step}) + "\n").encode())


@dataclass
class Outcome:
    """What one reader gave: its data, or the error it raised, or the step it hung on."""

    name: str
    data: Any = None
    error: str | None = None
    timed_out: bool = False
    step: str = "start"
    seconds: float = 0.0
    answered: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out


def _child(write_fd: int, reader: Callable[[], Any]) -> None:
    """In the child: run the reader, send its result as one JSON line, and exit without cleanup."""
    code = 0
    try:
        _PROGRESS[:] = [write_fd]
        data = reader()
        message = {"result": data}
    except BaseException as exc:
        message = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=4)}
        code = 1
    try:
        os.write(write_fd, (json.dumps(message, default=str) + "\n").encode())
    finally:
        os._exit(code)


def run_readers(
    readers: dict[str, Callable[[], Any]], timeout_s: float, meanwhile: Callable[[], None] | None = None
) -> dict[str, Outcome]:
    """Run every reader in its own forked child; wait at most ``timeout_s`` for all of them.

    A reader still running at the deadline is killed (SIGKILL, not waited for) and reported as timed
    out on the step it last announced. ``meanwhile`` runs in a thread of this process once every child
    is forked (the judging core's imports), so it overlaps the readings.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.monotonic()
    selector = selectors.DefaultSelector()
    children: dict[str, tuple[int, int]] = {}
    outcomes: dict[str, Outcome] = {}
    buffers: dict[str, bytes] = {}
    for name, reader in readers.items():
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(read_fd)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            _child(write_fd, reader)
        os.close(write_fd)
        children[name] = (pid, read_fd)
        outcomes[name] = Outcome(name)
        buffers[name] = b""
        selector.register(read_fd, selectors.EVENT_READ, name)
    if meanwhile is not None:
        threading.Thread(target=meanwhile, name="gpuaccept-meanwhile", daemon=True).start()
    open_fds = len(children)
    while open_fds:
        left = timeout_s - (time.monotonic() - start)
        if left <= 0:
            break
        for key, _ in selector.select(timeout=left):
            name = key.data
            chunk = os.read(key.fd, 65536)
            if chunk:
                buffers[name] += chunk
                continue
            selector.unregister(key.fd)
            os.close(key.fd)
            open_fds -= 1
            outcomes[name].seconds = round(time.monotonic() - start, 3)
    for name, (pid, fd) in children.items():
        outcome = outcomes[name]
        for line in buffers[name].decode(errors="replace").splitlines():
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "step" in message:
                outcome.step = message["step"]
            elif "result" in message:
                outcome.data, outcome.answered = message["result"], True
            elif "error" in message:
                outcome.error = message["error"]
        if fd in selector.get_map():
            outcome.timed_out = True
            outcome.seconds = round(time.monotonic() - start, 3)
            selector.unregister(fd)
            os.close(fd)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        elif not outcome.answered and outcome.error is None:
            outcome.error = f"reader exited without a result (last step: {outcome.step})"
        try:
            os.waitpid(pid, os.WNOHANG)  # reap if already gone; a child in D state is left to init
        except ChildProcessError:
            pass
    selector.close()
    return outcomes
