"""The run record's schema gpuaccept.run/4: older records migrated, a newer one refused, and what /4 adds
(the session verdict, the test hooks, the limits a site file loosens, the suite that judged) worked out
the same way for the record, the terminal and the summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaccept.judging.baseline import Baseline, BaselineError
from gpuaccept.judging.verdict import (
    EXIT_COULD_NOT_JUDGE,
    EXIT_TEST_HOOKS,
    cluster_verdict,
    exit_code,
    verdict_line,
)
from gpuaccept.report.summary_model import overview
from gpuaccept.results.record import SCHEMA, RecordError, RunRecord, TestEntry, read_record
from gpuaccept.results.suite import suite_identity
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.thresholds.loosened import loosened

from .conftest import REPO

pytestmark = pytest.mark.selftest

CHECK = {
    "test": "t",
    "metric": "dev_shm_gib",
    "value": 64.0,
    "unit": "GiB",
    "node": "n1",
    "sku": "cpu",
    "verdict": "pass",
}


def _write(path: Path, schema: str, **extra: object) -> Path:
    raw = {
        "schema": schema,
        "started": "2026-11-20T00:00:00+00:00",
        "status": "passed",
        "tests": [{"nodeid": "t", "verdict": "passed"}],
        "metrics": [CHECK],
        **extra,
    }
    path.write_text(json.dumps(raw))
    return path


def test_schema_is_run4() -> None:
    assert SCHEMA == "gpuaccept.run/4"
    assert RunRecord().to_dict()["schema"] == SCHEMA


def test_run3_record_is_migrated(tmp_path: Path) -> None:
    """A run/3 record knows nothing of hooks or of the suite: read back, it has none recorded and the suite
    ``unknown``; its verdict is worked out again from its tests."""
    record = read_record(_write(tmp_path / "run3.json", "gpuaccept.run/3"))
    assert record.schema == "gpuaccept.run/3" and record.test_hooks == {} and record.loosened == []
    assert record.suite == {"version": None, "commit": "unknown", "edited": "unknown"}
    assert cluster_verdict(record)[0] is True
    again = RunRecord.from_dict(record.to_dict())
    assert again.to_dict()["schema"] == SCHEMA and again.metrics == record.metrics


@pytest.mark.parametrize("schema", ["gpuaccept.run/5", "gpuaccept.run/12", "gpuaccept.run/next"])
def test_an_unknown_schema_is_refused_naming_file_and_schema(tmp_path: Path, schema: str) -> None:
    path = _write(tmp_path / "future.json", schema)
    with pytest.raises(RecordError, match=rf"{path}: run record schema {schema} is not one this gpuaccept reads"):
        read_record(path)
    with pytest.raises(BaselineError, match=rf"--baseline: baseline {path}: run record schema {schema}"):
        Baseline.load(path)  # as a baseline: a usage error (exit 4), never compared field by field


def test_run4_round_trip_keeps_hooks_suite_and_verdict(tmp_path: Path) -> None:
    record = RunRecord(status="passed", tests={"t": TestEntry("t", "passed")}, suite=suite_identity())
    record.hook_seen("GPUACCEPT_TEST_INJECT", "/x.json", "the pytest process")
    record.merge_hooks({"GPUACCEPT_TEST_INJECT": {"value": "/x.json", "where": ["probes on n1", "the pytest process"]}})
    record.accepted, record.verdict = verdict_line(record)
    assert record.verdict == "NOT ACCEPTED: test hooks active: GPUACCEPT_TEST_INJECT" and not record.accepted
    back = read_record(record.write(tmp_path / "runs" / "r.json"))
    assert back.test_hooks == {
        "GPUACCEPT_TEST_INJECT": {"value": "/x.json", "where": ["the pytest process", "probes on n1"]}
    }
    assert (back.verdict, back.accepted, back.suite) == (record.verdict, False, record.suite)
    view = overview(back)
    assert view.verdict == "NOT ACCEPTED" and view.reason == "test hooks active: GPUACCEPT_TEST_INJECT"
    assert view.hooks == ["GPUACCEPT_TEST_INJECT=/x.json (the pytest process, probes on n1)"]


def test_suite_identity_names_this_checkout() -> None:
    identity = suite_identity()
    assert identity["version"]
    if (REPO / ".git").exists():  # the selftests run from a checkout (a worktree has a .git file)
        assert len(identity["commit"]) == 40 and identity["edited"] in (True, False)


def test_suite_error_verdict_is_apart_from_hardware_failures() -> None:
    ours = TestEntry("t1", "error", category="suite error")
    measured = TestEntry("t2", "error", category="could not measure")
    failed = TestEntry("t3", "failed", category="threshold miss")
    record = RunRecord(status="failed", tests={"t1": ours, "t2": measured})
    assert verdict_line(record) == (
        False,
        "NOT ACCEPTED: 1 could not measure, the suite could not judge 1 test (suite error: a fault of the suite, "
        "not of the hardware)",
    )
    record.tests["t3"] = failed
    assert cluster_verdict(record)[1].startswith("1 failed, 1 could not measure, the suite could not judge 1 test")


@pytest.mark.parametrize(
    ("pytest_code", "counts", "failures", "hooks", "code"),
    [
        (0, {"passed": 3}, 0, False, 0),
        (1, {"passed": 3, "error": 2}, 2, False, EXIT_COULD_NOT_JUDGE),  # only errors: the suite could not judge
        (1, {"failed": 1, "error": 2}, 3, False, 1),  # a hardware failure wins: a bad node is what to act on
        (1, {"error": 1}, 2, False, 1),  # a failure outside the acceptance tests is never hidden behind a 6
        (4, {}, 0, False, 4),
        (2, {"error": 1}, 1, False, 2),
        (0, {"passed": 3}, 0, True, EXIT_TEST_HOOKS),  # every test passed on hooked readings: never a 0
        (1, {"failed": 1}, 1, True, 1),  # what its tests said of what they were given
        (1, {"error": 1}, 1, True, EXIT_COULD_NOT_JUDGE),
        (5, {}, 0, True, 5),
        (0, {"skipped": 2}, 0, True, 0),  # a dry run or --co: nothing judged, as a run without hooks
    ],
)
def test_exit_code_tells_a_bad_run_from_a_bad_node(pytest_code, counts, failures, hooks, code) -> None:
    verdicts = [verdict for verdict, n in counts.items() for _ in range(n)]
    record = RunRecord(status="passed", tests={f"t{i}": TestEntry(f"t{i}", v) for i, v in enumerate(verdicts)})
    if hooks:
        record.hook_seen("GPUACCEPT_TEST_INJECT", "/tmp/readings.json", "pytest process")
    assert record.counts == counts
    assert exit_code(pytest_code, record, failures) == code


def test_loosened_limits_are_named(tmp_path: Path) -> None:
    """A site file lowering a packaged floor (or raising a ceiling) is listed with both values; a tighter
    limit and a SKU of the site's own are not."""
    site = tmp_path / "site.yaml"
    site.write_text(
        "settings:\n"
        "  straggler_pct: {value: 25, source: 'selftest: a site widening the straggler rule'}\n"
        "skus:\n"
        "  cpu:\n"
        "    limits:\n"
        "      dev_shm_gib: {min: 0.5, source: 'selftest: a site lowering the floor'}\n"
        "      nofile: {min: 1048576, source: 'selftest: a site raising the floor'}\n"
    )
    packaged = load_thresholds()
    merged = load_thresholds(site)
    found = loosened(merged, packaged)
    before = packaged.limits_for("cpu")
    assert before["dev_shm_gib"].min is not None and before["dev_shm_gib"].min > 0.5
    assert found == [
        {
            "metric": "settings.straggler_pct",
            "sku": "every SKU",
            "bound": "value",
            "packaged": packaged.settings["straggler_pct"],
            "site": 25.0,
            "file": str(site),
        },
        {
            "metric": "dev_shm_gib",
            "sku": "cpu",
            "bound": "min",
            "packaged": before["dev_shm_gib"].min,
            "site": 0.5,
            "file": str(site),
        },
    ]
    assert loosened(packaged, packaged) == []


def test_a_busbw_check_without_its_sweep_still_gets_a_summary() -> None:
    """A busbw check whose sweep was not recorded (its step failed half way) draws no chart, and the page is
    still written (it raised ZeroDivisionError in the chart before, and no summary was written)."""
    from gpuaccept.report.summary import build_summary

    check = {**CHECK, "metric": "nccl_all_reduce_busbw_gbs", "value": 0.01, "unit": "GB/s", "min": 0.04}
    check["extra"] = {"scale": 2}  # the scale it was judged at, and no size or curve
    record = RunRecord.from_dict(
        {"status": "failed", "tests": [{"nodeid": "t", "verdict": "failed"}]}
        | {"metrics": [check | {"verdict": "fail"}]}
    )
    assert "NOT ACCEPTED" in build_summary(record, thresholds=load_thresholds())
