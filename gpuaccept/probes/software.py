"""What software a node runs, for NVIDIA's security bulletins and the site's approved list (VMAAS07, CNP09,
ATTEST01): GPU driver, the CUDA version the driver supports, each GPU's VBIOS (NVML), kernel release, OS
(``/etc/os-release`` ID and VERSION_ID, os-release(5)), DCGM's host engine and the DCGM exporter.

Every field is what was read, or None where the thing is not there (no NVML, no DCGM installed): never a
guessed value, so a judge can tell "not installed" from "below a fix". The DCGM tools print their version
on a line of their own (``dcgmi --version``: "dcgmi  version: 4.2.3"; ``dcgm-exporter --version``:
"dcgm-exporter version 4.2.3-4.1.3", DCGM's version, then the exporter's); the first dotted version on the
output is taken, whatever words surround it; a tool that prints none gives the text it printed, for the judge
to call unreadable.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from gpuaccept.contracts.tenant import GpuSoftware, SoftwareRecord
from gpuaccept.probes._nvml import nvml, text
from gpuaccept.probes._protocol import emit_read_under_root

__all__ = ["collect", "dcgm_exporter_version", "dcgm_version", "main", "os_release", "tool_version"]

#: a dotted version, optionally a second one behind a dash (the exporter's "<DCGM>-<exporter>")
VERSION = re.compile(r"\b(\d+(?:\.\d+)+(?:-\d+(?:\.\d+)+)?)\b")


def tool_version(*command: str, timeout: float = 10.0) -> str | None:
    """The first dotted version ``command`` prints; None where the tool is missing. A tool that is there but
    fails or prints no version gives what it said (its first line, or why it did not run): the judge calls that
    "could not measure", never "not installed" (nothing of it to be vulnerable)."""
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{command[0]} did not run: {exc}"[:200]
    said = done.stdout + "\n" + done.stderr
    match = VERSION.search(said)
    if match:
        return match.group(1)
    first = next((line.strip() for line in said.splitlines() if line.strip()), "")
    return (first or f"{' '.join(command)} printed nothing (exit {done.returncode})")[:200]


def dcgm_version() -> str | None:
    """DCGM's version from its host engine or its CLI, whichever is installed."""
    return tool_version("nv-hostengine", "--version") or tool_version("dcgmi", "--version")


def dcgm_exporter_version() -> str | None:
    """The DCGM exporter's ``<DCGM>-<exporter>`` version where its binary is on this node."""
    return tool_version("dcgm-exporter", "--version")


def os_release(root: str | Path = "/") -> tuple[str | None, str | None]:
    """``ID`` and ``VERSION_ID`` of os-release(5): ``/etc/os-release``, else ``/usr/lib/os-release``."""
    for path in (Path(root) / "etc/os-release", Path(root) / "usr/lib/os-release"):
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        fields = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
        return (
            fields.get("ID", "").strip().strip('"') or None,
            fields.get("VERSION_ID", "").strip().strip('"') or None,
        )
    return None, None


def _nvml_versions() -> tuple[str | None, str | None, list[GpuSoftware]]:
    lib = nvml()
    if lib is None:
        return None, None, []
    driver = cuda = None
    try:
        driver = text(lib.nvmlSystemGetDriverVersion())
    except Exception:
        pass
    try:
        raw = int(lib.nvmlSystemGetCudaDriverVersion())  # 13000 = CUDA 13.0 (NVML's encoding: major*1000+minor*10)
        cuda = f"{raw // 1000}.{raw % 1000 // 10}"
    except Exception:
        pass
    gpus: list[GpuSoftware] = []
    try:
        count = int(lib.nvmlDeviceGetCount())
    except Exception:
        count = 0
    for index in range(count):
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
        except Exception:
            continue
        fields: dict[str, str | None] = {}
        for key, call in (
            ("uuid", lib.nvmlDeviceGetUUID),
            ("vbios", lib.nvmlDeviceGetVbiosVersion),
        ):
            try:
                fields[key] = text(call(handle))
            except Exception:
                fields[key] = None
        try:
            fields["pci_bus_id"] = text(lib.nvmlDeviceGetPciInfo(handle).busId)
        except Exception:
            fields["pci_bus_id"] = None
        gpus.append(GpuSoftware(index=index, **fields))
    return driver, cuda, gpus


def collect(root: str | Path = "/") -> SoftwareRecord:
    driver, cuda, gpus = _nvml_versions()
    os_id, os_version = os_release(root)
    return SoftwareRecord(
        driver=driver,
        cuda_driver=cuda,
        kernel=os.uname().release,
        os_id=os_id,
        os_version_id=os_version,
        dcgm=dcgm_version(),
        dcgm_exporter=dcgm_exporter_version(),
        gpus=gpus,
    )


def main(argv: Sequence[str] | None = None) -> None:
    emit_read_under_root(
        collect, probe="software", doc=__doc__, root_help="read os-release under this tree instead of /", argv=argv
    )


if __name__ == "__main__":
    main()
