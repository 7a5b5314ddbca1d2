"""docs/ARCHITECTURE.md's "Adding a metric" stays true: a metric added the way it says, in a temporary copy of
the catalogue, is judged and listed with nothing else written.

The recipe's files, at most three: (1) the catalogue entry in thresholds.yaml (what the metric is, its limit per
SKU with a source, the requirements it proves), (2) the probe's payload field, (3) the judge's line in its
``verdicts/`` module. docs/requirements.md lists it after ``python3 -m gpuaccept.thresholds.requirements_doc``
(a command, not a hand edit; tests/selftest/test_generated_docs.py names it when the page is stale).

The metric is the issue's example, a per-GPU maximum SM clock judged on one SKU only: the H100's limit from
its datasheet, no limit elsewhere, so it is ``limit_optional`` (judged where a limit is set, shown elsewhere).
"""

from __future__ import annotations

import re
from typing import Any, TypedDict

import pytest
import yaml

from gpuaccept.judging.judge import Judge
from gpuaccept.results.metrics import MetricResult
from gpuaccept.thresholds.loader import Thresholds, default_path, load_thresholds
from gpuaccept.thresholds.requirements_doc import render

from .conftest import REPO

pytestmark = pytest.mark.selftest

ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"
METRIC = "gpu_sm_clock_max_mhz"
#: step 1: the catalogue entry and its limit, as the doc says to write them
ENTRY = {
    "unit": "MHz",
    "description": "highest SM clock the GPU reports (NVML max clock)",
    "limit_optional": True,
    "requirements": ["BMAAS08"],
}
LIMIT = {"min": 1980, "source": "NVIDIA H100 Tensor Core GPU datasheet: max boost clock 1980 MHz (SXM5)"}


class GpuClocks(TypedDict):
    """Step 2: the payload field (here on a payload of its own; in the suite, a field of the probe's type)."""

    gpu: str
    sm_clock_max_mhz: float


def judge_sm_clock(payload: list[GpuClocks], judge: Any, node: str) -> None:
    """Step 3: the judge's line, as a ``verdicts/`` module writes it."""
    for gpu in payload:
        judge.check(METRIC, gpu["sm_clock_max_mhz"], node=node, gpu=gpu["gpu"])


@pytest.fixture(scope="module")
def added(tmp_path_factory: pytest.TempPathFactory) -> Thresholds:
    """The packaged catalogue, copied, with the metric added as the doc says (entry, limit on one SKU)."""
    data = yaml.safe_load(default_path().read_text(encoding="utf-8"))
    data["metrics"][METRIC] = ENTRY
    data["skus"]["H100-SXM-80GB"].setdefault("limits", {})[METRIC] = LIMIT
    path = tmp_path_factory.mktemp("catalogue") / "thresholds.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return load_thresholds(defaults=path)


def _judged(thresholds: Thresholds, sku: str, payload: list[GpuClocks]) -> list[MetricResult]:
    results: list[MetricResult] = []
    judge = Judge(thresholds, lambda node: sku, results.append, "test_gpu_clocks")
    judge_sm_clock(payload, judge, "node1")
    return results


def test_the_added_metric_is_judged_against_its_limit(added: Thresholds) -> None:
    payload: list[GpuClocks] = [{"gpu": "0", "sm_clock_max_mhz": 1980.0}, {"gpu": "1", "sm_clock_max_mhz": 1500.0}]
    passed, failed = _judged(added, "H100-SXM-80GB", payload)
    assert (passed.verdict, failed.verdict) == ("pass", "fail")
    assert passed.min == failed.min == 1980 and passed.source == LIMIT["source"]
    assert failed.subject == "1" and "1980" in failed.reason


def test_where_no_limit_is_set_it_is_shown_not_judged(added: Thresholds) -> None:
    (shown,) = _judged(added, "H200", [{"gpu": "0", "sm_clock_max_mhz": 1500.0}])
    assert shown.verdict == "info"


def test_the_added_metric_is_listed(added: Thresholds) -> None:
    page = render(thresholds=added)
    row = next(line for line in page.splitlines() if line.startswith(f"| `{METRIC}`"))
    assert "(judged where a limit is set)" in row and "H100-SXM-80GB: >= 1980" in row and "MHz" in row
    section = page[page.index("### BMAAS08") :]
    assert f"`{METRIC}`" in section[: section.index("\n### ")]
    assert METRIC not in render()  # the packaged catalogue is untouched


def test_the_doc_says_three_files_at_most() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("## Adding a metric") :]
    section = section[: section.index("\n## ", 1)]
    assert section.startswith("## Adding a metric: three files at most"), section.splitlines()[0]
    steps = re.findall(r"^(\d)\. ", section, re.M)
    assert steps == ["1", "2", "3"], steps
    for named in ("thresholds.yaml", "contracts/", "verdicts/", "python3 -m gpuaccept.thresholds.requirements_doc"):
        assert named in section, named
