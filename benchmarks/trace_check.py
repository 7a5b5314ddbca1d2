"""The files one real check enters, traced, not read off the code: docs/ARCHITECTURE.md's flow comes from this.

It starts a two-node loopback cluster (``slurm/dev-cluster/up.sh --nodes 2``), runs one acceptance test on it
(default ``tests/acceptance/test_hygiene.py::test_node_limits``: the hygiene probe, judged against the SKU's
limits) with the Slurm launcher, and traces every Python process of the run: the pytest session on the login
node and each process the srun steps start on the nodes (the fan-out wrapper, the probe). Each gets a
``sitecustomize`` (on ``PYTHONPATH``) that sets ``sys.setprofile`` and ``threading.setprofile`` and writes to
``OUT/calls/<pid>.txt``, at once (``_pernode`` replaces itself with the probe by ``exec``: no exit handler
runs), each file of this repository the process imports, and each it calls a function of, with that first
function, in call order. A file only imported ran its module body and no function of it: it is not on the
path a check's figure takes.

    python benchmarks/trace_check.py OUT [--test NODEID] [--nodes N]

writes ``OUT/trace.json`` (per process: its commands, the files it imported and those it called into, in
order) and prints the files called into per process and the counts in all. Run it as root with slurm-wlm
installed (it starts and stops its own cluster; ``GPUACCEPT_SLURM_PORTS`` picks its ports).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
UP, DOWN = REPO / "slurm/dev-cluster/up.sh", REPO / "slurm/dev-cluster/down.sh"
DEFAULT_TEST = "tests/acceptance/test_hygiene.py::test_node_limits"

#: the tracer every process of the run imports at start (``site`` imports ``sitecustomize`` from the path)
SITECUSTOMIZE = r"""
import os, sys, threading

_OUT, _ROOT = os.environ.get("GPUACCEPT_TRACE_OUT"), os.environ.get("GPUACCEPT_TRACE_ROOT", "")
if _OUT:
    _imported, _called = set(), set()
    _log = open(os.path.join(_OUT, f"{os.getpid()}.txt"), "a", buffering=1)
    _log.write("argv " + " ".join(sys.orig_argv) + "\n")

    def _importing(frame):
        # a module or class body of ours on the stack (no CO_NEWLOCALS), other than the __main__ module's: the
        # call runs while a module is imported (a class defined, a table built), not on a check's path
        while frame is not None:
            code = frame.f_code
            if code.co_filename.startswith(_ROOT) and not code.co_flags & 0x2:
                if frame.f_globals.get("__name__") != "__main__":
                    return True
            frame = frame.f_back
        return False

    def _profile(frame, event, arg):
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(_ROOT) or "/site-packages/" in path:
            return
        name, where = frame.f_code.co_name, os.path.relpath(path, _ROOT)
        if name == "<module>":
            if path not in _imported:
                _imported.add(path)
                _log.write(f"import {where} {name}\n")
        elif path not in _called and not _importing(frame.f_back):
            _called.add(path)
            _log.write(f"call {where} {name}\n")

    sys.setprofile(_profile)
    threading.setprofile(_profile)
"""


def up(nodes: int) -> dict[str, str]:
    out = subprocess.run(["bash", str(UP), "--nodes", str(nodes)], capture_output=True, text=True, check=True).stdout
    dump = subprocess.run(["bash", "-c", 'eval "$1" && env -0', "_", out], capture_output=True, text=True, check=True)
    env = dict(item.split("=", 1) for item in dump.stdout.split("\0") if "=" in item)
    env.pop("SLURM_JOB_ID", None)
    return env


def down(env: dict[str, str]) -> None:
    subprocess.run(["bash", str(DOWN), "--clean", env["GPUACCEPT_DEV_CLUSTER"]], env=env, capture_output=True)


def read_calls(folder: Path) -> list[dict[str, Any]]:
    """Per traced process (a pid: ``_pernode`` and the probe it becomes share one): its command lines, the
    repository files it imported, and those it called a function of, in the order of the first call."""
    processes = []
    for path in sorted(folder.glob("*.txt"), key=lambda p: p.stat().st_mtime):
        argv: list[str] = []
        imported: list[str] = []
        called: list[dict[str, str]] = []
        for line in path.read_text().splitlines():
            kind, _, rest = line.partition(" ")
            name, _, function = rest.partition(" ")
            if kind == "argv":
                argv.append(rest)
            elif kind == "import":
                imported.append(name)
            elif kind == "call":
                called.append({"file": name, "first_call": function})
        if imported:
            processes.append({"pid": int(path.stem), "argv": argv, "imported": imported, "called": called})
    return processes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--test", default=DEFAULT_TEST)
    parser.add_argument("--nodes", type=int, default=2, help="2: the fan-out step, one srun step for both nodes")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    calls, hook = out / "calls", out / "site"
    calls.mkdir(parents=True, exist_ok=True)
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    cluster = up(args.nodes)
    env = {
        **cluster,
        "PYTHONPATH": f"{hook}:{REPO}",
        "GPUACCEPT_TRACE_OUT": str(calls),
        "GPUACCEPT_TRACE_ROOT": str(REPO) + "/",
    }
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", args.test, "--launcher", "slurm"]
    argv += ["--nodes", str(args.nodes), "--run-record", str(out / "record.json")]
    try:
        done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    finally:
        down(cluster)
    processes = read_calls(calls)
    record = json.loads((out / "record.json").read_text()) if (out / "record.json").exists() else {}
    called = sorted({c["file"] for p in processes for c in p["called"]})
    imported = sorted({f for p in processes for f in p["imported"]})
    summary = {
        "test": args.test,
        "nodes": args.nodes,
        "exit": done.returncode,
        "verdicts": {t["nodeid"]: t["verdict"] for t in record.get("tests", [])},
        "srun_steps": record.get("cluster", {}).get("srun_steps"),
        "files_called": len(called),
        "files_imported": len(imported),
        "processes": processes,
    }
    (out / "trace.json").write_text(json.dumps(summary, indent=1))
    print(f"{args.test} on {args.nodes} nodes: exit {done.returncode}, verdicts {summary['verdicts']}")
    for process in processes:
        print(f"\n{' => '.join(a[:110] for a in process['argv'])}")
        print(f"  {len(process['imported'])} files imported, {len(process['called'])} called into, in order:")
        for entry in process["called"]:
            print(f"  {entry['file']}  ({entry['first_call']})")
    print(f"\n{len(called)} files called into in all ({len(imported)} imported); srun steps: {summary['srun_steps']}")
    if done.returncode:
        print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)


if __name__ == "__main__":
    main()
