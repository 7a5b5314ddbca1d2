"""Test hooks cannot fake an acceptance: one registry owns every hook and its gate, each probe's result
line names the hooks set where it ran, and a run with any hook set is NOT ACCEPTED with the hook named
in the record, the terminal, the summary and JUnit, while each test is judged as always."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpuaccept import selftest_hooks
from gpuaccept.dispatch.result import parse_records
from gpuaccept.judging.verdict import EXIT_TEST_HOOKS

from .conftest import REPO, write_suite

pytestmark = pytest.mark.selftest

INNER = """
from gpuaccept.probes import specs
import pytest

pytestmark = pytest.mark.acceptance


def test_judged_pass(node, judge):
    judge.check("dev_shm_gib", 64.0, node=node)


def test_probe_ran(node, cluster, judge):
    cluster.run(specs.VISIBILITY, nodes=[node])
    judge.check("dev_shm_gib", 64.0, node=node)
"""


def test_every_hook_the_package_names_is_registered() -> None:
    """Every GPUACCEPT_TEST_* / GPUACCEPT_FAULT_* / the gate named in gpuaccept/ is in the registry, and
    only the registry reads the gate: no module writes ``GPUACCEPT_SELFTEST`` out again."""
    names: set[str] = set()
    gate_readers = []
    for path in (REPO / "gpuaccept").rglob("*.py"):
        text = path.read_text()
        names |= set(re.findall(r"\bGPUACCEPT_(?:TEST|FAULT)_[A-Z_]*[A-Z]\b", text))
        if path.name != "selftest_hooks.py" and re.search(r"environ[^\n]*GPUACCEPT_SELFTEST", text):
            gate_readers.append(path.name)
    assert names and names <= {h.name for h in selftest_hooks.HOOKS}, names - {h.name for h in selftest_hooks.HOOKS}
    assert gate_readers == []


def test_gated_knobs_need_the_gate() -> None:
    env = {"GPUACCEPT_FAULT_HANG_RANK": "1"}
    with pytest.raises(selftest_hooks.HookRefused, match="GPUACCEPT_FAULT_HANG_RANK is a selftest knob"):
        selftest_hooks.gated("GPUACCEPT_FAULT_HANG_RANK", env)
    assert selftest_hooks.gated("GPUACCEPT_FAULT_HANG_RANK", {**env, selftest_hooks.GATE: "1"}) == "1"
    assert selftest_hooks.gated("GPUACCEPT_FAULT_HANG_RANK", {}) is None
    assert selftest_hooks.active({"GPUACCEPT_TEST_INJECT": "/empty.json", "GPUACCEPT_TEST_PERTURB_TRAINING": ""}) == {
        "GPUACCEPT_TEST_INJECT": "/empty.json"
    }


def test_a_probe_says_which_hooks_it_ran_under(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPUACCEPT_TEST_INJECT": str(tmp_path / "none.json")}
    env.pop(selftest_hooks.GATE, None)
    done = subprocess.run(
        [sys.executable, "-m", "gpuaccept.probes.visibility"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    (rank,) = parse_records("visibility", done.stdout, 1, ("here",))
    assert rank.test_hooks == {"GPUACCEPT_TEST_INJECT": str(tmp_path / "none.json")}
    clean = {k: v for k, v in env.items() if k != "GPUACCEPT_TEST_INJECT"}
    done = subprocess.run(
        [sys.executable, "-m", "gpuaccept.probes.visibility"], env=clean, capture_output=True, text=True, timeout=60
    )
    assert parse_records("visibility", done.stdout, 1, ("here",))[0].test_hooks == {}


@pytest.mark.parametrize("content", ["", "{}"], ids=["empty-file", "no-readings"])
def test_a_run_with_the_inject_hook_is_not_accepted(tmp_path: Path, content: str) -> None:
    """GPUACCEPT_TEST_INJECT set, even to an empty file, the gate off: the record names the hook (from the
    pytest process and from the probes) and the session is NOT ACCEPTED. With ``{}`` (no readings: the
    probes read the machine) every test passes as judged, and still nothing is accepted."""
    suite = write_suite(tmp_path / "suite", INNER)
    inject = tmp_path / "inject.json"
    inject.write_text(content)
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPUACCEPT_TEST_INJECT": str(inject)}
    env.pop(selftest_hooks.GATE, None)
    argv = [sys.executable, "-m", "pytest", "-q", "-rA", "-m", "acceptance", "--launcher", "local"]
    argv += ["--run-record", "record.json", "--junitxml", "junit.xml"]
    done = subprocess.run(argv, cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    record = json.loads((suite / "record.json").read_text())
    assert record["schema"] == "gpuaccept.run/4"
    assert list(record["test_hooks"]) == ["GPUACCEPT_TEST_INJECT"], record["test_hooks"]
    assert record["test_hooks"]["GPUACCEPT_TEST_INJECT"]["where"][0] == "the pytest process"
    assert record["accepted"] is False
    assert record["verdict"].startswith("NOT ACCEPTED: test hooks active: GPUACCEPT_TEST_INJECT"), record["verdict"]
    assert f"TEST HOOK GPUACCEPT_TEST_INJECT={inject}" in output
    assert "session verdict: NOT ACCEPTED: test hooks active: GPUACCEPT_TEST_INJECT" in output
    testsuite = ET.parse(suite / "junit.xml").getroot().find("testsuite")
    assert testsuite is not None
    props = {p.get("name"): p.get("value") for p in testsuite.findall("properties/property")}  # the session's
    assert props["gpuaccept.test_hooks"] == "GPUACCEPT_TEST_INJECT"
    assert props["gpuaccept.session_verdict"] == record["verdict"]
    page = (suite / "reports" / "summary.html").read_text()
    assert '<meta name="gpuaccept-verdict" content="NOT ACCEPTED">' in page and 'id="test-hooks"' in page
    verdicts = {t["nodeid"].split("::")[-1].split("[")[0]: t["verdict"] for t in record["tests"]}
    if content:  # the tests are judged as always: both pass, the probes reported the hook too
        assert done.returncode == EXIT_TEST_HOOKS, output[-3000:]  # all passed, and still never an exit 0
        assert verdicts == {"test_judged_pass": "passed", "test_probe_ran": "passed"}
        assert any(w.startswith("probes on ") for w in record["test_hooks"]["GPUACCEPT_TEST_INJECT"]["where"])
    else:  # the probes cannot read an empty file: nothing could be measured, and it says why
        assert set(verdicts.values()) == {"error"} and "GPUACCEPT_TEST_INJECT" in output, output[-3000:]
