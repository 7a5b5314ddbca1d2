"""What this process runs in: the image's marker file, the Python it found, the container runtime's traces.

Read here, apart from the ``container`` probe that prints it, because two sides need it: every probe's
result line carries ``ran_in()`` (``_protocol.emit``), and the ``container`` probe emits ``where()``
through ``_protocol``; with the reading in either of those two files they would import each other.

The marker is ``/etc/gpuaccept-image.json``, baked in by ``slurm/dev-cluster/image.sh`` (and by the
recipes in docs/containers.md); an image without one is reported by its ``/etc/os-release`` name.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

__all__ = ["MARKER", "ran_in", "where"]

MARKER = Path("/etc/gpuaccept-image.json")

#: files that container runtimes leave inside what they start
_TRACES: tuple[tuple[str, str], ...] = (("docker", "/.dockerenv"), ("podman", "/run/.containerenv"))


def _marker() -> str | None:
    try:
        raw = json.loads(MARKER.read_text())
    except (OSError, ValueError):
        return None
    name = raw.get("name") if isinstance(raw, dict) else None
    return str(name) if name else None


def _os_name() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return None


def _runtime() -> str | None:
    """Which runtime started this process, from what it leaves behind; None on the host (or unknown)."""
    if os.environ.get("SLURM_CONTAINER"):  # srun --container: Slurm's own OCI support (runc, crun)
        return "oci"
    if any(name.startswith(("ENROOT_", "PYXIS_")) for name in os.environ):
        return "enroot"
    for name, path in _TRACES:
        if Path(path).exists():
            return name
    return None


def where() -> dict[str, Any]:
    """``{"image": marker name or None, "os": ..., "runtime": ..., "python": "3.11.2 /usr/bin/python3"}``."""
    return {
        "image": _marker(),
        "os": _os_name(),
        "runtime": _runtime(),
        "python": f"{platform.python_version()} {sys.executable}",
    }


def ran_in() -> dict[str, Any]:
    """``where()`` as every result line carries it, short (lines over 800 bytes are sent in parts): the
    image's marker name, else its OS; the runtime; the Python."""
    found = where()
    return {"image": found["image"] or found["os"], "runtime": found["runtime"], "python": found["python"]}
