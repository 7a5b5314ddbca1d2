"""No check that cannot fail: each check below is shown failing on the fault it exists for.

* the shared-filesystem writer judges the bytes it reads back, not the payload it held in memory;
* a task's CPU mask is judged against the CPUs Slurm granted it, not against ">= 1";
* NVLink counters a link does not answer are "could not measure" naming GPU and link, never a
  legacy total (tests/selftest/test_gpu_probes.py has the probe side);
* no acceptance test hands ``judge.expect`` the same literal as observed and expected.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.judging.judge import Judge
from gpuaccept.probes import sharedfs
from gpuaccept.probes._cpus import granted_cpus, tasks_on_node
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.verdicts.nvlink import judge_nvlink
from gpuaccept.verdicts.slurm import GRANTED, cpus_granted_observed

from .ending import ends
from .nvml_recordings import older_nvlink

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[2]


def _emitted(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("GPUACCEPT")][-1]
    return dict(json.loads(line.split(" ", 3)[3])["data"])  # GPUACCEPT_RESULT <nbytes> <crc32> <json>


def test_sharedfs_writer_reports_what_it_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "f.bin"
    expected = hashlib.sha256(random.Random(7).randbytes(4096)).hexdigest()
    sharedfs.main(["--mode", "write", "--path", str(path), "--size", "4096", "--seed", "7"])
    assert _emitted(capsys)["sha256"] == expected  # a healthy filesystem gives the bytes back

    def corrupt(p: Path) -> None:  # the filesystem hands back other bytes than were written
        p.write_bytes(b"\0" * 4096)

    monkeypatch.setattr(sharedfs, "_drop_cache", corrupt)
    sharedfs.main(["--mode", "write", "--path", str(path), "--size", "4096", "--seed", "7"])
    data = _emitted(capsys)
    assert data["sha256"] != expected and data["exists"] is True


def test_granted_cpus_from_the_step_environment() -> None:
    assert granted_cpus({}) is None  # not a Slurm step: nothing to judge against
    step = {"SLURM_JOB_ID": "1", "SLURM_CPUS_ON_NODE": "16", "SLURM_STEP_TASKS_PER_NODE": "4(x2),2"}
    step["SLURM_NODEID"] = "2"
    assert granted_cpus(step) == 8
    assert granted_cpus(step | {"SLURM_NODEID": "0"}) == 4
    assert granted_cpus(step | {"SLURM_CPUS_PER_TASK": "6"}) == 6
    assert tasks_on_node("2(x3),1", 3) == 1 and tasks_on_node("garbage", 0) is None


def test_cpu_mask_narrower_than_the_grant_fails() -> None:
    thresholds = load_thresholds()
    judge = Judge(thresholds, lambda node: "cpu", lambda result: None, "selftest")
    judge.expect("usable_cpus_granted", cpus_granted_observed(2, 1), GRANTED, node="n1")  # task/none: wider
    judge.expect("usable_cpus_granted", cpus_granted_observed(2, 4, 2), GRANTED, node="n3")  # 4 declared, 2 exist
    judge.expect("usable_cpus_granted", cpus_granted_observed(1, 8, 64), GRANTED, node="n2")  # confined to 1 of 8
    with ends(judge, "failed", match="n2: usable_cpus_granted = 1 of 8 granted CPUs usable"):
        pass


def test_unread_nvlink_counter_errors_naming_gpu_and_link() -> None:
    judge = Judge(load_thresholds(), lambda node: "H200", lambda result: None, "selftest")
    links = older_nvlink()  # the 2 x H200 recording, 18 links up on each GPU
    errors = links["gpus"][0]["nvlink"]["errors"]
    errors["recovery"], errors["unread_links"] = None, {"recovery": [5]}
    with ends(
        judge,
        "error",
        match=r"GPU 0 \(00000000:00:06.0\): nvlink_recovery_errors \(could not read recovery on link\(s\) 5\)",
    ):
        judge_nvlink(links, judge, "n1")


def test_no_expectation_compares_a_literal_with_itself() -> None:
    """``judge.expect(name, "x", "x")`` passes whatever the cluster does: a check that cannot fail."""
    found = []
    for path in sorted((REPO / "tests" / "acceptance").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "expect"
                and len(node.args) >= 3
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[2], ast.Constant)
                and node.args[1].value == node.args[2].value
            ):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, f"expectations that cannot fail: {found}"
