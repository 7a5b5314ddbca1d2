"""The declared filesystems on this node: each path there, a directory, on the mount it should be, writable,
with room; the mount's type, source and options; and the kernel modules a vendor client needs.

The commonest storage faults of a new cluster are not slow disks but missing ones: a path the site declared
that one node never mounted (the job then writes into the node's root filesystem, and the data is gone with
the node), a mount gone read-only after an error, a filesystem full, an NFS mount without the ``nconnect``
or ``vers`` the site tuned, a read-ahead left at the kernel's default, a vendor client module not loaded.
For each ``--path``:

* whether it exists and is a directory, and where it resolves to;
* the mount it lives on: the longest mount point of ``/proc/self/mountinfo`` that holds it (the last one
  listed where one point is mounted over: the one on top), with its type, source, per-mount and
  filesystem options, and whether the path is itself that mount point;
* read-only: the ``ro`` flag, and an actual 4 KiB file created, fsynced and removed (a mount can say ``rw``
  and refuse writes: EROFS after an error, ENOSPC, EDQUOT, a server exporting read-only);
* ``statvfs``: bytes and inodes, total and free;
* NFS options (``vers``, ``nconnect``, ``proto``, ``rsize``/``wsize``, hard or soft, ``local_lock``, the
  attribute-cache times), and the mount's ``read_ahead_kb`` from ``/sys/class/bdi/<major>:<minor>``;

and once, the names in ``/proc/modules`` (lustre, mmfs26 for GPFS, wekafs ...). Every call on a declared
path runs under the stall limit (``_stall``): a hung mount is reported, naming the path, and the probe returns.
``--root`` reads ``proc`` and ``sys`` under another folder (the selftests' recorded trees); the paths
themselves are always the real ones. By hand: ``python -m gpuaccept.probes.mounts --path /mnt/x --path /data``.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import stat
from pathlib import Path

from gpuaccept.contracts.fsmeta import MountEntry, MountsPayload, NfsOptions, PathMount, StallRecord
from gpuaccept.probes._protocol import emit
from gpuaccept.probes._stall import STALL_LIMIT_S, Progress, Stalled, run

__all__ = ["find_mount", "main", "measure", "nfs_options", "parse_mountinfo", "read_modules"]

#: the bytes written to prove a path writable: one page, fsynced, so a full filesystem says ENOSPC here
WRITE_BYTES = 4096
NFS_TYPES = frozenset({"nfs", "nfs4"})
_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes (``\\040``)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Every line of ``/proc/self/mountinfo`` (proc(5)): ``id parent major:minor root point options
    [optional fields...] - type source super-options``; a line not of that shape is skipped."""
    entries: list[MountEntry] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or len(tail) < 2:
            continue
        try:
            mount_id, parent_id = int(fields[0]), int(fields[1])
        except ValueError:
            continue
        entries.append(
            MountEntry(
                mount_id=mount_id,
                parent_id=parent_id,
                major_minor=fields[2],
                root=_unescape(fields[3]),
                mount_point=_unescape(fields[4]),
                fs_type=tail[0],
                source=_unescape(tail[1]),
                mount_options=fields[5].split(","),
                super_options=tail[2].split(",") if len(tail) > 2 else [],
            )
        )
    return entries


def _within(path: str, point: str) -> bool:
    return point == "/" or path == point or path.startswith(point.rstrip("/") + "/")


def find_mount(entries: list[MountEntry], path: str) -> MountEntry | None:
    """The mount ``path`` (absolute, resolved) lives on: the longest mount point holding it, and of several
    on one point the last listed (mounted over the others)."""
    best: MountEntry | None = None
    for entry in entries:
        if _within(path, entry.mount_point) and (best is None or len(entry.mount_point) >= len(best.mount_point)):
            best = entry
    return best


def _options(entry: MountEntry) -> dict[str, str]:
    out: dict[str, str] = {}
    for option in entry.mount_options + entry.super_options:
        key, _, value = option.partition("=")
        out[key] = value
    return out


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def nfs_options(entry: MountEntry) -> NfsOptions | None:
    """What an NFS mount's options say (nfs(5)); None for another filesystem."""
    if entry.fs_type not in NFS_TYPES:
        return None
    options = _options(entry)
    vers = options.get("vers") or options.get("nfsvers")
    if vers is None and entry.fs_type == "nfs4":
        vers = "4"
    hard = True if "hard" in options else False if "soft" in options or "softerr" in options else None
    cache = {key: int(value) for key, value in options.items() if key.startswith("ac") and value.isdigit()}
    return NfsOptions(
        vers=vers,
        nconnect=_int(options.get("nconnect")),
        proto=options.get("proto"),
        rsize=_int(options.get("rsize")),
        wsize=_int(options.get("wsize")),
        hard=hard,
        local_lock=options.get("local_lock"),
        actimeo=cache,
    )


def read_modules(root: Path) -> list[str] | None:
    """The loaded kernel modules' names (``/proc/modules``' first field), sorted; None when unreadable."""
    try:
        text = (root / "proc" / "modules").read_text()
    except OSError:
        return None
    return sorted({line.split()[0] for line in text.splitlines() if line.strip()})


def _read_ahead(root: Path, major_minor: str) -> int | None:
    try:
        return int((root / "sys" / "class" / "bdi" / major_minor / "read_ahead_kb").read_text().strip())
    except (OSError, ValueError):
        return None


def _write_check(progress: Progress, directory: str) -> str | None:
    """Create, fill, fsync and remove one file in ``directory``: None when all of that worked, else the error."""
    probe = os.path.join(directory, f".gpuaccept-mounts-{socket.gethostname()}-{os.getpid()}")
    try:
        progress.at("create", probe)
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError as exc:
        return f"create: {exc}"
    error: str | None = None
    try:
        progress.at("write", probe)
        os.write(fd, b"\0" * WRITE_BYTES)
        progress.at("fsync", probe)
        os.fsync(fd)
    except OSError as exc:
        error = f"write: {exc}"
    finally:
        progress.at("close", probe)
        try:
            os.close(fd)
        except OSError as exc:  # NFS reports a deferred write error at close
            error = error or f"close: {exc}"
        try:
            progress.at("unlink", probe)
            os.unlink(probe)
        except OSError as exc:
            error = error or f"unlink: {exc}"
        progress.idle()
    return error


def _path(path: str, entries: list[MountEntry] | None, root: Path, write: bool, limit_s: float) -> PathMount:
    """One declared path (``Stalled`` propagates: the caller keeps what the others found)."""

    def look(progress: Progress) -> tuple[str, os.stat_result | None, os.statvfs_result | None]:
        progress.at("realpath", path)
        resolved = os.path.realpath(path)  # absolute, symlinks followed: what mountinfo's points are
        progress.at("stat", resolved)
        try:
            info: os.stat_result | None = os.stat(resolved)
        except (FileNotFoundError, NotADirectoryError):
            info = None
        fs = None
        if info is not None:
            progress.at("statvfs", resolved)
            fs = os.statvfs(resolved)
        progress.idle()
        return resolved, info, fs

    step = f"look at {path}"
    try:
        resolved, info, fs = run(look, step=step, limit_s=limit_s)
    except OSError as exc:
        return _unreadable(path, f"{step}: {exc}")
    mount = find_mount(entries, resolved) if entries is not None else None
    is_dir = info is not None and stat.S_ISDIR(info.st_mode)
    flags = set(mount.mount_options + mount.super_options) if mount is not None else set()
    write_error: str | None = None
    if write and is_dir:
        write_error = run(lambda progress: _write_check(progress, resolved), step=f"write to {path}", limit_s=limit_s)
    return PathMount(
        path=path,
        resolved=resolved,
        exists=info is not None,
        is_dir=is_dir if info is not None else None,
        mount=mount,
        is_mount_point=None if mount is None else mount.mount_point == resolved,
        read_only_flag=None if mount is None else "ro" in flags,
        write_checked=write and is_dir,
        writable=(write_error is None) if write and is_dir else None,
        write_error=write_error,
        total_bytes=None if fs is None else fs.f_blocks * fs.f_frsize,
        free_bytes=None if fs is None else fs.f_bavail * fs.f_frsize,
        total_inodes=None if fs is None else fs.f_files,
        free_inodes=None if fs is None else fs.f_favail,
        nfs=None if mount is None else nfs_options(mount),
        read_ahead_kb=None if mount is None else _read_ahead(root, mount.major_minor),
        stalled=None,
        error=None,
    )


def _unreadable(path: str, error: str, stalled: StallRecord | None = None) -> PathMount:
    return PathMount(
        path=path,
        resolved=None,
        exists=None,
        is_dir=None,
        mount=None,
        is_mount_point=None,
        read_only_flag=None,
        write_checked=False,
        writable=None,
        write_error=None,
        total_bytes=None,
        free_bytes=None,
        total_inodes=None,
        free_inodes=None,
        nfs=None,
        read_ahead_kb=None,
        stalled=stalled,
        error=error,
    )


def measure(
    paths: list[str], *, root: Path = Path("/"), write: bool = True, limit_s: float = STALL_LIMIT_S
) -> MountsPayload:
    """Every path's reading, in order; after a stalled path the rest are not looked at (their calls could
    hang as well) and say so."""
    mountinfo_error: str | None = None
    entries: list[MountEntry] | None
    try:
        entries = parse_mountinfo((root / "proc" / "self" / "mountinfo").read_text())
    except OSError as exc:
        entries, mountinfo_error = None, str(exc)
    readings: list[PathMount] = []
    stalled: StallRecord | None = None
    for path in paths:
        if stalled is not None:
            readings.append(_unreadable(path, f"not looked at: {stalled.path} stalled before it"))
            continue
        try:
            readings.append(_path(path, entries, root, write, limit_s))
        except Stalled as exc:
            stalled = exc.record
            readings.append(_unreadable(path, str(exc), stalled))
    return MountsPayload(
        paths=readings, modules=read_modules(root), mountinfo_error=mountinfo_error, stall_limit_s=limit_s
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", action="append", required=True, help="a declared path (repeat for each)")
    parser.add_argument("--root", type=Path, default=Path("/"), help="read proc/ and sys/ under this folder")
    parser.add_argument("--no-write", action="store_true", help="do not create the 4 KiB file that proves writes")
    parser.add_argument("--stall-limit", type=float, default=STALL_LIMIT_S, help="seconds one call may take")
    args = parser.parse_args(argv)
    payload = measure(args.path, root=args.root, write=not args.no_write, limit_s=args.stall_limit)
    emit(payload.model_dump(mode="json"), probe="mounts")


if __name__ == "__main__":
    main()
