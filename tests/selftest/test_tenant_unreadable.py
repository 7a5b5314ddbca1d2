"""An unreadable reading is never a pass (issue 57 item 4): a version the bulletins cannot compare, a firmware string
the site's approved list cannot compare, a Secure Boot or TPM reading that was not read where the site requires it,
and an exporter's GPUs with NVML's count unread are each "could not measure", naming node, component and text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaccept.contracts.tenant import AgentRecord, AgentState, SoftwareRecord, TrustRecord
from gpuaccept.thresholds.bulletins import UnreadableVersion, findings, load_catalogue
from gpuaccept.thresholds.tenant_site import AgentDeclaration, RootOfTrust, TenantSite
from gpuaccept.verdicts.tenant import judge_agents, judge_approved, judge_bulletins, judge_trust

from ._tenant_judge import RecordingJudge

pytestmark = pytest.mark.selftest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tenant"


def _software(**changed: object) -> SoftwareRecord:
    recorded = json.loads((FIXTURES / "software-580.159.04.json").read_text())
    return SoftwareRecord.model_validate(recorded | changed)


@pytest.mark.parametrize("text", ["garbage", "N/A", "[Unknown Error]", "580", ""])
def test_a_version_without_dotted_numbers_is_not_compared(text: str) -> None:
    with pytest.raises(UnreadableVersion, match="not a version"):
        findings("gpu_driver", text, load_catalogue())
    assert findings("dcgm_exporter", "3.3.5-3.4.0", load_catalogue()) is not None  # a readable compound version


def test_an_unreadable_driver_version_is_could_not_measure_naming_node_component_and_text() -> None:
    judge = RecordingJudge()
    judge_bulletins(_software(driver="garbage"), load_catalogue(), judge, "node2")
    (driver,) = [c for c in judge.of("software_bulletin") if c.extra["field"] == "gpu_driver"]
    assert driver.kind == "unreadable" and driver.node == "node2"
    assert "node2" in driver.value and "gpu_driver" in driver.value and "'garbage'" in driver.value
    assert not any(c.passed for c in judge.of("software_bulletin"))


def test_a_firmware_string_the_approved_list_cannot_compare_is_could_not_measure() -> None:
    site = TenantSite(source="site baseline", approved={"vbios": ["96.00.99.*"]})
    gpus = [{"index": 0, "uuid": "GPU-0", "pci_bus_id": "00000000:18:00.0", "vbios": "[Unknown Error]"}]
    judge = RecordingJudge()
    judge_approved(_software(gpus=gpus), site, judge, "node2")
    (vbios,) = judge.of("software_approved")
    assert vbios.kind == "unreadable" and "vbios" in vbios.value and "'[Unknown Error]'" in vbios.value
    assert "node2" in vbios.value and "96.00.99.*" in vbios.value


def test_secure_boot_and_tpm_not_read_where_required_are_could_not_measure() -> None:
    site = TenantSite(source="baseline", root_of_trust=RootOfTrust(uefi=True, secure_boot=True, tpm=True))
    judge = RecordingJudge()
    judge_trust(TrustRecord(uefi=True, secure_boot=None, tpm_present=True, tpm_version=None), site, judge, "node2")
    kinds = {c.metric: c.kind for c in judge.calls}
    assert kinds == {"uefi_boot": "expect", "secure_boot": "unreadable", "tpm_version": "unreadable"}
    assert "node2" in judge.of("tpm_version")[0].value


def test_an_exporter_with_nvml_unread_is_could_not_measure() -> None:
    decl = AgentDeclaration(name="dcgm-exporter", kind="dcgm-exporter")
    site = TenantSite(source="baseline", agents=[decl])
    record = AgentRecord(agents=[AgentState(name="dcgm-exporter", exporter_gpus=["0", "1"])], nvml_gpus=None)
    judge = RecordingJudge()
    judge_agents(record, site, judge, "node2")
    (gpus,) = judge.of("health_agent_gpus")
    assert gpus.kind == "unreadable" and "NVML" in gpus.value and "node2" in gpus.value
