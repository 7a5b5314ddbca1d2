"""Fleet benchmark (not a timed test): srun dispatch overhead and node-parallel wall time.

(a) per-probe dispatch overhead of an ``srun`` step inside one allocation on the loopback cluster,
    compared with the same probe started locally (so the difference is Slurm's, not Python's);
(b) wall time of the node-local acceptance tests on 1, 4 and 8 loopback nodes with
    ``pytest -n <nodes> --dist loadgroup`` (target: 8 nodes <= 1.5 x 1 node);
(c) where that time went, from each run record: pytest's wall, the tests' own time per node, the
    slowest tests and which failed (on a GPU host, CPU-declared loopback nodes see GPUs they do not
    declare, so the fingerprint test fails there by design).

Run as root on a machine with slurm-wlm installed: ``python benchmarks/fleet_bench.py``. It starts
and stops its own clusters and prints a table. Loopback nodes share this machine's cores, so (b)
measures scheduling and dispatch overlap, not per-node hardware.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UP, DOWN = REPO / "slurm/dev-cluster/up.sh", REPO / "slurm/dev-cluster/down.sh"
NODE_LOCAL = "acceptance and not multinode and not training and not nccl"


def start(nodes: int) -> dict[str, str]:
    # GPUACCEPT_UP_ARGS: extra up.sh arguments, e.g. "--prefix /opt/sl --debs .cache/slurmdeb" on a host
    # without Slurm installed (the GPU machine).
    extra = os.environ.get("GPUACCEPT_UP_ARGS", "").split()
    argv = ["bash", str(UP), "--nodes", str(nodes), *extra]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    # The export lines refer to $PATH and $LD_LIBRARY_PATH: let bash expand them, then read its environment.
    dump = subprocess.run(["bash", "-c", 'eval "$1" && env -0', "_", out], capture_output=True, text=True, check=True)
    env = dict(item.split("=", 1) for item in dump.stdout.split("\0") if "=" in item)
    env.pop("SLURM_JOB_ID", None)
    return env


def stop(env: dict[str, str]) -> None:
    subprocess.run(["bash", str(DOWN), env["GPUACCEPT_DEV_CLUSTER"]], env=env, capture_output=True)


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[-600:]}")
    return time.perf_counter() - t0


def dispatch_overhead(repeats: int) -> list[tuple[str, float]]:
    env = start(1)
    try:
        out = subprocess.run(["salloc", "--no-shell", "-N1", "-J", "bench"], env=env, capture_output=True, text=True)
        job = out.stderr.split("allocation")[-1].split()[0]
        probe = [sys.executable, "-m", "gpuaccept.probes.hygiene"]
        srun = ["srun", f"--jobid={job}", "-N1", "-n1", "--overlap", "--kill-on-bad-exit=1"]
        rows = []
        for label, argv in (("srun true", [*srun, "true"]), ("srun probe", [*srun, *probe]), ("local probe", probe)):
            times = [timed(argv, env) for _ in range(repeats)]
            rows.append((label, statistics.median(times)))
        subprocess.run(["scancel", job], env=env)
        return rows
    finally:
        stop(env)


def node_scaling(counts: list[int]) -> list[tuple[int, float, str]]:
    rows = []
    for nodes in counts:
        env = start(nodes)
        try:
            argv = [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-m",
                NODE_LOCAL,
                "tests/acceptance",
                "--launcher",
                "slurm",
                "--nodes",
                str(nodes),
                "--run-record",
                f"/tmp/bench-{nodes}.json",
                "-rf",
            ]
            # Every size through xdist (one worker per node), as the comparison is worded: the
            # 1-node baseline pays the same worker start-up as the 8-node run.
            argv += ["-n", str(nodes), "--dist", "loadgroup"]
            t0 = time.perf_counter()
            done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True)
            rows.append(
                (
                    nodes,
                    time.perf_counter() - t0,
                    done.stdout.strip().splitlines()[-1] if done.stdout else done.stderr[-200:],
                )
            )
        finally:
            stop(env)
    return rows


def breakdown(record: Path, nodes: int) -> str:
    """Record wall vs the tests' own time per node, the slowest tests, and what failed."""
    data = json.loads(record.read_text())
    tests = data["tests"]
    per_node = sum(t["duration_s"] for t in tests) / nodes
    slow = sorted(tests, key=lambda t: -t["duration_s"])[:4]
    failed = sorted({t["nodeid"].split("::")[-1].split("[")[0] for t in tests if t["verdict"] == "failed"})
    return (
        f"{nodes} node(s): record wall {data['duration_s']:.1f} s, tests {per_node:.1f} s per node; slowest: "
        + ", ".join(f"{t['nodeid'].split('::')[-1]} {t['duration_s']:.1f} s" for t in slow)
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()
    print("(a) dispatch overhead, median of", args.repeats)
    rows = dict(dispatch_overhead(args.repeats))
    for label, seconds in rows.items():
        print(f"  {label:<12} {seconds:6.3f} s")
    print(f"  srun overhead per probe step: {rows['srun probe'] - rows['local probe']:.3f} s (target <= 0.5 s)")
    print("(b) node-local acceptance tests, pytest-xdist --dist loadgroup")
    scaling = node_scaling(args.nodes)
    base = scaling[0][1]
    for nodes, seconds, tail in scaling:
        print(f"  {nodes} node(s): {seconds:6.1f} s  ({seconds / base:4.2f} x 1 node)  {tail}")
    print("(c) where the time went (run record of each size: pytest's own wall, the per-node test time)")
    for nodes, _, _ in scaling:
        print("  " + breakdown(Path(f"/tmp/bench-{nodes}.json"), nodes))


if __name__ == "__main__":
    main()
