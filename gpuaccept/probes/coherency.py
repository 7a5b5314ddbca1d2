"""Cross-node coherency of a shared filesystem: how soon one node sees another's file, and whether a lock one
node holds keeps the other out.

A checkpoint written on one node and read on another, a "done" marker a launcher waits for, a lock file that
keeps two jobs from writing one output: each needs the other node to see the file whole (content, size and
mtime as the writer left them) soon, and a lock held on one node to hold on the other. Attribute and
directory caches (NFS ``actimeo``, a negative dentry cached for a name that did not exist yet) and locks kept
on the node (``local_lock=all``, ``nolock``) break exactly this, silently.

One step of two ranks on two nodes, coordinating only through ``--path`` (the filesystem under test is their
only channel), in a directory named by ``--token`` (unique per run):

1. hello: each rank writes its node's name and waits for the other's (``cross_node``: two nodes, not one);
2. ping-pong, ``--rounds`` times: rank 0 creates ``a.<n>`` (its wall time inside, an mtime set in the past),
   rank 1 looks every millisecond until it sees ``a.<n>`` whole, then creates ``b.<n>``; rank 0 looks for
   ``b.<n>`` the same way. Rank 0's round trip, on its one clock, holds both one-way visibilities, so each is
   at most the round trip and their mean at most half of it, whatever the nodes' clocks say; the wall-clock
   one-way time (the writer's time in the file against the reader's clock) is reported beside it;
3. locks: for ``flock`` and then POSIX ``lockf``, rank 0 takes an exclusive lock and says so; rank 1's
   non-blocking try must be refused; rank 0 releases and says so; rank 1's try must then be granted.

Every wait is bounded (``--wait``, the stall limit by default) and one that runs out is reported naming its
step; every call runs under the stall limit (``_stall``). With one rank (``WORLD_SIZE=1``) the probe says that
cross-node was not possible. By hand, on two nodes: ``srun -N2 -n2 python -m gpuaccept.probes.coherency
--path /mnt/x --token $(date +%s)``. The pair's channel (files whole, the waits for them) is
``_coherency_pair.py``, the lock trials ``_coherency_locks.py``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuaccept.contracts.fsmeta import CoherencyPayload, LockTrial, StallRecord, VisibilityRound, WaitTimeout
from gpuaccept.probes._coherency_locks import contend, hold, trial
from gpuaccept.probes._coherency_pair import Late, Look, Pair
from gpuaccept.probes._protocol import emit, node_name, rank_info
from gpuaccept.probes._stall import STALL_LIMIT_S, Progress, Stalled, TimedOut, run

__all__ = ["main", "measure"]

#: the run's directory under --path
PREFIX = "gpuaccept-coherency-"
#: the mtime each ping-pong file is given (whole seconds: every filesystem keeps them), far from "now", so a
#: look that shows the create time instead of the one set is an attribute the other node has not seen yet
MTIME_BASE_S = 1_500_000_000


@dataclass
class _State:
    """What the rank found so far: built in ``run``'s child, sent back as its value, and kept on the way
    (``Progress.keep``) for the payload should a later call stall."""

    peer_node: str | None = None
    rounds: list[VisibilityRound] = field(default_factory=list)
    locks: list[LockTrial] = field(default_factory=list)
    timed_out: WaitTimeout | None = None
    error: str | None = None
    cleaned: bool | None = None


def _body(token: str, name: str) -> bytes:
    """A ping-pong file's content: which run and file it is, and the writer's wall time (fixed width)."""
    return f"{token} {name} {time.time():020.6f}\n".encode()


def _checker(token: str, name: str) -> Callable[[bytes], bool]:
    prefix = f"{token} {name} ".encode()
    length = len(prefix) + 21

    def check(data: bytes) -> bool:
        return len(data) == length and data.startswith(prefix) and data.endswith(b"\n") and _wall(data) is not None

    return check


def _wall(data: bytes) -> float | None:
    try:
        return float(data.rsplit(b" ", 1)[1])
    except (IndexError, ValueError):
        return None


def _mtime(round_: int, name: str) -> int:
    return MTIME_BASE_S + 10 * round_ + (1 if name.startswith("b") else 0)


def _round_record(round_: int, role: str, look: Look, start: float | None) -> VisibilityRound:
    wall = _wall(look.data) if look.data else None
    trip = None if start is None or not look.seen else look.at - start
    return VisibilityRound(
        round=round_,
        role=role,  # type: ignore[arg-type]
        seen=look.seen,
        content_s=None if look.content_s is None else round(look.content_s, 6),
        whole_s=None if look.whole_s is None else round(look.whole_s, 6),
        attributes_ok=look.attributes_ok,
        size_seen=look.size,
        mtime_ns_seen=look.mtime_ns,
        looks=look.looks,
        clock_one_way_s=None if wall is None or not look.seen else round(time.time() - wall, 6),
        round_trip_s=None if trip is None else round(trip, 6),
        one_way_bound_s=None if trip is None else round(trip / 2, 6),
    )


def _rounds(pair: Pair, state: _State, count: int) -> None:
    """The ping-pong: rank 0 times each round trip on its own clock."""
    initiator = pair.rank == 0
    role = "initiator" if initiator else "responder"
    for n in range(count):
        mine, theirs = (f"a.{n}", f"b.{n}") if initiator else (f"b.{n}", f"a.{n}")
        start: float | None = None
        if initiator:
            pair.step(f"round {n}: rank 0 creates {mine}")
            start = time.monotonic()
            pair.write(mine, _body(pair.token, mine), _mtime(n, mine))
        pair.step(f"round {n}: rank {pair.rank} waits for {theirs}")
        try:
            look = pair.await_file(theirs, _checker(pair.token, theirs), _mtime(n, theirs))
        except Late as late:
            state.rounds.append(_round_record(n, role, late.look, start))
            raise
        state.rounds.append(_round_record(n, role, look, start))
        if not initiator:
            pair.step(f"round {n}: rank 1 creates {mine}")
            pair.write(mine, _body(pair.token, mine), _mtime(n, mine))
        pair.progress.keep(state)  # between rounds: the pickle is in no round trip


def _locks(pair: Pair, state: _State) -> None:
    for kind in ("flock", "lockf"):
        try:
            found = hold(pair, kind) if pair.rank == 0 else contend(pair, kind)
        except OSError as exc:  # the lock file or a signal could not be made: the pair is out of step, stop
            role = "holder" if pair.rank == 0 else "contender"
            state.locks.append(trial(kind, role, error=f"{pair.progress.step}: {exc}"))
            raise
        state.locks.append(found)
        pair.progress.keep(state)


def _protocol(pair: Pair, state: _State, node: str, rounds: int) -> None:
    """Hello, rounds, locks; then rank 1 says goodbye and rank 0 removes the directory."""
    try:
        pair.step(f"hello: rank {pair.rank} writes its node's name")
        pair.write(f"hello.{pair.rank}", f"{node}\n".encode())
        pair.step(f"hello: rank {pair.rank} waits for rank {1 - pair.rank}'s")
        look = pair.await_file(f"hello.{1 - pair.rank}", lambda data: data.endswith(b"\n") and len(data) > 1)
        state.peer_node = (look.data or b"").decode(errors="replace").strip()
        pair.progress.keep(state)
        _rounds(pair, state, rounds)
        _locks(pair, state)
    except TimedOut as exc:
        state.timed_out = exc.record
    except OSError as exc:
        state.error = f"{pair.progress.step}: {exc}"
    if pair.rank == 1:
        pair.step("rank 1 says goodbye")
        try:
            pair.signal("bye.1")
        except OSError as exc:  # after a wait ran out rank 0 may have removed the directory: nothing new
            if state.timed_out is None:
                state.error = state.error or f"{pair.progress.step}: {exc}"
        return
    state.cleaned = _clean(pair, state)


def _clean(pair: Pair, state: _State) -> bool:
    """Rank 0, once rank 1 said goodbye (or after a wait ran out: it may be gone): remove the directory."""
    try:
        if state.timed_out is None and state.error is None:
            pair.step("rank 0 waits for rank 1's goodbye")
            pair.await_signal("bye.1")
        pair.step("rank 0 removes the directory")
        pair.progress.at("listdir", pair.directory)
        for name in os.listdir(pair.directory):
            pair.progress.at("unlink", pair.directory / name)
            os.unlink(pair.directory / name)
        pair.progress.at("rmdir", pair.directory)
        os.rmdir(pair.directory)
    except TimedOut as exc:
        state.timed_out = exc.record
        return False
    except OSError as exc:
        state.error = state.error or f"{pair.progress.step}: {exc}"
        return False
    finally:
        pair.progress.idle()
    return True


def measure(
    path: Path, *, token: str, rounds: int = 5, limit_s: float = STALL_LIMIT_S, wait_s: float | None = None
) -> CoherencyPayload:
    """This rank's view of the pair (``Stalled`` is caught: what was found before it is kept)."""
    info = rank_info()
    node = node_name()
    directory = path / f"{PREFIX}{token}"
    state = _State()
    common = {"path": str(path), "token": token, "node": node, "stall_limit_s": limit_s}
    if info.world_size < 2 or info.rank > 1:
        alone = info.world_size < 2
        return CoherencyPayload(
            **common,  # type: ignore[arg-type]
            role="alone" if alone else "idle",
            peer_node=None,
            cross_node=False,
            reason="one rank: cross-node visibility and locking need two ranks on two nodes"
            if alone
            else f"rank {info.rank}: only ranks 0 and 1 take part",
            rounds=[],
            locks=[],
            stalled=None,
            timed_out=None,
            error=None,
            cleaned=None,
        )
    stalled: StallRecord | None = None

    def work(progress: Progress) -> _State:
        pair = Pair(directory, info.rank, token, limit_s if wait_s is None else wait_s, progress)
        progress.step = "make the run's directory"
        progress.at("mkdir", directory)
        directory.mkdir(exist_ok=True)
        progress.idle()
        _protocol(pair, state, node, rounds)
        return state

    try:
        state = run(work, step="coherency", limit_s=limit_s)
    except Stalled as exc:
        stalled = exc.record
        state = exc.kept or state
    except OSError as exc:
        state.error = f"make the run's directory: {exc}"
    cross = state.peer_node is not None and state.peer_node != node
    reason: str | None = None
    if state.peer_node is None:
        reason = "the other rank was never seen"
    elif not cross:
        reason = f"both ranks ran on {node}"
    return CoherencyPayload(
        **common,  # type: ignore[arg-type]
        role="initiator" if info.rank == 0 else "responder",
        peer_node=state.peer_node,
        cross_node=cross,
        reason=reason,
        rounds=list(state.rounds),
        locks=list(state.locks),
        stalled=stalled,
        timed_out=state.timed_out,
        error=state.error,
        cleaned=state.cleaned if info.rank == 0 and stalled is None else None,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", type=Path, required=True, help="a directory on the shared filesystem")
    parser.add_argument("--token", required=True, help="unique per run: names the pair's directory")
    parser.add_argument("--rounds", type=int, default=5, help="ping-pong rounds (default 5)")
    parser.add_argument("--stall-limit", type=float, default=STALL_LIMIT_S, help="seconds one call may take")
    parser.add_argument("--wait", type=float, default=None, help="seconds a wait for the other rank may take")
    args = parser.parse_args(argv)
    payload = measure(args.path, token=args.token, rounds=args.rounds, limit_s=args.stall_limit, wait_s=args.wait)
    emit(payload.model_dump(mode="json"), probe="coherency")


if __name__ == "__main__":
    main()
