"""Where a probe's wall time went: start-up, warm-up, measurement, teardown, as the probe itself saw it.

A probe step through srun costs more than its measurement: the interpreter and its imports (torch
alone took 4-7 s per process on the H100 and H200 hosts measured), CUDA or NCCL initialisation, warm-up, then the
measurement and the teardown. ``Phases`` keeps those apart in every probe's result, so a run record
says which of them a change would cut (``benchmarks/suite_sections.py`` tabulates them).

The clock starts when the kernel started the process (``/proc/self/stat``), not when Python reached
the probe's first line, so the interpreter's own start-up and the imports before ``Phases()`` count
as ``startup_s``. Nothing here imports anything beyond the standard library.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Phases", "process_age_s", "quick_exit"]


def process_age_s() -> float | None:
    """Seconds since the kernel started this process (fork, then exec of the interpreter); None if unknown.

    ``starttime`` (field 22 of ``/proc/self/stat``) counts clock ticks since boot, the same origin as
    ``CLOCK_BOOTTIME``; the resolution is one tick (10 ms on the usual CLK_TCK of 100).
    """
    try:
        with open("/proc/self/stat") as fh:
            raw = fh.read()
        fields = raw[raw.rindex(")") + 2 :].split()
        start_ticks = int(fields[19])  # field 22 counted from 1, after pid and (comm)
        ticks = os.sysconf("SC_CLK_TCK")
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / ticks)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class Phases:
    """Named phase durations in seconds, measured back to back from the process start.

    ``mark(name)`` closes the phase that ran since the previous mark (the first one since the process
    started, so it holds the interpreter and the imports); ``phase(name)`` times a block and adds it,
    so a phase met several times (warm-up before each size) sums up. ``as_dict()`` gives the phases
    and ``process_wall_s``, the process's age when it was called (what the step's wall time is
    compared with to find the launcher's own share).
    """

    def __init__(self) -> None:
        age = process_age_s()
        now = time.monotonic()
        self._origin = now - age if age is not None else now
        self._last = self._origin
        self.seconds: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, seconds)

    def mark(self, name: str) -> float:
        """Close the phase running since the last mark under ``name``; returns its seconds."""
        now = time.monotonic()
        spent = now - self._last
        self.add(name, spent)
        self._last = now
        return spent

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a block as ``name`` (and move the mark past it)."""
        started = time.monotonic()
        try:
            yield
        finally:
            now = time.monotonic()
            self.add(name, now - started)
            self._last = now

    def elapsed(self) -> float:
        """Seconds since the process started."""
        return time.monotonic() - self._origin

    def as_dict(self) -> dict[str, float]:
        out = {name if name.endswith("_s") else f"{name}_s": round(value, 3) for name, value in self.seconds.items()}
        out["process_wall_s"] = round(self.elapsed(), 3)
        return out


def quick_exit() -> None:
    """Leave right after the result line, without the interpreter's teardown.

    With torch, transformers and peft loaded, Python's own shutdown (module teardown, thread pools,
    atexit hooks) took 1.7 s on the 2-core VM after the probe had printed everything, time srun
    waits for and nobody uses; CUDA contexts and NCCL communicators are released by the driver when
    the process ends either way. Only for a probe's ``__main__`` after a successful run: output is
    flushed first, and an error still takes the normal way out with its traceback.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
