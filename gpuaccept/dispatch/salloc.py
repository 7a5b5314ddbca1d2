"""``salloc --no-shell`` that never waits in silence and never waits forever.

A request Slurm cannot grant yet (nodes busy, a node that went down after the preflight check, a
limit) used to leave the operator looking at a silent terminal for ten minutes. Here salloc runs in
the background; a reader thread picks the job id from its stderr as soon as it queues (``Pending job
allocation N``), Slurm's pending reason (``squeue -o %r``) is printed every few seconds, and after
``--alloc-wait`` seconds the job is cancelled and the run stops with an error that quotes the reason
and the partition's node states. Ctrl-C or SIGTERM while waiting cancels the pending job too.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from gpuaccept.dispatch.preflight import SlurmUnusable
from gpuaccept.dispatch.proc import stop_group
from gpuaccept.dispatch.slurm_cli import SlurmError, slurm_cmd

__all__ = ["NOTE_EVERY_S", "REASONS", "cancel_job", "pending_state", "request_allocation", "to_stderr"]

#: How often the pending reason is printed while salloc waits.
NOTE_EVERY_S = 5.0

_JOB = re.compile(r"job allocation (\d+)", re.IGNORECASE)
_GRANTED = re.compile(r"Granted job allocation (\d+)")

#: Plain words for the pending reasons a newcomer meets most (Slurm's squeue man page, JOB REASON CODES).
REASONS = {
    "Resources": "the nodes are busy with other jobs",
    "Priority": "other jobs are ahead in the queue",
    "PartitionNodeLimit": "more nodes than the partition allows or has",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "NodeDown": "a node it needs is down",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
    "BadConstraints": "the request can never be satisfied (gres, memory or CPUs per node)",
    "QOSMaxNodePerJobLimit": "the QOS allows fewer nodes per job",
    "AssocGrpNodeLimit": "the account's node limit is reached",
}


def to_stderr(message: str) -> None:
    """The default progress line sink (the plugin passes one that gets past pytest's capture)."""
    print(message, file=sys.stderr, flush=True)


def pending_state(job_id: str) -> str:
    """``PENDING, reason Resources (the nodes are busy with other jobs)``, or what squeue said instead."""
    try:
        out = slurm_cmd(["squeue", "-h", "-j", job_id, "-o", "%T|%r"], timeout_s=15).strip()
    except SlurmError as exc:
        return f"unknown (squeue: {exc})"
    if not out:
        return "no longer in the queue"
    state, _, reason = out.partition("|")
    base = reason.split(",")[0].split("(")[0].strip()
    meaning = f" ({REASONS[base]})" if base in REASONS else ""
    return f"{state}, reason {reason}{meaning}"


def cancel_job(job_id: str, wait_s: float = 10.0) -> str:
    """``scancel``, then wait up to ``wait_s`` until the job has left the queue; '' if done, else the problem."""
    try:
        slurm_cmd(["scancel", job_id], timeout_s=30)
    except SlurmError as exc:
        return f"could not cancel job {job_id} ({exc}): cancel it by hand with scancel {job_id}"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if not slurm_cmd(["squeue", "-h", "-j", job_id, "-o", "%i"], timeout_s=15).strip():
                return ""
        except SlurmError:
            return ""  # squeue rejects a job id that has already been purged
        time.sleep(0.5)
    return "" if wait_s <= 0 else f"job {job_id} still in the queue {wait_s:g} s after scancel"


def request_allocation(
    argv: list[str],
    wait_s: float,
    *,
    what: str,
    wait_source: str,
    notify: Callable[[str], None],
    describe_nodes: Callable[[], str],
) -> str:
    """Run ``argv`` (a ``salloc --no-shell``); the granted job id, or ``SlurmUnusable`` naming why not.

    ``what`` says what was asked for (``2 node(s) of partition main``); ``describe_nodes`` reads the
    partition's node states again for the error message, at the moment the wait gives up.
    """
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # Ctrl-C reaches pytest only; the finally below cancels the job
    )
    lines: list[str] = []
    job: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
            match = _JOB.search(line)
            if match and not job:
                job.append(match.group(1))

    reader = threading.Thread(target=read, name="gpuaccept-salloc", daemon=True)
    reader.start()
    start = time.monotonic()
    next_note = start + 1.0  # an allocation granted at once prints nothing
    granted = cancelled = False
    try:
        while proc.poll() is None and time.monotonic() - start < wait_s:
            if job and time.monotonic() >= next_note:
                notify(
                    f"gpuaccept: waiting for Slurm job {job[0]} ({what}): {pending_state(job[0])} "
                    f"[{time.monotonic() - start:.0f} s of {wait_s:g} s, {wait_source}]"
                )
                next_note = time.monotonic() + NOTE_EVERY_S
            time.sleep(0.2)
        if proc.poll() is None:
            cancelled = True
            raise SlurmUnusable(_gave_up(job, wait_s, what, wait_source, describe_nodes))
        reader.join(timeout=5)
        said = "\n".join(lines)
        match = _GRANTED.search(said)
        if proc.returncode != 0 or not match:
            raise SlurmUnusable(f"{' '.join(argv)}: exit {proc.returncode}: {said.strip() or 'no output'}")
        granted = True
        return match.group(1)
    finally:
        if not granted:
            problem = cancel_job(job[0]) if job and not cancelled else ""
            stop_group(proc)
            if problem:
                notify(f"gpuaccept: {problem}")


def _gave_up(job: list[str], wait_s: float, what: str, wait_source: str, describe_nodes: Callable[[], str]) -> str:
    """The error when the wait runs out: the job, Slurm's reason, and every node's state now."""
    if job:
        status = f"job {job[0]} {pending_state(job[0])}"
        problem = cancel_job(job[0])
        status += f"; {problem}" if problem else "; cancelled"
    else:
        status = "salloc printed no job id"
    return f"Slurm did not grant {what} within {wait_s:g} s ({wait_source}): {status}. Nodes: {describe_nodes()}"
