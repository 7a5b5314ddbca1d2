"""Drain nodes with hardware failures so the scheduler stops placing jobs on them.

Only *failed* node-local tests count (the hardware missed a threshold); an *error* means we could not
measure, which says nothing certain about the node and must not take it out of service. The default
is to print the ``scontrol`` commands; ``--drain-on-fail yes`` runs them. Resume a node with
``scontrol update nodename=X state=resume`` (or ``gpuaccept-undrain X``), after fixing it.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess

from gpuaccept.dispatch.slurm_cli import SlurmError, node_info
from gpuaccept.fleet.node import PREFIX, REASON_MAX, ours
from gpuaccept.results.record import RunRecord

__all__ = ["drain_commands", "nodes_to_drain", "run_drain", "undrain_main"]


def nodes_to_drain(record: RunRecord) -> dict[str, str]:
    """Node -> drain reason ``gpuaccept: <test> <metric,...>`` from failed node-local tests."""
    reasons: dict[str, list[str]] = {}
    for entry in record.tests.values():
        if entry.verdict != "failed" or len(entry.nodes) != 1:
            continue
        node = entry.nodes[0]
        name = entry.nodeid.split("::")[-1].split("[")[0]
        metrics = sorted(
            {m.metric for m in record.metrics if m.test == entry.nodeid and m.node == node and m.verdict == "fail"}
        )
        reasons.setdefault(node, []).append(f"{name} {','.join(metrics)}".strip())
    return {node: f"{PREFIX} {'; '.join(parts)}"[:REASON_MAX] for node, parts in reasons.items()}


def drain_commands(reasons: dict[str, str]) -> list[list[str]]:
    return [
        ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"]
        for node, reason in sorted(reasons.items())
    ]


def run_drain(record: RunRecord, mode: str) -> list[str]:
    """Print (mode ``print``) or run (mode ``yes``) the drain commands; returns lines for the terminal."""
    lines = []
    for argv in drain_commands(nodes_to_drain(record)):
        text = shlex.join(argv)
        if mode == "yes":
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            status = "drained" if done.returncode == 0 else f"FAILED to drain ({done.stderr.strip()})"
            lines.append(f"{status}: {text}")
        else:
            lines.append(f"would drain (use --drain-on-fail yes): {text}")
    return lines


def undrain_main(argv: list[str] | None = None) -> int:
    """``gpuaccept-undrain NODE...``: resume nodes that gpuaccept drained (only those)."""
    parser = argparse.ArgumentParser(description=undrain_main.__doc__)
    parser.add_argument("nodes", nargs="+")
    parser.add_argument("--force", action="store_true", help="resume even if the drain reason is not gpuaccept's")
    args = parser.parse_args(argv)
    status = 0
    for node in args.nodes:
        try:
            reason = node_info(node).reason
        except SlurmError as exc:
            print(f"{node}: {exc}")
            status = 1
            continue
        if not ours(reason) and not args.force:
            print(f"{node}: not drained by gpuaccept; left alone (use --force)")
            status = 1
            continue
        done = subprocess.run(
            ["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True, text=True
        )
        print(f"{node}: {'resumed' if done.returncode == 0 else 'FAILED: ' + done.stderr.strip()}")
        status |= done.returncode != 0
    return status
