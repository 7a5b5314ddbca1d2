"""Thin, typed wrappers over the Slurm commands the suite reads (scontrol, sinfo, squeue).

Each returns parsed values or raises ``SlurmError`` with the command and its stderr. Node states are
classified by table (after ReFrame's Slurm backend): a node is usable only when its base state is
idle, mixed or allocated and no flag (DRAIN, DOWN, NOT_RESPONDING, ...) says otherwise.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = [
    "NodeInfo",
    "SlurmError",
    "cluster_name",
    "expand_hostlist",
    "gres_gpus",
    "key_values",
    "node_info",
    "partition_info",
    "share_node_reads",
    "slurm_client_installed",
    "slurm_cmd",
    "state_is_usable",
]

USABLE_BASE_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED", "ALLOC", "MIX", "COMPLETING"})
UNUSABLE_FLAGS = frozenset(
    {
        "DOWN",
        "DRAIN",
        "DRAINED",
        "DRAINING",
        "FAIL",
        "FAILING",
        "NOT_RESPONDING",
        "NO_RESPOND",
        "POWERED_DOWN",
        "POWER_DOWN",
        "POWERING_DOWN",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "MAINTENANCE",
        "MAINT",
        "UNKNOWN",
        "FUTURE",
        "INVALID_REG",
        "INVAL",
    }
)


class SlurmError(RuntimeError):
    """A Slurm command failed or printed something unexpected."""


#: The client commands whose presence means "this machine is meant to use Slurm".
CLIENT_COMMANDS = ("srun", "sinfo")


def slurm_client_installed() -> list[str]:
    """Paths of the Slurm client commands on PATH; empty only when Slurm is not installed at all.

    ``--launcher auto`` falls back to the local launcher only then: a Slurm that is installed but
    failing (controller down, mistyped partition) must stop the run, not quietly test the login host.
    """
    return [path for path in (shutil.which(cmd) for cmd in CLIENT_COMMANDS) if path]


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


#: the Slurm commands run inside ``recording()`` (what ``Cluster.scheduler`` puts on the test's record)
_RAN: ContextVar[list[list[str]] | None] = ContextVar("gpuaccept_slurm_ran", default=None)


@contextmanager
def recording() -> Iterator[list[list[str]]]:
    """Collect the argv of every Slurm command run in the block."""
    ran: list[list[str]] = []
    token = _RAN.set(ran)
    try:
        yield ran
    finally:
        _RAN.reset(token)


def slurm_cmd(argv: list[str], timeout_s: float = 30.0) -> str:
    """Run one Slurm client command; its stdout, or ``SlurmError`` quoting what Slurm said."""
    ran = _RAN.get()
    if ran is not None:
        ran.append(list(argv))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]}: command not found") from None
    except subprocess.TimeoutExpired as exc:
        # a client that cannot find its configuration retries for a minute: quote what it said so far
        said = (_text(exc.stderr) or _text(exc.stdout)).strip()
        said = f": {said}" if said else ""
        raise SlurmError(f"{' '.join(argv)}: no answer within {timeout_s:g} s{said}") from None
    if done.returncode != 0:
        raise SlurmError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def expand_hostlist(hostlist: str) -> list[str]:
    """``node[1-3,5]`` -> ``[node1, node2, node3, node5]`` through ``scontrol show hostnames``."""
    if not hostlist.strip():
        return []
    return slurm_cmd(["scontrol", "show", "hostnames", hostlist]).split()


_GRES_GPU = re.compile(r"gpu(?::[A-Za-z0-9_.-]+)?:(\d+)")


def gres_gpus(gres: str) -> int:
    """GPUs in a gres string: ``gpu:8``, ``gpu:h200:8(S:0-1)``, ``gpu:a:4,gpu:b:4`` -> 8; ``(null)`` -> 0."""
    return sum(int(m.group(1)) for m in _GRES_GPU.finditer(gres or ""))


def state_is_usable(state: str) -> bool:
    """Whether a ``scontrol``/``sinfo`` state such as ``IDLE+DRAIN`` or ``mixed*`` can run work."""
    tokens = re.split(r"[+]", state.upper().rstrip("*~#!%$@^-"))
    if not tokens or tokens[0] not in USABLE_BASE_STATES:
        return False
    return not any(token in UNUSABLE_FLAGS for token in tokens[1:]) and not state.endswith("*")


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str
    gpus: int
    cpus: int
    reason: str
    partitions: tuple[str, ...]

    @property
    def usable(self) -> bool:
        return state_is_usable(self.state)


def key_values(text: str) -> dict[str, str]:
    """``Key=value Key2=a b`` (scontrol's output) -> dict; a value runs until the next ``Key=``."""
    out: dict[str, str] = {}
    for match in re.finditer(r"(\w+)=(.*?)(?=\s+\w+=|$)", text.replace("\n", " ")):
        out[match.group(1)] = match.group(2).strip()
    return out


class _SharedReads:
    """One ``scontrol -o show node`` for every case of a node-parametrized test function (see below)."""

    key: object = None
    fields: dict[str, dict[str, str]] | None = None


_shared = _SharedReads()


def share_node_reads(key: object) -> None:
    """While ``key`` (a test function) is set, ``node_info`` answers every node from one read of all
    nodes taken at its first call, as a fan-out step measures every node at once: N cases, one
    scontrol. ``None`` (between functions, at session end, for drains): every call asks Slurm."""
    if key != _shared.key:
        _shared.key, _shared.fields = key, None


def _shared_fields(node: str, timeout_s: float) -> dict[str, str] | None:
    if _shared.key is None:
        return None
    if _shared.fields is None:
        try:
            lines = slurm_cmd(["scontrol", "-o", "show", "node"], timeout_s).splitlines()
        except SlurmError:
            return None  # asked alone, the node's own error names it
        _shared.fields = {f["NodeName"]: f for f in map(key_values, lines) if "NodeName" in f}
    return _shared.fields.get(node)


def node_info(node: str, timeout_s: float = 30.0) -> NodeInfo:
    """``scontrol show node`` parsed: state, declared GPUs, CPUs, drain reason, partitions."""
    fields = _shared_fields(node, timeout_s) or key_values(slurm_cmd(["scontrol", "show", "node", node], timeout_s))
    if "NodeName" not in fields:
        raise SlurmError(f"scontrol show node {node}: no such node")
    return NodeInfo(
        name=fields["NodeName"],
        state=fields.get("State", "UNKNOWN"),
        gpus=gres_gpus(fields.get("Gres", "")),
        cpus=int(fields.get("CPUTot", "0") or 0),
        reason=fields.get("Reason", ""),
        partitions=tuple(p for p in fields.get("Partitions", "").split(",") if p),
    )


@dataclass(frozen=True)
class PartitionInfo:
    name: str
    available: str


def partition_info(partition: str | None) -> PartitionInfo:
    """The named partition (or the default one) and its availability."""
    argv = ["sinfo", "-h", "-N", "-o", "%P|%a"]
    if partition:
        argv += ["-p", partition]
    rows = [line.split("|") for line in slurm_cmd(argv).splitlines() if line.strip()]
    if not rows:
        raise SlurmError(f"sinfo: partition {partition or '(default)'} has no nodes or does not exist")
    if partition is None:
        defaults = [r for r in rows if r[0].endswith("*")]
        rows = defaults or rows
    name = rows[0][0].rstrip("*")
    return PartitionInfo(name, rows[0][1])


def cluster_name() -> str | None:
    """``ClusterName`` from the controller's configuration (what the customer calls the cluster); None
    when Slurm does not say."""
    try:
        out = slurm_cmd(["scontrol", "show", "config"], timeout_s=10)
    except SlurmError:
        return None
    match = re.search(r"^ClusterName\s*=\s*(\S+)", out, re.MULTILINE)
    return match.group(1) if match else None
