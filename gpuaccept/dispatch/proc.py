"""Run child processes with a deadline, and stop them cleanly when it passes.

Shared by both launchers. Children start in their own process group so a timeout or a failing rank
can stop the whole tree (srun and its helpers, or a probe's worker threads) without touching pytest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

__all__ = ["Finished", "run_all", "stop_group"]


@dataclass
class Finished:
    """Exit codes (None = still running when stopped) and output of a group of processes."""

    returncodes: list[int | None]
    stdout: list[str]
    stderr: list[str]
    timed_out: bool
    duration_s: float
    first_bad: int | None = None
    #: why ``watch`` stopped the processes before their deadline ('' when it did not)
    stop_reason: str = ""
    #: the wall clock (epoch seconds) when the processes ended or were stopped
    ended_at: float = 0.0


#: Seconds between two looks of a ``watch`` at the output so far
WATCH_EVERY_S = 2.0


def _output_so_far(files: Sequence[IO[str]]) -> str:
    """What the processes wrote so far, read without moving the files' offsets (``os.pread``)."""
    texts = []
    for handle in files:
        fd = handle.fileno()
        size = os.fstat(fd).st_size
        texts.append(os.pread(fd, size, 0).decode(errors="replace"))
    return "".join(texts)


def stop_group(proc: subprocess.Popen[str], first: int = signal.SIGTERM, grace_s: float = 5.0) -> None:
    """Signal the process group, then SIGKILL whatever is left after ``grace_s``."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, first)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def run_all(
    argvs: list[list[str]],
    envs: list[dict[str, str]],
    timeout_s: float,
    *,
    first_signal: int = signal.SIGTERM,
    watch: Callable[[str, float], str] | None = None,
) -> Finished:
    """Start every argv at once; wait until all end, one fails or the deadline passes.

    ``watch(output so far, seconds since the start)`` is asked every ``WATCH_EVERY_S``: a reason it gives
    stops the processes then, as a deadline would (``timed_out``, with ``stop_reason``): a launch whose
    progress proves it cannot pass need not run to its limit."""
    import tempfile

    start = time.monotonic()
    outs = [tempfile.TemporaryFile("w+") for _ in argvs]
    errs = [tempfile.TemporaryFile("w+") for _ in argvs]
    procs = [
        subprocess.Popen(
            argv, env=env, stdout=out, stderr=err, text=True, start_new_session=True, stdin=subprocess.DEVNULL
        )
        for argv, env, out, err in zip(argvs, envs, outs, errs, strict=True)
    ]
    timed_out = False
    first_bad: int | None = None
    reason = ""
    looked = start
    try:
        while True:
            codes = [p.poll() for p in procs]
            if first_bad is None:
                first_bad = next((i for i, c in enumerate(codes) if c not in (None, 0)), None)
            if all(code is not None for code in codes):
                break
            if any(code not in (None, 0) for code in codes):
                break
            if time.monotonic() - start > timeout_s:
                timed_out = True
                break
            if watch is not None and time.monotonic() - looked >= WATCH_EVERY_S:
                looked = time.monotonic()
                reason = watch(_output_so_far(outs), looked - start)
                if reason:
                    timed_out = True
                    break
            time.sleep(0.05)
    finally:
        codes = [p.poll() for p in procs]
        for proc in procs:
            stop_group(proc, first_signal)
    texts_out, texts_err = [], []
    for out, err in zip(outs, errs, strict=True):
        out.seek(0)
        err.seek(0)
        texts_out.append(out.read())
        texts_err.append(err.read())
        out.close()
        err.close()
    return Finished(codes, texts_out, texts_err, timed_out, time.monotonic() - start, first_bad, reason, time.time())
