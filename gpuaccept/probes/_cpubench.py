"""Host memory copy bandwidth: a metric any CPU box can measure, for the report's selftests.

The baseline-regression and report selftests need a real, repeatable number from a real probe run
through the real dispatcher on a machine with no GPU; this is it. It copies a buffer repeatedly
(``bytearray`` slice assignment, a plain ``memcpy``) and reports the best GB/s over ``--repeats``
rounds, timed in the thread's *CPU* time: on a busy 2-core box the wall clock also counts the time
other processes held the core (best-of-20 seen 8-18 GB/s under load 8), CPU time much less so
(13-18 GB/s in the same minute), and a regression check needs a number that only moves when the
machine does.

Test-only knob, refused unless ``GPUACCEPT_SELFTEST=1``: ``GPUACCEPT_FAULT_MEMCPY_SLOWDOWN=<n>``
makes each timed round copy the buffer ``n`` times while counting it once (really n times the CPU
work per byte), optionally only on ``GPUACCEPT_FAULT_NODE=<node>``: a "slow node" the regression
check has to find and name.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from gpuaccept import selftest_hooks
from gpuaccept.probes._protocol import emit, node_name, rank_info

__all__ = ["measure", "slowdown"]


def slowdown() -> int:
    """The selftest slow-down factor for this node (1 = none); refused outside selftests."""
    try:
        raw = selftest_hooks.gated("GPUACCEPT_FAULT_MEMCPY_SLOWDOWN")
    except selftest_hooks.HookRefused as exc:
        sys.exit(str(exc))
    if not raw:
        return 1
    target = selftest_hooks.value("GPUACCEPT_FAULT_NODE")
    if target and target != node_name():
        return 1
    if not raw.isdigit() or int(raw) < 1:
        sys.exit(f"GPUACCEPT_FAULT_MEMCPY_SLOWDOWN={raw}: must be a whole number >= 1")
    return int(raw)


def measure(size_mib: int, repeats: int, factor: int = 1) -> float:
    """Best-of-``repeats`` copy bandwidth in GB/s of CPU time (bytes read + written, as a device copy)."""
    size = size_mib << 20
    src = bytearray(os.urandom(1 << 20)) * size_mib
    dst = bytearray(size)
    dst[:] = src  # first touch: page faults are not bandwidth
    best = 0.0
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(factor):
            dst[:] = src
        elapsed = max(time.thread_time() - start, 1e-9)
        best = max(best, 2 * size / elapsed / 1e9)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=64, help="buffer size in MiB")
    parser.add_argument("--repeats", type=int, default=20, help="timed copies; the best one counts")
    args = parser.parse_args(argv)
    factor = slowdown()
    gbps = measure(args.size_mib, args.repeats, factor)
    emit(
        {"memcpy_gbps": round(gbps, 3), "size_mib": args.size_mib, "repeats": args.repeats, "rank": rank_info().rank},
        probe="_cpubench",
    )


if __name__ == "__main__":
    main()
