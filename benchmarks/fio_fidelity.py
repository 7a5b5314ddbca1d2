"""The fio probe against the same fio job run by hand, on one node: is the probe's GB/s fio's own?

    python3 benchmarks/fio_fidelity.py --path /var/tmp/gpuaccept-fidelity              # 5 pairs each
    python3 benchmarks/fio_fidelity.py --path /mnt/chkpt --runs 7 --jobs 4 --file-mib 1024
    python3 benchmarks/fio_fidelity.py --path /var/tmp/gpuaccept-fidelity --control    # the disk against itself

Issue 48 asks for the probe within 5% of fio run by hand. The hand run is the probe's own command line, taken
from the probe's record (``run.command``; the same in every probe run of a phase, or the benchmark stops), so
the two cannot drift apart: it runs in the same folder, from the same state (the write's files removed first,
as the probe removes them), after as long an idle disk as the probe's own start gives fio, and its figure is
fio's bytes over fio's runtime, read from fio's JSON here, not through the probe.

A virtual disk moves by a third or more between runs (docs/measurements.md, "Loopback dev VM, 2026-11-28"),
so single runs prove nothing: the runs alternate in pairs, the hand run second in one pair and first in the
next (probe, hand, hand, probe, ...), so that a drift of the disk reaches both alike, and the verdict compares
the medians. It prints both command lines, every run's GB/s, the medians, and the probe's median as a share of
the hand median; it exits 1 when a phase is outside 100 +/- ``--tolerance`` percent, and prints the runs' own
spread beside it (and ``--control`` the disk's agreement with itself), so that a disk too noisy for a 5% claim
is seen as such rather than retried until it passes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, as the device scripts do

from gpuaccept.dispatch.result import parse_records

PHASES = ("write", "read")
#: who runs first in each pair: the probe, or with --control fio by hand as well
FIRST = {False: "probe", True: "hand A"}


@dataclass(frozen=True)
class Phase:
    """One phase's runs: GB/s of the probe and of the hand runs, in the order they ran."""

    rw: str
    probe: list[float]
    hand: list[float]

    @property
    def share_pct(self) -> float:
        """The probe's median as a percentage of the hand median."""
        return 100.0 * statistics.median(self.probe) / statistics.median(self.hand)

    def within(self, tolerance_pct: float) -> bool:
        return abs(self.share_pct - 100.0) <= tolerance_pct


def spread_pct(runs: list[float]) -> float:
    """Largest over smallest run, less one, in percent: how far this disk moved between runs."""
    return 100.0 * (max(runs) / min(runs) - 1.0)


def table(phases: list[Phase], tolerance_pct: float, first: str = "probe") -> list[str]:
    """A markdown table: each run's GB/s, the medians, the share, the spreads, and the verdict."""
    runs = max(len(p.probe) for p in phases)
    head = ["phase", "by"] + [f"run {i + 1}" for i in range(runs)] + ["median", "spread", f"{first} / hand"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in phases:
        verdict = f"{p.share_pct:.1f}% ({'within' if p.within(tolerance_pct) else 'outside'} +/-{tolerance_pct:g}%)"
        for who, values in ((first, p.probe), ("hand", p.hand)):
            cells = [f"{v:.3f}" for v in values] + [""] * (runs - len(values))
            last = verdict if who == first else ""
            spread = f"{spread_pct(values):.0f}%"
            out.append(
                f"| {p.rw} | {who} | " + " | ".join(cells) + f" | {statistics.median(values):.3f} | {spread} | {last} |"
            )
    return out


def probe_run(args: argparse.Namespace, rw: str, token: str) -> tuple[float, list[str], float]:
    """One probe run: its GB/s, the fio command line it ran (from its record), and its seconds outside fio."""
    command = [sys.executable, "-m", "gpuaccept.probes.fio", "--path", str(args.path), "--token", token, "--rw", rw]
    command += ["--jobs", str(args.jobs), "--file-mib", str(args.file_mib), "--max-s", str(args.max_s)]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[1])
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"the probe failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    (record,) = parse_records("fio", done.stdout, 1, (socket.gethostname(),))
    run = record.data.get("run")
    if not run:
        raise SystemExit(f"the probe measured nothing: {json.dumps(record.data)[:800]}")
    return float(run["gbps"]), [str(part) for part in run["command"]], max(0.0, wall - float(run["wall_s"]))


def hand_run(command: list[str], rw: str, idle_s: float) -> float:
    """The probe's fio command run here: fio's bytes over fio's runtime, from its own JSON.

    It waits ``idle_s`` first, the probe's own start (Python, fio's version, the path's checks): every fio
    run then follows the one before it after the same idle time, which a disk with a burst allowance or a
    host-side cache could otherwise reward on one side only."""
    time.sleep(idle_s)
    folder = Path(next(a for a in command if a.startswith("--directory=")).split("=", 1)[1])
    if rw == "write":  # the probe starts each write from no files: so does the hand run
        for stale in folder.glob("gpuaccept-fio.*"):
            stale.unlink()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=folder)
    if done.returncode != 0:
        raise SystemExit(f"fio by hand failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    report: dict[str, Any] = json.loads(done.stdout[done.stdout.find("{") :])
    part = report["jobs"][0][rw]
    return int(part["io_bytes"]) / (float(part["runtime"]) / 1000.0) / 1e9


def measure(args: argparse.Namespace, token: str) -> list[Phase]:
    """Each phase's pairs; with ``--control`` the probe's place goes to a second hand run (the disk against itself)."""
    phases = []
    for rw in PHASES:
        first: list[float] = []
        hand: list[float] = []
        gbps, command, idle = probe_run(args, rw, token)
        print(
            f"{rw}, the probe: python3 -m gpuaccept.probes.fio --path {args.path} --token {token} --rw {rw} "
            f"--jobs {args.jobs} --file-mib {args.file_mib} --max-s {args.max_s:g}"
        )
        print(f"{rw}, by hand (the probe's own fio command, after {idle:.2f} s idle): {' '.join(command)}")
        for i in range(args.runs):
            # ABBA: the hand run goes first in every other pair, so a disk that speeds up or slows down over
            # the runs favours neither side (with probe, hand, probe, hand a steady slowdown favours the probe)
            if i % 2:
                hand.append(hand_run(command, rw, idle))
            if args.control:
                first.append(hand_run(command, rw, idle))
            elif i == 0:
                first.append(gbps)
            else:
                gbps, again, idle = probe_run(args, rw, token)
                if again != command:
                    raise SystemExit(f"the probe's fio command changed between runs: {again}")
                first.append(gbps)
            if not i % 2:
                hand.append(hand_run(command, rw, idle))
            order = f"{FIRST[args.control]}, hand" if not i % 2 else f"hand, {FIRST[args.control]}"
            print(
                f"  {rw} pair {i + 1} ({order}): {FIRST[args.control]} {first[-1]:.3f} GB/s, "
                f"hand {hand[-1]:.3f} GB/s (idle {idle:.2f} s)",
                flush=True,
            )
        phases.append(Phase(rw, first, hand))
    return phases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, required=True, help="the folder fio writes under (created)")
    parser.add_argument("--runs", type=int, default=5, help="pairs (probe, hand) per phase")
    parser.add_argument("--jobs", type=int, default=2, help="fio jobs, one file each (the probe's --jobs)")
    parser.add_argument("--file-mib", type=int, default=512, help="each job's file (the probe's --file-mib)")
    parser.add_argument("--max-s", type=float, default=60.0, help="fio's runtime cap (the probe's --max-s)")
    parser.add_argument(
        "--control",
        action="store_true",
        help="hand against hand: how well the disk agrees with itself (one uncounted probe run gives the command)",
    )
    parser.add_argument("--tolerance", type=float, default=5.0, help="the probe's median within 100 +/- this %%")
    args = parser.parse_args(argv)
    args.path.mkdir(parents=True, exist_ok=True)
    token = f"fidelity-{os.getpid()}"
    try:
        phases = measure(args, token)
    finally:
        shutil.rmtree(args.path / f"gpuaccept-{token}", ignore_errors=True)
    print("\n".join(["", *table(phases, args.tolerance, FIRST[args.control])]))
    return 0 if all(p.within(args.tolerance) for p in phases) else 1


if __name__ == "__main__":
    sys.exit(main())
