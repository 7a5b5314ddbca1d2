"""Shared-filesystem probe: write a file on one node, read it back byte for byte on the others.

Modes (``--mode``): ``write`` creates ``--path`` with ``--size`` bytes from ``--seed``; ``read`` reads it;
``rename`` moves ``--path`` to ``--to`` (the test then reads the new name everywhere, catching caches
that serve a stale directory entry); ``remove`` deletes test files. Every mode then reports what this node
sees at its target (``--to`` after a rename): whether a file is there, its SHA-256 and size
(``contracts.node.SharedfsPayload``); the writer drops its cached pages first, so it reports what the
filesystem gives back. Reads bypass the page cache of the writer because they run on another node, which is
the point.
"""

from __future__ import annotations

import argparse
import os
import random
from pathlib import Path

from gpuaccept.probes._protocol import emit
from gpuaccept.signing.files import sha256_of

__all__ = ["main"]


def _drop_cache(path: Path) -> None:
    """Ask the kernel to forget the file's cached pages (POSIX_FADV_DONTNEED; a hint, best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (AttributeError, OSError):
        pass
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=("write", "read", "rename", "remove"), required=True)
    parser.add_argument("--path", type=Path, required=True)
    parser.add_argument("--to", type=Path)
    parser.add_argument("--size", type=int, default=4 << 20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    target = args.path
    if args.mode == "write":
        args.path.parent.mkdir(parents=True, exist_ok=True)
        payload = random.Random(args.seed).randbytes(args.size)
        with args.path.open("wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        # the writer's verdict is on what the filesystem gives back, not on the payload in memory:
        # drop the written pages from this node's cache first, so the read goes to the filesystem
        _drop_cache(args.path)
    elif args.mode == "rename":
        if args.to is None:
            parser.error("--mode rename needs --to")
        os.replace(args.path, args.to)
        target = args.to
    elif args.mode == "remove":
        for path in (args.path, args.to):
            if path is not None and path.exists():
                path.unlink()
    there = target.exists()
    data = {
        "mode": args.mode,
        "path": str(args.path),
        "to": None if args.to is None else str(args.to),
        "exists": there,
        "sha256": sha256_of(target) if there else None,
        "bytes": target.stat().st_size if there else None,
    }
    emit(data, probe="sharedfs")


if __name__ == "__main__":
    main()
