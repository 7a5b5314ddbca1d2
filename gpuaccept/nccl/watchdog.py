"""A per-rank watchdog that turns a hung collective into an error naming the ranks and nodes behind it.

A collective that never completes blocks every rank of the communicator; NCCL's own timeout (or the
step timeout) would only say "timed out". Here each rank's watchdog thread knows where its main thread
is (which collective and size, which phase, how many operations it launched). When one rank's deadline
passes it raises a flag in the rendezvous store; every rank that sees the flag publishes its position,
waits a moment for its peers', prints one line naming who is behind, who did not answer and who was
waiting, and exits with status 124 (no process is left behind; the dispatcher's step timeout is only
the backstop). A rank that never answers is dead, stopped, or stuck outside Python.

The store is anything with ``set(key, value)``, ``get(key) -> bytes`` and ``check([keys]) -> bool``
(torch's ``TCPStore``), so the selftests can drive it with a dict.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

__all__ = ["HANG_EXIT", "Position", "StoreLike", "Watchdog", "describe_hang"]

HANG_EXIT = 124
_FLAG = "gpuaccept/hang"


class StoreLike(Protocol):
    def set(self, key: str, value: str | bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...


@dataclass
class Position:
    """Where a rank's main thread is: step number, what it runs, phase, operations launched."""

    rank: int
    node: str
    step: int = -1
    what: str = "start"
    phase: str = ""
    launched: int = 0


def describe_hang(
    what: str, timeout_s: float, group: Sequence[int], names: Sequence[str], finals: dict[int, Position]
) -> str:
    """One line: which ranks are behind (earlier step, fewer launches), which never answered, who waited."""
    answered = [finals[r] for r in group if r in finals]
    silent = [r for r in group if r not in finals]
    nodes = "+".join(dict.fromkeys(names[r] for r in group)) if names else "?"
    parts = [f"{what} (group {nodes}) did not finish within {timeout_s:g} s"]
    if answered:
        lead = max((p.step, p.launched) for p in answered)
        behind = [p for p in answered if (p.step, p.launched) < lead]
        waiting = [p for p in answered if (p.step, p.launched) == lead]
        if behind:
            parts.append(
                "behind: "
                + ", ".join(
                    f"rank {p.rank} ({p.node}) at {p.what} {p.phase}, {p.launched} ops launched" for p in behind
                )
            )
        if waiting and (behind or silent):
            parts.append("waiting: " + ", ".join(f"rank {p.rank} ({p.node})" for p in waiting))
        if not behind and not silent:
            first = waiting[0]
            parts.append(
                f"every rank reached {first.what} {first.phase} and launched {first.launched} ops: the collective "
                "itself did not complete (network, NVLink, GPU or driver)"
            )
    if silent:
        parts.append(
            "no answer (dead, stopped or stuck outside Python): "
            + ", ".join(f"rank {r} ({names[r] if r < len(names) else '?'})" for r in silent)
        )
    return "; ".join(parts)


class Watchdog:
    """Arm before each collective step, disarm after; on expiry report and exit ``HANG_EXIT``."""

    def __init__(
        self,
        rank: int,
        node: str,
        *,
        store_factory: Callable[[], StoreLike] | None = None,
        poll_s: float = 1.0,
        grace_s: float = 3.0,
        exit_fn: Callable[[int], Any] = os._exit,
        stream: Any = None,
    ) -> None:
        self.position = Position(rank, node)
        self.group: list[int] = [rank]
        self.names: list[str] = [node]
        self._store_factory = store_factory
        self._store: StoreLike | None = None
        self._poll_s = poll_s
        self._grace_s = grace_s
        self._exit = exit_fn
        self._stream = stream
        self._deadline: float | None = None
        self._timeout_s = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.fired: str | None = None
        self.firing = False
        self._thread = threading.Thread(target=self._run, name="gpuaccept-nccl-watchdog", daemon=True)
        self._thread.start()

    def set_group(self, group: Sequence[int], names: Sequence[str], store_factory: Callable[[], StoreLike]) -> None:
        """The ranks this rank waits on (its communicator) and every rank's node name."""
        self.group, self.names, self._store_factory = list(group), list(names), store_factory

    def arm(self, what: str, timeout_s: float) -> None:
        with self._lock:
            self.position.step += 1
            self.position.what, self.position.phase, self.position.launched = what, "", 0
            self._timeout_s = timeout_s
            self._deadline = time.monotonic() + timeout_s

    def phase(self, phase: str) -> None:
        self.position.phase = phase

    def launched(self) -> None:
        self.position.launched += 1

    def disarm(self) -> None:
        with self._lock:
            self._deadline = None

    def close(self) -> None:
        self._stop.set()

    def absorb(self, exc: BaseException) -> None:
        """Called with the main thread's exception: during a hang report, wait for the watchdog's exit.

        When a peer leaves after the report, the collective this rank waits in fails ("connection closed");
        that is a consequence of the hang, not news, so the rank exits with the hang's status, not a traceback.
        """
        if self.firing:
            self._thread.join()
            time.sleep(60)  # the watchdog has called exit; only reached with a test exit_fn
        raise exc

    def _client(self) -> StoreLike | None:
        if self._store is None and self._store_factory is not None:
            try:
                self._store = self._store_factory()
            except Exception as exc:  # the store's host (rank 0) may be gone
                self._say(f"GPUACCEPT_NCCL_WATCHDOG rank {self.position.rank}: store unreachable: {exc}")
                self._store_factory = None
        return self._store

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            with self._lock:
                deadline = self._deadline
            if deadline is None:
                continue
            expired = time.monotonic() >= deadline
            store = self._client()
            flagged = False
            if store is not None:
                try:
                    flagged = store.check([_FLAG])
                except Exception:
                    flagged = False
            if expired or flagged:
                self._fire(store, raised=expired and not flagged)
                return

    def _fire(self, store: StoreLike | None, *, raised: bool) -> None:
        self.firing = True
        pos = self.position
        finals: dict[int, Position] = {pos.rank: Position(**asdict(pos))}
        if store is not None:
            try:
                if raised:
                    store.set(_FLAG, f"rank {pos.rank}")
                store.set(f"gpuaccept/final/{pos.rank}", json.dumps(asdict(pos)))
                end = time.monotonic() + self._grace_s
                while time.monotonic() < end and len(finals) < len(self.group):
                    for peer in self.group:
                        key = f"gpuaccept/final/{peer}"
                        if peer not in finals and store.check([key]):
                            finals[peer] = Position(**json.loads(store.get(key)))
                    time.sleep(0.1)
            except Exception as exc:
                self._say(f"GPUACCEPT_NCCL_WATCHDOG rank {pos.rank}: could not reach peers: {exc}")
        self.fired = describe_hang(pos.what, self._timeout_s, self.group, self.names, finals)
        self._say(f"GPUACCEPT_NCCL_HANG rank {pos.rank} ({pos.node}) at {pos.what} {pos.phase}: {self.fired}")
        if pos.rank == 0 and store is not None:
            time.sleep(self._grace_s)  # rank 0 hosts the store: leave last so the others can read it
        self._exit(HANG_EXIT)

    def _say(self, line: str) -> None:
        stream = self._stream or sys.stderr
        stream.write(line + "\n")
        stream.flush()
