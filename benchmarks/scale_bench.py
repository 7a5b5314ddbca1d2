"""Scale benchmark: the default command (no ``-n``) on 1..256 loopback nodes, harness apart from host.

For each node count it starts a loopback cluster (``slurm/dev-cluster/up.sh --nodes N``) and runs, each
under ``/usr/bin/time -v`` and with slurmctld's statistics reset (``sdiag -r``) before:

(a) the stand-in: ``--standin-tests`` node-parametrized tests whose probe takes a fixed time on every
    node (``_faults --fault slow --seconds S``: a sleep, no CPU). Whatever the wall adds to
    ``tests x S`` is the harness (pytest, the fan-out step's launch, its output) plus what the one host
    behind every loopback node costs (N slurmstepd and N Python starts on the same CPUs);
(b) the node-local section of the acceptance suite (``--section``, default
    ``acceptance and not multinode and not training and not nccl``).

Per run it reports the wall, the login-node side's peak RSS and CPU seconds (pytest and its srun
clients: ``time -v`` counts the children it waited for, not slurmd's), slurmctld's RPC count (``sdiag``),
the srun steps the session launched (``cluster.srun_steps`` in the run record) and the verdicts.

Run as root with slurm-wlm installed (it starts and stops its own clusters):
``python benchmarks/scale_bench.py --nodes 1 64 256 --json /tmp/scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_bench import sdiag  # the benchmarks folder is not a package

REPO = Path(__file__).resolve().parents[1]
UP, DOWN = REPO / "slurm/dev-cluster/up.sh", REPO / "slurm/dev-cluster/down.sh"
SECTION = "acceptance and not multinode and not training and not nccl"

STANDIN = """
from gpuaccept.probes import specs
import pytest


@pytest.mark.parametrize("k", range({tests}))
def test_standin(node, cluster, k):
    result = cluster.run(specs.FAULTS, nodes=[node], args=["--fault", "slow", "--seconds", "{seconds}"])
    assert result.one().node == node
"""


def up(nodes: int) -> dict[str, str]:
    extra = os.environ.get("GPUACCEPT_UP_ARGS", "").split()
    env = {**os.environ, "GPUACCEPT_DEV_TIMEOUT": str(max(60, nodes * 2))}
    out = subprocess.run(
        ["bash", str(UP), "--nodes", str(nodes), *extra], capture_output=True, text=True, check=True, env=env
    ).stdout
    dump = subprocess.run(["bash", "-c", 'eval "$1" && env -0', "_", out], capture_output=True, text=True, check=True)
    cluster_env = dict(item.split("=", 1) for item in dump.stdout.split("\0") if "=" in item)
    cluster_env.pop("SLURM_JOB_ID", None)
    return cluster_env


def down(env: dict[str, str]) -> None:
    subprocess.run(["bash", str(DOWN), "--clean", env["GPUACCEPT_DEV_CLUSTER"]], env=env, capture_output=True)


def _time_v(stderr: str, label: str) -> float:
    match = re.search(rf"^\s*{re.escape(label)}: ([\d.:]+)$", stderr, re.MULTILINE)
    if match is None:
        return float("nan")
    text = match.group(1)
    if ":" in text:  # h:mm:ss or m:ss
        seconds = 0.0
        for part in text.split(":"):
            seconds = seconds * 60 + float(part)
        return seconds
    return float(text)


def timed_pytest(env: dict[str, str], nodes: int, args: list[str], cwd: Path, record: Path) -> dict[str, Any]:
    """One pytest session under ``/usr/bin/time -v``: wall, peak RSS, CPU, RPCs, steps, verdicts."""
    # the report empties reports/allure-results at start: the previous run's files would be timed too
    shutil.rmtree(cwd / "reports" / "allure-results", ignore_errors=True)
    sdiag(env, reset=True)
    argv = ["/usr/bin/time", "-v", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    argv += [*args, "--launcher", "slurm", "--nodes", str(nodes), "--run-record", str(record)]
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    rpc = sdiag(env)
    data = json.loads(record.read_text()) if record.exists() else {"tests": [], "cluster": {}}
    verdicts = Counter(t["verdict"] for t in data["tests"])
    return {
        "nodes": nodes,
        "wall_s": round(wall, 2),
        "peak_rss_mib": round(_time_v(done.stderr, "Maximum resident set size (kbytes)") / 1024, 1),
        "login_cpu_s": round(
            _time_v(done.stderr, "User time (seconds)") + _time_v(done.stderr, "System time (seconds)"), 2
        ),
        # by message type (upper case); sdiag's per-user section repeats the same calls under the user's name
        "rpc_total": sum(count for name, (count, _) in rpc.items() if name.isupper()),
        "rpc_top": dict(sorted(((k, c) for k, (c, _) in rpc.items() if k.isupper()), key=lambda kv: -kv[1])[:6]),
        "srun_steps": data["cluster"].get("srun_steps"),
        "lost_nodes": data["cluster"].get("lost_nodes"),
        "verdicts": dict(verdicts),
        "exit": done.returncode,
        "tail": (done.stdout.strip().splitlines() or [""])[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--standin-tests", type=int, default=3, help="0 skips the stand-in")
    parser.add_argument("--standin-seconds", type=float, default=3.0)
    parser.add_argument("--section", default=SECTION, help="marker expression of the real section ('' skips it)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    work = Path(tempfile.mkdtemp(prefix="gpuaccept-scale-"))
    suite = work / "standin"
    suite.mkdir()
    (suite / "test_standin.py").write_text(STANDIN.format(tests=args.standin_tests, seconds=args.standin_seconds))
    (suite / "pytest.ini").write_text("[pytest]\n")
    print(f"scale bench: {os.cpu_count()} CPUs; stand-in {args.standin_tests} tests x {args.standin_seconds:g} s")
    for nodes in args.nodes:
        env = {**up(nodes), "GPUACCEPT_SELFTEST": "1", "PYTHONPATH": str(REPO)}
        try:
            if args.standin_tests:
                row = timed_pytest(env, nodes, [], suite, work / f"standin-{nodes}.json")
                row["part"] = "stand-in"
                row["harness_s"] = round(row["wall_s"] - args.standin_tests * args.standin_seconds, 2)
                rows.append(row)
                print(json.dumps(row), flush=True)
            if args.section:
                row = timed_pytest(
                    env, nodes, ["-m", args.section, "tests/acceptance"], REPO, work / f"section-{nodes}.json"
                )
                row["part"] = "section"
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            down(env)
    print(
        f"\n{'part':<9} {'nodes':>5} {'wall s':>7} {'x 1 node':>8} {'RSS MiB':>8} "
        f"{'login CPU s':>11} {'RPCs':>6} {'steps':>5}"
    )
    base = {r["part"]: r["wall_s"] for r in rows if r["nodes"] == min(args.nodes)}
    for r in rows:
        ratio = r["wall_s"] / base[r["part"]] if base.get(r["part"]) else float("nan")
        print(
            f"{r['part']:<9} {r['nodes']:>5} {r['wall_s']:>7.1f} {ratio:>8.2f} {r['peak_rss_mib']:>8.0f} "
            f"{r['login_cpu_s']:>11.1f} {r['rpc_total']:>6} {r['srun_steps']!s:>5}  {r['verdicts']}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
