"""The node's root of trust (SEC22): UEFI boot, Secure Boot, TPM, as sysfs shows them.

* UEFI: the kernel creates ``/sys/firmware/efi`` only when the firmware booted it through UEFI (kernel
  documentation, Documentation/ABI/stable/sysfs-firmware-efi); a legacy-BIOS boot has none.
* Secure Boot: the EFI global variable ``SecureBoot`` (GUID 8be4df61-93ca-11d2-aa0d-00e098032b8c, UEFI
  specification 2.10 section 3.3 "Globally Defined Variables": 1 = enabled, 0 = disabled) and ``SetupMode``
  (1 = no platform key enrolled, nothing is enforced). efivarfs prints a 4-byte attribute word before the
  value, so the value is the 5th byte.
* TPM: ``/sys/class/tpm/tpm<N>/tpm_version_major`` (Linux 5.6 and later: "1" or "2"); on older kernels a
  TPM 2.0 exposes no ``caps`` file while a TPM 1.2 does, and ``device/description`` may name it.

``--root DIR`` reads a copied tree instead of ``/`` (the selftests' fixtures under fixtures/tenant/).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuaccept.contracts.tenant import TrustRecord
from gpuaccept.probes._protocol import emit_read_under_root

__all__ = ["collect", "main"]

GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"


def _efivar(root: Path, name: str, notes: list[str]) -> bool | None:
    """The value byte of an EFI global boolean variable, None where it is absent or unreadable: efivarfs
    puts a 4-byte attribute word before it, the older sysfs-efivars ``data`` file holds the value alone."""
    leaf = f"{name}-{GLOBAL_GUID}"
    for path, skip in (
        (root / "sys/firmware/efi/efivars" / leaf, 4),
        (root / "sys/firmware/efi/vars" / leaf / "data", 0),
    ):
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            notes.append(f"{name}: /{path.relative_to(root)} unreadable ({exc.strerror or exc})")
            return None
        value = raw[skip : skip + 1]
        if not value:
            notes.append(f"{name}: /{path.relative_to(root)} holds {len(raw)} bytes, no value")
            return None
        return value[0] == 1
    notes.append(f"{name}: no EFI variable {leaf}")
    return None


def _tpm_version(device: Path) -> int | None:
    """A TPM's major version: ``tpm_version_major``, else 1 where a ``caps`` file (TPM 1.2 only) exists,
    else what ``device/description`` names; None when nothing tells."""
    major = device / "tpm_version_major"
    if major.is_file():
        text = major.read_text().strip()
        return int(text) if text.isdigit() else None
    if (device / "caps").is_file() or (device / "device" / "caps").is_file():
        return 1
    description = device / "device" / "description"
    if description.is_file():
        text = description.read_text()
        if "2.0" in text:
            return 2
        if "1.2" in text:
            return 1
    return None


def collect(root: str | Path = "/") -> TrustRecord:
    """The boot chain under ``root``."""
    base = Path(root)
    notes: list[str] = []
    uefi = (base / "sys/firmware/efi").is_dir()
    secure_boot = setup_mode = None
    if uefi:
        secure_boot = _efivar(base, "SecureBoot", notes)
        setup_mode = _efivar(base, "SetupMode", notes)
    else:
        notes.append("no /sys/firmware/efi: booted through legacy BIOS (or the firmware hides UEFI)")
    tpm_root = base / "sys/class/tpm"
    devices = sorted(p for p in tpm_root.glob("tpm[0-9]*")) if tpm_root.is_dir() else []
    versions = [v for v in (_tpm_version(d) for d in devices) if v is not None]
    if devices and not versions:
        notes.append(f"TPM {', '.join(d.name for d in devices)}: its version is not readable")
    return TrustRecord(
        uefi=uefi,
        secure_boot=secure_boot,
        setup_mode=setup_mode,
        tpm_present=bool(devices),
        tpm_version=max(versions) if versions else None,
        tpm_devices=[d.name for d in devices],
        notes=notes,
    )


def main(argv: Sequence[str] | None = None) -> None:
    emit_read_under_root(
        collect,
        probe="trust",
        doc=__doc__,
        root_help="read this tree instead of / (a copied sysfs, fixtures)",
        argv=argv,
    )


if __name__ == "__main__":
    main()
