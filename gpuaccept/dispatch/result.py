"""What a probe step gives back, and the strict parsing of its framed result lines.

The parse is where "never pass on missing data" is enforced for every probe at once: a non-zero exit,
a signal, a malformed line, a result that arrived changed, a duplicated rank, or fewer ranks than
launched raises ``ProbeError`` naming the probe, the nodes and the reason (and the rank, when it is
known), with the tail of stderr for the operator.

The framing is ``gpuaccept.probes._protocol``'s (see its docstring). Each rank's result is either one line
``GPUACCEPT_RESULT <nbytes> <crc32> <json>`` or numbered parts ``GPUACCEPT_PART <rank> <i>/<n> <chunk>``
whose chunks, joined in order, are the base64 of ``<nbytes> <crc32> <json>``. The parse puts the parts
back together between other ranks' lines, decodes them, and takes the JSON only when its UTF-8 length
and CRC-32 are the ones the probe sent: what is judged is byte for byte what the probe wrote.

A launcher may put a label before the sentinel (srun's ``12: ``) and a ``\r`` after the line; the
line terminator is the only thing taken away, never content.

Still read, with nothing to verify: an unframed ``GPUACCEPT_RESULT {json}`` line and parts whose joined
text starts with ``{`` (the JSON itself). That was the format before framing: the recordings under
``fixtures/`` (``nccl/2xh200-precontract.nccl.out``, ``training/*.out``) are in it, and an operator may write such
a line by hand. A framed result can never be mistaken for one: its frame starts with a digit, its
base64 never holds a ``{``.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from gpuaccept.contracts.records import RankRecord
from gpuaccept.dispatch.exits import describe_exit
from gpuaccept.errors import ProbeError
from gpuaccept.probes._protocol import PART_SENTINEL, SENTINEL, STAGE_SENTINEL
from gpuaccept.probes.specs import ProbeSpec

__all__ = [
    "ProbeResult",
    "RankRecord",
    "check_step",
    "parse_records",
    "reported_ranks",
    "stage_records",
    "timeout_text",
]


@dataclass
class ProbeResult:
    """A finished step: the exact command, its output and the per-rank records."""

    probe: str
    command: list[str]
    nodes: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float
    records: list[RankRecord] = field(default_factory=list)
    #: the wall clock (epoch seconds) when the step ended or was stopped: what a rank's progress is read against
    ended_at: float = 0.0
    #: why the launcher stopped the step before its limit, from the ranks' progress ('' when it did not)
    stop_reason: str = ""

    def by_node(self) -> dict[str, list[RankRecord]]:
        grouped: dict[str, list[RankRecord]] = {}
        for record in self.records:
            grouped.setdefault(record.node, []).append(record)
        return grouped

    def one(self) -> RankRecord:
        if len(self.records) != 1:
            raise ProbeError(f"probe {self.probe}: expected one rank, got {len(self.records)}", nodes=self.nodes)
        return self.records[0]


def _tail(text: str, lines: int = 15) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return "\n    ".join(kept) if kept else "(empty)"


#: The words that mark result lines; whatever a launcher wrote before them (srun's label) is not read.
_RESULT = SENTINEL.strip()
_PART = PART_SENTINEL.strip()
#: What follows ``GPUACCEPT_PART``: the rank, ``i/n`` and the chunk, which is everything to the line's end.
#: Exactly as ``_protocol.result_lines`` writes it (one space, no leading zeros, few enough digits for
#: ``int``), so that a header changed on the way reads as changed rather than as another rank's part.
_PART_HEADER = re.compile(r" (0|[1-9]\d{0,8}) ([1-9]\d{0,8})/([1-9]\d{0,8}) (.*)", re.DOTALL | re.ASCII)
#: The frame before the JSON text: its UTF-8 length and CRC-32 (``_protocol.frame``), written one way only.
_FRAME = re.compile(r"(0|[1-9]\d{0,11}) ([0-9a-f]{8}) ", re.ASCII)


class _Changed(ValueError):
    """A framed result whose bytes are not the ones the probe sent; the message says how they differ."""


@dataclass(frozen=True)
class _Arrival:
    """One rank's result as it came out of stdout, before its JSON is read.

    ``text`` is the JSON text: verified against its frame, or unframed (nothing to verify). When
    ``changed`` says why it cannot be trusted, ``text`` is only a best guess, read for nothing but naming
    the rank and node in the error."""

    label: str  # how errors name it when no rank is known: "line 4", "the parts of rank 3"
    rank: int | None  # from the parts' headers; a single line names its rank only inside the JSON
    text: str
    changed: str | None = None  # framed, and not as sent
    problem: str | None = None  # the parts themselves are wrong (missing, repeated): no text at all
    malformed: str | None = None  # a line that is no result at all: neither framed nor JSON


def _lines(stdout: str) -> list[str]:
    """The output's lines without their terminator (``\n``, and the ``\r`` a pty or srun adds), nothing else.

    Not ``str.strip`` or ``splitlines``: whitespace inside a result is content, and a part that ended in
    a space lost it that way (a false ``versions_consistent`` failure in CI, 2026-11)."""
    return [line.rstrip("\r") for line in stdout.split("\n")]


def _first_token(line: str) -> str | None:
    """Which sentinel starts the line's result, if any: the earlier of the two, so that a result whose
    JSON happens to contain the other word is still read as what it is."""
    found = [(line.find(token), token) for token in (_RESULT, _PART) if token in line]
    return min(found)[1] if found else None


def _unframe(framed: str) -> str:
    """The JSON text of ``<nbytes> <crc32> <json>``, or ``_Changed`` saying how it differs from what was sent."""
    match = _FRAME.match(framed)
    if match is None:
        raise _Changed(f"no frame (<bytes> <crc32>) before the JSON: {framed[:60]!r}")
    declared, sent = int(match[1]), match[2]
    text = framed[match.end() :]
    try:
        raw = text.encode("utf-8", "surrogateescape")  # bytes stdout's decoding could not read: as they came
    except UnicodeEncodeError as exc:
        raise _Changed(f"not UTF-8 text ({exc.reason} at character {exc.start})") from None
    got = f"{zlib.crc32(raw):08x}"
    if len(raw) != declared or got != sent:
        raise _Changed(f"{len(raw)} of {declared} bytes, checksum {got} instead of {sent}")
    return text


def _unframe_parts(joined: str) -> str:
    """The JSON text of a result sent in parts: base64, then the frame, both checked.

    The base64 must be exactly what ``b64encode`` gives for the bytes it decodes to: a lenient decoder
    ignores the spare bits of the last character and anything after padding, which would let a change
    pass unseen."""
    try:
        raw = base64.b64decode(joined, validate=True)
    except ValueError as exc:  # binascii.Error, or characters that are not ASCII
        raise _Changed(f"its parts are not base64 ({exc})") from None
    if base64.b64encode(raw).decode("ascii") != joined:
        raise _Changed("its parts are not the base64 that was sent")
    try:
        framed = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Changed(f"not UTF-8 once decoded ({exc.reason} at byte {exc.start})") from None
    return _unframe(framed)


def _single(number: int, rest: str) -> _Arrival:
    """A result on one line; ``rest`` is what follows the sentinel word."""
    label = f"line {number}"
    if rest.lstrip(" \t").startswith("{"):  # unframed: recorded before framing, or written by hand
        return _Arrival(label, None, rest)
    payload = rest.removeprefix(" ")
    match = _FRAME.match(payload) if rest.startswith(" ") else None
    if match is None:
        return _Arrival(label, None, payload, malformed="neither framed (<bytes> <crc32> <json>) nor JSON")
    try:
        return _Arrival(label, None, _unframe(payload))
    except _Changed as exc:
        return _Arrival(label, None, payload[match.end() :], changed=str(exc))


def _joined(rank: int, pieces: list[tuple[int, int, str]]) -> _Arrival:
    """One rank's parts (``(i, n, chunk)`` in the order they came) put back together."""
    label = f"the parts of rank {rank}"
    totals = sorted({total for _, total, _ in pieces})
    numbers = sorted(index for index, _, _ in pieces)
    if len(totals) != 1:
        return _Arrival(label, rank, "", problem=f"sent parts {numbers} counted of {totals}")
    if numbers != list(range(1, totals[0] + 1)):
        repeated = sorted({n for n in numbers if numbers.count(n) > 1})
        said = f" ({', '.join(map(str, repeated))} more than once)" if repeated else ""
        return _Arrival(label, rank, "", problem=f"sent parts {numbers} of {totals[0]}{said}")
    joined = "".join(chunk for _, _, chunk in sorted(pieces))
    if joined.startswith("{"):  # unframed parts, the JSON itself: recorded before framing
        return _Arrival(label, rank, joined)
    try:
        return _Arrival(label, rank, _unframe_parts(joined))
    except _Changed as exc:
        return _Arrival(label, rank, _best_guess(joined), changed=str(exc))


def _best_guess(joined: str) -> str:
    """The JSON text a changed result in parts may still hold, to name its node; '' when there is none."""
    try:
        framed = base64.b64decode(joined + "=" * (-len(joined) % 4)).decode("utf-8", "replace")
    except ValueError:
        return ""
    match = _FRAME.match(framed)
    return framed[match.end() :] if match else framed


def _arrivals(stdout: str) -> tuple[list[_Arrival], str | None]:
    """Every result in the output in the order it came (results in parts after the single lines), and
    the first part line that cannot be read at all (then no rank can be trusted to be whole)."""
    singles: list[_Arrival] = []
    parts: dict[int, list[tuple[int, int, str]]] = {}
    bad_part: str | None = None
    for number, line in enumerate(_lines(stdout), 1):
        token = _first_token(line)
        if token == _RESULT:
            singles.append(_single(number, line.split(_RESULT, 1)[1]))
        elif token == _PART:
            match = _PART_HEADER.fullmatch(line.split(_PART, 1)[1])
            if match is None or not 1 <= int(match[2]) <= int(match[3]):
                bad_part = bad_part or line
                continue
            parts.setdefault(int(match[1]), []).append((int(match[2]), int(match[3]), match[4]))
    return singles + [_joined(rank, pieces) for rank, pieces in sorted(parts.items())], bad_part


def _claims(text: str) -> tuple[int | None, str | None]:
    """The rank and node a result's JSON says it comes from, as far as it can be read."""
    try:
        raw = json.loads(text)
    except ValueError:
        return None, None
    if not isinstance(raw, dict):
        return None, None
    rank, node = raw.get("rank"), raw.get("node")
    return (
        rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
        node if isinstance(node, str) else None,
    )


def _who(arrival: _Arrival, expected_ranks: int, nodes: tuple[str, ...]) -> str:
    """How an error names a result: its rank and, when the step spans several nodes, the rank's node.

    The rank is the parts' header's, else the one the JSON names if it can still be read. The node is
    the one srun's block layout puts the rank on (ranks ``k*t .. k*t+t-1`` on the k-th node, as the
    dispatcher launches them), else the JSON's if it is one of the step's: a changed result may have
    its change in the node's name."""
    claimed_rank, claimed_node = _claims(arrival.text) if arrival.text else (None, None)
    rank = arrival.rank if arrival.rank is not None else claimed_rank
    if rank is None:
        return arrival.label
    node = claimed_node if claimed_node in nodes else None
    if nodes and expected_ranks % len(nodes) == 0 and 0 <= rank < expected_ranks:
        node = nodes[rank // (expected_ranks // len(nodes))]
    return f"rank {rank} on {node}" if node and len(nodes) > 1 else f"rank {rank}"


def _record(arrival: _Arrival) -> RankRecord:
    """The record in a result's JSON; ``ValueError``, ``KeyError`` or ``TypeError`` when it is not one."""
    raw = json.loads(arrival.text)
    return RankRecord(
        node=str(raw["node"]),
        rank=int(raw["rank"]),
        world_size=int(raw["world_size"]),
        local_rank=int(raw.get("local_rank", 0)),
        gpu=raw.get("gpu"),
        data=dict(raw["data"]),
        test_hooks={str(k): str(v) for k, v in (raw.get("test_hooks") or {}).items()},
        ran_in=raw.get("ran_in") if isinstance(raw.get("ran_in"), dict) else None,
    )


def parse_records(probe: str, stdout: str, expected_ranks: int, nodes: tuple[str, ...]) -> list[RankRecord]:
    """Every rank's record, or ``ProbeError`` saying which line or rank is wrong.

    A result that arrived changed is an error, never a figure: its JSON may still read, with a
    different number in it."""
    records: dict[int, RankRecord] = {}
    where = ", ".join(nodes)
    arrivals, bad_part = _arrivals(stdout)
    if bad_part is not None:
        raise ProbeError(f"probe {probe} on {where}: malformed result part: {bad_part[:200]!r}", nodes=nodes)
    for arrival in arrivals:
        who = _who(arrival, expected_ranks, nodes)
        if arrival.problem is not None:
            raise ProbeError(f"probe {probe} on {where}: {who} {arrival.problem}", nodes=nodes)
        if arrival.malformed is not None:
            raise ProbeError(
                f"probe {probe} on {where}: malformed result {arrival.label}: {arrival.malformed}: "
                f"{arrival.text[:200]!r}",
                nodes=nodes,
            )
        if arrival.changed is not None:
            raise ProbeError(f"probe {probe} on {where}: {who}: result arrived changed: {arrival.changed}", nodes=nodes)
        try:
            record = _record(arrival)
        except (ValueError, KeyError, TypeError) as exc:
            named = arrival.label if arrival.rank is None else f"of {who}"
            raise ProbeError(
                f"probe {probe} on {where}: malformed result {named}: {exc}: {arrival.text[:200]!r}", nodes=nodes
            ) from None
        if arrival.rank is not None and record.rank != arrival.rank:
            raise ProbeError(
                f"probe {probe} on {where}: the parts of rank {arrival.rank} hold rank {record.rank}'s result",
                nodes=nodes,
            )
        if record.rank in records:
            raise ProbeError(f"probe {probe} on {where}: rank {record.rank} reported twice", nodes=nodes)
        records[record.rank] = record
    if len(records) != expected_ranks:
        missing = sorted(set(range(expected_ranks)) - set(records))
        raise ProbeError(
            f"probe {probe} on {where}: {len(records)} of {expected_ranks} ranks reported"
            + (f" (missing ranks {missing})" if missing else ""),
            nodes=nodes,
        )
    return [records[rank] for rank in sorted(records)]


def reported_ranks(stdout: str) -> set[int]:
    """Ranks whose result has come out whole so far (for naming the ones a hang left behind).

    Works on partial output: a rank counts once all its parts are there (even if they then fail their
    check: it finished, and ``parse_records`` names the change), or once its line's JSON names it. A rank
    halfway through its parts, or a line too broken to say whose it is, counts as not finished."""
    ranks: set[int] = set()
    for arrival in _arrivals(stdout)[0]:
        if arrival.problem is not None:
            continue
        rank = arrival.rank if arrival.rank is not None else _claims(arrival.text)[0]
        if rank is not None:
            ranks.add(rank)
    return ranks


def check_step(result: ProbeResult, expected_ranks: int) -> ProbeResult:
    """Turn a finished step into records, or raise naming what went wrong where."""
    where = ", ".join(result.nodes)
    if result.returncode != 0:
        error = ProbeError(
            f"probe {result.probe} on {where}: {describe_exit(result.returncode, result.stderr)}\n"
            f"  stderr:\n    {_tail(result.stderr)}",
            nodes=result.nodes,
        )
        error.result = result  # type: ignore[attr-defined]  # the report attaches the full output
        raise error
    result.records = parse_records(result.probe, result.stdout, expected_ranks, result.nodes)
    return result


def timeout_text(result: ProbeResult, where: str, limit_s: float) -> str:
    """How a step that did not finish ended: stopped early because the ranks' progress proved it could not
    pass in time (the reason names the ranks), or cancelled at its limit."""
    if result.stop_reason:
        return (
            f"probe {result.probe} on {where}: stopped after {result.duration_s:.0f} s of its {limit_s:g} s limit: "
            f"{result.stop_reason}"
        )
    return f"probe {result.probe} on {where}: no result within {limit_s:g} s"


def stage_records(spec: ProbeSpec[Any], stdout: str, stage: str) -> list[RankRecord]:
    """The records of the ranks that sent ``stage``'s result (``_protocol.emit(stage=...)``), verified as any
    result is and typed by the spec (``validate_stage``). A rank whose parts stop half-way did not finish the
    stage and is left out; a result changed, malformed or not of the stage's type is an error naming the rank."""
    probe, marker = spec.name, STAGE_SENTINEL.strip()
    lines = []
    for line in (line for line in _lines(stdout) if marker in line):
        named, kind, rest = [*line.split(marker, 1)[1].lstrip(" ").split(" ", 2), "", ""][:3]
        if named == stage and kind in ("R", "P"):
            lines.append((SENTINEL if kind == "R" else PART_SENTINEL) + rest)
    records: dict[int, RankRecord] = {}
    for arrival in _arrivals("\n".join(lines))[0]:
        if arrival.problem is not None:
            continue
        who = arrival.label if arrival.rank is None else f"rank {arrival.rank}"
        if arrival.changed is not None or arrival.malformed is not None:
            raise ProbeError(
                f"probe {probe}: {stage} result of {who} arrived changed: {arrival.changed or arrival.malformed}"
            )
        try:
            record = _record(arrival)
        except (ValueError, KeyError, TypeError) as exc:
            raise ProbeError(f"probe {probe}: malformed {stage} result of {who}: {exc}") from None
        records[record.rank] = spec.validate_stage(record, stage)
    return [records[rank] for rank in sorted(records)]
