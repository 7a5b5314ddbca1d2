"""The barrier the ranks of the metadata probe (``fsmeta.py``) meet at, and the removals it and they share.

The ranks of one step may sit on different nodes and share nothing but the filesystem under test, so they meet
through marker files in a directory on it (``Barrier``): mdtest's MPI barriers, spelt in files, so each
phase's timing starts together on every rank. Every call runs under the stall limit (``_stall``), and a wait
for a rank that never arrives runs out naming it. ``unlink`` and ``rmdir`` remove a file and an empty
directory under the stall watch, for the barrier's markers and the ranks' own files alike.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Sequence
from pathlib import Path

from gpuaccept.contracts.fsmeta import WaitTimeout
from gpuaccept.probes._stall import Progress, TimedOut, run

__all__ = ["Barrier", "rmdir", "unlink"]

#: looks at the barrier start this far apart and back off to the longer gap: hundreds of ranks listing one
#: directory every millisecond would load the metadata server while the slowest rank is still timing a phase
BARRIER_FIRST_LOOK_S = 0.002
BARRIER_LONGEST_LOOK_S = 0.1


class Barrier:
    """All ranks of the step meet, through marker files in ``directory`` (the filesystem under test is the
    only channel they share).

    Rank r at barrier g creates ``g<g>.<r>`` and removes its previous marker; the barrier is passed when every
    rank shows a marker of g or later, or ``gone``. A rank can be at most one barrier ahead of the slowest, so
    the one marker per rank is enough. A rank that is done (or gives up) writes ``gone.<r>``, which passes
    every barrier: the others never wait for a rank that left. Whoever sees every rank gone removes the markers.
    """

    def __init__(self, directory: Path, rank: int, world: int, limit_s: float) -> None:
        self.directory, self.rank, self.world, self.limit_s = directory, rank, world, limit_s
        self.generation = 0
        self.left = False

    def _marker(self, name: str) -> Path:
        return self.directory / f"{name}.{self.rank}"

    def _levels(self, progress: Progress) -> dict[int, float]:
        """Each rank's furthest marker (``gone`` is infinitely far)."""
        progress.at("listdir", self.directory)
        names = os.listdir(self.directory)
        progress.idle()
        levels: dict[int, float] = {}
        for name in names:
            head, _, tail = name.partition(".")
            if not tail.isdigit():
                continue
            level = float("inf") if head == "gone" else float(head[1:]) if head[1:].isdigit() else None
            if level is not None:
                levels[int(tail)] = max(levels.get(int(tail), -1.0), level)
        return levels

    def _swap(self, progress: Progress, new: str) -> None:
        """Create this rank's new marker, then drop the old one (never zero markers: a rank looking between
        the two calls would think this rank had not arrived yet)."""
        target = self._marker(new)
        progress.at("create", target)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
        if self.generation > 0:
            unlink(progress, self._marker(f"g{self.generation - 1:04d}"))
        progress.idle()

    def wait(self, step: str) -> None:
        """Arrive at the next barrier and wait until every rank has; ``TimedOut`` after the limit."""
        if self.world <= 1:
            return
        generation = self.generation

        def work(progress: Progress) -> None:
            self._swap(progress, f"g{generation:04d}")
            start = time.monotonic()
            gap = BARRIER_FIRST_LOOK_S
            while True:
                levels = self._levels(progress)
                behind = [r for r in range(self.world) if levels.get(r, -1.0) < generation]
                if not behind:
                    return
                waited = time.monotonic() - start
                if waited >= self.limit_s:
                    raise TimedOut(
                        WaitTimeout(
                            step=f"barrier before {step}",
                            path=str(self.directory),
                            limit_s=self.limit_s,
                            waited_s=round(waited, 3),
                            last_seen=f"ranks not arrived: {_ranks(behind)}",
                        )
                    )
                time.sleep(gap)
                gap = min(gap * 2, BARRIER_LONGEST_LOOK_S)

        run(work, step=f"barrier before {step}", limit_s=self.limit_s)
        self.generation += 1

    def leave(self) -> None:
        """Mark this rank gone (it passes every barrier from now on)."""
        if self.world <= 1 or self.left:
            return

        def work(progress: Progress) -> None:
            self._swap(progress, "gone")  # drops the marker of the last barrier passed

        run(work, step="leave the barrier", limit_s=self.limit_s)
        self.left = True

    def all_gone(self, look_s: float) -> bool:
        """Whether every rank left within ``look_s``; the one that sees it removes the markers and the folder."""
        if self.world <= 1:
            return run(lambda progress: rmdir(progress, self.directory), step="clean up", limit_s=self.limit_s)

        def work(progress: Progress) -> bool:
            end = time.monotonic() + look_s
            while True:
                try:
                    levels = self._levels(progress)
                except FileNotFoundError:
                    return True  # another rank saw them all gone first and removed the folder
                if all(levels.get(r) == float("inf") for r in range(self.world)):
                    for r in range(self.world):
                        unlink(progress, self.directory / f"gone.{r}")
                    rmdir(progress, self.directory)
                    return True
                if time.monotonic() >= end:
                    return False
                time.sleep(0.05)

        return run(work, step="clean up the barrier", limit_s=self.limit_s)


def _ranks(ranks: Sequence[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8])
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def unlink(progress: Progress, path: Path) -> None:
    """Remove a file; one already gone (another rank's clean-up, or never made) is nothing to remove."""
    _remove(progress, "unlink", path)


def rmdir(progress: Progress, path: Path) -> bool:
    """Remove an empty directory; False while another rank's entries are still in it."""
    return _remove(progress, "rmdir", path)


def _remove(progress: Progress, operation: str, path: Path) -> bool:
    """``unlink`` or ``rmdir`` under the stall watch: missing is removed; a directory not empty yet is False."""
    progress.at(operation, path)
    try:
        if operation == "unlink":
            os.unlink(path)
        else:
            os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if operation == "unlink" or exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        return False
    finally:
        progress.idle()
    return True
