"""The two ranks of the coherency probe (``coherency.py``) and their one channel: files in a shared directory.

``Pair`` is one rank's side: it creates a file whole (``O_EXCL``, then the mtime set) and waits for the other
rank's, looking every ``LOOK_GAP_S`` and opening, reading and ``fstat``-ing it each time as a reader on another
node would, until the content and the attributes are the ones the writer left (``Look``: what the wait saw);
a wait that runs out raises ``Late`` with its last look. The signals the lock trials exchange (``OK``,
``REFUSED``) are files too: the filesystem under test is the only channel the ranks share.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuaccept.contracts.fsmeta import WaitTimeout
from gpuaccept.probes._stall import Progress, TimedOut

__all__ = ["LOOK_GAP_S", "OK", "REFUSED", "Late", "Look", "Pair"]

#: the gap between two looks for the other's file: the 1 s requirement is resolved to a millisecond or so
LOOK_GAP_S = 0.001
#: what a signal file holds: the step it announces was done, or refused (rank 0 could not take the lock)
OK = b"ok\n"
REFUSED = b"no\n"


@dataclass
class Look:
    """One wait for the other rank's file."""

    seen: bool
    data: bytes | None
    content_s: float | None
    whole_s: float | None
    size: int | None
    mtime_ns: int | None
    attributes_ok: bool | None  # the last look's size and mtime as set (None: never opened)
    looks: int
    at: float  # time.monotonic() of the last look
    last_seen: str


class Pair:
    """One rank of the pair: the shared directory, the waits and the files."""

    def __init__(self, directory: Path, rank: int, token: str, wait_s: float, progress: Progress) -> None:
        self.directory, self.rank, self.token, self.wait_s, self.progress = directory, rank, token, wait_s, progress

    def step(self, text: str) -> None:
        self.progress.step = text

    def write(self, name: str, body: bytes, mtime_s: int | None = None) -> None:
        """Create ``name`` whole (O_EXCL: a file of an earlier run is an error, never read as this one's),
        then set its mtime: the other node must see both."""
        path = self.directory / name
        self.progress.at("create", path)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            self.progress.at("write", path)
            os.write(fd, body)
        finally:
            self.progress.at("close", path)
            os.close(fd)  # NFS writes back on close: what the other node's open revalidates against
        if mtime_s is not None:
            self.progress.at("utime", path)
            os.utime(path, ns=(mtime_s * 10**9, mtime_s * 10**9))
        self.progress.idle()

    def await_file(self, name: str, check: Callable[[bytes], bool], mtime_s: int | None = None) -> Look:
        """Look at ``name`` every ``LOOK_GAP_S`` until its content passes ``check`` and its size (and mtime, if
        given) agree; ``TimedOut`` after ``wait_s``. Each look opens the file, reads it and fstat()s the open
        file, as a reader on the other node would: an open revalidates NFS's cached attributes."""
        path = self.directory / name
        want_mtime = None if mtime_s is None else mtime_s * 10**9
        start = time.monotonic()
        looks = 0
        content_s: float | None = None
        last = "missing"
        size: int | None = None
        mtime_ns: int | None = None
        attributes: bool | None = None
        while True:
            looks += 1
            self.progress.at("open", path)
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                last = "missing"
            else:
                try:
                    self.progress.at("read", path)
                    data = _read_all(fd)
                    self.progress.at("fstat", path)
                    info = os.fstat(fd)
                finally:
                    os.close(fd)
                now = time.monotonic()
                size, mtime_ns = info.st_size, info.st_mtime_ns
                content = check(data)
                if content and content_s is None:
                    content_s = now - start
                size_ok = size == len(data)
                mtime_ok = want_mtime is None or mtime_ns == want_mtime
                attributes = size_ok and mtime_ok
                if content and attributes:
                    self.progress.idle()
                    return Look(True, data, content_s, now - start, size, mtime_ns, True, looks, now, "whole")
                last = _describe(content, len(data), size, mtime_ns, want_mtime)
            self.progress.idle()
            waited = time.monotonic() - start
            if waited >= self.wait_s:
                raise Late(
                    WaitTimeout(
                        step=self.progress.step or name,
                        path=str(path),
                        limit_s=self.wait_s,
                        waited_s=round(waited, 3),
                        last_seen=last,
                    ),
                    Look(False, None, content_s, None, size, mtime_ns, attributes, looks, time.monotonic(), last),
                )
            time.sleep(LOOK_GAP_S)

    def signal(self, name: str, body: bytes = OK) -> None:
        self.write(name, body)

    def await_signal(self, name: str) -> bytes:
        look = self.await_file(name, lambda data: data in (OK, REFUSED))
        return look.data or b""


class Late(TimedOut):
    """A wait that ran out, with what the last look found (for the round's record)."""

    def __init__(self, record: WaitTimeout, look: Look) -> None:
        super().__init__(record)
        self.look = look

    def __reduce__(self) -> tuple[Any, ...]:  # raised in ``run``'s child, pickled to the probe
        return type(self), (self.record, self.look)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _describe(content: bool, read: int, size: int, mtime_ns: int, want_mtime: int | None) -> str:
    """What a look that was not whole found: for the timeout's record."""
    parts = [] if content else [f"content not yet right ({read} bytes read)"]
    if size != read:
        parts.append(f"size {size} but {read} bytes read")
    if want_mtime is not None and mtime_ns != want_mtime:
        parts.append(f"mtime {mtime_ns / 1e9:.3f} s, set {want_mtime / 1e9:.0f} s")
    return "; ".join(parts) or "whole"
