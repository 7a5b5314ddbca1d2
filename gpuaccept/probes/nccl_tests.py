"""Run NVIDIA's nccl-tests (``all_reduce_perf`` & co.) on this node and report its table, for comparison.

Why: operators trust nccl-tests' numbers; printing them beside ours on the same GPUs, in the same
step, shows our torch.distributed figures mean the same thing (or exposes where they do not). One
task holding all of the node's GPUs runs each binary single-process (``-g <gpus>``: intra-node only;
multi-node nccl-tests needs an MPI build and is out of scope here). A missing build is reported as
``found: false`` with the places searched, never as a measurement.

By hand: ``python -m gpuaccept.probes.nccl_tests --dir /opt/nccl-tests/build --ngpus 8 --min-bytes 4G``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess

from gpuaccept.contracts.nccl_payloads import NcclTestsRan, NcclTestsRecord, NcclTestsRun, NcclTestsTimedOut
from gpuaccept.nccl.nccltests import parse_nccl_tests
from gpuaccept.probes._protocol import emit
from gpuaccept.units import parse_bytes

__all__ = ["BINARIES", "find_binary", "main"]

BINARIES = {
    "all_reduce": "all_reduce_perf",
    "all_gather": "all_gather_perf",
    "reduce_scatter": "reduce_scatter_perf",
    "alltoall": "alltoall_perf",
    "broadcast": "broadcast_perf",
}


def find_binary(name: str, folder: str | None) -> tuple[str | None, list[str]]:
    """The binary's path (``folder``, ``folder/build``, then PATH) and every place looked at."""
    searched = []
    for candidate in [folder, os.path.join(folder, "build")] if folder else []:
        path = os.path.join(candidate, name)
        searched.append(path)
        if os.access(path, os.X_OK):
            return path, searched
    searched.append(f"PATH ({name})")
    return shutil.which(name), searched


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=os.environ.get("NCCL_TESTS_DIR", ""), help="nccl-tests build folder")
    p.add_argument("--collectives", default="all_reduce,all_gather")
    p.add_argument("--ngpus", type=int, required=True)
    p.add_argument("--min-bytes", type=parse_bytes, default=4 << 30)
    p.add_argument("--max-bytes", type=parse_bytes, default=4 << 30)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--ring", action="store_true", help="NCCL_ALGO=Ring, as the sweep was run")
    p.add_argument("--timeout", type=float, default=240.0)
    args = p.parse_args(argv)
    env = dict(os.environ)
    if args.ring:
        env["NCCL_ALGO"] = "Ring"
    runs: dict[str, NcclTestsRun] = {}  # one table per collective
    searched_all: list[str] = []
    for collective in [c.strip() for c in args.collectives.split(",") if c.strip()]:
        binary, searched = find_binary(BINARIES[collective], args.dir or None)
        searched_all += searched
        if binary is None:
            continue
        argv_run = [
            binary,
            "-g",
            str(args.ngpus),
            "-b",
            str(args.min_bytes),
            "-e",
            str(args.max_bytes),
            "-f",
            str(args.factor),
            "-n",
            str(args.iters),
            "-w",
            str(args.warmup),
            "-c",
            "1",
        ]
        try:
            done = subprocess.run(argv_run, capture_output=True, text=True, timeout=args.timeout, env=env, check=False)
        except subprocess.TimeoutExpired:
            runs[collective] = NcclTestsTimedOut(
                outcome="timed_out", command=argv_run, error=f"timeout after {args.timeout:g} s"
            )
            continue
        table = parse_nccl_tests(done.stdout)
        runs[collective] = NcclTestsRan(
            outcome="ran",
            command=argv_run,
            returncode=done.returncode,
            rows=table["rows"],
            avg_busbw=table.get("avg_busbw"),
            out_of_bounds=table.get("out_of_bounds"),
            version=table.get("version"),
            nccl=table.get("nccl"),
            devices=table["devices"],
            stderr_tail=done.stderr[-2000:],
        )
    emit(NcclTestsRecord(found=bool(runs), searched=searched_all, runs=runs), probe="nccl_tests")


if __name__ == "__main__":
    main()
