"""The forked child the storage probes' filesystem work runs in (``_stall.run``), and its two channels to the
probe that watches it.

The page: before each call the child writes what it is about to do (``Progress.at``: the operation, the path and
a ``time.monotonic()`` read, one clock for both processes) into a page of anonymous shared memory, with no system
call, so a loop of a hundred thousand creates is timed as it would be without the watch; the parent reads it
(``current``, ``step_of``) only at a call's deadline. The pipe: the work's value or exception, and what it kept
on the way (``Progress.keep``), pickled, each message after its length (``send``, ``receive``). ``serve`` is the
child's whole life: its standard streams on /dev/null (a child left behind in the kernel holds none of the step's
output pipes, which srun waits on), the work, the answer, ``os._exit``.
"""

from __future__ import annotations

import io
import mmap
import os
import pickle
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

__all__ = ["PAGE", "Now", "Progress", "current", "receive", "send", "serve", "step_of"]

# The page the child says what it is doing in: the call at offset 0, the step at STEP_AT, each as a header
# (a sequence number, odd while the child writes, then its text's length) and the text. The parent copies a
# header and its text and takes them only when the sequence number is even and the same after the copy.
PAGE = 2 * mmap.PAGESIZE
_SEQ = struct.Struct("<Q")
_CALL = struct.Struct("<QdI")  # sequence, the call's start (time.monotonic(), one clock for both), length
_STEP = struct.Struct("<QI")  # sequence, length (0: no step set)
_STEP_AT = mmap.PAGESIZE
_ROOM = _STEP_AT - _CALL.size  # a call's text: the operation, NUL, the path (PATH_MAX is 4096: cut, never lost)
_LENGTH = struct.Struct("<Q")  # a message's length on the pipe, before its pickle


@dataclass(frozen=True)
class Now:
    operation: str
    path: str
    since: float  # time.monotonic() when the call started


class Progress:
    """What the child is doing, for the parent that watches it: ``at`` before each filesystem call, ``idle``
    while it sleeps between looks (a sleep is not a call, and a wait's own deadline, not the stall limit,
    bounds it). ``step``, when the work sets it, names the part of a longer piece of work a stall is reported
    in ("round 3: wait for b.3"). ``keep`` sends the parent what the work found so far (pickled: call it
    between timed calls, not in a timed loop), for the probe's payload should a later call stall."""

    __slots__ = ("_page", "_pipe", "_seq", "_step", "_step_seq")

    def __init__(self, page: mmap.mmap, pipe: int) -> None:
        self._page, self._pipe = page, pipe
        self._seq = self._step_seq = 0
        self._step: str | None = None

    def at(self, operation: str, path: str | os.PathLike[str]) -> None:
        # the cost is the watch's on every call timed: one f-string, one encode, three copies into the page
        text = f"{operation}\0{os.fspath(path)}".encode(errors="surrogateescape")
        if len(text) > _ROOM:
            text = text[:_ROOM]
        page, seq = self._page, self._seq + 2
        _SEQ.pack_into(page, 0, seq - 1)
        page[_CALL.size : _CALL.size + len(text)] = text
        _CALL.pack_into(page, 0, seq, time.monotonic(), len(text))
        self._seq = seq

    def idle(self) -> None:
        self._seq += 2
        _CALL.pack_into(self._page, 0, self._seq, 0.0, 0)

    @property
    def step(self) -> str | None:
        return self._step

    @step.setter
    def step(self, text: str | None) -> None:
        self._step = text
        data = (text or "").encode(errors="surrogateescape")[: PAGE - _STEP_AT - _STEP.size]
        seq = self._step_seq
        _SEQ.pack_into(self._page, _STEP_AT, seq + 1)
        self._page[_STEP_AT + _STEP.size : _STEP_AT + _STEP.size + len(data)] = data
        _STEP.pack_into(self._page, _STEP_AT, seq + 2, len(data))
        self._step_seq = seq + 2

    def keep(self, found: object) -> None:
        send(self._pipe, ("kept", found))


def _look(page: mmap.mmap, at: int, header: struct.Struct) -> tuple[tuple[Any, ...], bytes]:
    """One consistent copy of a header and its text from the child's page (the child never stops in the
    middle of a write for long: it writes no more than a path)."""
    while True:
        fields = header.unpack_from(page, at)
        text = page[at + header.size : at + header.size + fields[-1]]
        if fields[0] % 2 == 0 and _SEQ.unpack_from(page, at)[0] == fields[0]:
            return fields, text
        time.sleep(0.001)


def current(page: mmap.mmap) -> tuple[int, Now | None]:
    """The child's call under way (None between calls), with the sequence number it was written under."""
    (seq, since, _), text = _look(page, 0, _CALL)
    if not text:
        return seq, None
    operation, _, path = text.decode(errors="surrogateescape").partition("\0")
    return seq, Now(operation, path, since)


def step_of(page: mmap.mmap) -> str | None:
    """The step the child's work named last (``Progress.step``), None when it named none."""
    (_, length), text = _look(page, _STEP_AT, _STEP)
    return text.decode(errors="surrogateescape") if length else None


def send(pipe: int, message: tuple[str, object]) -> None:
    data = memoryview(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
    with open(pipe, "wb", buffering=0, closefd=False) as out:
        out.write(_LENGTH.pack(len(data)))
        while data:
            data = data[out.write(data) or 0 :]


def receive(pipe: io.FileIO) -> tuple[str, Any] | None:
    """The next message from the child; None when its end closed first (it ended without an answer)."""
    head = pipe.read(_LENGTH.size)
    if head is None or len(head) < _LENGTH.size:
        return None
    size = _LENGTH.unpack(head)[0]
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        count = pipe.readinto(view[got:]) or 0
        if count == 0:
            return None
        got += count
    kind, value = pickle.loads(data)
    return kind, value


def serve(work: Callable[[Progress], object], page: mmap.mmap, pipe: int) -> NoReturn:
    """The forked child: the work, its value or exception down the pipe, and out with ``os._exit`` (no atexit
    handler, no flush of the parent's buffers it holds a copy of)."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
        for stream in (0, 1, 2):
            os.dup2(null, stream)
        answer: tuple[str, object]
        try:
            answer = ("value", work(Progress(page, pipe)))
        except BaseException as exc:  # sent to the parent, which raises it
            answer = ("error", exc)
        try:
            send(pipe, answer)
        except Exception as exc:  # a value or an exception pickle cannot carry
            send(pipe, ("error", ChildProcessError(f"the I/O child's {answer[0]} could not be sent back: {exc}")))
    finally:
        os._exit(0)
