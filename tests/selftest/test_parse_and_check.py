"""The probe protocol's parsing and the Judge's judging: no pass on missing or bad data."""

from __future__ import annotations

import json

import pytest

from gpuaccept.dispatch.result import ProbeResult, check_step, parse_records
from gpuaccept.errors import ProbeError
from gpuaccept.judging.judge import Judge
from gpuaccept.probes._protocol import SENTINEL, frame
from gpuaccept.thresholds.loader import load_thresholds

from .ending import ends


def line(rank: int, node: str = "n1", **data: object) -> str:
    """A rank's result line as a probe prints it: framed with its length and checksum."""
    payload = {"node": node, "rank": rank, "world_size": 2, "local_rank": rank, "gpu": None, "data": data}
    return SENTINEL + frame(json.dumps(payload))


def unframed(rank: int, node: str = "n1", **data: object) -> str:
    """A line in the format before framing (the recorded fixtures, an operator's hand-written line)."""
    payload = {"node": node, "rank": rank, "world_size": 2, "local_rank": rank, "gpu": None, "data": data}
    return SENTINEL + json.dumps(payload)


def test_records_sorted_by_rank_with_noise_around():
    out = "\n".join(["warning: noise", line(1, v=2), "more noise", line(0, v=1)])
    records = parse_records("p", out, 2, ("n1",))
    assert [r.rank for r in records] == [0, 1] and records[1].data == {"v": 2}


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        (line(0), "1 of 2 ranks reported (missing ranks [1])"),
        (line(0) + "\n" + line(0), "rank 0 reported twice"),
        (SENTINEL + "{broken", "malformed result line 1"),
        (SENTINEL + json.dumps({"rank": 0}), "malformed result line 1"),
        ("", "0 of 2 ranks reported"),
    ],
)
def test_bad_output_is_probe_error(stdout, expected):
    with pytest.raises(ProbeError) as info:
        parse_records("p", stdout, 2, ("n1",))
    assert expected in str(info.value)


def test_unframed_lines_are_still_read():
    out = "\n".join([unframed(0, v=1), "0: " + unframed(1, v=2) + "\r"])
    assert [r.data for r in parse_records("p", out, 2, ("n1",))] == [{"v": 1}, {"v": 2}]


def test_a_line_that_is_neither_framed_nor_json_is_malformed():
    with pytest.raises(ProbeError, match="malformed result line 2: neither framed"):
        parse_records("p", line(0) + "\n" + SENTINEL + "oops", 2, ("n1",))


def test_nonzero_exit_wins_over_good_lines():
    result = ProbeResult("p", ["x"], ("n1",), -9, line(0) + "\n" + line(1), "Killed\n", 1.0)
    with pytest.raises(ProbeError, match="killed by signal SIGKILL"):
        check_step(result, 2)


@pytest.fixture()
def checker():
    sink: list = []
    return Judge(load_thresholds(), lambda node: "H200", sink.append, "t"), sink


def test_check_pass_fail_and_report(checker):
    check, sink = checker
    assert check.check("dev_shm_gib", 64.0, node="n1").verdict == "pass"
    miss = check.check("dev_shm_gib", 0.0625, node="n2")
    assert miss.verdict == "fail" and "min 1" in miss.reason
    assert check.check("memlock_kib", 8192, node="n1").verdict == "fail"
    assert check.info("memory_gib", 2000, node="n1").verdict == "info"
    assert len(sink) == 4
    with ends(check, "failed") as info:
        pass
    assert "n2: dev_shm_gib = 0.0625 GiB" in str(info.value) and "memlock_kib" in str(info.value)


def test_missing_value_is_unmeasured_and_nan_fails(checker):
    check, _ = checker
    missing = check.check("dev_shm_gib", None, node="n1", gpu=3)
    assert (missing.verdict, missing.reason, missing.subject) == ("unmeasured", "no value was measured", "3")
    assert check.check("dev_shm_gib", float("nan"), node="n1").verdict == "fail"
    assert check.check("dev_shm_gib", "nan", node="n1").verdict == "fail"


def test_nothing_measured_never_passes(checker):
    check, _ = checker
    with ends(check, "error", match="nothing was judged"):
        pass
    check.info("memory_gib", 2000, node="n1")
    with ends(check, "error", match="only informational figures: memory_gib"):
        pass


def test_straggler_fails_above_floor(checker):
    check, _ = checker
    for gpu, value in enumerate([100.0, 101.0, 99.0, 85.0]):
        check.check("dev_shm_gib", value, node="n1", gpu=gpu)
    flagged = check.stragglers("dev_shm_gib")
    assert [r.subject for r in flagged] == ["3"] and "below n1's median" in flagged[0].reason


def test_long_result_travels_in_parts_and_is_rejoined(capsys, monkeypatch):
    from gpuaccept.probes._protocol import PART_SENTINEL, emit

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    emit({"blob": "x" * 5000, "n": 7}, probe="p")
    out = capsys.readouterr().out
    parts = out.splitlines()
    assert len(parts) > 5 and all(p.startswith(PART_SENTINEL) and len(p) < 1000 for p in parts)
    # srun interleaves another rank's line between the parts: still parsed
    mixed = "\n".join([parts[0], line(0), *parts[1:]])
    records = parse_records("p", mixed, 2, ("n1",))
    assert records[1].data == {"blob": "x" * 5000, "n": 7}


def test_missing_part_is_probe_error(capsys, monkeypatch):
    from gpuaccept.probes._protocol import emit

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    emit({"blob": "y" * 3000}, probe="p")
    parts = capsys.readouterr().out.splitlines()
    with pytest.raises(ProbeError, match="rank 0 sent parts"):
        parse_records("p", "\n".join(parts[:-1]), 1, ("n1",))
