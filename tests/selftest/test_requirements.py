"""Each check names the requirements it proves: the catalogue, the declarations, docs/requirements.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaccept.thresholds.loader import ThresholdsError, load_thresholds
from gpuaccept.thresholds.requirements import Catalogue, load_catalogue
from gpuaccept.thresholds.requirements_doc import PAGE, render
from gpuaccept.thresholds.schema import MetricSpec
from gpuaccept.thresholds.trace import TraceError, trace

from .conftest import REPO


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
    assert named <= {t.requirement.id for t in traced if t.coverage != "not covered" or t.shown}


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
    line = '  memory_gib: {unit: GiB, description: "host memory (MemTotal)", informational: true'
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
        "m2": _spec(unit="x", description="d", informational=True, requirements=("DD01",)),
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
        "m2": _spec(unit="x", description="d", informational=True, requirements=("AA01",)),
        "m3": _spec(unit="x", description="d", no_requirement="proves nothing on purpose"),
    }
    got = {t.requirement.id: (t.coverage, t.judged, t.shown) for t in trace(metrics, catalogue)}
    assert got == {
        "AA01": ("covered", ("m1",), ("m2",)),
        "BB01": ("partly covered", ("m1",), ()),
        "CC01": ("not covered", (), ()),
    }


def test_a_check_cannot_both_serve_and_serve_none() -> None:
    with pytest.raises(ValueError, match="names requirements and no_requirement"):
        MetricSpec(unit="x", description="d", requirements=("BMAAS09",), no_requirement="and also nothing at all")
