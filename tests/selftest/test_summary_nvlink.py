"""The summary's NVLink domain panel: a run record with two GB200 blocks renders one row each, its trays, clique,
IMEX state and busbw, from the checks the domain judges wrote (``verdicts/nvlink_block.py``) and the IMEX ones."""

from __future__ import annotations

import functools
import re

import pytest

from gpuaccept.judging.judge import Judge
from gpuaccept.report.summary import build_summary
from gpuaccept.report.summary_nvlink import nvlink_blocks
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import RunRecord
from gpuaccept.thresholds.loader import Thresholds, load_thresholds
from gpuaccept.verdicts.nvlink_block import judge_block_cliques

from .report_records import gpu_record

pytestmark = pytest.mark.selftest

UUID_A, UUID_B = "9c6f5af3-0000-4000-8000-00000000000a", "9c6f5af3-0000-4000-8000-00000000000b"
BLOCKS = {"rack1": ["tray01", "tray02"], "rack2": ["tray03", "tray04"]}
TEST = "tests/acceptance/test_nvlink_domain.py::test_block_domain"


@functools.cache
def thresholds() -> Thresholds:
    return load_thresholds(None)


def _domain_checks() -> list[MetricResult]:
    """rack1 healthy (in the fabric, one clique, IMEX UP, 850 GB/s); rack2 with an Unhealthy GPU, split over two
    cliques, IMEX DOWN, slow."""
    results: list[MetricResult] = []
    judge = Judge(thresholds(), lambda node: "GB200", results.append, TEST)
    cliques = {
        "tray01": {(UUID_A, 32766)},
        "tray02": {(UUID_A, 32766)},
        "tray03": {(UUID_B, 32766)},
        "tray04": {(UUID_A, 4027)},
    }
    judge_block_cliques(BLOCKS, cliques, judge)
    for node in ("tray01", "tray02", "tray03"):
        judge.expect("nvlink_fabric_state", "in the fabric", "in the fabric", node=node, gpu=0)
    judge.expect("nvlink_fabric_state", "health summary Unhealthy", "in the fabric", node="tray04", gpu=0)
    for block, state, ready in (("rack1", "UP", "all READY"), ("rack2", "DOWN", "tray04: UNAVAILABLE")):
        for node in BLOCKS[block]:
            extra = {"block": block, "settle_s": 5.0, "scope": "job"}
            judge.expect("imex_domain_state", state, "UP", node=node, **extra)
            judge.expect("imex_members_ready", ready, "all READY", node=node, **extra)
    for block, busbw in (("rack1", 850.0), ("rack2", 512.0)):
        judge.check(
            "nvlink_domain_busbw_gbps",
            busbw,
            node=BLOCKS[block][0],
            scale=72,
            block=block,
            collective="all_reduce",
            size=2**33,
            gpus=72,
        )
    return results


def _record() -> RunRecord:
    record = gpu_record()
    checks = _domain_checks()
    record["tests"].append(
        {
            "nodeid": TEST,
            "verdict": "failed",
            "duration_s": 60.0,
            "message": "",
            "nodes": [],
            "commands": [],
            "category": "hardware fault",
            "checks": [m.check_entry() for m in checks],
        }
    )
    record["metrics"].extend(m.to_dict() for m in checks)
    return RunRecord.from_dict(record)


def test_each_block_is_a_row_with_its_trays_clique_imex_and_busbw() -> None:
    rack1, rack2 = nvlink_blocks(_record().metrics)
    assert (rack1.block, rack2.block) == ("rack1", "rack2")
    assert rack1.trays is not None and rack1.trays.text == "2 measured: tray01, tray02"
    assert rack1.fabric is not None and rack1.fabric.text == "in the fabric (2 checks)"
    assert rack2.fabric is not None and rack2.fabric.text == "tray04 GPU 0: health summary Unhealthy"
    assert rack1.clique is not None and rack1.clique.verdict == "pass" and f"{UUID_A}/32766" in rack1.clique.text
    assert rack1.imex is not None and rack1.imex.verdict == "pass" and rack1.imex.checks == 4
    assert [(c.verdict, c.text) for c in rack1.busbw] == [("pass", "all_reduce 850.0 GB/s at 72 GPUs (>= 693)")]
    assert rack2.clique is not None and rack2.clique.verdict == "fail"
    assert rack2.clique.text == f"2 cliques: {UUID_A}/4027 on tray04; {UUID_B}/32766 on tray03"
    assert rack2.imex is not None and rack2.imex.verdict == "fail"
    assert rack2.imex.text == "DOWN (imex_domain_state, seen from tray03)"
    assert [c.verdict for c in rack2.busbw] == ["fail"]


def test_the_page_shows_each_block_row() -> None:
    html = build_summary(_record())
    assert 'href="#nvlink-blocks"' in html and 'id="nvlink-blocks"' in html
    rows = re.findall(r"<tr><td>(rack\d)</td>(.*?)</tr>", html)
    assert [name for name, _ in rows] == ["rack1", "rack2"]
    cells = dict(rows)
    assert "2 measured: tray01, tray02" in cells["rack1"] and "850.0 GB/s at 72 GPUs" in cells["rack1"]
    assert "UP, all READY and C (4 checks)" in cells["rack1"]
    assert '<td class="cell failed">2 cliques' in cells["rack2"] and "512.0 GB/s" in cells["rack2"]


def test_a_run_without_blocks_has_no_panel() -> None:
    html = build_summary(RunRecord.from_dict(gpu_record()))
    assert "nvlink-blocks" not in html
