"""``gpuaccept-node-check``: check this node in seconds, judged like the suite; drain it if it fails.

Contexts (``--context``, default ``auto``: Slurm's ``SLURM_SCRIPT_CONTEXT`` says prolog or epilog,
anything else is the health check):

* ``healthcheck`` (slurm.conf HealthCheckProgram; Slurm ignores the exit code): with ``--drain`` a
  failing node drains itself with a ``gpuaccept:`` reason, and a healthy node that gpuaccept drained
  is resumed (never one drained by anyone else). Exit 0 healthy, 1 failed, 2 could not check.
* ``prolog`` (slurm.conf Prolog): exit 1 on failure, so Slurm drains the node and requeues the job
  (``SchedulerParameters=nohold_on_prolog_fail`` lets it start elsewhere at once); with ``--drain``
  the reason is ours first, and Slurm keeps it. A check that could not run exits 0: a bug of ours
  must not drain a cluster one job at a time.
* ``epilog`` (slurm.conf Epilog): as prolog; processes the ending job left on a GPU are foreign.

Output: one line per finding, then one summary line (``gpuaccept: node1 FAILED ...``); slurmd
writes a failing prolog/epilog/health check's output to its log. ``--json`` prints the checks instead.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from gpuaccept.nodecheck import readers
from gpuaccept.nodecheck.state import DEFAULT_STATE_DIR, NodeState
from gpuaccept.nodecheck.watchdog import progress, run_readers

__all__ = ["entry", "main"]

CONTEXTS = ("auto", "healthcheck", "prolog", "epilog")
EXIT_ERROR = 2


class _Parser(argparse.ArgumentParser):
    """A bad argument is an error of the check's own (its configuration), so it exits as one: argparse's
    exit 2 from a prolog would drain the node for a typo in slurm.conf."""

    def __init__(self, argv: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.argv = argv

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        context = _context(_context_arg(self.argv))
        sys.stderr.write(f"gpuaccept-node-check: cannot check: {message}\n")
        raise SystemExit(_could_not_check(context))


def _context_arg(argv: list[str]) -> str:
    """``--context`` as written, read before the parse that failed (else ``auto``)."""
    for i, arg in enumerate(argv):
        if arg.startswith("--context="):
            value = arg.split("=", 1)[1]
        elif arg == "--context" and i + 1 < len(argv):
            value = argv[i + 1]
        else:
            continue
        return value if value in CONTEXTS else "auto"
    return "auto"


def _could_not_check(context: str) -> int:
    """The exit of a check that could not run: 2 for the health check, 0 for prolog and epilog (a non-zero
    exit there drains the node, and our failing to look is no fault of the node's)."""
    return EXIT_ERROR if context == "healthcheck" else 0


def _parser(argv: list[str]) -> argparse.ArgumentParser:
    p = _Parser(argv, prog="gpuaccept-node-check", description=__doc__.splitlines()[0])
    p.add_argument("--context", choices=CONTEXTS, default="auto", help="how Slurm runs it (default: from the env)")
    p.add_argument("--drain", action="store_true", help="drain this node on failure; resume it if it is ours")
    p.add_argument("--node", help="Slurm node name (default: SLURMD_NODENAME, else the short hostname)")
    p.add_argument("--thresholds", type=Path, help="site thresholds file merged over the packaged ones")
    p.add_argument("--sku", help="force the SKU instead of detecting it from the GPU name")
    p.add_argument("--expected", type=Path, help="expected fingerprint (default /etc/gpuaccept/expected-...)")
    p.add_argument("--gpus", type=int, help="GPUs the node declares (default: its gres, from scontrol)")
    p.add_argument("--state-dir", type=Path, help=f"per-node state (default {DEFAULT_STATE_DIR})")
    p.add_argument("--timeout", type=float, default=30.0, help="hard watchdog for the whole check, s (30)")
    p.add_argument("--check-timeout", type=float, default=10.0, help="watchdog for each reading, s (10)")
    p.add_argument("--acknowledge-xids", action="store_true", help="start the Xid window now (after a repair)")
    p.add_argument("--json", action="store_true", help="print the judged checks as JSON")
    recorded = p.add_argument_group("recorded readings instead of the live node (selftests, replay)")
    recorded.add_argument("--nvml-load", type=Path, help="a `gpu_health --dump` file")
    recorded.add_argument("--nvlink-load", type=Path, help="a `nvlink --dump` file")
    recorded.add_argument("--sysfs-root", type=Path, default=Path("/sys"), help="sysfs root for InfiniBand")
    recorded.add_argument("--kernel-log", type=Path, help="a saved kernel log instead of dmesg")
    recorded.add_argument("--shm", default="/dev/shm", help="the shared-memory mount to check")
    recorded.add_argument("--proc-root", type=Path, default=Path("/proc"), help="where processes and jobs are read")
    return p


def _context(arg: str) -> str:
    """``auto``: Slurm's ``SLURM_SCRIPT_CONTEXT``; without it (a Slurm before 21.08) a job id means a
    prolog or epilog (they get one, the health check does not), judged with the prolog's exit codes."""
    if arg != "auto":
        return arg
    script = os.environ.get("SLURM_SCRIPT_CONTEXT", "")
    if script.startswith(("prolog", "epilog")):
        return script[:6]
    return "prolog" if not script and os.environ.get("SLURM_JOB_ID") else "healthcheck"


def _declared(args: argparse.Namespace, node: str, context: str, state: NodeState) -> dict[str, Any]:
    """A reader: the node's declared GPUs and its Slurm state. Prolog and epilog read the count the last
    health check cached (Slurm's docs ask them not to call Slurm commands); the health check asks."""
    if args.gpus is not None:
        return {"gpus": args.gpus, "source": "--gpus"}
    cached = state.read("gres")
    if context != "healthcheck" and "gpus" in cached:
        return {"gpus": cached["gpus"], "source": "cache"}
    from gpuaccept.dispatch.slurm_cli import node_info

    progress(f"scontrol show node {node}")
    info = node_info(node)
    return {"gpus": info.gpus, "source": "scontrol", "state": info.state, "reason": info.reason}


def _read_expected(path: Path) -> dict[str, Any]:
    from gpuaccept.nodecheck.expected import ExpectedError, read_expected

    progress(f"reading {path}")
    try:
        return {"fields": read_expected(path)}
    except ExpectedError as exc:
        return {"fields": None, "error": str(exc)}


def _readers(args: argparse.Namespace, node: str, context: str, state: NodeState) -> dict[str, Any]:
    from gpuaccept.nodecheck.expected import DEFAULT_EXPECTED

    sources = readers.Sources(
        args.nvml_load, args.nvlink_load, args.sysfs_root, args.kernel_log, args.shm, args.proc_root
    )
    expected = args.expected or DEFAULT_EXPECTED
    return {
        "gpus": lambda: readers.read_gpus(sources),
        "kernel_log": lambda: readers.read_kernel_log(sources),
        "ib": lambda: readers.read_ib(sources),
        "hygiene": lambda: readers.read_hygiene(sources),
        "versions": readers.read_versions,
        "expected": lambda: _read_expected(expected),
        "slurm": lambda: _declared(args, node, context, state),
    }


def _watchdog(seconds: float) -> None:
    """The last resort: whatever hangs in this process, exit after ``seconds`` with a line saying so."""

    def fire(signum: int, frame: Any) -> None:
        os.write(2, f"gpuaccept: node check watchdog: no verdict after {seconds:g} s\n".encode())
        os._exit(EXIT_ERROR)

    signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser(argv).parse_args(argv)
    start = time.monotonic()
    _watchdog(args.timeout)
    context = _context(args.context)
    node = args.node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    state = NodeState(args.state_dir or DEFAULT_STATE_DIR, node)
    # readers first (forked before the heavy imports below, which then overlap with the readings)
    budget = min(args.check_timeout, max(1.0, args.timeout - 8.0))
    try:
        outcomes = run_readers(_readers(args, node, context, state), budget, meanwhile=_import_judging)
        from gpuaccept.nodecheck.run import conclude

        return conclude(args, node, context, state, outcomes, start)
    except Exception as exc:  # an error of ours (a file it cannot read, a bug): a clear line, never a drain
        print(f"gpuaccept: {node}: cannot check: {type(exc).__name__}: {exc}")
        return _could_not_check(context)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _import_judging() -> None:
    """Import the judging core and pydantic while the readers read (about 0.6 s of CPU)."""
    import gpuaccept.nodecheck.run  # noqa: F401


def entry() -> None:
    """The console script: ``main``, then exit at once (interpreter teardown after pydantic and the
    judging core costs about half a second, a tenth of the check's budget)."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
