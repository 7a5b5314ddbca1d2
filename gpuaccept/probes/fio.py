"""Storage throughput with fio: sequential writes that reach the disk, and reads that come from it.

    python -m gpuaccept.probes.fio --path /mnt/chkpt --token t1 --rw write                     # this node's files
    python -m gpuaccept.probes.fio --path /mnt/chkpt --token t1 --rw read --peers node1,node2  # the next one's

fio is the tool storage engineers already trust, so the figures are fio's own (``--output-format=json``),
with its version on the record. A write is 1 MiB sequential I/O by ``--jobs`` jobs of one file each, direct
(O_DIRECT) where the filesystem takes it, else buffered, and fsynced at the end either way (``end_fsync``:
MLPerf Storage's checkpoint rule, a write counts once it is on stable storage). A read reads the files another
node wrote (the one after it in ``--peers``), so none of its pages can be in this node's cache, and with fio's
``invalidate`` the cache is dropped first as well; with direct I/O the cache is bypassed. The payload says which
held. Alone, or on node-local storage, a node reads its own files, dropped from the cache first.

Files live under ``<path>/gpuaccept-<token>/<node>/``; ``--rw clean`` removes the token's folder. fio missing on
the node: the payload says so (``fio: null``) and the test records "not run", never a pass. A path that is
missing, not a directory, read-only or full is named as such, and fio itself runs under the stall limit
(``--stall-limit``): fio's bytes, from the report it prints each quarter second, that stop growing for the stall limit
end it there, naming the node, the folder and what fio was doing (a job stuck in the kernel is named and left);
the clean-up runs under the limit too.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from gpuaccept.contracts.fsmeta import StallRecord
from gpuaccept.contracts.storage import FioPayload, FioRun, PathProblem
from gpuaccept.probes._protocol import emit, node_name
from gpuaccept.probes._stall import Stalled, call, leave, remove, watch
from gpuaccept.timelimits import STALL_S

__all__ = ["BLOCK_KIB", "FIO_NAME", "fio_binary", "main", "run_dir"]

#: fio's job name: its files are ``gpuaccept-fio.<job>.0`` in the node's folder, the same names for the reader.
#: fio runs in that folder: given a job name that names an entry of its working folder, fio 3.33 writes every
#: job into one file of that name (seen with a ``gpuaccept`` folder in the working folder)
FIO_NAME = "gpuaccept-fio"
BLOCK_KIB = 1024
#: fio prints its running totals this often (``--status-interval``): the watch sees its bytes grow, and names how far
#: a stalled phase got, within a quarter of a second of the stall
REPORT_MS = 250


class FioStalled(Exception):
    """fio's bytes stopped growing for the stall limit: an I/O of it stopped answering (``record`` says which)."""

    def __init__(self, record: StallRecord) -> None:
        left = f"; {record.stuck}" if record.stuck else ""
        super().__init__(
            f"{node_name()}: {record.step} in {record.path} made no progress for {record.waited_s:.0f} s "
            f"(stall limit {record.limit_s:g} s) at {record.operation}{left}"
        )
        self.record = record


def fio_binary() -> str | None:
    """``$GPUACCEPT_FIO`` (an operator's own build), else fio on PATH, else None."""
    return os.environ.get("GPUACCEPT_FIO") or shutil.which("fio")


def run_dir(path: Path, token: str, node: str) -> Path:
    return path / f"gpuaccept-{token}" / node


def _version(fio: str) -> str:
    done = subprocess.run([fio, "--version"], capture_output=True, text=True, timeout=30, check=False)
    return done.stdout.strip() or done.stderr.strip()


def _check_path(path: Path, need_bytes: int, stall_s: float) -> PathProblem | None:
    """Why ``path`` cannot take this run (missing, not a folder, read-only, too full), or None."""
    step = "the path's checks"
    try:
        is_dir = call(path.is_dir, step=step, operation="stat", path=path, limit_s=stall_s)
        if not is_dir:
            exists = call(path.exists, step=step, operation="stat", path=path, limit_s=stall_s)
            return PathProblem(kind="not a directory" if exists else "missing", detail=str(path))
        st = call(lambda: os.statvfs(path), step=step, operation="statvfs", path=path, limit_s=stall_s)
        probe = path / f".gpuaccept-write-test-{os.getpid()}"
        try:
            call(lambda: probe.write_bytes(b"x"), step=step, operation="create", path=probe, limit_s=stall_s)
            call(probe.unlink, step=step, operation="unlink", path=probe, limit_s=stall_s)
        except OSError as exc:
            detail = f"{path}: {exc.strerror or exc}"
            if exc.errno in (errno.EROFS, errno.ENOSPC):
                return PathProblem(kind="read-only" if exc.errno == errno.EROFS else "full", detail=detail)
            return PathProblem(kind="unwritable", detail=detail)
    except Stalled as stalled:
        return PathProblem(kind="stalled", detail=str(stalled))
    free = st.f_bavail * st.f_frsize
    if need_bytes and free < need_bytes:
        return PathProblem(
            kind="full", detail=f"{path}: {free / 2**30:.2f} GiB free, this run writes {need_bytes / 2**30:.2f}"
        )
    return None


def _fio_command(fio: str, folder: Path, rw: str, jobs: int, file_bytes: int, direct: bool, max_s: float) -> list[str]:
    command = [
        fio,
        "--output-format=json",
        f"--name={FIO_NAME}",
        f"--directory={folder}",
        f"--filename_format={FIO_NAME}.$jobnum.0",
        f"--rw={rw}",
        f"--bs={BLOCK_KIB}k",
        f"--size={file_bytes}",
        f"--numjobs={jobs}",
        "--ioengine=psync",
        f"--direct={int(direct)}",
        "--invalidate=1",
        "--group_reporting",
        f"--runtime={max(1, round(max_s))}",
    ]
    if rw == "write":
        command.append("--end_fsync=1")
    return command


class _Progress:
    """fio's running totals, from the report it prints every ``REPORT_MS`` (``--status-interval``): when its
    bytes last grew, and the last whole report (the final one is fio's result)."""

    def __init__(self, rw: str, expected: int) -> None:
        self.rw, self.expected = rw, expected
        self.moved, self.when = 0, time.monotonic()
        self.last: dict[str, object] | None = None

    def read(self, stream: IO[str]) -> None:
        """Every report on ``stream`` as it comes (a reader thread: the watch must not block on fio's pipe)."""
        decoder, text = json.JSONDecoder(), ""
        for line in stream:
            text += line
            while (start := text.find("{")) >= 0:
                try:
                    report, end = decoder.raw_decode(text, start)
                except json.JSONDecodeError:
                    break  # not whole yet
                text = text[end:]
                self.last = report
                moved = sum(int(job[self.rw]["io_bytes"]) for job in report.get("jobs", []))
                if moved > self.moved:
                    self.moved, self.when = moved, time.monotonic()

    def now(self) -> tuple[float, str]:
        if self.last is None:  # its start-up, or its first quarter second of I/O
            return self.when, f"{self.rw}, before fio's first report (its start-up or first {REPORT_MS} ms)"
        doing = "fsync (end_fsync)" if self.rw == "write" and self.moved >= self.expected else self.rw
        return self.when, f"{doing}, {self.moved / 2**20:.0f} of {self.expected / 2**20:.0f} MiB moved"


def _run_fio(
    command: list[str], folder: Path, rw: str, expected: int, stall_s: float, cap_s: float
) -> tuple[dict[str, object] | None, str, float]:
    """fio's JSON (None when it failed), its stderr, its wall time; ``FioStalled`` when its bytes stopped
    growing for ``stall_s`` (its status reports, not its runtime: a stall is named at the stall limit)."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [*command, f"--status-interval={REPORT_MS}ms"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=folder,
        start_new_session=True,  # its job processes killed with it
    )
    assert proc.stdout is not None and proc.stderr is not None  # PIPE
    progress = _Progress(rw, expected)
    errors: list[str] = []
    threads = [
        threading.Thread(target=progress.read, args=(proc.stdout,), daemon=True),
        threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True),  # type: ignore[arg-type]
    ]
    for thread in threads:
        thread.start()
    stalled = watch(proc, progress.now, step=f"fio {rw}", path=str(folder), limit_s=stall_s, cap_s=cap_s)
    if stalled is not None:
        raise FioStalled(stalled)
    for thread in threads:
        thread.join(timeout=stall_s)
    wall = time.monotonic() - started
    said = "".join(errors).strip()
    if proc.returncode != 0:
        return None, said, wall
    return progress.last, said, wall


def _figures(report: dict[str, object], rw: str) -> tuple[int, float]:
    """Bytes and seconds of the job group (``group_reporting``: one job entry for all of them)."""
    jobs = report.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise ValueError("fio's JSON has no jobs")
    part = jobs[0][rw]
    return int(part["io_bytes"]), float(part["runtime"]) / 1000.0


def _file_sizes(folder: Path, jobs: int) -> list[int]:
    sizes = []
    for job in range(jobs):
        try:
            sizes.append((folder / f"{FIO_NAME}.{job}.0").stat().st_size)
        except OSError:
            sizes.append(0)
    return sizes


def _next(peers: list[str], me: str) -> str:
    """The node whose files ``me`` reads: the one after it in ``peers`` (round the end), itself when alone."""
    if me not in peers or len(peers) < 2:
        return me
    return peers[(peers.index(me) + 1) % len(peers)]


def measure(args: argparse.Namespace) -> FioPayload:
    """One phase on this node: its payload (what fio measured, or why nothing could be)."""
    path = Path(args.path)
    fio = fio_binary()
    if fio is None:
        return FioPayload(path=str(path), fio=None, run=None, problem=None)
    version = _version(fio)
    me = node_name()
    if args.rw == "clean":
        try:
            remove(path / f"gpuaccept-{args.token}", args.stall_limit)
        except Stalled as stalled:
            return FioPayload(
                path=str(path), fio=version, run=None, problem=PathProblem(kind="stalled", detail=str(stalled))
            )
        return FioPayload(path=str(path), fio=version, run=None, problem=None)
    file_bytes = args.file_mib << 20
    need = file_bytes * args.jobs if args.rw == "write" else 0
    problem = _check_path(path, need, args.stall_limit)
    if problem is not None:
        return FioPayload(path=str(path), fio=version, run=None, problem=problem)
    writer = _next(args.peers.split(",") if args.peers else [], me)
    folder = run_dir(path, args.token, writer if args.rw == "read" else me)
    if args.rw == "write":
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob(f"{FIO_NAME}.*"):
            stale.unlink()
    else:
        sizes = _file_sizes(folder, args.jobs)
        if min(sizes) == 0:
            detail = f"{folder}: {sizes.count(0)} of the {args.jobs} files {writer} wrote are missing or empty here"
            missing = PathProblem(kind="files missing", detail=detail)
            return FioPayload(path=str(path), fio=version, run=None, problem=missing)
        file_bytes = min(sizes)
    direct = args.direct
    expected, cap = file_bytes * args.jobs, args.max_s + args.stall_limit
    try:
        command = _fio_command(fio, folder, args.rw, args.jobs, file_bytes, direct, args.max_s)
        report, said, wall = _run_fio(command, folder, args.rw, expected, args.stall_limit, cap)
        if report is None and direct and "Invalid argument" in said:  # no O_DIRECT here (tmpfs, some FUSE)
            direct = False
            command = _fio_command(fio, folder, args.rw, args.jobs, file_bytes, direct, args.max_s)
            report, said, wall = _run_fio(command, folder, args.rw, expected, args.stall_limit, cap)
    except FioStalled as stalled:
        return FioPayload(
            path=str(path), fio=version, run=None, problem=PathProblem(kind="stalled", detail=str(stalled))
        )
    if report is None:
        raise SystemExit(f"fio failed in {folder}: {said[-600:]}")
    moved, runtime = _figures(report, args.rw)
    if direct:
        cache = "direct I/O"
    else:
        cache = "page cache dropped (fadvise)"
    run = FioRun(
        rw=args.rw,
        fio=version,
        bytes=moved,
        runtime_s=round(runtime, 4),
        wall_s=round(wall, 4),
        gbps=round(moved / runtime / 1e9, 4) if runtime > 0 else 0.0,
        jobs=args.jobs,
        block_kib=BLOCK_KIB,
        direct=direct,
        fsync=args.rw == "write",
        cache=cache,
        written_by=f"written by {writer}" if writer != me else "written by this node",
        command=command,
    )
    return FioPayload(path=str(path), fio=version, run=run, problem=None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", required=True, help="the declared filesystem's path")
    parser.add_argument("--token", required=True, help="this run's folder under the path (gpuaccept-<token>)")
    parser.add_argument("--rw", choices=("write", "read", "clean"), required=True)
    parser.add_argument("--peers", default="", help="read: the nodes in order; each reads the next one's files")
    parser.add_argument("--jobs", type=int, default=4, help="fio jobs, one file each")
    parser.add_argument("--file-mib", type=int, default=1024, help="each job's file (MiB)")
    parser.add_argument("--buffered", dest="direct", action="store_false", help="no O_DIRECT even where it works")
    parser.add_argument("--max-s", type=float, default=60.0, help="fio's runtime cap: a slower phase stops there")
    parser.add_argument("--stall-limit", type=float, default=STALL_S, help="an I/O stalled this long is named")
    args = parser.parse_args(argv)
    payload = measure(args)
    emit(payload.model_dump(mode="json"), probe="fio")
    leave(0)  # a reader thread of a fio job stuck in the kernel must not keep the process (and the step) alive


if __name__ == "__main__":
    main()
