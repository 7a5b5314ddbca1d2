"""IMEX per job (issue 56, item 5; SDN17, SDN21): on every allocated node of a block, the daemon answers, every
member is READY, every pair Connected (``C``), ``Domain State: UP``, the members are the nodes they should be, and
the step's channel exists and opens.

The IMEX domain is the boundary of GPU memory import across nodes, so its members are judged against Slurm's
nodes: matched by host name (``-H``: the name in ``hostName``, the IP in ``host``, ai-cloud-validation PR #621)
and else by IP, they must equal the block's allocated nodes (``domain.imex_domain: job``: IMEX started per job)
or the whole block (``block``: IMEX spanning the rack). A member outside that set is a tenancy finding
(``imex_extra_member``): another job's node could import this job's exported memory. Fewer than 2 members fails
(a domain of one node proves no cross-node import); one allocated node in a block is not applicable
(``imex_absent``).

The channel: ``present`` (exactly one character device the step sees) is judged everywhere; ``opens`` is judged
where an IMEX driver holds the ``nvidia-caps-imex-channels`` major in ``/proc/devices``. Where none does (the dev
cluster, whose Slurm was given a free major), open() fails ENXIO: that proves Slurm made the step's channel file,
not that a driver would grant it, so the open check is unreadable there (ERROR, never PASS).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuaccept.contracts.imex import ImexAnswer, ImexMember, ImexRecord
from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.fabric.imex import CONNECTED

__all__ = ["IMEX_METRICS", "imex_absent", "judge_imex_channel", "judge_imex_domain"]

IMEX_METRICS = (
    "imex_daemon",
    "imex_members_ready",
    "imex_connectivity",
    "imex_domain_state",
    "imex_members",
    "imex_extra_member",
    "imex_channel",
    "imex_channel_open",
)
READY = "READY"
UP = "UP"


def imex_absent(block: str, allocated: Sequence[str]) -> str | None:
    """Why IMEX is not judged for ``block``: one allocated node there (IMEX across nodes needs two)."""
    if len(allocated) >= 2:
        return None
    return f"not applicable: {len(allocated)} allocated node in block {block} ({', '.join(allocated)}): IMEX needs two"


def _matches(member: ImexMember, records: Mapping[str, ImexRecord]) -> str | None:
    """The Slurm node a member is: by host name (a node's Slurm name, host name or its short form), else by an IP
    that exactly one measured node holds."""
    if member.host_name:
        name = member.host_name.split(".")[0]
        for node, record in records.items():
            if name in {node, record.hostname, record.hostname.split(".")[0]}:
                return node
    holders = [node for node, record in records.items() if member.ip in record.addresses]
    return holders[0] if len(holders) == 1 else None


def _spell(member: ImexMember) -> str:
    return member.ip + (f" ({member.host_name})" if member.host_name else "")


def judge_imex_domain(
    records: Mapping[str, ImexRecord],
    expected: Sequence[str],
    scope: str,
    judge: JudgeLike,
    *,
    block: str,
) -> None:
    """Each node's view of the IMEX domain. ``records``: the block's allocated nodes' readings; ``expected``: the
    nodes the domain must hold (allocated or the whole block, per ``scope``)."""
    want = sorted(expected)
    expected_text = f"{scope}: {', '.join(want)}"
    for node, record in sorted(records.items()):
        extra = {"block": block, "settle_s": record.settle_s, "scope": scope}
        status = record.status
        if status.outcome == "tool_missing":
            judge.tool_missing("imex_daemon", status.tool, node=node, detail="the IMEX package is not installed")
            continue
        if status.outcome == "no_answer":
            judge.expect(
                "imex_daemon", f"no answer: {status.why}", "answering", node=node, output=status.output, **extra
            )
            continue
        judge.expect("imex_daemon", "answering", "answering", node=node, argv=status.argv, **extra)
        _judge_answer(status, node, records, want, expected_text, judge, extra)


def _judge_answer(
    answer: ImexAnswer,
    node: str,
    records: Mapping[str, ImexRecord],
    want: list[str],
    expected_text: str,
    judge: JudgeLike,
    extra: dict[str, object],
) -> None:
    members = answer.members
    not_ready = [f"{_spell(m)} {m.state}" for m in members if m.state != READY]
    judge.expect(
        "imex_members_ready",
        "; ".join(not_ready) or "all READY",
        "all READY",
        node=_blame(node, members, records),
        **extra,
    )
    bad = [
        f"{_spell(members[i])} -> {_spell(members[j])}: {code}"
        for i, row in enumerate(answer.connectivity)
        for j, code in enumerate(row)
        if code != CONNECTED
    ]
    if not answer.connectivity:
        bad = ["no connectivity table"]
    judge.expect("imex_connectivity", "; ".join(bad) or "all C", "all C", node=node, **extra)
    judge.expect("imex_domain_state", answer.domain_state or "no Domain State line", UP, node=node, **extra)
    matched = {m.index: _matches(m, records) for m in members}
    found = sorted({n for n in matched.values() if n is not None and n in want})
    strangers = [_spell(m) for m in members if matched[m.index] is None or matched[m.index] not in want]
    problems = []
    missing = sorted(set(want) - set(found))
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if len(members) < 2:
        problems.append(f"fewer than 2 members ({len(members)})")
    observed = "; ".join(problems) if problems else expected_text
    judge.expect("imex_members", observed, expected_text, node=node, members=[_spell(m) for m in members], **extra)
    judge.expect("imex_extra_member", ", ".join(strangers) or "none", "none", node=node, **extra)


def _blame(node: str, members: Sequence[ImexMember], records: Mapping[str, ImexRecord]) -> str:
    """The node a not-READY finding names: the first such member's Slurm node where it is one, else the reader."""
    for member in members:
        if member.state != READY:
            return _matches(member, records) or node
    return node


def judge_imex_channel(records: Mapping[str, ImexRecord], judge: JudgeLike) -> None:
    """Each node's step sees one IMEX channel, a character device, which opens where an IMEX driver exists."""
    for node, record in sorted(records.items()):
        channel = record.channel
        extra = {"folder": channel.folder, "channels": channel.names, "driver_major": record.driver_major}
        if not channel.names:
            judge.expect("imex_channel", "missing", "present", node=node, errors=record.errors, **extra)
            continue
        if len(channel.names) != 1:
            shape = f"{len(channel.names)} channels: {', '.join(channel.names)}"
        elif not channel.is_char_device:
            shape = "not a character device"
        elif record.driver_major is not None and channel.major != record.driver_major:
            shape = f"major {channel.major}, not the IMEX driver's {record.driver_major}"
        else:
            shape = "present"
        judge.expect("imex_channel", shape, "present", node=node, major=channel.major, minor=channel.minor, **extra)
        if channel.opened:
            judge.expect("imex_channel_open", "opens", "opens", node=node, **extra)
        elif record.driver_major is None and channel.open_error == "ENXIO":
            judge.unreadable(
                "imex_channel_open",
                f"{channel.names[0]} exists (major {channel.major}) but open() gave ENXIO and /proc/devices lists no "
                "nvidia-caps-imex-channels driver: no IMEX driver on this node, so Slurm's channel file is all "
                "there is to see",
                node=node,
                **extra,
            )
        else:
            judge.expect("imex_channel_open", f"open failed: {channel.open_error}", "opens", node=node, **extra)
