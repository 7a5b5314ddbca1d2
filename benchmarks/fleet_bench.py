"""Fleet benchmark (not a timed test): srun dispatch overhead, node-parallel wall time, and where it goes.

(a) per-probe dispatch overhead of an ``srun`` step inside one allocation on the loopback cluster,
    compared with the same probe started locally (so the difference is Slurm's, not Python's);
(b) concurrent dispatch: one ``srun`` per node at the same time (``true`` and a light probe), as
    node-parallel tests issue them; the median and slowest srun wall per node count;
(c) wall time of the node-local acceptance tests on 1, 4 and 8 loopback nodes with
    ``pytest -n <nodes> --dist loadgroup`` (target: 8 nodes <= 1.5 x 1 node), or with the default
    command (``--default-command``: no xdist, every node-parametrized test one fan-out step;
    ``benchmarks/scale_bench.py`` takes that to 256 nodes);
(d) where that time went, per size: the tests' own time per node, of it the srun steps' wall (from
    ``benchmarks/step_timing.py``) and which probes they ran (fingerprints included), the steps' life
    inside slurmd (launch request to "done with job", from the slurmd logs), and slurmctld's RPC
    counts and mean times (``sdiag``, reset before each size).

``--pin`` gives every loopback node its own CPUs (``taskset`` on its slurmd, inherited by slurmstepd
and the tasks; slurmctld and pytest get CPUs of their own), the same number at every size: on one
host that is what separate nodes would have, so if the slow-down disappears when pinned, it was CPU
contention of the one-host harness, not Slurm dispatch. Loopback nodes always share one kernel, page
cache, disk and (on a GPU host) one NVIDIA driver.

Run as root on a machine with slurm-wlm installed: ``python benchmarks/fleet_bench.py [--pin]``
(``GPUACCEPT_UP_ARGS="--prefix /opt/sl --debs .cache/slurmdeb"`` where Slurm comes from carried
.debs). It starts and stops its own clusters and prints a table; ``--json PATH`` keeps the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
UP, DOWN = REPO / "slurm/dev-cluster/up.sh", REPO / "slurm/dev-cluster/down.sh"
NODE_LOCAL = "acceptance and not multinode and not training and not nccl"


class Cluster:
    """One loopback cluster: its environment, folder, and (with ``pin``) the CPUs of each daemon."""

    def __init__(self, nodes: int, pin: dict[str, list[int]] | None) -> None:
        # GPUACCEPT_UP_ARGS: extra up.sh arguments, e.g. "--prefix /opt/sl --debs .cache/slurmdeb" on a host
        # without Slurm installed (the GPU machine).
        extra = os.environ.get("GPUACCEPT_UP_ARGS", "").split()
        out = subprocess.run(
            ["bash", str(UP), "--nodes", str(nodes), *extra], capture_output=True, text=True, check=True
        ).stdout
        # The export lines refer to $PATH and $LD_LIBRARY_PATH: let bash expand them, then read its environment.
        dump = subprocess.run(
            ["bash", "-c", 'eval "$1" && env -0', "_", out], capture_output=True, text=True, check=True
        )
        self.env = dict(item.split("=", 1) for item in dump.stdout.split("\0") if "=" in item)
        self.env.pop("SLURM_JOB_ID", None)
        self.dir = Path(self.env["GPUACCEPT_DEV_CLUSTER"])
        self.nodes = nodes
        self.pin = pin
        if pin:
            for line in (self.dir / "pids").read_text().splitlines():
                name, pid = line.split()
                cpus = pin.get(name) or pin["ctl"]
                subprocess.run(["taskset", "-a", "-cp", _cpulist(cpus), pid], capture_output=True, check=True)

    def prefix(self) -> list[str]:
        """Command prefix for the login-node side (pytest, srun clients): the controller's CPUs when pinned."""
        return ["taskset", "-c", _cpulist(self.pin["ctl"])] if self.pin else []

    def stop(self) -> None:
        subprocess.run(["bash", str(DOWN), str(self.dir)], env=self.env, capture_output=True)


def _cpulist(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus)


def pin_plan(max_nodes: int, nodes: int) -> dict[str, list[int]]:
    """CPUs per daemon: the same share per node at every size (the host's CPUs / (max nodes + 1));
    slurmctld and pytest get one share too. Shares wrap around on a host with fewer CPUs than that."""
    cpus = sorted(os.sched_getaffinity(0))
    share = max(1, len(cpus) // (max_nodes + 1))
    plan = {"ctl": [cpus[i % len(cpus)] for i in range(share)]}
    for k in range(1, nodes + 1):
        plan[f"node{k}"] = [cpus[(k * share + i) % len(cpus)] for i in range(share)]
    return plan


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[-600:]}")
    return time.perf_counter() - t0


def _salloc(cluster: Cluster, nodes: int) -> str:
    out = subprocess.run(
        ["salloc", "--no-shell", f"-N{nodes}", "-J", "bench"], env=cluster.env, capture_output=True, text=True
    )
    return out.stderr.split("allocation")[-1].split()[0]


def dispatch_overhead(repeats: int, pin: bool) -> list[tuple[str, float]]:
    cluster = Cluster(1, pin_plan(1, 1) if pin else None)
    try:
        job = _salloc(cluster, 1)
        probe = [sys.executable, "-m", "gpuaccept.probes.hygiene"]
        srun = [*cluster.prefix(), "srun", f"--jobid={job}", "-N1", "-n1", "--overlap", "--kill-on-bad-exit=1"]
        rows = []
        for label, argv in (("srun true", [*srun, "true"]), ("srun probe", [*srun, *probe]), ("local probe", probe)):
            times = [timed(argv, cluster.env) for _ in range(repeats)]
            rows.append((label, statistics.median(times)))
        subprocess.run(["scancel", job], env=cluster.env)
        return rows
    finally:
        cluster.stop()


def _popen(cluster: Cluster, job: str, k: int, tail: list[str]) -> subprocess.Popen[bytes]:
    argv = [*cluster.prefix(), "srun", f"--jobid={job}", "-N1", "-n1", f"-wnode{k}", "--overlap", *tail]
    return subprocess.Popen(argv, env=cluster.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def concurrent_dispatch(counts: list[int], rounds: int, pin: bool) -> list[dict[str, Any]]:
    """One srun per node at once, ``rounds`` times: each srun's wall (Slurm's per-step cost under load)."""
    rows = []
    for nodes in counts:
        cluster = Cluster(nodes, pin_plan(max(counts), nodes) if pin else None)
        try:
            job = _salloc(cluster, nodes)
            for label, tail in (("true", ["true"]), ("probe", [sys.executable, "-m", "gpuaccept.probes.hygiene"])):
                walls: list[float] = []
                batches: list[float] = []
                for _ in range(rounds):
                    started = time.perf_counter()
                    procs = [(time.perf_counter(), _popen(cluster, job, k, tail)) for k in range(1, nodes + 1)]
                    for t0, proc in procs:
                        proc.wait()
                        walls.append(time.perf_counter() - t0)
                    batches.append(time.perf_counter() - started)
                rows.append(
                    {
                        "nodes": nodes,
                        "command": label,
                        "srun_median_s": round(statistics.median(walls), 3),
                        "srun_max_s": round(max(walls), 3),
                        "round_median_s": round(statistics.median(batches), 3),
                    }
                )
            subprocess.run(["scancel", job], env=cluster.env)
        finally:
            cluster.stop()
    return rows


def sdiag(env: dict[str, str], reset: bool = False) -> dict[str, tuple[int, float]]:
    """slurmctld's RPC statistics by message type: name -> (count, mean microseconds)."""
    try:
        if reset:
            subprocess.run(["sdiag", "-r"], env=env, capture_output=True)
            return {}
        out = subprocess.run(["sdiag"], env=env, capture_output=True, text=True).stdout
    except FileNotFoundError:  # a Slurm unpacked without sdiag: no RPC figures, the rest still stands
        return {}
    stats = {}
    for match in re.finditer(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)", out, re.MULTILINE):
        stats[match.group(1)] = (int(match.group(2)), float(match.group(3)))
    return stats


_LAUNCH = re.compile(r"^\[(?P<t>[\d\-T:.]+)\] launch task StepId=(?P<id>\d+\.\d+) ")
_DONE = re.compile(r"^\[(?P<t>[\d\-T:.]+)\] \[(?P<id>\d+\.\d+)\] done with job")


def slurmd_step_lives(log_dir: Path) -> list[float]:
    """Seconds from slurmd's "launch task" to slurmstepd's "done with job" for every step in the logs."""
    lives = []
    for log in log_dir.glob("slurmd-node*.log"):
        started: dict[str, datetime] = {}
        for line in log.read_text(errors="replace").splitlines():
            if (m := _LAUNCH.match(line)) is not None:
                started[m["id"]] = datetime.fromisoformat(m["t"])
            elif (m := _DONE.match(line)) is not None and m["id"] in started:
                lives.append((datetime.fromisoformat(m["t"]) - started.pop(m["id"])).total_seconds())
    return lives


def node_scaling(counts: list[int], pin: bool, xdist: bool = True) -> list[dict[str, Any]]:
    rows = []
    for nodes in counts:
        cluster = Cluster(nodes, pin_plan(max(counts), nodes) if pin else None)
        steps_log = Path(f"/tmp/bench-steps-{nodes}.jsonl")
        steps_log.unlink(missing_ok=True)
        env = {
            **cluster.env,
            "GPUACCEPT_STEP_LOG": str(steps_log),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "benchmarks"), cluster.env.get("PYTHONPATH")])),
        }
        try:
            sdiag(env, reset=True)
            argv = [
                *cluster.prefix(),
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "step_timing",
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
            # Every size through xdist (one worker per node) unless --default-command: the 1-node baseline
            # then pays the same worker start-up as the 8-node run.
            argv += ["-n", str(nodes), "--dist", "loadgroup"] if xdist else []
            t0 = time.perf_counter()
            done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            rows.append(
                {
                    "nodes": nodes,
                    "wall_s": round(wall, 2),
                    "tail": done.stdout.strip().splitlines()[-1] if done.stdout else done.stderr[-200:],
                    "rpc": sdiag(env),
                    "slurmd_step_lives": slurmd_step_lives(cluster.dir / "log"),
                    "steps": [json.loads(line) for line in steps_log.read_text().splitlines()]
                    if steps_log.exists()
                    else [],
                }
            )
        finally:
            cluster.stop()
    return rows


def breakdown(row: dict[str, Any]) -> list[str]:
    """The record's wall vs the tests' own time per node, of it the steps' wall, the slowest tests, the RPCs."""
    nodes = row["nodes"]
    data = json.loads(Path(f"/tmp/bench-{nodes}.json").read_text())
    tests = data["tests"]
    per_node = sum(t["duration_s"] for t in tests) / nodes
    steps = [s for s in row["steps"] if s["step_s"] is not None and not s["repeat"]]
    step_total = sum(s["step_s"] for s in steps) / nodes
    by_probe: dict[str, list[float]] = defaultdict(list)
    for s in steps:
        by_probe[s["probe"]].append(s["step_s"])
    probes = ", ".join(
        f"{p} {len(v)}x median {statistics.median(v):.2f} s"
        for p, v in sorted(by_probe.items(), key=lambda kv: -sum(kv[1]))
    )
    slow = sorted(tests, key=lambda t: -t["duration_s"])[:4]
    failed = sorted({t["nodeid"].split("::")[-1].split("[")[0] for t in tests if t["verdict"] == "failed"})
    lives = row["slurmd_step_lives"]
    rpc = sorted(row["rpc"].items(), key=lambda kv: -kv[1][0] * kv[1][1])[:5]
    lines = [
        f"{nodes} node(s): record wall {data['duration_s']:.1f} s; tests {per_node:.1f} s per node, of which srun "
        f"steps {step_total:.1f} s ({len(steps)} steps: {probes})",
        "  slowest: "
        + ", ".join(f"{t['nodeid'].split('::')[-1]} {t['duration_s']:.1f} s" for t in slow)
        + (f"; failed: {', '.join(failed)}" if failed else ""),
    ]
    if lives:
        lines.append(
            f"  step life in slurmd (launch -> done): median {statistics.median(lives):.2f} s, max {max(lives):.2f} s, "
            f"{len(lives)} steps; srun wall median {statistics.median([s['step_s'] for s in steps] or [0]):.2f} s"
        )
    if rpc:
        lines.append("  slurmctld RPCs (count x mean ms): " + ", ".join(f"{k} {c}x{t / 1000:.1f}" for k, (c, t) in rpc))
    workers = Counter(s["worker"] for s in row["steps"])
    lines.append(f"  steps per xdist worker: {dict(sorted(workers.items()))}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of concurrent sruns per node count")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--pin", action="store_true", help="give every slurmd (and pytest) CPUs of its own")
    parser.add_argument("--skip", default="", help="parts to skip: dispatch,concurrent,scaling")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--default-command", action="store_true", help="(c) without xdist: fan-out steps")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    figures: dict[str, Any] = {"pin": args.pin, "cpus": len(os.sched_getaffinity(0))}
    mode = "pinned: each slurmd on CPUs of its own" if args.pin else "unpinned"
    print(f"fleet bench ({mode}; {figures['cpus']} CPUs)")
    if "dispatch" not in skip:
        print("(a) dispatch overhead, median of", args.repeats)
        rows = dict(dispatch_overhead(args.repeats, args.pin))
        for label, seconds in rows.items():
            print(f"  {label:<12} {seconds:6.3f} s")
        print(f"  srun overhead per probe step: {rows['srun probe'] - rows['local probe']:.3f} s (target <= 0.5 s)")
        figures["dispatch"] = rows
    if "concurrent" not in skip:
        print(f"(b) one srun per node at once, {args.rounds} rounds: median / slowest srun wall, median round")
        figures["concurrent"] = concurrent_dispatch(args.nodes, args.rounds, args.pin)
        for row in figures["concurrent"]:
            print(
                f"  {row['nodes']} node(s) {row['command']:<5}: {row['srun_median_s']:.3f} / {row['srun_max_s']:.3f} s,"
                f" round {row['round_median_s']:.3f} s"
            )
    if "scaling" not in skip:
        print(
            "(c) node-local acceptance tests, "
            + ("default command" if args.default_command else "-n N --dist loadgroup")
        )
        scaling = node_scaling(args.nodes, args.pin, xdist=not args.default_command)
        base = scaling[0]["wall_s"]
        for row in scaling:
            ratio = row["wall_s"] / base
            print(f"  {row['nodes']} node(s): {row['wall_s']:6.1f} s  ({ratio:4.2f} x 1 node)  {row['tail']}")
        print("(d) where the time went")
        for row in scaling:
            for line in breakdown(row):
                print("  " + line)
        figures["scaling"] = [{k: v for k, v in row.items() if k != "steps"} for row in scaling]
        figures["steps"] = {row["nodes"]: row["steps"] for row in scaling}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str))


if __name__ == "__main__":
    main()
