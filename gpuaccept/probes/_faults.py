"""Deliberately broken probes for the suite's own selftests (refused unless GPUACCEPT_SELFTEST=1).

``--fault exit3`` exits with status 3 after printing a valid line; ``hang`` sleeps forever;
``garbage`` prints a corrupt sentinel line; ``short`` makes every rank but 0 print nothing;
``ok`` is a well-behaved probe, ``slow`` one that takes 4 s. They prove the dispatcher turns each
failure mode into an error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from gpuaccept.probes._protocol import SENTINEL, emit, rank_info

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    if os.environ.get("GPUACCEPT_SELFTEST") != "1":
        sys.exit("gpuaccept.probes._faults is for selftests only (set GPUACCEPT_SELFTEST=1)")
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", choices=("ok", "exit3", "hang", "garbage", "short", "slow"), required=True)
    args = parser.parse_args(argv)
    if args.fault == "hang":
        time.sleep(3600)
    if args.fault == "slow":  # a healthy probe that takes 4 s: shows whether steps run side by side
        time.sleep(4)
    if args.fault == "garbage":
        sys.stdout.write(SENTINEL + "{not json\n")
        return
    if args.fault == "short" and rank_info().rank != 0:
        return
    emit({"fault": args.fault, "pid": os.getpid()}, probe="_faults")
    if args.fault == "exit3":
        sys.exit(3)


if __name__ == "__main__":
    main()
