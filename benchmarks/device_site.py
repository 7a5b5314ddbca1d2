"""The site file for a GPU host's storage and tenant-safety runs: the host's own site file (what it declares
absent: NVLink on a GPU alone in a VM, InfiniBand) with a ``storage:`` and a ``tenant:`` section over it.

    python3 benchmarks/device_site.py fixtures/site/h100-1gpu.yaml --contract superpod-h100-good > /tmp/site.yaml
    python3 benchmarks/device_site.py fixtures/site/h100-1gpu.yaml --contract fixtures/site/gpu-vm-disk.yaml

The host's local disk stands in for a shared filesystem: every loopback node of the host sees one folder of it
(``--path``), which is what a shared filesystem is to the storage tests; the declaration says so in its source.
The GPU VMs of this workplace boot without UEFI and have no TPM and no health agent (docs/measurements.md): the
tenant section declares those absent, as a VM site would.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

TENANT = {
    "source": "docs/measurements.md 'GPU VMs, 2026-11-28: storage and tenant safety': the GPU VM boots without UEFI "
    "(no /sys/firmware/efi), has no TPM (no /sys/class/tpm) and runs no GPU health agent (no DCGM, no GPUd)",
    "root_of_trust": {"uefi": "absent", "secure_boot": "absent", "tpm": "absent"},
    "agents": "absent",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="the host's site file (fixtures/site/...)")
    parser.add_argument("--contract", required=True, help="a preset's name, or a YAML file holding one contract")
    parser.add_argument("--path", default="/var/tmp/gpuaccept-storage")
    args = parser.parse_args()
    site = yaml.safe_load(args.base.read_text())
    given = Path(args.contract)
    contract = yaml.safe_load(given.read_text()) if given.is_file() else args.contract
    site["storage"] = {
        "filesystems": {
            "local-disk": {"path": args.path, "scope": "shared", "role": "checkpoints", "contract": contract}
        }
    }
    site["tenant"] = TENANT
    yaml.safe_dump(site, sys.stdout, sort_keys=False, width=120)


if __name__ == "__main__":
    main()
