"""A rank's progress lines during the fine-tune (``gpuaccept.contracts.progress_line``), and the selftest knobs
that make one rank slow or stall.

One line per optimizer step and one at the start of each phase, printed by every rank as it goes: when the
launch's time limit comes, the login node reads from them where each GPU stood, bounds the speed of a GPU
that did not finish, and names a rank that stopped making progress. A line costs a ``print`` of ~120 bytes;
a 7B step takes ~0.7 s, the small model's ~0.1 s, so the lines cost nothing measurable.

The knobs exist to prove, on CPU loopback clusters, that a slow rank is FAILED by its progress bound and a
stalled one is named a hang; they are honoured only with ``GPUACCEPT_SELFTEST=1`` (``gpuaccept.selftest_hooks``)
and a run with either set is never ACCEPTED.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from gpuaccept import selftest_hooks
from gpuaccept.contracts.progress_line import Progress, format_progress

__all__ = ["SLOW_RANK_ENV", "STALL_RANK_ENV", "Reporter", "Slowdown"]

#: ``<rank>:<seconds>[@<node>]``: the launch's rank (on that node only) sleeps that long after each optimizer step
SLOW_RANK_ENV = "GPUACCEPT_FAULT_SLOW_RANK"
#: ``<rank>:<step>[@<node>]``: the launch's rank (on that node only) stops for good after that step (a hang)
STALL_RANK_ENV = "GPUACCEPT_FAULT_STALL_RANK"


@dataclass
class Reporter:
    """Prints this rank's progress lines; ``rank`` is its rank in the launch (not in a solo world of one)."""

    node: str
    rank: int
    gpu: int | None = None
    phase_name: str = "start-up"
    steps: int = 0

    def phase(self, name: str, steps: int = 0) -> None:
        """A phase starts: ``steps`` optimizer steps to come (0 for set-up, lifecycle, serving)."""
        self.phase_name, self.steps = name, steps
        self._write(0)

    def step(self, done: int) -> None:
        """``done`` steps of the current phase are finished (as far as the host knows)."""
        self._write(done)

    def _write(self, done: int) -> None:
        line = Progress(self.node, self.rank, self.phase_name, done, self.steps, round(time.time(), 3), self.gpu)
        sys.stdout.write(format_progress(line) + "\n")
        sys.stdout.flush()


@dataclass(frozen=True)
class Slowdown:
    """What the selftest knobs ask of this rank: seconds to sleep after each step, a step to stall at."""

    sleep_s: float = 0.0
    stall_at: int | None = None

    @classmethod
    def for_rank(cls, rank: int, node: str) -> Slowdown:
        """The knobs that name ``rank`` (the launch's global rank) on ``node``; ``HookRefused`` without the
        gate."""
        slow = _selected(selftest_hooks.gated(SLOW_RANK_ENV), rank, node)
        stall = _selected(selftest_hooks.gated(STALL_RANK_ENV), rank, node)
        return cls(float(slow) if slow else 0.0, int(stall) if stall else None)

    def after(self, step: int) -> None:
        """Called after each optimizer step: sleep, or stop for good at the stall step."""
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.stall_at is not None and step >= self.stall_at:
            print(f"gpuaccept finetune: selftest fault: stalled after step {step} ({STALL_RANK_ENV})", file=sys.stderr)
            sys.stderr.flush()
            while True:
                time.sleep(3600)


def _selected(spec: str | None, rank: int, node: str) -> str | None:
    """The value of ``<rank>:<value>[@<node>]`` when it names this rank (and node), else None."""
    if not spec:
        return None
    target, _, where = spec.partition("@")
    who, value = target.split(":")
    return value if int(who) == rank and where in ("", node) else None
