"""The lock trials of the coherency probe (``coherency.py``): does a lock one node holds keep the other out?

For ``flock`` and then POSIX ``lockf``, rank 0 (``hold``) takes an exclusive lock on a file in the shared
directory and says so; rank 1 (``contend``) tries the same lock without blocking, which must be refused; rank 0
releases it and says so; rank 1's next try must then be granted (tried every ``LOOK_GAP_S`` up to the wait: a
release may take a moment to reach the server). Locks kept on the node (NFS ``local_lock=all``, ``nolock``)
grant both. The ranks say so through files (``Pair.signal``): the filesystem under test is their only channel.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from gpuaccept.contracts.fsmeta import LockTrial
from gpuaccept.probes._coherency_pair import LOOK_GAP_S, OK, REFUSED, Pair

__all__ = ["contend", "hold"]

_REFUSALS = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)


def trial(kind: str, role: str, **found: object) -> LockTrial:
    """One lock trial with what it found; every reading it did not take written None (the payload has no defaults)."""
    unread = dict.fromkeys(
        ("held", "refused_while_held", "granted_after_release", "grant_s", "honoured", "error"), None
    )
    return LockTrial.model_validate({"kind": kind, "role": role, **unread, **found})


def _try_lock(fd: int, kind: str) -> bool:
    """A non-blocking exclusive lock: True granted, False refused (another holds it); other errors raise."""
    try:
        if kind == "flock":
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in _REFUSALS:
            return False
        raise
    return True


def _unlock(pair: Pair, fd: int, kind: str, path: Path) -> None:
    pair.progress.at(f"{kind} unlock", path)
    if kind == "flock":
        fcntl.flock(fd, fcntl.LOCK_UN)
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def _opened(pair: Pair, path: Path, flags: int) -> Iterator[int]:
    """The lock file open (each call under the stall watch), closed again whatever the trial found."""
    pair.progress.at("open", path)
    fd = os.open(path, flags, 0o644)
    try:
        yield fd
    finally:
        pair.progress.at("close", path)
        os.close(fd)
        pair.progress.idle()


def hold(pair: Pair, kind: str) -> LockTrial:
    """Rank 0: lock, say so, wait for rank 1's try, release, say so, wait for rank 1 to finish."""
    path = pair.directory / f"lock.{kind}"
    pair.step(f"{kind}: rank 0 locks")
    with _opened(pair, path, os.O_RDWR | os.O_CREAT) as fd:
        pair.progress.at(kind, path)
        try:
            held = _try_lock(fd, kind)
            error = None if held else "the lock file was already locked"
        except OSError as exc:
            held, error = False, f"{kind}: {exc}"
        pair.progress.idle()
        pair.signal(f"held.{kind}", OK if held else REFUSED)
        if not held:
            return trial(kind, "holder", held=False, error=error)
        pair.step(f"{kind}: rank 0 waits for rank 1's try")
        pair.await_signal(f"tried.{kind}")
        pair.step(f"{kind}: rank 0 releases")
        _unlock(pair, fd, kind, path)
    pair.signal(f"released.{kind}")
    pair.step(f"{kind}: rank 0 waits for rank 1's second try")
    pair.await_signal(f"done.{kind}")
    return trial(kind, "holder", held=True)


def contend(pair: Pair, kind: str) -> LockTrial:
    """Rank 1: once rank 0 holds the lock, a try must be refused; once it released it, a try must be granted
    (tried every millisecond up to the wait: a release may take a moment to reach the server)."""
    path = pair.directory / f"lock.{kind}"
    pair.step(f"{kind}: rank 1 waits for rank 0's lock")
    if pair.await_signal(f"held.{kind}") != OK:
        return trial(kind, "contender", error="rank 0 could not take the lock")
    pair.step(f"{kind}: rank 1 tries while held")
    errors: list[str] = []
    refused: bool | None = None
    granted = False
    grant_s: float | None = None
    with _opened(pair, path, os.O_RDWR) as fd:
        pair.progress.at(kind, path)
        try:
            refused = not _try_lock(fd, kind)
        except OSError as exc:  # ENOLCK: no lock service; the protocol goes on so rank 0 is not left waiting
            errors.append(f"{kind} while held: {exc}")
        if refused is False:
            _unlock(pair, fd, kind, path)  # two nodes held one lock: give it back so rank 0 can go on
        pair.progress.idle()
        pair.signal(f"tried.{kind}")
        pair.step(f"{kind}: rank 1 waits for rank 0's release")
        pair.await_signal(f"released.{kind}")
        pair.step(f"{kind}: rank 1 tries after the release")
        start = time.monotonic()
        while True:
            pair.progress.at(kind, path)
            try:
                granted = _try_lock(fd, kind)
            except OSError as exc:
                errors.append(f"{kind} after release: {exc}")
                break
            pair.progress.idle()
            if granted or time.monotonic() - start >= pair.wait_s:
                break
            time.sleep(LOOK_GAP_S)
        if granted:
            grant_s = time.monotonic() - start
            _unlock(pair, fd, kind, path)
    pair.signal(f"done.{kind}")
    return trial(
        kind,
        "contender",
        refused_while_held=refused,
        granted_after_release=granted,
        grant_s=None if grant_s is None else round(grant_s, 6),
        honoured=refused is True and granted,
        error="; ".join(errors) or None,
    )
