"""Deliberately broken probes for the suite's own selftests (refused unless GPUACCEPT_SELFTEST=1).

``--fault exit3`` exits with status 3 after printing a valid line; ``hang`` sleeps forever;
``garbage`` prints a corrupt sentinel line; ``short`` makes every rank but 0 print nothing;
``ok`` is a well-behaved probe, ``slow`` one that takes ``--seconds`` (4 s). ``--on NODE`` breaks only
that node (the others behave as ``ok``): one node's fault in a fan-out step. They prove the dispatcher
turns each failure mode into an error, on the node where it happened.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from gpuaccept import selftest_hooks
from gpuaccept.probes._protocol import SENTINEL, emit, node_name, rank_info

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    if not selftest_hooks.selftest_on():
        sys.exit(f"gpuaccept.probes._faults is for selftests only (set {selftest_hooks.GATE}=1)")
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", choices=("ok", "exit3", "hang", "garbage", "short", "slow"), required=True)
    parser.add_argument("--seconds", type=float, default=4.0, help="how long --fault slow takes")
    parser.add_argument("--on", help="only this node has the fault; the others are ok")
    args = parser.parse_args(argv)
    if args.on and args.on != node_name():
        args.fault = "ok"
    if args.fault == "hang":
        time.sleep(3600)
    if args.fault == "slow":  # a healthy probe that takes 4 s: shows whether steps run side by side
        time.sleep(args.seconds)
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
