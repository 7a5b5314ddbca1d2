"""Metadata rates of a declared filesystem, in IO500's mdtest shapes, and one large directory listed whole.

Training jobs stall on metadata long before bandwidth: a dataloader opening a million small files, every rank
stat-ing the same checkpoint directory, a launcher listing a shard folder. Each rank, in ``--path``:

* ``easy``: creates ``--files`` empty files in a directory of its own, stats them, deletes them (mdtest
  "easy": no two clients touch one directory);
* ``hard``: the same with every rank of the step in one shared directory, the files named by rank (mdtest
  "hard": the clients contend for one directory's lock; ranks may sit on different nodes);

each phase timed on the rank's own clock, so ops/s per phase per rank; the ranks meet at a barrier before each
phase (marker files in the shared directory: the probe has no other channel), so the phases overlap as mdtest's
MPI barriers make them, and a judge can sum the ranks' ops over the slowest rank's seconds. Then each node's
first rank creates ``--large`` entries in one directory and lists it whole with ``os.scandir``: the count seen
must be the count created (a listing cut short, or one repeating names, is what NFS readdir cookie bugs do
to a job that lists its shards). Everything created is removed again; the shared directories by the last
rank out.

Every call runs under the stall limit (``_stall``); a call that stalls is reported and the probe returns.
By hand: ``python -m gpuaccept.probes.fsmeta --path /mnt/x --files 1000``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gpuaccept.contracts.fsmeta import FsmetaPayload, LargeDir, MdtestPhase, MdtestShape, StallRecord, WaitTimeout
from gpuaccept.probes._fsmeta_barrier import Barrier, rmdir, unlink
from gpuaccept.probes._protocol import emit, rank_info
from gpuaccept.probes._stall import STALL_LIMIT_S, Progress, Stalled, TimedOut, call, run, step_token

__all__ = ["main", "measure"]

#: the shared directory's name under --path: one per step, so two runs never meet
PREFIX = "gpuaccept-fsmeta-"
#: how long a rank that is done looks for the others to be done too, to remove the shared directories
CLEANUP_LOOK_S = 5.0

_CREATE_FLAGS = os.O_CREAT | os.O_EXCL | os.O_WRONLY


def _mkdir(path: Path, step: str, limit_s: float) -> None:
    def make() -> None:
        path.mkdir(exist_ok=True)

    call(make, step=step, operation="mkdir", path=path, limit_s=limit_s)


def _timed(phase: str, paths: Sequence[Path]) -> Callable[[Progress], tuple[MdtestPhase | None, int, OSError | None]]:
    """One phase's loop over ``paths``: its record, how many calls returned (for the clean-up after a failure)
    and the error that stopped it (None: none did; the record is then None). The loop runs in ``run``'s child,
    which changes nothing of this process's: the count comes back with the value."""

    def work(progress: Progress) -> tuple[MdtestPhase | None, int, OSError | None]:
        handled = 0
        start = time.perf_counter()
        try:
            if phase == "create":
                for path in paths:
                    progress.at("create", path)
                    os.close(os.open(path, _CREATE_FLAGS, 0o644))
                    handled += 1
            elif phase == "stat":
                for path in paths:
                    progress.at("stat", path)
                    os.stat(path)
                    handled += 1
            else:
                for path in paths:
                    progress.at("unlink", path)
                    os.unlink(path)
                    handled += 1
        except OSError as exc:
            progress.idle()
            return None, handled, exc
        seconds = time.perf_counter() - start
        progress.idle()
        rate = round(len(paths) / seconds, 1) if seconds > 0 else None
        record = MdtestPhase(phase=phase, ops=len(paths), seconds=round(seconds, 6), ops_per_s=rate)  # type: ignore[arg-type]
        return record, handled, None

    return work


class _Rank:
    """One rank's run: what it measured, what it left, how it ended."""

    def __init__(self, files: int, limit_s: float) -> None:
        self.files, self.limit_s = files, limit_s
        self.shapes: dict[str, MdtestShape] = {}
        self.large: LargeDir | None = None
        self.error: str | None = None
        self.timed_out: WaitTimeout | None = None
        self.leftovers: list[Path] = []  # files this rank created and has not removed (a phase stopped)
        self.own_dirs: list[Path] = []

    def shape(self, shape: str, directory: Path, names: Sequence[Path], barrier: Barrier) -> None:
        """create, stat, delete ``names``, each phase after a barrier; a failed call stops the shape and leaves
        its files to ``clean``."""
        phases: list[MdtestPhase] = []
        done = 0  # files of the shape that exist now: create counts up, delete down (both in order)
        phase = "create"
        try:
            for phase in ("create", "stat", "delete"):
                barrier.wait(f"{shape} {phase}")
                record, handled, error = run(_timed(phase, names), step=f"{shape} {phase}", limit_s=self.limit_s)
                if phase != "stat":
                    done = handled if phase == "create" else len(names) - handled
                if error is not None:
                    raise error
                phases.append(record)  # type: ignore[arg-type]  # a record whenever no error
        except OSError as exc:
            self.error = f"{shape} {phase}: {exc}"
            self.leftovers += list(names[len(names) - done :] if phase == "delete" else names[:done])
        finally:
            self.shapes[shape] = MdtestShape(shape=shape, directory=str(directory), files=self.files, phases=phases)  # type: ignore[arg-type]

    def large_dir(self, directory: Path, entries: int) -> None:
        names = [directory / f"e{i:08d}" for i in range(entries)]
        _mkdir(directory, "large create", self.limit_s)
        self.own_dirs.append(directory)
        created, handled, error = run(_timed("create", names), step="large create", limit_s=self.limit_s)
        if created is None:
            self.error = self.error or f"large create: {error}"
            self.leftovers += names[:handled]
            self.large = LargeDir(
                directory=str(directory),
                entries=entries,
                created=handled,
                create_seconds=0.0,
                listed=None,
                matched=None,
                list_seconds=None,
            )
            return

        expected = {name.name for name in names}

        def listing(progress: Progress) -> tuple[int, int, float]:
            start = time.perf_counter()
            seen: set[str] = set()
            count = 0
            progress.at("scandir", directory)
            with os.scandir(directory) as entries_seen:
                for entry in entries_seen:  # each next() may read the next batch of the directory
                    count += 1
                    if entry.name in expected:
                        seen.add(entry.name)
                    progress.at("scandir", directory)
            seconds = time.perf_counter() - start
            progress.idle()
            return count, len(seen), seconds

        listed: int | None = None
        matched: int | None = None
        list_seconds: float | None = None
        try:
            listed, matched, list_seconds = run(listing, step="large list", limit_s=self.limit_s)
        except OSError as exc:
            self.error = self.error or f"large list: {exc}"
        self.large = LargeDir(
            directory=str(directory),
            entries=entries,
            created=entries,
            create_seconds=created.seconds,
            listed=listed,
            matched=matched,
            list_seconds=None if list_seconds is None else round(list_seconds, 6),
        )
        self.leftovers += names

    def clean(self) -> bool:
        """Remove what this rank left; True when all of it is gone."""

        def work(progress: Progress) -> bool:
            for path in self.leftovers:
                unlink(progress, path)
            return all(rmdir(progress, d) for d in reversed(self.own_dirs))

        try:
            gone = run(work, step="clean up", limit_s=self.limit_s)
        except OSError as exc:
            self.error = self.error or f"clean up: {exc}"
            return False
        self.leftovers = []
        return gone


def measure(path: Path, *, files: int, large: int, token: str, limit_s: float = STALL_LIMIT_S) -> FsmetaPayload:
    """This rank's figures. A stalled call ends the measuring where it happened: what was measured before it is
    kept, nothing is cleaned up (the next call could hang as well), and the caller emits it and returns (the
    stalled child was killed, or named and left)."""
    info = rank_info()
    top = path / f"{PREFIX}{token}"
    me = _Rank(files, limit_s)
    barrier = Barrier(top / "sync", info.rank, info.world_size, limit_s)
    stalled: StallRecord | None = None
    cleaned = False
    try:
        _measure(me, barrier, top, large, info.rank, info.local_rank)
        cleaned = me.clean()
        barrier.leave()
        # after a barrier ran out the others may never leave: look once, leave the folder to the last one out
        if barrier.all_gone(0.0 if me.timed_out else CLEANUP_LOOK_S):

            def shared(progress: Progress) -> bool:
                return rmdir(progress, top / "hard") and rmdir(progress, top)

            run(shared, step="clean up", limit_s=limit_s)
    except Stalled as exc:
        stalled = exc.record
    except OSError as exc:
        me.error = me.error or f"clean up: {exc}"
    return FsmetaPayload(
        path=str(path),
        token=token,
        files=files,
        easy=me.shapes.get("easy"),
        hard=me.shapes.get("hard"),
        large=me.large,
        cleaned=cleaned and stalled is None,
        stall_limit_s=limit_s,
        stalled=stalled,
        timed_out=me.timed_out,
        error=me.error,
    )


def _measure(me: _Rank, barrier: Barrier, top: Path, large: int, rank: int, local_rank: int) -> None:
    """The shapes (every rank, in step) and the large directory (each node's first rank, on its own)."""
    try:
        for directory in (top, top / "sync", top / "hard"):
            _mkdir(directory, "set up", me.limit_s)
        easy = top / f"easy.{rank}"
        _mkdir(easy, "set up", me.limit_s)
        me.own_dirs.append(easy)
    except OSError as exc:
        me.error = f"set up: {exc}"
        return
    try:
        me.shape("easy", easy, [easy / f"f{i:08d}" for i in range(me.files)], barrier)
        if me.error is None:
            hard = top / "hard"
            me.shape("hard", hard, [hard / f"f.{rank}.{i:08d}" for i in range(me.files)], barrier)
        if me.error is None:
            barrier.wait("the end")  # every rank's hard delete done before the last one out removes the folder
    except TimedOut as exc:
        me.timed_out = exc.record
    if large > 0 and local_rank == 0 and me.timed_out is None and me.error is None:
        me.large_dir(top / f"large.{rank}", large)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", type=Path, required=True, help="a directory on the filesystem under test")
    parser.add_argument("--files", type=int, default=1000, help="files per rank per shape (default 1000)")
    parser.add_argument("--large", type=int, default=1000, help="entries of the large directory; 0: none")
    parser.add_argument("--token", default=None, help="names the shared directory (default: the Slurm step)")
    parser.add_argument("--stall-limit", type=float, default=STALL_LIMIT_S, help="seconds one call may take")
    args = parser.parse_args(argv)
    token = args.token or step_token()
    payload = measure(args.path, files=args.files, large=args.large, token=token, limit_s=args.stall_limit)
    emit(payload.model_dump(mode="json"), probe="fsmeta")


if __name__ == "__main__":
    main()
