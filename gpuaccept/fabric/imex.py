"""``nvidia-imex-ctl -N``'s text as members, a connectivity table and a domain state.

The layout (NVIDIA IMEX guide, "IMEX Service Command Service"; published outputs under ``fixtures/imex/``)::

    Connectivity Table Legend:
    ...
    Nodes:
    Node #0   - 10.136.206.47   - READY
    Node #1   - 10.136.206.48   - READY

     Nodes From\\To  0  1
           0        C  C
           1        C  C
    Domain State: UP

A member's line may carry ``- Version: <v>`` (newer releases) and, with ``-H``, the member's host name
(``nvidia-imex-ctl`` puts the IP in ``host`` and the name in ``hostName``, NVIDIA ai-cloud-validation PR #621):
any field that is neither an IP, a state word nor ``Version:`` is taken as the host name. Text that holds no
``Nodes:`` table is not an answer: ``parse_imex_ctl`` raises ``ValueError`` quoting it, never "no members".
"""

from __future__ import annotations

import ipaddress
import re

from gpuaccept.contracts.imex import ImexAnswer, ImexMember

__all__ = ["CONNECTED", "parse_imex_ctl"]

#: the connectivity code of a pair ready for operation
CONNECTED = "C"
_MEMBER = re.compile(r"^Node\s+#(\d+)\s+-\s+(.*)$")
_STATE = re.compile(r"^[A-Z][A-Z_]+$")
_ROW = re.compile(r"^\s*(\d+)\s+(\S.*)$")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _member(index: int, rest: str, line: str) -> ImexMember:
    ip = host = state = version = None
    for field in (f.strip() for f in re.split(r"\s+-\s+", rest.strip())):
        if not field:
            continue
        if field.startswith("Version:"):
            version = field.removeprefix("Version:").strip() or None
        elif ip is None and _is_ip(field):
            ip = field
        elif _STATE.match(field):
            state = field
        elif host is None:
            host = field
    if ip is None or state is None:
        raise ValueError(f"nvidia-imex-ctl -N: a member line without an IP and a state: {line.strip()!r}")
    return ImexMember(index=index, ip=ip, host_name=host, state=state, version=version)


def parse_imex_ctl(text: str, argv: list[str]) -> ImexAnswer:
    """The domain ``text`` shows; ``argv``: the command that printed it (kept on the payload)."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Nodes:")
    except StopIteration:
        head = " | ".join(line.strip() for line in lines if line.strip())[:300]
        raise ValueError(f"nvidia-imex-ctl -N printed no 'Nodes:' table: {head or '(nothing)'}") from None
    members: list[ImexMember] = []
    rows: dict[int, list[str]] = {}
    columns: list[int] | None = None
    state: str | None = None
    for line in lines[start + 1 :]:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("Domain State:"):
            state = stripped.removeprefix("Domain State:").strip() or None
            break
        found = _MEMBER.match(stripped)
        if found:
            members.append(_member(int(found.group(1)), found.group(2), line))
            continue
        if stripped.startswith("Nodes From"):
            columns = [int(c) for c in stripped.split()[2:] if c.isdigit()]
            continue
        row = _ROW.match(line)
        if columns is not None and row:
            cells = row.group(2).split()
            if len(cells) != len(columns):
                raise ValueError(f"nvidia-imex-ctl -N: row {row.group(1)} has {len(cells)} cells for {len(columns)}")
            rows[int(row.group(1))] = cells
    order = sorted(m.index for m in members)
    if columns is not None and sorted(rows) != order:
        raise ValueError(f"nvidia-imex-ctl -N: connectivity rows {sorted(rows)} for members {order}")
    connectivity = [rows[i] for i in order] if columns is not None else []
    return ImexAnswer(
        outcome="answered",
        members=sorted(members, key=lambda m: m.index),
        connectivity=connectivity,
        domain_state=state,
        argv=argv,
    )
