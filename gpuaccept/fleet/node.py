"""Drain one node with a reason gpuaccept wrote, and resume it only if the reason is still ours.

Like LBNL NHC (which resumes only nodes whose reason starts with ``NHC:``), the node check never
touches a drain another tool or a person set: ``resume_if_ours`` reads the node's reason first and
leaves any reason that does not start with ``gpuaccept:`` alone. Nor does it resume a drain of the
acceptance suite or the idle re-validation (``gpuaccept: test_<name> ...``, from ``fleet.drain``): its
seconds of reading cannot clear what a benchmark or a fine-tune found; a passing run and
``gpuaccept-undrain`` do. Reasons are kept short: ``sinfo -R`` shows 20 characters by default.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from gpuaccept.dispatch.slurm_cli import NodeInfo, SlurmError, node_info, state_is_usable

__all__ = ["PREFIX", "REASON_MAX", "NodeAction", "drain", "from_node_check", "ours", "reason_text", "resume_if_ours"]

PREFIX = "gpuaccept:"
REASON_MAX = 120  # Slurm keeps the reason in a fixed-size field in sinfo output; keep it readable


def reason_text(findings: list[str]) -> str:
    """``gpuaccept: <first finding> (+N more)``, cut to ``REASON_MAX`` characters."""
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    head = f"{PREFIX} {findings[0] if findings else 'failed'}"
    return head[: REASON_MAX - len(more)] + more


def ours(reason: str) -> bool:
    """Any drain gpuaccept wrote (the node check's or the suite's)."""
    return reason.strip().startswith(PREFIX)


def from_node_check(reason: str) -> bool:
    """A drain the node check wrote and may lift: ours, and not the suite's ``gpuaccept: test_...``."""
    return ours(reason) and not reason.strip()[len(PREFIX) :].lstrip().startswith("test_")


@dataclass(frozen=True)
class NodeAction:
    """What was done to the node (for the check's output): drained, resumed, left alone, or failed."""

    action: str
    detail: str = ""

    def text(self) -> str:
        return self.action + (f": {self.detail}" if self.detail else "")


def _scontrol(args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["scontrol", *args], capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
    )


def drain(node: str, reason: str, timeout_s: float = 10.0) -> NodeAction:
    """``scontrol update nodename=NODE state=drain reason=REASON``; a node already drained by another
    tool keeps that reason (we do not overwrite someone else's diagnosis)."""
    try:
        current = node_info(node, timeout_s)
    except SlurmError as exc:
        current = None
        lookup = str(exc)
    if current is not None and _drained(current) and not ours(current.reason):
        return NodeAction("left alone", f"already drained by someone else: {current.reason}")
    try:
        done = _scontrol(["update", f"nodename={node}", "state=drain", f"reason={reason}"], timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return NodeAction("drain FAILED", f"{type(exc).__name__}: {exc}")
    if done.returncode != 0:
        extra = "" if current is not None else f" (and {lookup})"
        return NodeAction("drain FAILED", (done.stderr.strip() or f"exit {done.returncode}") + extra)
    return NodeAction("drained", reason)


def _drained(info: NodeInfo) -> bool:
    return any(flag in info.state.upper() for flag in ("DRAIN", "FAIL")) or not state_is_usable(info.state)


def resume_if_ours(node: str, info: NodeInfo | None = None, timeout_s: float = 10.0) -> NodeAction:
    """Resume the node if the node check drained it; any other drain or state is left alone."""
    try:
        info = info or node_info(node, timeout_s)
    except SlurmError as exc:
        return NodeAction("resume skipped", str(exc))
    if "DRAIN" not in info.state.upper():
        return NodeAction("nothing to resume")
    if not from_node_check(info.reason):
        whose = "a slow check of gpuaccept's" if ours(info.reason) else "someone else"
        return NodeAction("left alone", f"drained by {whose}: {info.reason}")
    try:
        done = _scontrol(["update", f"nodename={node}", "state=resume"], timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return NodeAction("resume FAILED", f"{type(exc).__name__}: {exc}")
    if done.returncode != 0:
        return NodeAction("resume FAILED", done.stderr.strip() or f"exit {done.returncode}")
    return NodeAction("resumed", f"was: {info.reason}")
