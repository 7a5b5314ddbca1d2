"""A probe step's time limit: how many seconds, and how that number follows from what the step will do.

A limit is a prediction: the work a step plans (steps, tokens,
FLOPs, bytes) at the SKU's floor, plus the measured costs that do not scale with the work (start-up,
set-up, checkpoints, lifecycle, serving), with a stated margin. Each probe declares its own
(``gpuaccept.probes.specs``; the fine-tune's from its plan, ``gpuaccept.training.budget``); the settings'
``--probe-timeout`` then scales or caps it (``TimeoutRule``), and the run record keeps the limit, its basis,
the step's wall and their ratio.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["STALL_S", "TimeLimit", "TimeoutRule"]

#: seconds one filesystem call may take before a storage probe names it stalled: NVIDIA's 2026 cloud requirements
#: (v2.4) count an I/O request stalled beyond 60 s as unavailability. The one home of the figure: the probes'
#: stall limit (``probes/_stall.py``), the site's default (``thresholds/storage_site.py``) and the specs read it.
STALL_S = 60.0


@dataclass(frozen=True)
class TimeLimit:
    """Seconds a step may take, and why that many."""

    seconds: float
    #: how the number follows from the plan, in words a reader can check ("start-up 30 s + ...")
    basis: str
    #: each phase's end for a GPU at the floor, in seconds from the step's start (progress judging)
    phases: tuple[tuple[str, float], ...] = ()
    #: seconds with no progress line from any rank before the step is called hung (steps with phases only).
    #: The longest silences of a healthy 7B launch are its lifecycle (12-43 s without a line on H100 and H200
    #: nodes) and start-up (10-22 s, torch's imports on a cold host): 180 s is four times the longest.
    hang_s: float = 180.0


@dataclass(frozen=True)
class TimeoutRule:
    """What ``--probe-timeout`` does to every declared limit: scale it (``x1.5``: its phases and its hang time
    too) and/or cap it (``600``)."""

    scale: float = 1.0
    cap_s: float | None = None

    @classmethod
    def parse(cls, text: str) -> TimeoutRule:
        """``'600'`` caps every limit at 600 s; ``'x2'`` doubles every limit; ``'x2,900'`` both.
        ``ValueError`` names what was wrong."""
        scale, cap = 1.0, None
        for part in (p.strip() for p in str(text).split(",") if p.strip()):
            if part[0] in "xX":
                scale = float(part[1:])
                if not scale > 0:
                    raise ValueError(f"{part!r}: the scale must be above 0")
            else:
                cap = float(part)
                if not cap > 0:
                    raise ValueError(f"{part!r}: the cap must be above 0 seconds")
        return cls(scale, cap)

    def apply(self, limit: TimeLimit) -> TimeLimit:
        """The limit this rule allows (its phases scaled alike; a cap leaves them as they are)."""
        seconds = limit.seconds * self.scale
        basis = limit.basis
        if self.scale != 1.0:
            basis += f"; x{self.scale:g} (--probe-timeout)"
        if self.cap_s is not None and seconds > self.cap_s:
            seconds = self.cap_s
            basis += f"; capped at {self.cap_s:g} s (--probe-timeout)"
        phases = tuple((name, end * self.scale) for name, end in limit.phases)
        return replace(limit, seconds=round(seconds, 1), basis=basis, phases=phases, hang_s=limit.hang_s * self.scale)
