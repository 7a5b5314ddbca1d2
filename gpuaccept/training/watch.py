"""Where each rank of a launch stands against its plan: behind the floor, hung, or on time.

Read from the ranks' progress lines (``gpuaccept.contracts.progress_line``) and the launch's phase ends at the
floor (``gpuaccept.timelimits.TimeLimit.phases``, from ``gpuaccept.training.budget``). Two readers use it:
the launcher, every few seconds while the step runs, to stop a launch as soon as one GPU is proven behind
its floor or the whole launch has stopped moving (``standing``), instead of waiting for the whole limit;
and the training judge afterwards, to name each rank that did not finish and bound its speed.
Pure functions of plain values: no clock is read here.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuaccept.contracts.progress_line import Progress, read_progress

__all__ = ["RankStand", "Standing", "latest", "phase_start", "standing", "stands"]


#: A rank as its lines name it: (node, rank). A fan-out step runs one launch per node, each with ranks from 0.
Key = tuple[str, int]


@dataclass(frozen=True)
class Standing:
    """Why a launch should stop now ('' when it should go on), and the ranks that make it so."""

    reason: str
    #: ranks proven behind the floor, or (for a hang) the ranks furthest behind
    ranks: tuple[Key, ...] = ()
    hang: bool = False


def latest(lines: list[Progress]) -> dict[Key, Progress]:
    """Each rank's last line (a rank that never wrote one is not known here: the step's limit still ends it)."""
    out: dict[Key, Progress] = {}
    for line in lines:
        out[(line.node, line.rank)] = line
    return out


def phase_start(lines: list[Progress], key: Key, phase: str) -> Progress | None:
    """The line that opened ``phase`` on the rank ``key`` (its step 0), if any."""
    return next((p for p in lines if (p.node, p.rank) == key and p.phase == phase and p.step == 0), None)


def _finished(lines: list[Progress], key: Key, phase: str) -> bool:
    """Whether the rank has left ``phase`` behind (a later phase's line) or done all of its steps."""
    seen = False
    for line in lines:
        if (line.node, line.rank) != key:
            continue
        if line.phase == phase:
            seen = True
            if line.steps and line.step >= line.steps:
                return True
        elif seen:
            return True
    return False


def standing(stdout: str, phases: tuple[tuple[str, float], ...], started: float, now: float, hang_s: float) -> Standing:
    """Whether the launch that started at ``started`` (epoch seconds) should stop at ``now``: no progress from
    any rank for ``hang_s`` (a hang, named by the ranks furthest behind), or a rank that has not finished a
    phase whose end at the floor has passed (behind: its own progress bounds its speed)."""
    lines = read_progress(stdout)
    last = latest(lines)
    keys = sorted(last)
    newest = max((p.t for p in last.values()), default=started)
    if not keys or now - newest < hang_s:
        for phase, end in phases:
            if now - started < end:
                break
            behind = tuple(k for k in keys if not _finished(lines, k, phase))
            if behind:
                where = ", ".join(_where(last[k]) for k in behind)
                return Standing(f"{where}: not done with {phase} {end:.0f} s in, when a GPU at the floor is", behind)
        return Standing("")
    first = min(_position(last[k], phases) for k in keys)
    stuck = tuple(k for k in keys if _position(last[k], phases) == first)
    where = ", ".join(_where(last[k]) for k in stuck)
    return Standing(f"{where}: no progress from any rank for {now - newest:.0f} s (a hang)", stuck, hang=True)


def _position(line: Progress, phases: tuple[tuple[str, float], ...]) -> tuple[int, int]:
    """How far a rank got: its phase's place in the plan (a strategy's set-up just before the strategy,
    start-up first, the lifecycle and serving last), then its step."""
    names = [name for name, _ in phases]
    base = line.phase.removesuffix(" set-up")
    if base in names:
        return (2 * names.index(base) + (0 if line.phase.endswith(" set-up") else 1), line.step)
    if line.phase in ("lifecycle", "serving"):
        return (2 * len(names) + (0 if line.phase == "lifecycle" else 1), line.step)
    return (-1, line.step)


def _where(line: Progress) -> str:
    gpu = f", GPU {line.gpu}" if line.gpu is not None else ""
    steps = f" step {line.step} of {line.steps}" if line.steps else ""
    return f"rank {line.rank} on {line.node}{gpu} in {line.phase}{steps}"


@dataclass(frozen=True)
class RankStand:
    """Where one rank stood when its launch was stopped: its last progress line, the line that opened its phase,
    the moment of the stop, and the launch's hang time."""

    last: Progress
    opened: Progress | None
    ended_at: float
    hang_s: float

    @property
    def silent_s(self) -> float:
        """Seconds from the rank's last progress line to the stop."""
        return self.ended_at - self.last.t

    @property
    def hung(self) -> bool:
        """Whether the rank had made no progress for the launch's hang time when it was stopped."""
        return self.silent_s >= self.hang_s

    @property
    def in_steps(self) -> bool:
        """Whether the rank was in a strategy's optimizer steps (the only phase a speed bound applies to)."""
        return bool(self.last.steps) and self.opened is not None

    def tokens_per_s_bound(self, tokens_per_step: int) -> float | None:
        """At most this many tokens/s over the strategy so far: (steps + 1) x tokens over the time since its
        first line (a step in flight when it was stopped counted as done)."""
        if not self.in_steps or self.opened is None:
            return None
        elapsed = self.ended_at - self.opened.t
        return (self.last.step + 1) * tokens_per_step / elapsed if elapsed > 0 else None

    def where(self) -> str:
        steps = f" at step {self.last.step} of {self.last.steps}" if self.last.steps else ""
        hang = " (a hang)" if self.hung else ""
        return f"in {self.last.phase}{steps}, its last progress {self.silent_s:.0f} s before the stop{hang}"


def stands(stdout: str, ended_at: float, hang_s: float) -> dict[tuple[str, int], RankStand]:
    """Every rank's standing at the stop, keyed by (node, rank)."""
    lines = read_progress(stdout)
    return {
        key: RankStand(last, phase_start(lines, key, last.phase), ended_at, hang_s)
        for key, last in latest(lines).items()
    }
