"""NVIDIA security bulletins (gpuaccept/data/bulletins.json, generated from NVIDIA/product-security's CSAF):
the fixes the issue quotes are in the catalogue, versions are compared by branch, and the judge fails a
node below a fix naming node, component, version, fix and bulletin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaccept.contracts.tenant import SoftwareRecord
from gpuaccept.thresholds.bulletins import findings, load_catalogue, version_key
from gpuaccept.thresholds.bulletins_refresh import bulletin_of
from gpuaccept.thresholds.tenant_site import TenantSite
from gpuaccept.verdicts.tenant import NO_KNOWN_VULNERABLE, judge_approved, judge_bulletins

from ._tenant_judge import RecordingJudge

pytestmark = pytest.mark.selftest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tenant"


def _software(name: str) -> SoftwareRecord:
    return SoftwareRecord.model_validate(json.loads((FIXTURES / f"software-{name}.json").read_text()))


def test_catalogue_holds_the_fixes_the_issue_quotes() -> None:
    bulletins = {b.id: b for b in load_catalogue().bulletins}
    may = bulletins["5821"].components["gpu_driver"]
    assert {line: fix.fixed for line, fix in may.items()} == {
        "R535": "535.309.01",
        "R580": "580.159.03",
        "R595": "595.71.05",
    }
    july = bulletins["5857"]
    assert july.cves == ["CVE-2026-47483"] and july.components["dcgm"]["*"].fixed == "4.5.3"


def test_versions_compare_by_number() -> None:
    assert version_key("580.159.10") > version_key("580.159.9") > version_key("580.126.09")


@pytest.mark.parametrize(
    ("version", "bulletins"),
    [
        ("580.159.04", []),  # the GPU machine at hand: above every R580 fix
        ("580.159.03", []),
        ("580.159.02", ["5821"]),
        ("580.95.05", ["5821", "5747"]),
        ("535.288.01", ["5821"]),
        ("590.48.01", ["5821"]),  # R590 not among May 2026's branches, older than R595: no fix for it
        ("600.10.01", []),  # a branch newer than every bulletin's
    ],
)
def test_driver_findings_by_branch(version: str, bulletins: list[str]) -> None:
    assert [f.bulletin for f in findings("gpu_driver", version, load_catalogue())] == bulletins


def test_unlisted_older_branch_says_no_fix() -> None:
    (finding,) = findings("gpu_driver", "590.48.01", load_catalogue())
    assert finding.fixed is None and "no fix for R590" in finding.why


def test_dcgm_below_the_july_2026_fix() -> None:
    assert [f.bulletin for f in findings("dcgm", "4.5.2", load_catalogue())] == ["5857"]
    assert findings("dcgm", "4.5.3", load_catalogue()) == []
    assert findings("dcgm", None, load_catalogue()) == []


def test_judge_passes_the_machine_at_hand() -> None:
    judge = RecordingJudge()
    judge_bulletins(_software("580.159.04"), load_catalogue(), judge, "n1")
    (driver,) = judge.of("software_bulletin")  # DCGM not installed: nothing of it judged
    assert driver.passed and driver.extra["field"] == "gpu_driver"
    shown = {c.extra["field"]: c.value for c in judge.of("software_version")}
    assert shown["gpu_driver"] == "580.159.04" and shown["dcgm"] == "not installed" and shown["os"] == "ubuntu 24.04"


def test_judge_fails_an_older_driver_naming_fix_and_bulletin() -> None:
    judge = RecordingJudge()
    judge_bulletins(_software("580.95.05"), load_catalogue(), judge, "n1")
    failed = [c for c in judge.of("software_bulletin") if not c.passed]
    by = {(c.extra["field"], c.extra["bulletin"]): c for c in failed}
    assert set(by) == {("gpu_driver", "5821"), ("gpu_driver", "5747"), ("dcgm", "5857"), ("dcgm_exporter", "5857")}
    may = by[("gpu_driver", "5821")]
    assert may.expected == NO_KNOWN_VULNERABLE and may.extra["fixed"] == "580.159.03" and may.node == "n1"
    assert may.value.startswith("gpu_driver 580.95.05 (fixed in 580.159.03: bulletin 5821 ")
    assert by[("dcgm_exporter", "5857")].extra["version"] == "4.8.1"  # the exporter part of 4.5.2-4.8.1


def test_approved_list() -> None:
    site = TenantSite(source="site baseline", approved={"gpu_driver": ["580.159.*"], "os": ["ubuntu 24.04"]})
    judge = RecordingJudge()
    judge_approved(_software("535.288.01"), site, judge, "n1")
    verdicts = {c.extra["field"]: (c.passed, c.value, c.expected) for c in judge.of("software_approved")}
    assert verdicts == {
        "gpu_driver": (False, "535.288.01", "one of 580.159.*"),
        "os": (True, "ubuntu 24.04", "ubuntu 24.04"),
    }


def test_refresh_reads_a_csaf_document() -> None:
    """The refresh's reading of one CSAF bulletin, in the shape NVIDIA publishes (trimmed: one product)."""
    doc = {
        "document": {
            "title": "Security Bulletin: GPU Display Driver - May 2026",
            "tracking": {
                "id": "5821",
                "initial_release_date": "2026-05-19T00:00:00Z",
                "current_release_date": "2026-05-21T00:00:00Z",
            },
        },
        "product_tree": {
            "branches": [
                {
                    "category": "vendor",
                    "name": "NVIDIA",
                    "branches": [
                        {
                            "category": "architecture",
                            "name": "Linux(R580)",
                            "branches": [
                                {
                                    "category": "product_version",
                                    "name": "Tesla",
                                    "product": {"name": "All driver versions prior to 580.159.03", "product_id": "a"},
                                },
                                {
                                    "category": "product_version",
                                    "name": "Tesla",
                                    "product": {"name": "580.159.03", "product_id": "f"},
                                },
                            ],
                        },
                        {
                            "category": "architecture",
                            "name": "Linux(R580 vGPU 19)",
                            "branches": [
                                {
                                    "category": "product_version",
                                    "name": "Guest driver",
                                    "product": {"name": "580.1", "product_id": "g"},
                                },
                            ],
                        },
                    ],
                }
            ]
        },
        "vulnerabilities": [
            {"cve": "CVE-2026-24187", "product_status": {"fixed": ["f", "g"], "known_affected": ["a"]}},
        ],
    }
    entry = bulletin_of(doc)
    assert entry is not None and entry.published == "2026-05-19"
    assert entry.components == {"gpu_driver": {"R580": entry.components["gpu_driver"]["R580"]}}
    assert entry.components["gpu_driver"]["R580"].fixed == "580.159.03"
    assert entry.components["gpu_driver"]["R580"].cves == ["CVE-2026-24187"]
