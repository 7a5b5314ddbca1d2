"""Each check names the requirements it proves: the catalogue, the declarations, docs/requirements.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.judging.judge import Judge
from gpuaccept.judging.verdict import EXIT_TEST_HOOKS
from gpuaccept.report.labels import requirement_links
from gpuaccept.report.summary import build_summary
from gpuaccept.report.summary_requirements import requirement_rows
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import RunRecord, read_record
from gpuaccept.results.table import metrics_frame
from gpuaccept.thresholds.loader import ThresholdsError, load_thresholds
from gpuaccept.thresholds.requirements import Catalogue, load_catalogue
from gpuaccept.thresholds.requirements_doc import PAGE, render
from gpuaccept.thresholds.schema import MetricSpec
from gpuaccept.thresholds.trace import TraceError, trace

from .conftest import REPO, run_inner, write_suite
from .report_records import gpu_record


def test_page_is_generated_from_the_declarations() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/requirements.md differs from thresholds.yaml and gpuaccept/data/requirements.yaml: regenerate it "
        "with `python3 -m gpuaccept.thresholds.requirements_doc` (and edit the declarations, not the page)"
    )


def test_every_check_names_a_requirement_or_why_it_proves_none() -> None:
    metrics = load_thresholds().metrics
    for name, spec in metrics.items():
        assert bool(spec.requirements) != bool(spec.no_requirement), name
    traced = trace(metrics, load_catalogue())  # the two catalogues agree (TraceError otherwise)
    named = {rid for spec in metrics.values() for rid in spec.requirements}
    assert named <= {t.requirement.id for t in traced if t.coverage != "not covered" or t.informational}


def test_the_catalogue_holds_every_requirement_of_its_sources() -> None:
    """All of NVIDIA's three files at the commit read (128 offtake, 142 reference, 26 storage), so the
    requirements no check covers are listed too, each with its reason."""
    catalogue = load_catalogue()
    per_source = {key: sum(r.source == key for r in catalogue.requirements) for key in catalogue.sources}
    assert per_source == {"offtake": 128, "reference": 142, "storage": 26}
    for rid in ("BMAAS06", "BMAAS12", "SLURM02", "SLURM10", "K8S33", "SDN12", "SDN27", "CAP05", "HSS02", "N-011"):
        assert rid in catalogue.by_id, rid
    commits = {source.commit for source in catalogue.sources.values()}
    assert len(commits) == 1 and all(s.license == "Apache-2.0" for s in catalogue.sources.values())


def _edited_thresholds(tmp_path: Path, old: str, new: str) -> Path:
    text = (REPO / "thresholds.yaml").read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path = tmp_path / "thresholds.yaml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_an_unknown_requirement_id_names_the_metric_and_the_id(tmp_path: Path) -> None:
    path = _edited_thresholds(
        tmp_path,
        "requirements: [BMAAS09, SLURM07]}\n  matmul_checksum",
        "requirements: [BMAAS09, BMAAS99]}\n  matmul_checksum",
    )
    with pytest.raises(ThresholdsError) as info:
        load_thresholds(defaults=path)
    assert "metrics.matmul_bf16_tflops.requirements" in str(info.value) and "'BMAAS99'" in str(info.value)


def test_a_check_naming_no_requirement_is_refused(tmp_path: Path) -> None:
    line = '  memory_gib: {unit: GiB, description: "host memory (MemTotal)", report_only: true'
    path = _edited_thresholds(tmp_path, line + ", no_requirement: ", line + "}\n  memory_gib_why: ")
    text = path.read_text(encoding="utf-8").replace("\n  memory_gib_why: ", "\n#  ", 1)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ThresholdsError, match=r"metrics\.memory_gib: names no requirement"):
        load_thresholds(defaults=path)


def _catalogue(**reqs: dict[str, str]) -> Catalogue:
    source = {
        "title": "a source",
        "repository": "https://github.com/o/r",
        "path": "r.yaml",
        "commit": "0" * 40,
        "license": "Apache-2.0",
    }
    return Catalogue.model_validate(
        {
            "sources": {"s": source},
            "scopes": {"kubernetes": "asks for Kubernetes"},
            "requirements": [
                {"id": rid, "source": "s", "section": "x", "title": "a title"} | r for rid, r in reqs.items()
            ],
        }
    )


def _spec(**fields: object) -> MetricSpec:
    """A catalogue entry naming the made-up requirements of ``_catalogue`` (not the packaged ones)."""
    return MetricSpec.model_construct(**fields)


def test_trace_refuses_every_disagreement_at_once() -> None:
    catalogue = _catalogue(
        AA01={},  # named by a judged check: covered
        BB01={"not_covered": "kubernetes"},  # but a check names it
        CC01={},  # no check names it and no reason is given
        DD01={"partly": "it asks for more than this"},  # named by an informational figure only
    )
    metrics = {
        "m1": _spec(unit="x", description="d", requirements=("AA01", "BB01")),
        "m2": _spec(unit="x", description="d", limit_optional=True, requirements=("DD01",)),
    }
    with pytest.raises(TraceError) as info:
        trace(metrics, catalogue)
    text = str(info.value)
    assert "BB01: declared not covered (kubernetes) but named by m1" in text
    assert "CC01: no judged check names it" in text
    assert "DD01: no judged check names it (only informational figures name it: m2)" in text
    assert "AA01" not in text


def test_coverage_follows_partly_and_the_judged_checks() -> None:
    catalogue = _catalogue(
        AA01={}, BB01={"partly": "the one-second bound is not timed"}, CC01={"not_covered": "kubernetes"}
    )
    metrics = {
        "m1": _spec(unit="x", description="d", requirements=("AA01", "BB01")),
        "m2": _spec(unit="x", description="d", limit_optional=True, requirements=("AA01",)),
        "m3": _spec(unit="x", description="d", no_requirement="proves nothing on purpose"),
    }
    got = {t.requirement.id: (t.coverage, t.judged, t.informational) for t in trace(metrics, catalogue)}
    assert got == {
        "AA01": ("covered", ("m1",), ("m2",)),
        "BB01": ("partly covered", ("m1",), ()),
        "CC01": ("not covered", (), ()),
    }


def test_a_check_cannot_both_serve_and_serve_none() -> None:
    with pytest.raises(ValueError, match="names requirements and no_requirement"):
        MetricSpec(unit="x", description="d", requirements=("BMAAS09",), no_requirement="and also nothing at all")


def test_the_record_names_the_requirements_of_every_check(tmp_path: Path) -> None:
    """The judge copies the catalogue's IDs onto each check; the record, its test entries and the CSV keep them."""
    made: list[MetricResult] = []
    nodeid = "tests/acceptance/test_compute.py::test_matmul[node1]"
    judge = Judge(load_thresholds(), lambda node: "H200", made.append, nodeid)
    judge.check("matmul_bf16_tflops", 700.0, node="node1", gpu="0 (0000:1A:00.0)")
    judge.expect("slurm_step_node", "node1", "node1", node="node1")
    judge.info("memory_gib", 2015.6, node="node1")
    record = RunRecord(metrics=made)
    record.test(nodeid).checks = [m.check_entry() for m in made]
    back = read_record(record.write(tmp_path / "runs" / "run.json", latest=False))
    ids = [["BMAAS09", "SLURM07"], ["SLURM04", "SLURM06"], []]
    assert [m.requirements for m in back.metrics] == ids
    assert [c["requirements"] for c in back.tests[nodeid].checks] == ids
    assert list(metrics_frame(back.metrics)["requirements"]) == ["BMAAS09 SLURM07", "SLURM04 SLURM06", ""]
    older = back.to_dict()["metrics"][0]
    del older["requirements"]  # a record written before checks named requirements reads as naming none
    assert MetricResult.from_dict(older).requirements == []


def _with_requirements(record: dict[str, Any]) -> RunRecord:
    """A synthetic record as a run judges it now: each check naming what its catalogue entry names."""
    metrics = load_thresholds().metrics
    for check in record["metrics"]:
        check["requirements"] = list(metrics[check["metric"]].requirements)
    return RunRecord.from_dict(record)


def test_the_summary_groups_the_verdicts_by_requirement() -> None:
    record = _with_requirements(gpu_record())
    finetune = "tests/acceptance/test_training.py::test_finetune_node[gpu-a02-ddp]"
    record.metrics.append(
        MetricResult(finetune, "train_loss_final", 0.31, "nats", "gpu-a02", "H200", max=0.5, verdict="pass")
    )
    record.metrics[-1].requirements = ["BMAAS12"]
    rows = {r.id: r for r in requirement_rows(record, load_catalogue())}
    assert list(rows) == ["BMAAS06", "BMAAS08", "BMAAS09", "BMAAS11", "BMAAS12", "SLURM07", "SLURM08"]
    assert (rows["BMAAS09"].verdict, rows["BMAAS09"].failing) == ("failed", ["gpu-a02"])  # the slow GPU
    assert (rows["BMAAS08"].verdict, rows["BMAAS08"].failing) == ("failed", ["gpu-a01"])  # the ECC fault
    assert rows["BMAAS06"].word == "passed" and rows["BMAAS06"].partly and rows["BMAAS06"].judged > 0
    # gpu-a01's fine-tune timed out before any check: gpu-a02's case says which requirement it serves
    assert (rows["BMAAS12"].word, rows["BMAAS12"].unmeasured) == ("could not measure", ["gpu-a01"])
    assert "versions_consistent" not in {c.metric for c in record.metrics if c.requirements}  # proves none
    page = build_summary(record, thresholds=load_thresholds())
    assert 'id="requirements"' in page and "<b>BMAAS12</b> Training workload test" in page
    assert "partly covered" in page
    plain = build_summary(RunRecord.from_dict(gpu_record()), thresholds=load_thresholds())
    assert "No check of this run record names a requirement" in plain


def test_allure_links_each_requirement_once_to_its_source() -> None:
    checks = [
        MetricResult("t", "p2p_gbps", 1.0, "GB/s", "n", "H200", requirements=["BMAAS06"]),
        MetricResult("t", "nvlink_links_active", 18, "links", "n", "H200", requirements=["BMAAS06", "BMAAS08"]),
        MetricResult("t", "x", 1, "u", "n", "H200", requirements=["ZZ99"]),
    ]
    links = requirement_links(checks, load_catalogue())
    assert [link.id for link in links] == ["BMAAS06", "BMAAS08", "ZZ99"]
    assert links[0].name == "BMAAS06: Nodes can communicate across ethernet, infiniband, and NVLink (Bare Metal)"
    assert links[0].url is not None and links[0].url.startswith("https://github.com/NVIDIA/ai-cloud-validation/blob/")
    assert links[0].url.endswith("/docs/requirements/software-reference-requirements.yaml")
    assert links[2].url is None  # an ID the catalogue lacks (a newer record) is labelled, not linked


SUITE = """
import pytest

pytestmark = [pytest.mark.acceptance]


@pytest.mark.slurm
def test_step_lands(node, judge):
    judge.expect("slurm_step_node", node, node, node=node)
"""


def test_a_run_carries_the_ids_to_the_record_allure_and_the_summary(tmp_path: Path) -> None:
    """Through the real plugin: the check in the record, a label and link per ID in Allure, a summary row."""
    run = run_inner(write_suite(tmp_path, SUITE), "-m", "acceptance", "--launcher", "local")
    assert run.returncode == EXIT_TEST_HOOKS, run.output[-3000:]  # passed, under the selftest's hook
    (check,) = run.record["metrics"]
    assert check["requirements"] == ["SLURM04", "SLURM06"]
    (result,) = [json.loads(p.read_text()) for p in (tmp_path / "reports" / "allure-results").glob("*-result.json")]
    assert [x["value"] for x in result["labels"] if x["name"] == "requirement"] == ["SLURM04", "SLURM06"]
    links = {x["name"]: x for x in result["links"]}
    assert links["SLURM04: SlurmJobSubmission"]["type"] == "requirement"
    summary = (tmp_path / "reports" / "summary.html").read_text()
    assert "<b>SLURM04</b> SlurmJobSubmission" in summary and "<b>SLURM06</b>" in summary
