"""The paths that stopped answering in this run, each on its node: known until the session ends (issue 57).

A mount that hangs while the storage section runs hangs every later call on it: each later phase and test that
sent a probe there would wait out a stall limit of its own to find the same thing again (issue 57 measured a
15 s stall costing the section 8 minutes). So the first stall of a (node, path) is noted here, where it was
already FAILED, and what would use that path on that node later is not launched: it is "not run", naming that
first stall ("/mnt/chkpt on node2 stalled at 19:02:11 in test_storage_throughput"), as a fine-tune held back by
a slow GPU is. Other nodes, and other paths of the same node, are launched and judged as usual.

A path that answers again later in the run (a step that reached it anyway came back whole) is not trusted again
silently: ``answered`` says so, for the judge to record beside its figures. One registry per pytest process, on
``SessionState.stalls``; the storage tests reach it through their ``stalls`` fixture.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Stall", "Stalls"]


@dataclass(frozen=True)
class Stall:
    """The first stall of one path on one node: when (UTC, as the run's log shows time), in which test, what."""

    node: str
    path: str
    at: str
    test: str
    detail: str

    def __str__(self) -> str:
        return f"{self.path} on {self.node} stalled at {self.at} in {self.test}"


@dataclass
class Stalls:
    """Every (node, path) that stalled in this run, the first stall of each kept."""

    _first: dict[tuple[str, str], Stall] = field(default_factory=dict)

    def note(self, node: str, path: str, test: str, detail: str) -> Stall:
        """Record that ``path`` stalled on ``node`` in ``test`` (the first time counts; later ones return it)."""
        return self._first.setdefault(
            (node, path), Stall(node, path, time.strftime("%H:%M:%S UTC", time.gmtime()), test, detail)
        )

    def of(self, node: str, path: str) -> Stall | None:
        return self._first.get((node, path))

    def split(self, nodes: Iterable[str], path: str) -> tuple[list[str], dict[str, str]]:
        """``nodes`` that may still be sent to ``path``, and why each other one is not run (node -> reason)."""
        free: list[str] = []
        held: dict[str, str] = {}
        for node in nodes:
            stall = self.of(node, path)
            if stall is None:
                free.append(node)
            else:
                held[node] = f"not run: {stall} (FAILED there)"
        return free, held

    def answered(self, node: str, path: str, test: str) -> str | None:
        """What to say when ``path`` answered on ``node`` after it had stalled there: not trusted again in this
        run, its earlier stall stands; None when it never stalled."""
        stall = self.of(node, path)
        if stall is None:
            return None
        now = time.strftime("%H:%M:%S UTC", time.gmtime())
        return (
            f"{path} on {node} answered again at {now} in {test} after it stalled at {stall.at} in {stall.test}: "
            "not trusted again in this run"
        )
