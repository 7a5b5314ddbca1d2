"""An unreadable reading is never a pass (issue 57 item 4): a version the bulletins cannot compare, a firmware string
the site's approved list cannot compare, a Secure Boot or TPM reading that was not read where the site requires it,
and an exporter's GPUs with NVML's count unread are each "could not measure", naming node, component and text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaccept.contracts.tenant import AgentRecord, SoftwareRecord, TrustRecord
from gpuaccept.probes.agent import one_agent
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
    read = TrustRecord(
        uefi=True, secure_boot=None, setup_mode=None, tpm_present=True, tpm_version=None, tpm_devices=["tpm0"], notes=[]
    )
    judge_trust(read, site, judge, "node2")
    kinds = {c.metric: c.kind for c in judge.calls}
    assert kinds == {"uefi_boot": "expect", "secure_boot": "unreadable", "tpm_version": "unreadable"}
    assert "node2" in judge.of("tpm_version")[0].value


def test_an_exporter_with_nvml_unread_is_could_not_measure() -> None:
    decl = AgentDeclaration(name="dcgm-exporter", kind="dcgm-exporter")
    site = TenantSite(source="baseline", agents=[decl])
    exporter = one_agent({"name": "dcgm-exporter", "kind": "dcgm-exporter"}).model_copy(
        update={"exporter_gpus": ["0", "1"]}
    )
    record = AgentRecord(agents=[exporter], nvml_gpus=None, nvml_uuids=[], dcgm_version=None)
    judge = RecordingJudge()
    judge_agents(record, site, judge, "node2")
    (gpus,) = judge.of("health_agent_gpus")
    assert gpus.kind == "unreadable" and "NVML" in gpus.value and "node2" in gpus.value


# ---- end to end: a node whose NVML answers a driver version that is no version --------------------------------------

#: node2's NVML (pynvml, bound over the installed one in its mount namespace) answers this for the driver version,
#: node1's a real version: the probe and the judge run for real through srun on both
FAKE_NVML = '''"""pynvml as a node whose driver reports {driver!r}: every other call is the installed pynvml's."""
import importlib.util as _util
import sys as _sys

_spec = _util.spec_from_file_location("_installed_pynvml", {real!r})
_real = _util.module_from_spec(_spec)
_sys.modules["_installed_pynvml"] = _real
_spec.loader.exec_module(_real)


def nvmlInit():
    return None


def nvmlSystemGetDriverVersion():
    return {driver!r}


def nvmlSystemGetCudaDriverVersion():
    return 13000


def nvmlDeviceGetCount():
    return 0


def __getattr__(name):
    return getattr(_real, name)
'''


@pytest.mark.loopback
def test_an_unreadable_driver_version_on_one_node_is_could_not_measure_end_to_end(tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess

    import pynvml  # type: ignore[import-untyped]

    from .conftest import REPO, run_inner, start_cluster, stop_cluster

    if os.geteuid() != 0 or shutil.which("nsenter") is None:
        pytest.skip("root and nsenter are needed to bind a module in one node's namespace")
    real = tmp_path / "installed_pynvml.py"
    shutil.copy(pynvml.__file__, real)
    fakes = {}
    for node, driver in (("node1", "580.159.04"), ("node2", "garbage")):
        fakes[node] = tmp_path / f"pynvml-{node}.py"
        fakes[node].write_text(FAKE_NVML.format(driver=driver, real=str(real)))
    (tmp_path / "gpus").mkdir()
    cluster = start_cluster(2, gpus_per_node=1, gpu_files=tmp_path / "gpus", own_mounts=True)
    try:
        for node, fake in fakes.items():
            exec_on = [str(REPO / "slurm" / "dev-cluster" / "node-exec.sh"), node, str(cluster.directory), "--"]
            subprocess.run([*exec_on, "mount", "--bind", str(fake), pynvml.__file__], check=True, timeout=60)
        run = run_inner(
            tmp_path,
            *("-m", "acceptance", "--launcher", "slurm", "--nodes", "2", "--rootdir", str(REPO)),
            *("-k", "known_vulnerable", str(REPO / "tests" / "acceptance" / "test_tenant.py")),
            env=cluster.env,
            timeout=300,
        )
    finally:
        stop_cluster(cluster)
    verdicts = run.verdicts()
    print("unreadable driver:", verdicts, run.messages())
    assert verdicts == {
        "test_known_vulnerable_software[node1]": "passed",
        "test_known_vulnerable_software[node2]": "error",
    }, run.output[-3000:]
    (driver,) = [
        m
        for m in run.record["metrics"]
        if m["metric"] == "software_bulletin" and m["node"] == "node2" and "gpu_driver" in m["reason"]
    ]
    assert driver["verdict"] == "unmeasured" and "'garbage'" in driver["reason"], driver
