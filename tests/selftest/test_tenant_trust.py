"""Root of trust (SEC22): the trust probe on sysfs fixtures (fixtures/tenant/sysfs-*), judged where the site
requires it, shown where it does not, declared absent on a VM."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaccept.probes import trust
from gpuaccept.thresholds.tenant_site import TenantSite
from gpuaccept.verdicts.tenant import judge_trust, trust_absent

from ._tenant_judge import RecordingJudge

pytestmark = pytest.mark.selftest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tenant"
REQUIRED = TenantSite.model_validate(
    {"source": "site policy", "root_of_trust": {"uefi": True, "secure_boot": True, "tpm": True}}
)


@pytest.mark.parametrize(
    ("tree", "uefi", "secure_boot", "setup_mode", "tpm"),
    [
        ("sysfs-secureboot-on", True, True, False, 2),
        ("sysfs-secureboot-off", True, False, False, 1),
        ("sysfs-setup-mode", True, True, True, 2),
        ("sysfs-no-uefi", False, None, None, None),
    ],
)
def test_probe_reads_the_boot_chain(tree: str, uefi: bool, secure_boot: bool, setup_mode: bool, tpm: int) -> None:
    record = trust.collect(FIXTURES / tree)
    assert (record.uefi, record.secure_boot, record.setup_mode, record.tpm_version) == (
        uefi,
        secure_boot,
        setup_mode,
        tpm,
    )
    assert record.tpm_present == (tpm is not None)


def _verdicts(tree: str, site: TenantSite = REQUIRED) -> dict[str, tuple[bool, object]]:
    judge = RecordingJudge()
    judge_trust(trust.collect(FIXTURES / tree), site, judge, "n1")
    return {c.metric if c.kind == "expect" else c.extra["field"]: (c.passed, c.value) for c in judge.calls}


def test_required_and_present_passes() -> None:
    assert _verdicts("sysfs-secureboot-on") == {
        "uefi_boot": (True, "UEFI"),
        "secure_boot": (True, "enabled"),
        "tpm_version": (True, "TPM 2.0"),
    }


def test_secure_boot_off_and_tpm_12_fail() -> None:
    verdicts = _verdicts("sysfs-secureboot-off")
    assert verdicts["secure_boot"] == (False, "disabled") and verdicts["tpm_version"] == (False, "TPM 1.2")
    assert _verdicts("sysfs-setup-mode")["secure_boot"][0] is False


def test_the_gpu_vm_without_uefi_fails_where_required() -> None:
    verdicts = _verdicts("sysfs-no-uefi")
    assert verdicts == {
        "uefi_boot": (False, "legacy BIOS (no /sys/firmware/efi)"),
        "secure_boot": (False, "not available (no UEFI)"),
        "tpm_version": (False, "no TPM"),
    }


def test_not_required_is_shown_not_judged_and_absent_is_skipped() -> None:
    site = TenantSite.model_validate(
        {"source": "VM offer", "root_of_trust": {"uefi": False, "secure_boot": "absent", "tpm": "absent"}}
    )
    judge = RecordingJudge()
    judge_trust(trust.collect(FIXTURES / "sysfs-no-uefi"), site, judge, "n1")
    assert [(c.kind, c.metric, c.extra["field"]) for c in judge.calls] == [("info", "root_of_trust", "uefi_boot")]
    vm = TenantSite.model_validate(
        {"source": "VM offer", "root_of_trust": {"uefi": "absent", "secure_boot": "absent", "tpm": "absent"}}
    )
    assert "declares its root of trust absent" in (trust_absent(vm, "n1") or "")
    assert trust_absent(site, "n1") is None


def test_undeclared_names_the_site_key() -> None:
    assert "tenant.root_of_trust" in (trust_absent(None, "n1") or "")
    assert "tenant.root_of_trust" in (trust_absent(TenantSite(source="x"), "n1") or "")


def test_main_emits_one_result(capsys: pytest.CaptureFixture[str]) -> None:
    trust.main(["--root", str(FIXTURES / "sysfs-secureboot-on")])
    assert capsys.readouterr().out.startswith("GPUACCEPT_RESULT ")
