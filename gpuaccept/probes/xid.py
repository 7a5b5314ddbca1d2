"""NVIDIA Xid events in the kernel log since boot: the driver's own record of GPU faults.

One task per node. The kernel log is read from the first source that works: ``dmesg``, then
``journalctl -k -b`` (this boot), then ``/dev/kmsg``. Each can be closed to an unprivileged user
(``kernel.dmesg_restrict``, journal group membership, CAP_SYSLOG), so the probe says which source it
used and why the others failed; a node where none is readable reports ``readable: false`` and the test
turns that into an error, never into "no Xids, pass". A source that answers with no kernel lines at
all is treated as unreadable too (journalctl says "-- No entries --" to users it hides the log from).

The probe passes on the raw ``NVRM: Xid`` lines plus what is needed to judge them (uptime, the time
the log starts, the GPUs' PCI addresses); ``gpuaccept.verdicts.gpu_health`` parses and classifies them.
``--log-file`` reads a saved log instead (dmesg, journalctl or /dev/kmsg format).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from gpuaccept.probes import _inject
from gpuaccept.probes._gpu import identity
from gpuaccept.probes._nvml import nvml
from gpuaccept.probes._protocol import emit

__all__ = ["collect", "read_log"]

MARKERS = ("NVRM: Xid", "SXid")
MAX_LINES = 500
_STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]|^\d+,\d+,(\d+),")


def _run(argv: list[str]) -> tuple[str | None, str | None]:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, env={**os.environ, "LC_ALL": "C"}, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if done.returncode != 0:
        return None, (done.stderr.strip() or f"exit status {done.returncode}")[:300]
    return done.stdout, None


def _kmsg(path: str = "/dev/kmsg") -> tuple[str | None, str | None]:
    """Every record in the kernel ring buffer, read without blocking (``pri,seq,usec,flags;text``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    records: list[str] = []
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:
                continue  # a record was overwritten while we read; the next read resumes
            except OSError as exc:
                return None, f"{type(exc).__name__}: {exc}"
            if not chunk:
                break
            records.append(chunk.decode(errors="replace").split("\n", 1)[0])
    finally:
        os.close(fd)
    return "\n".join(records), None


SOURCES = {
    "dmesg": lambda: _run(["dmesg"]),
    "journalctl": lambda: _run(["journalctl", "-k", "-b", "--no-pager", "-o", "short-monotonic", "-q"]),
    "kmsg": _kmsg,
}


def read_log(order: list[str]) -> tuple[str | None, str | None, dict[str, str]]:
    """(source, text, errors): the first source in ``order`` that yields kernel lines."""
    errors: dict[str, str] = {}
    for name in order:
        text, error = SOURCES[name]()
        if text is None:
            errors[name] = error or "no output"
            continue
        if not any(line.strip() and "-- No entries --" not in line for line in text.splitlines()):
            errors[name] = "answered with no kernel lines (log hidden from this user?)"
            continue
        return name, text, errors
    return None, None, errors


def _uptime() -> float | None:
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _first_stamp(lines: list[str]) -> float | None:
    for line in lines:
        match = _STAMP.search(line)
        if match:
            return float(match.group(1)) if match.group(1) else int(match.group(2)) / 1e6
    return None


def collect(order: list[str], log_file: Path | None = None) -> dict[str, Any]:
    """The Xid lines since boot and how trustworthy that window is."""
    source: str | None
    text: str | None
    errors: dict[str, str]
    injected = _inject.kernel_log()  # test hook, off by default (probes/_inject.py)
    if log_file is not None:
        source, text, errors = f"file:{log_file}", log_file.read_text(errors="replace"), {}
    elif injected is not None:
        (source, text), errors = injected, {}
    else:
        source, text, errors = read_log(order)
    gpus = _inject.gpus()
    if gpus is None:
        lib = nvml()
        gpus = (
            []
            if lib is None
            else [identity(lib, lib.nvmlDeviceGetHandleByIndex(i)) for i in range(lib.nvmlDeviceGetCount())]
        )
    lines = text.splitlines() if text else []
    hits = [line for line in lines if any(marker in line for marker in MARKERS)]
    return {
        "readable": text is not None,
        "source": source,
        "errors": errors,
        "lines_total": len(lines),
        "log_start_s": _first_stamp(lines),
        "uptime_s": _uptime(),
        "xid_lines": hits[-MAX_LINES:],
        "xid_lines_total": len(hits),
        "gpus": gpus,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", action="append", choices=sorted(SOURCES), help="sources to try, in order")
    parser.add_argument("--log-file", type=Path, help="parse this saved kernel log instead of the live one")
    args = parser.parse_args(argv)
    emit(collect(args.source or ["dmesg", "journalctl", "kmsg"], args.log_file), probe="xid")


if __name__ == "__main__":
    main()
