"""A probe's result comes back byte for byte as the probe wrote it, however it was cut; one that arrived
changed is a ``ProbeError`` naming the rank, never a figure.

The cases are the ones that broke the transit or could: a space at every cut position (a part that ended
in a space lost it: a false ``versions_consistent`` failure in CI, "Debian GNU/Linux 12(bookworm)"), tabs
and multi-byte text, srun's label prefix and a pty's ``\\r``, other ranks' lines between the parts; and
every way a line can arrive changed: a character flipped or dropped, a line cut in two, a part lost or
repeated. Nothing here needs a cluster: ``emit`` prints to captured stdout under a faked launcher.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuaccept.dispatch import result
from gpuaccept.dispatch.result import parse_records, reported_ranks
from gpuaccept.errors import ProbeError
from gpuaccept.probes import _protocol, specs
from gpuaccept.probes._protocol import PART_BYTES, PART_CHUNK, PART_SENTINEL, SENTINEL, emit, result_lines
from gpuaccept.probes.specs import PayloadError

#: What a launcher may have set in the environment the selftests run in; each test sets its own.
LAUNCH_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "MASTER_PORT",
    "GPUACCEPT_NODE",
)
NODES = ("node1", "node2")  # ranks 0, 1 on node1 and 2, 3 on node2 (srun's block layout)
#: Text of every kind a result can hold: what broke (a space between words, the CI's OS name), tabs,
#: two- to four-byte characters, characters JSON must escape, the sentinels themselves.
TEXTS = [
    "Debian GNU/Linux 12 (bookworm)",
    "ends in spaces   ",
    "   starts in spaces",
    "tab\there\t",
    "é à ü",
    "中文 节点 ",
    "emoji 😀 🚀 ",
    'quote " backslash \\ slash /',
    "cr\r lf\n nul\x00 bell\x07 del\x7f",
    "line sep\u2028 para sep\u2029 nel\x85",
    f"{SENTINEL}1 00000000 {{}}",
    f"{PART_SENTINEL}0 1/2 eyJ9",
    "",
]


@pytest.fixture(autouse=True)
def launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """No launcher's variables but ours; a fixed ``ran_in`` so that lengths do not depend on the host."""
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURMD_NODENAME", "node2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # no name lookup
    monkeypatch.setattr(
        _protocol, "ran_in", lambda: {"image": "Debian GNU/Linux 12 (bookworm)", "runtime": "", "python": "3.11"}
    )


@pytest.fixture()
def emitted(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., list[str]]:
    """``emitted(data, rank=, world=)``: the lines ``emit`` prints for that rank, without their newline."""

    def run(data: dict[str, Any], rank: int = 0, world: int = 1) -> list[str]:
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", str(world))
        emit(data, probe="transit")
        out = capsys.readouterr().out
        assert out.endswith("\n")
        lines = out[:-1].split("\n")
        assert all(len(line.encode()) < PART_BYTES for line in lines)
        return lines

    return run


def back(lines: list[str], world: int = 1, nodes: tuple[str, ...] = ("node2",)) -> dict[int, dict[str, Any]]:
    """Each rank's data as the dispatcher reads it from these output lines."""
    return {record.rank: record.data for record in parse_records("transit", "\n".join(lines) + "\n", world, nodes)}


def test_the_line_that_failed_in_ci_comes_back(emitted):
    data = {"x": "a" * 783 + " " + "b" * 1600}
    assert back(emitted(data)) == {0: data}


def test_a_space_at_every_cut_position_comes_back(emitted):
    """Whichever byte of the text a part boundary falls on, a space there survives: the old cut (every
    800 characters of JSON) and the new one (every ``PART_CHUNK`` characters of base64) both fall in."""
    at_edge = set()
    edge = PART_CHUNK * 3 // 4  # the framed bytes part 1 carries
    for k in range(500, 900):
        data = {"x": "a" * k + " " + "b" * 1600}
        lines = emitted(data)
        assert all(line.startswith(PART_SENTINEL) for line in lines)
        assert back(lines) == {0: data}, k
        framed = base64.b64decode("".join(line.split(" ", 3)[3] for line in lines))
        at_edge.add(framed.index(b"a b") + 1 - edge)
    assert {-1, 0} <= at_edge  # the space ended part 1, and began part 2


def test_every_length_across_the_one_line_limit_comes_back(emitted):
    """From results that fit one line to ones that need parts, ending in spaces, tabs or not."""
    kinds = set()
    for k in range(0, 1000, 3):
        for data in ({"x": "x" * k + " "}, {"x": " " * k}, {"x": "\t" + "y" * k, "v": k}):
            lines = emitted(data)
            kinds.add(len(lines) > 1)
            assert back(lines) == {0: data}, (k, data)
    assert kinds == {False, True}


@pytest.mark.parametrize("repeat", [1, 40, 400], ids=["short", "long", "longer"])
@pytest.mark.parametrize("text", TEXTS)
def test_text_of_every_kind_comes_back(emitted, text, repeat):
    data = {"text": text * repeat, text: [text, 1.5e-300, 2**70, None, True], "nested": {"t": text}}
    assert back(emitted(data)) == {0: data}


@pytest.mark.parametrize("text", [*TEXTS, "x" * 5000, "a" * 783 + " " + "b" * 1600])
def test_the_transit_keeps_every_byte(text):
    """Below the JSON: the text the frame carries is exactly the text sent, whatever it holds."""
    if "\n" in text or "\r" in text:  # a JSON text has neither: json escapes them
        text = text.replace("\n", "\\n").replace("\r", "\\r")
    (arrival,) = result._arrivals("\n".join(result_lines(text, 5)))[0]
    assert arrival.text == text and arrival.changed is None


def _labelled(lines: list[str], label: str, ending: str) -> str:
    return "".join(f"{label}{line}{ending}" for line in lines)


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
@pytest.mark.parametrize("label", ["", "12: ", "  3: "])
def test_srun_labels_carriage_returns_and_other_ranks_between_parts(emitted, label, ending):
    long = {"os": "Debian GNU/Linux 12 (bookworm) " * 60, "gpu": "H100 80GB HBM3 "}
    short = {"os": "Debian GNU/Linux 12 (bookworm) "}
    rank3 = emitted(long, rank=3, world=4)
    rank1 = emitted(long, rank=1, world=4)
    others = emitted(short, rank=0, world=4) + emitted(short, rank=2, world=4)
    assert len(rank3) > 2 and len(rank1) > 2
    mixed: list[str] = []
    for i in range(max(len(rank3), len(rank1))):  # srun writes whole lines, any rank's between another's
        mixed += [*rank3[i : i + 1], "srun: warning: noise", "   ", *rank1[i : i + 1], *others[i : i + 1]]
    out = _labelled(mixed, label, ending)
    records = parse_records("transit", out, 4, NODES)
    assert [r.data for r in records] == [short, long, short, long]
    assert reported_ranks(out) == {0, 1, 2, 3}


def test_parts_are_put_back_in_order(emitted):
    data = {"x": " ".join(str(i) for i in range(2000))}
    lines = emitted(data)
    random.Random(7).shuffle(lines)
    assert back(lines) == {0: data}


def test_a_transport_that_trims_every_line_changes_nothing(emitted):
    """What the old parser did to every part (``strip``), done to every line: base64 has no edge to lose."""
    data = {"x": ("a " * 50 + "\t") * 40}
    assert back([line.strip() for line in emitted(data)]) == {0: data}


# What arrives changed ---------------------------------------------------------------------------------------

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _step(emitted, data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Rank 3's lines (on node2, of 4 ranks on NODES) and the other ranks' good lines."""
    others = [line for rank in range(3) for line in emitted({"ok": rank}, rank=rank, world=4)]
    return emitted(data, rank=3, world=4), others


def _refused(lines: list[str]) -> str:
    with pytest.raises(ProbeError) as info:
        parse_records("transit", "\n".join(lines), 4, NODES)
    assert info.value.nodes == NODES
    return str(info.value)


def _chunk_start(line: str) -> int:
    """Where a part's base64 chunk starts."""
    return line.index(" ", line.index("/")) + 1


LONG = {"os": "Debian GNU/Linux 12 (bookworm)", "blob": "a" * 783 + " " + "b" * 1600}


def test_every_flipped_character_of_the_parts_is_an_error(emitted):
    rank3, others = _step(emitted, LONG)
    for number, line in enumerate(rank3):
        for at in range(_chunk_start(line), len(line)):
            new = B64[(B64.index(line[at]) + 1) % 64] if line[at] in B64 else "A"  # "=": padding
            changed = [*rank3[:number], line[:at] + new + line[at + 1 :], *rank3[number + 1 :]]
            message = _refused(others + changed)
            assert "probe transit on node1, node2: rank 3 on node2: result arrived changed: " in message, message


@pytest.mark.parametrize("new", ["!", " ", "é", "=", "\t"])
def test_a_character_that_is_not_base64_is_an_error(emitted, new):
    rank3, others = _step(emitted, LONG)
    for at in (_chunk_start(rank3[0]), len(rank3[0]) // 2, len(rank3[0]) - 1):
        changed = [rank3[0][:at] + new + rank3[0][at + 1 :], *rank3[1:]]
        assert "rank 3 on node2: result arrived changed" in _refused(others + changed)


def test_every_dropped_character_of_the_parts_is_an_error(emitted):
    rank3, others = _step(emitted, LONG)
    for number, line in enumerate(rank3):
        for at in range(_chunk_start(line), len(line)):
            changed = [*rank3[:number], line[:at] + line[at + 1 :], *rank3[number + 1 :]]
            assert "rank 3 on node2: result arrived changed" in _refused(others + changed)


def test_a_part_cut_in_two_is_an_error(emitted):
    rank3, others = _step(emitted, LONG)
    for at in range(_chunk_start(rank3[1]) + 1, len(rank3[1]), 37):
        cut = [rank3[0], rank3[1][:at], rank3[1][at:], *rank3[2:]]
        assert "rank 3 on node2: result arrived changed" in _refused(others + cut)


def test_a_dropped_or_repeated_part_is_an_error(emitted):
    rank3, others = _step(emitted, LONG)
    total = len(rank3)
    for i in range(total):
        message = _refused(others + rank3[:i] + rank3[i + 1 :])
        assert f"rank 3 on node2 sent parts {[n for n in range(1, total + 1) if n != i + 1]} of {total}" in message
        message = _refused(others + rank3[: i + 1] + rank3[i:])
        assert "rank 3 on node2 sent parts" in message and f"({i + 1} more than once)" in message


def test_two_results_in_parts_from_one_rank_are_an_error(emitted):
    rank3, others = _step(emitted, LONG)
    again = emitted({**LONG, "blob": LONG["blob"] * 2}, rank=3, world=4)
    assert "rank 3 on node2 sent parts" in _refused(others + rank3 + again)


def test_parts_that_name_another_rank_than_their_json_are_an_error(emitted):
    rank3, others = _step(emitted, LONG)
    relabelled = [line.replace(f"{PART_SENTINEL}3 ", f"{PART_SENTINEL}9 ") for line in rank3]
    assert "the parts of rank 9 hold rank 3's result" in _refused(others + relabelled)


def test_every_changed_character_of_a_line_is_an_error(emitted):
    """One line: a flipped or dropped character anywhere after the sentinel, or the line cut short."""
    (line,) = emitted({"os": "Debian GNU/Linux 12 (bookworm)"}, rank=3, world=4)
    others = [line for rank in range(3) for line in emitted({"ok": rank}, rank=rank, world=4)]
    for at in range(len(SENTINEL), len(line)):
        flipped = line[:at] + ("x" if line[at] != "x" else "y") + line[at + 1 :]
        for changed in (flipped, line[:at] + line[at + 1 :], line[:at]):
            message = _refused([*others, changed])
            assert "rank 3" in message or "line 4" in message, message


def test_a_changed_line_says_how_it_changed(emitted):
    (line,) = emitted({"os": "Debian GNU/Linux 12 (bookworm)"}, rank=3, world=4)
    others = [line for rank in range(3) for line in emitted({"ok": rank}, rank=rank, world=4)]
    size = int(line.split(" ")[1])
    dropped = line.replace("12 (bookworm)", "12(bookworm)", 1)
    message = _refused([*others, dropped])
    assert f"rank 3 on node2: result arrived changed: {size - 1} of {size} bytes, checksum " in message


def test_a_line_that_is_not_a_result_is_malformed():
    assert "malformed result line 1: neither framed" in _refused([SENTINEL + "hello"])
    assert "malformed result part" in _refused([PART_SENTINEL + "x 1/2 abc"])
    assert "malformed result part" in _refused([PART_SENTINEL + "0 3/2 abc"])


# Partial output and the format before framing ---------------------------------------------------------------


def test_reported_ranks_on_partial_output(emitted):
    rank0 = emitted({"short": 1}, rank=0, world=3)
    rank1 = emitted(LONG, rank=1, world=3)
    rank2 = emitted({"short": 2}, rank=2, world=3)
    assert reported_ranks("") == set()
    assert reported_ranks("\n".join(rank0 + rank1[:-1])) == {0}  # halfway through its parts: not finished
    assert reported_ranks("\n".join(rank0 + rank1)) == {0, 1}
    assert reported_ranks("\n".join(rank0 + rank1 + [rank2[0][:40]])) == {0, 1}  # a line cut short
    labelled = _labelled(rank2 + rank1, "2: ", "\r\n")
    assert reported_ranks(labelled) == {1, 2}


def test_unframed_results_are_still_read():
    """The format before framing (the recorded fixtures, a line an operator writes by hand): one line of
    JSON, or parts of the JSON text itself, a part's trailing space now kept."""
    head = '{"node": "node1", "rank": 0, "world_size": 2, "data": {"x": "'
    data = {"x": "a" * (799 - len(head)) + " " + "b" * 1600}
    text = json.dumps({"node": "node1", "rank": 0, "world_size": 2, "data": data})
    parts = [text[i : i + 800] for i in range(0, len(text), 800)]
    assert parts[0].endswith(" ")
    lines = [f"{PART_SENTINEL}0 {n}/{len(parts)} {part}" for n, part in enumerate(parts, 1)]
    lines.append("1: " + SENTINEL + json.dumps({"node": "node1", "rank": 1, "world_size": 2, "data": {}}) + "\r")
    assert back(lines, world=2, nodes=("node1",)) == {0: data, 1: {}}
    assert reported_ranks("\n".join(lines)) == {0, 1}


# Property tests (hypothesis comes with the dev extra, as pytest-xdist does) -------------------------------

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=15,
)
results = st.dictionaries(st.text(), values, max_size=6) | st.builds(
    lambda text, n: {"t": text * n}, st.text(min_size=1, max_size=20), st.integers(1, 120)
)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(data=results, rank=st.integers(0, 3), label=st.sampled_from(["", "12: ", "0: "]), cr=st.booleans())
def test_property_roundtrip(emitted, data, rank, label, cr):
    lines = emitted(data, rank=rank, world=4)
    others = [line for r in range(4) if r != rank for line in emitted({"r": r}, rank=r, world=4)]
    out = _labelled(others + lines, label, "\r\n" if cr else "\n")
    assert parse_records("transit", out, 4, NODES)[rank].data == data


@SETTINGS
@given(data=results, choice=st.data())
def test_property_changed_is_refused(emitted, data, choice):
    """Any character after a sentinel word replaced, dropped or the line cut there: never a record."""
    lines = emitted(data, rank=3, world=4)
    number = choice.draw(st.integers(0, len(lines) - 1))
    line = lines[number]
    token = (PART_SENTINEL if line.startswith(PART_SENTINEL) else SENTINEL).strip()
    start = line.index(token) + len(token)
    at = choice.draw(st.integers(start, len(line) - 1))
    new = choice.draw(st.characters(codec="utf-8").filter(lambda c: c != line[at]))
    how = choice.draw(st.sampled_from(["flip", "drop", "cut"]))
    changed = {"flip": line[:at] + new + line[at + 1 :], "drop": line[:at] + line[at + 1 :], "cut": line[:at]}
    others = [line for r in range(3) for line in emitted({"r": r}, rank=r, world=4)]
    with pytest.raises(ProbeError):
        parse_records("transit", "\n".join(others + lines[:number] + [changed[how]] + lines[number + 1 :]), 4, NODES)


# ---- a stage's result, sent as the stage finishes -------------------------------------------------------

#: a spec whose stages may hold anything: the transit itself under test, not the fine-tune's type
ANY_STAGE = dataclasses.replace(specs.FINETUNE, stage=dict[str, Any])


def test_stage_results_come_back_whole_and_never_as_the_steps_result(monkeypatch, capsys):
    """A fine-tune rank sends each strategy's result as it finishes (``emit(stage=...)``): the step's result
    parse does not read them, ``stage_records`` gives them back byte for byte, and a rank stopped half-way
    through its parts is left out (it had not finished the stage)."""
    for var in LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)
    long = {"name": "Debian GNU/Linux 12 (bookworm) " * 80, "losses": [0.5] * 50}
    lines = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        emit({**long, "rank_note": rank}, probe="finetune", stage="solo")
        lines.append(capsys.readouterr().out)
    final = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        emit({"strategies": {}}, probe="finetune")
        final.append(capsys.readouterr().out)
    whole = "".join(lines) + "".join(final)
    assert all(r.data == {"strategies": {}} for r in parse_records("finetune", whole, 2, ("node1",)))
    solo = result.stage_records(ANY_STAGE, whole, "solo")
    assert [r.rank for r in solo] == [0, 1] and solo[0].data == {**long, "rank_note": 0}
    assert result.stage_records(ANY_STAGE, whole, "ddp") == []
    cut = lines[0] + "\n".join(lines[1].splitlines()[:-1])  # rank 1 stopped before its last part
    assert [r.rank for r in result.stage_records(ANY_STAGE, cut, "solo")] == [0]


def test_a_stage_result_not_of_the_specs_stage_type_is_an_error_naming_probe_node_rank_and_field(monkeypatch, capsys):
    """A stopped launch's stage results are held to the spec's stage type as a finished step's are to its
    payload: a mistyped field is an ERROR naming where, never a figure a judge reads."""
    for var in LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("GPUACCEPT_NODE", "node4")
    emit({"strategy": "solo", "steps_done": "many"}, probe="finetune", stage="solo")
    sent = capsys.readouterr().out
    with pytest.raises(PayloadError) as raised:
        result.stage_records(specs.FINETUNE, sent, "solo")
    assert "probe finetune: " in str(raised.value) and "rank 1" in str(raised.value)
    assert "field steps_done" in str(raised.value) and "solo stage result" in str(raised.value)
    assert raised.value.nodes and raised.value.nodes[0] in str(raised.value)
    with pytest.raises(PayloadError, match="declares no stage type"):  # a probe with no stages sends none
        result.stage_records(specs.HYGIENE, sent, "solo")
