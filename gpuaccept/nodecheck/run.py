"""The node check's second half: judge what the readers brought, act on the node, say so, exit.

Kept apart from ``cli`` so the parser and the readers' fork happen before the judging core and the
thresholds (pydantic) are imported: those imports overlap the readings instead of preceding them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from typing import Any

from gpuaccept import selftest_hooks
from gpuaccept.dispatch.slurm_cli import NodeInfo
from gpuaccept.fleet.node import NodeAction, drain, reason_text, resume_if_ours
from gpuaccept.judging.judge import Judge
from gpuaccept.nodecheck.gate import Finding, Verdicts, judge_node
from gpuaccept.nodecheck.readers import boot_id
from gpuaccept.nodecheck.state import NodeState
from gpuaccept.nodecheck.watchdog import Outcome
from gpuaccept.thresholds.loader import CPU_SKU, Thresholds, ThresholdsError, load_thresholds

__all__ = ["conclude", "exit_code"]

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


def _sku(thresholds: Thresholds, forced: str | None, gpus: dict[str, Any] | None) -> str:
    if forced:
        if forced not in thresholds.skus:
            raise ThresholdsError(f"--sku {forced}: not in {', '.join(map(str, thresholds.files))}")
        return forced
    names = sorted({str(g.get("name")) for g in (gpus or {}).get("gpus") or []})
    if not names:
        return CPU_SKU
    skus = {thresholds.sku_for_gpu(name) for name in names}
    if None in skus or len(skus) != 1:
        raise ThresholdsError(
            f"GPU model {', '.join(names)} matches no single SKU in {', '.join(map(str, thresholds.files))}: "
            "add one in a site file (--thresholds) or force one with --sku"
        )
    return skus.pop()  # type: ignore[return-value]


def exit_code(context: str, verdicts: Verdicts) -> int:
    """Failed: 1 everywhere. Could not check: 2 for the health check (Slurm ignores it there), 0 for
    prolog and epilog (a non-zero exit there drains the node, and our failing to look is no fault)."""
    if verdicts.failed:
        return EXIT_FAILED
    if verdicts.errors:
        return EXIT_ERROR if context == "healthcheck" else EXIT_OK
    return EXIT_OK


def _act(
    args: argparse.Namespace, node: str, context: str, verdicts: Verdicts, slurm: dict[str, Any], start: float
) -> NodeAction:
    """Drain or resume within what is left of the watchdog (each scontrol call gets at most that)."""
    if not args.drain:
        return NodeAction("no action (without --drain)")
    left = max(2.0, min(10.0, (args.timeout - 1.0 - (time.monotonic() - start)) / 2))
    if verdicts.failed:
        return drain(node, reason_text([f.text() for f in verdicts.failed]), left)
    if verdicts.errors or context != "healthcheck":
        return NodeAction("no action")
    info = None
    if "state" in slurm:
        info = NodeInfo(node, slurm["state"], int(slurm["gpus"]), 0, slurm.get("reason", ""), ())
    return resume_if_ours(node, info, left)


def _save(state: NodeState, verdicts: Verdicts, slurm: dict[str, Any], summary: dict[str, Any]) -> None:
    try:
        for name, data in verdicts.state.items():
            if data:
                state.write(name, data)
        if slurm.get("source") == "scontrol":
            state.write("gres", {"gpus": slurm["gpus"]})
        state.write("last", summary)
    except OSError as exc:
        print(f"gpuaccept: could not write the node check's state in {state.folder}: {exc}")


def conclude(
    args: argparse.Namespace, node: str, context: str, state: NodeState, outcomes: dict[str, Outcome], start: float
) -> int:
    """Judge, act (drain or resume), print, keep state; returns the exit code."""
    slurm_outcome = outcomes.get("slurm")
    slurm = slurm_outcome.data if slurm_outcome is not None and slurm_outcome.ok else {}
    if slurm_outcome is not None and not slurm_outcome.ok:
        # the controller not answering says nothing about this node: never a finding that drains
        outcomes.pop("slurm")
        note = "timed out" if slurm_outcome.timed_out else slurm_outcome.error
        print(f"gpuaccept: {node}: declared GPUs unknown (scontrol: {note})")
    gpus_outcome = outcomes.get("gpus")
    gpus = gpus_outcome.data if gpus_outcome is not None and gpus_outcome.ok else None
    boot = boot_id()
    saved = {name: state.for_boot(name, boot) for name in ("xid", "nvlink", "pcie")}
    if args.acknowledge_xids and outcomes.get("kernel_log") and outcomes["kernel_log"].ok:
        saved["xid"] = {"uptime_s": outcomes["kernel_log"].data.get("uptime_s")}
    try:
        thresholds = load_thresholds(args.thresholds, sku=args.sku)
        sku = _sku(thresholds, args.sku, gpus)
    except ThresholdsError as exc:
        print(f"gpuaccept: {node}: cannot judge: {exc}")
        return EXIT_ERROR if context == "healthcheck" else EXIT_OK
    results: list[Any] = []
    judge = Judge(thresholds, lambda _node: sku, results.append, f"nodecheck::{context}")
    try:
        verdicts = judge_node(
            judge, node, outcomes, declared_gpus=slurm.get("gpus"), context=context, job=_job(), saved=saved
        )
    except Exception as exc:  # a bug of ours, or readings of a shape we did not foresee: never a drain
        print(f"gpuaccept: {node}: cannot judge: {type(exc).__name__}: {exc}")
        return EXIT_ERROR if context == "healthcheck" else EXIT_OK
    _no_verdict_under_test_hooks(verdicts)
    action = _act(args, node, context, verdicts, slurm, start)
    code = exit_code(context, verdicts)
    seconds = round(time.monotonic() - start, 2)
    word = "FAILED" if verdicts.failed else "could not check" if verdicts.errors else "PASSED"
    judged = sum(1 for r in verdicts.results if r.judged)
    summary = {
        "node": node,
        "context": context,
        "sku": sku,
        "verdict": word,
        "seconds": seconds,
        "checks": judged,
        "failed": [f.text() for f in verdicts.failed],
        "errors": [f.text() for f in verdicts.errors],
        "skipped": verdicts.skipped,
        "action": action.text(),
        "readers": {n: {"seconds": o.seconds, "timed_out": o.timed_out, "error": o.error} for n, o in outcomes.items()},
    }
    _save(state, verdicts, slurm, summary)
    if args.json:
        print(json.dumps({**summary, "results": [r.to_dict() for r in verdicts.results]}, indent=1, default=str))
    else:
        for finding in verdicts.failed:
            print(f"gpuaccept: {node} FAIL {finding.text()}")
        for finding in verdicts.errors:
            print(f"gpuaccept: {node} could not check {finding.check}: {finding.limit}")
        print(f"gpuaccept: {node} {context} {word}: {judged} checks, SKU {sku}, {seconds:g} s; {action.text()}")
    return code


def _no_verdict_under_test_hooks(verdicts: Verdicts) -> None:
    """With a test hook set (``gpuaccept.selftest_hooks``: injected readings, a fault made on purpose) the check
    judged what the hook made, not the node: it can neither pass the node (and resume it) nor drain it."""
    hooks = selftest_hooks.active()
    if not hooks:
        return
    verdicts.findings = [dataclasses.replace(f, drains=False) for f in verdicts.findings]
    names = ", ".join(sorted(hooks))
    why = f"none set on a node being checked; {names} made what was judged, not the node"
    verdicts.findings.append(Finding("test_hooks", "", names, why, drains=False))


def _job() -> str | None:
    return os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID")
