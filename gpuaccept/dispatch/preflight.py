"""Before ``salloc``: can Slurm give this session the nodes it asks for?

Without this check a request Slurm can never grant (a node down, a partition smaller than
``--nodes``) pends in silence until the wait runs out, and a dead controller or a mistyped partition
used to look like "no Slurm here" and sent the run to the login host. Each of these is a usage error
(exit code 4) raised before any job exists, naming the controller, the partition or the nodes in
Slurm's own words (node state, the ``Reason`` field), so the operator knows what to fix.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import pytest

from gpuaccept.dispatch.slurm_cli import SlurmError, gres_gpus, key_values, slurm_cmd, state_is_usable
from gpuaccept.dispatch.versions import detect, removed_srun_options
from gpuaccept.settings import Settings

__all__ = [
    "NodeRow",
    "Plan",
    "SlurmUnusable",
    "check_controller",
    "check_srun_args",
    "describe_partition",
    "describe_rows",
    "plan_allocation",
    "read_nodes",
    "read_partition",
]

#: A live controller answers in milliseconds; a client that cannot find its configuration retries
#: for 60 s. Stop waiting well before that (the partition check must end within a minute).
PREFLIGHT_TIMEOUT_S = 15.0


class SlurmUnusable(pytest.UsageError):  # type: ignore[misc]  # final in typing; pytest maps it to exit 4
    """Slurm cannot give this session its nodes (controller, partition or node states): exit code 4."""


@dataclass(frozen=True)
class NodeRow:
    """One node of the partition as ``sinfo`` reports it."""

    name: str
    state: str  # sinfo's long state: idle, mixed, allocated, down*, drained, idle* (not responding)
    gpus: int
    reason: str  # Slurm's Reason field ("none" when unset)

    @property
    def usable(self) -> bool:
        # sinfo calls an idle node of an active reservation "reserved" and one held for a pending job
        # "planned": both can run our job (with --reservation, or once free); if not, the job pends
        # and the wait prints Slurm's reason
        return state_is_usable(re.sub(r"^(reserved|planned)", "idle", self.state, flags=re.IGNORECASE))

    @property
    def idle(self) -> bool:
        return self.usable and self.state.rstrip("*~#!%$@^-").lower() == "idle"

    def describe(self) -> str:
        """``node2 (down*, reason: Not responding)``; ``*`` is Slurm's mark for "not responding"."""
        reason = "" if self.reason in ("", "none", "(null)") else f", reason: {self.reason}"
        note = ", not responding" if self.state.endswith("*") and "Not responding" not in self.reason else ""
        return f"{self.name} ({self.state}{note}{reason})"


def describe_rows(rows: list[NodeRow] | tuple[NodeRow, ...]) -> str:
    return "; ".join(row.describe() for row in rows) or "none"


@dataclass(frozen=True)
class Plan:
    """What to ask ``salloc`` for: ``count`` nodes among ``candidates`` of ``partition``."""

    partition: str
    rows: tuple[NodeRow, ...]
    candidates: tuple[str, ...]
    count: int
    nodelist: tuple[str, ...]  # pinned nodes (--nodelist, or --nodes all); empty = Slurm picks
    gpus_per_node: int


def _clean(message: str) -> str:
    """Slurm's message without the ``*** RESTORE SLURMCTLD DAEMON ***`` banner lines."""
    return "; ".join(line.strip() for line in message.splitlines() if line.strip() and not line.startswith("*"))


def check_controller() -> None:
    """The controller answers ``scontrol ping``; else name it and quote Slurm."""
    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):
        raise SlurmUnusable(f"SLURM_CONF={conf}: no such file, so Slurm's commands cannot find the cluster")
    where = f" (SLURM_CONF={conf})" if conf else ""
    try:
        out = slurm_cmd(["scontrol", "ping"], timeout_s=PREFLIGHT_TIMEOUT_S)
    except SlurmError as exc:
        raise SlurmUnusable(f"the Slurm controller does not answer{where}: {_clean(str(exc))}") from None
    if " is UP" not in out:
        raise SlurmUnusable(f"the Slurm controller does not answer{where}: scontrol ping: {_clean(out)}")


def check_srun_args(args: tuple[str, ...]) -> None:
    """Refuse an ``--srun-arg`` this cluster's Slurm version removed: it would fail every step."""
    if not args:
        return
    try:
        version = detect()
    except SlurmError as exc:
        raise SlurmUnusable(f"cannot tell this cluster's Slurm version: {_clean(str(exc))}") from None
    problems = removed_srun_options(args, version)
    if problems:
        raise SlurmUnusable("; ".join(problems))


def read_partition(partition: str | None, source: str = "default") -> tuple[str, str, dict[str, str]]:
    """(name, State, all fields) of the named partition, or of the cluster's default one."""
    argv = ["scontrol", "-a", "-o", "show", "partition"] + ([partition] if partition else [])  # -a: hidden too
    try:
        out = slurm_cmd(argv, timeout_s=PREFLIGHT_TIMEOUT_S)
    except SlurmError as exc:
        what = f"partition {partition!r} ({source})" if partition else "the default partition"
        raise SlurmUnusable(f"{what}: Slurm says: {_clean(str(exc))}") from None
    parts = [key_values(line) for line in out.splitlines() if line.startswith("PartitionName=")]
    if partition is None:
        defaults = [p for p in parts if p.get("Default") == "YES"]
        if not defaults:
            names = ", ".join(p["PartitionName"] for p in parts) or "none"
            raise SlurmUnusable(f"the cluster has no default partition: give --partition (partitions: {names})")
        parts = defaults
    if not parts:
        raise SlurmUnusable(f"partition {partition!r} ({source}): Slurm lists no such partition")
    fields = parts[0]
    return fields["PartitionName"], fields.get("State", "UNKNOWN"), fields


def read_nodes(partition: str) -> list[NodeRow]:
    """Every node of ``partition`` with its state, GPUs and reason, as ``sinfo`` sees them now."""
    try:
        out = slurm_cmd(["sinfo", "-h", "-N", "-p", partition, "-o", "%N|%T|%G|%E"], timeout_s=PREFLIGHT_TIMEOUT_S)
    except SlurmError as exc:
        raise SlurmUnusable(f"partition {partition}: cannot read its nodes: {_clean(str(exc))}") from None
    rows: dict[str, NodeRow] = {}
    for line in out.splitlines():
        cells = line.split("|", 3)
        if len(cells) == 4 and cells[0] not in rows:
            rows[cells[0]] = NodeRow(cells[0], cells[1], gres_gpus(cells[2]), cells[3].strip())
    return list(rows.values())


def describe_partition(partition: str) -> str:
    """Every node's state now, and the jobs holding them: what an operator needs when a wait gives up."""
    text = describe_rows(read_nodes(partition))
    try:
        out = slurm_cmd(
            ["squeue", "-h", "-p", partition, "-t", "CONFIGURING,RUNNING,COMPLETING", "-o", "%i|%j|%u|%N"],
            timeout_s=PREFLIGHT_TIMEOUT_S,
        )
    except SlurmError as exc:
        return f"{text}; jobs on them: unknown ({exc})"
    jobs = [line.split("|", 3) for line in out.splitlines() if line.count("|") == 3]
    held = "; ".join(f"job {i} ({name}, user {user}) on {nodes}" for i, name, user, nodes in jobs)
    return text + (f". Held by: {held}" if held else "")


def plan_allocation(settings: Settings) -> Plan:
    """Check controller, partition and node states; the allocation to request, or ``SlurmUnusable``."""
    source = settings.sources.get
    check_controller()
    check_srun_args(settings.srun_arg)
    name, state, _ = read_partition(settings.partition, source("partition", "default"))
    if state != "UP":
        raise SlurmUnusable(f"partition {name} is {state} (scontrol show partition {name}): it runs no new jobs")
    rows = read_nodes(name)
    if not rows:
        raise SlurmUnusable(f"partition {name} has no nodes")
    by_name = {row.name: row for row in rows}
    if settings.nodelist:
        unknown = [n for n in settings.nodelist if n not in by_name]
        if unknown:
            raise SlurmUnusable(
                f"{source('nodelist')}: {', '.join(unknown)} not in partition {name} (its nodes: {', '.join(by_name)})"
            )
        pool = [by_name[n] for n in settings.nodelist]
        bad = [row for row in pool if not row.usable]
        if bad:
            raise SlurmUnusable(f"{source('nodelist')} names nodes Slurm cannot allocate: {describe_rows(bad)}")
        return _plan(settings, name, rows, pool, len(pool), tuple(settings.nodelist))
    pool = [row for row in rows if row.name not in settings.exclude]
    excluded = f"; excluded ({source('exclude')}): {', '.join(settings.exclude)}" if settings.exclude else ""
    if settings.nodes == "all":
        idle = [row for row in pool if row.idle]
        if not idle:
            raise SlurmUnusable(
                f"--nodes all ({source('nodes')}): no idle node in partition {name}: {describe_rows(pool)}{excluded}"
            )
        return _plan(settings, name, rows, idle, len(idle), tuple(row.name for row in idle))
    wanted = int(settings.nodes)
    usable = [row for row in pool if row.usable]
    if wanted > len(usable):
        unusable = [row for row in pool if not row.usable]
        raise SlurmUnusable(
            f"{wanted} node(s) wanted ({source('nodes')}) but partition {name} has {len(usable)} usable "
            f"({', '.join(row.name for row in usable) or 'none'}); not usable: {describe_rows(unusable)}{excluded}"
        )
    return _plan(settings, name, rows, usable, wanted, ())


def _plan(
    settings: Settings, name: str, rows: list[NodeRow], pool: list[NodeRow], count: int, nodelist: tuple[str, ...]
) -> Plan:
    if settings.gpus_per_node is not None:
        gpus = settings.gpus_per_node
    else:  # the smallest GPU count any candidate declares (0 = a CPU partition: no --gres)
        gpus = min((row.gpus for row in pool if row.gpus), default=0)
    return Plan(name, tuple(rows), tuple(row.name for row in pool), count, nodelist, gpus)
