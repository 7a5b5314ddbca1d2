"""One node's IMEX: the domain ``nvidia-imex-ctl -N`` reports, and the step's IMEX channel (SDN17, SDN21).

Run once per allocated node of a block, after a settle window (``--settle-s``: the site's
``domain.imex_settle_s``), so a domain still forming for a job just started is not read as broken. It asks
``nvidia-imex-ctl -N -H`` (members with their host names), and ``-N`` where the tool refuses ``-H``; it reads
the channels the step sees under ``/dev/nvidia-caps-imex-channels`` (Slurm's ``switch/nvidia_imex`` shows each
step its own) and opens the first read-only; and the node's names and IPv4 addresses, by which the judge
matches IMEX members to Slurm nodes. ``/proc/devices`` says whether an IMEX driver holds a major at all: on the
dev cluster none does (Slurm was given a free major), so open() there fails ENXIO and proves only that Slurm
made the channel file.
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from gpuaccept.contracts.imex import ImexAnswer, ImexChannel, ImexRecord, ImexSilent, ImexToolMissing
from gpuaccept.fabric.imex import parse_imex_ctl
from gpuaccept.probes._protocol import emit

__all__ = ["CHANNELS", "TOOL", "collect", "main"]

TOOL = "nvidia-imex-ctl"
CHANNELS = "/dev/nvidia-caps-imex-channels"
#: how long one nvidia-imex-ctl call may take (it talks to the local daemon only)
TOOL_TIMEOUT_S = 20.0


def _run(argv: list[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return 124, f"{' '.join(argv)}: no answer within {TOOL_TIMEOUT_S:g} s"
    return done.returncode, (done.stdout + done.stderr).strip()


def _status(tool: str) -> ImexAnswer | ImexSilent | ImexToolMissing:
    path = shutil.which(tool)
    if path is None:
        return ImexToolMissing(outcome="tool_missing", tool=tool)
    said = ""
    for argv in ([path, "-N", "-H"], [path, "-N"]):
        rc, said = _run(argv)
        if rc == 0:
            try:
                return parse_imex_ctl(said, [tool, *argv[1:]])
            except ValueError as exc:
                return ImexSilent(outcome="no_answer", why=str(exc), output=said[-2000:])
    return ImexSilent(outcome="no_answer", why=f"{tool} -N exited non-zero", output=said[-2000:])


def _driver_major(proc_devices: Path, errors: list[str]) -> int | None:
    try:
        text = proc_devices.read_text()
    except OSError as exc:
        errors.append(f"{proc_devices}: unreadable ({exc.strerror or exc})")
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == "nvidia-caps-imex-channels" and parts[0].isdigit():
            return int(parts[0])
    return None


def _channel(folder: Path, errors: list[str]) -> ImexChannel:
    try:
        names = sorted(p.name for p in folder.iterdir() if p.name.startswith("channel"))
    except FileNotFoundError:
        names = []
        errors.append(f"{folder}: no such folder (no IMEX channel given to this step)")
    except OSError as exc:
        names = []
        errors.append(f"{folder}: unreadable ({exc.strerror or exc})")
    if not names:
        return ImexChannel(
            folder=str(folder), names=[], is_char_device=None, major=None, minor=None, opened=False, open_error=None
        )
    first = folder / names[0]
    info = first.stat()
    is_char = stat.S_ISCHR(info.st_mode)
    opened, error = False, None
    try:
        fd = os.open(first, os.O_RDONLY)
    except OSError as exc:
        error = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    else:
        os.close(fd)
        opened = True
    return ImexChannel(
        folder=str(folder),
        names=names,
        is_char_device=is_char,
        major=os.major(info.st_rdev) if is_char else None,
        minor=os.minor(info.st_rdev) if is_char else None,
        opened=opened,
        open_error=error,
    )


def _addresses(errors: list[str]) -> list[str]:
    """The node's IPv4 addresses: ``ip -o -4 addr`` (every interface), else what its host name resolves to."""
    if shutil.which("ip"):
        rc, said = _run(["ip", "-o", "-4", "addr", "show"])
        if rc == 0:
            found = [w.split("/")[0] for line in said.splitlines() for i, w in enumerate(line.split()) if i == 3]
            if found:
                return sorted(set(found))
        errors.append(f"ip -o -4 addr show: exit {rc}")
    try:
        return sorted(set(socket.gethostbyname_ex(socket.gethostname())[2]))
    except OSError as exc:
        errors.append(f"{socket.gethostname()}: does not resolve ({exc})")
        return []


def collect(
    settle_s: float, tool: str = TOOL, channels: str = CHANNELS, proc_devices: str = "/proc/devices"
) -> ImexRecord:
    """Wait ``settle_s``, then read the domain, the channel and the node's names."""
    time.sleep(settle_s)
    errors: list[str] = []
    return ImexRecord(
        node=os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0],
        hostname=socket.gethostname(),
        addresses=_addresses(errors),
        settle_s=settle_s,
        driver_major=_driver_major(Path(proc_devices), errors),
        status=_status(tool),
        channel=_channel(Path(channels), errors),
        errors=errors,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gpuaccept.probes.imex", description=__doc__.split("\n")[0])
    parser.add_argument("--settle-s", type=float, default=0.0, help="seconds to wait before reading (the site's)")
    parser.add_argument("--tool", default=TOOL, help="the nvidia-imex-ctl to run (default: the one on PATH)")
    parser.add_argument("--channels", default=CHANNELS, help="the IMEX channel folder the step sees")
    args = parser.parse_args(argv)
    emit(collect(args.settle_s, args.tool, args.channels).model_dump(mode="json"), probe="imex")


if __name__ == "__main__":
    main()
