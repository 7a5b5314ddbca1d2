"""What the node check keeps between runs, per node: the kernel-log position, NVLink counters, the PCIe
replay counters that open the next window, the node's declared GPU count, and the last result.

Kept in ``<state-dir>/<node>/`` (default ``/var/lib/gpuaccept/nodecheck``; one folder per node so
several slurmd of a test cluster on one host do not share it). Positions and counters carry the boot
id they were taken in: after a reboot they are void and the window starts at boot again.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_STATE_DIR", "NodeState"]

DEFAULT_STATE_DIR = Path("/var/lib/gpuaccept/nodecheck")


class NodeState:
    """One node's state folder; every file is written atomically and an unreadable one reads as empty."""

    def __init__(self, root: Path, node: str) -> None:
        self.folder = root / node

    def read(self, name: str) -> dict[str, Any]:
        try:
            data = json.loads((self.folder / f"{name}.json").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def write(self, name: str, data: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{name}-", suffix=".json")
        with os.fdopen(fd, "w") as handle:
            json.dump({**data, "written_at": time.time()}, handle, indent=1, default=str)
        os.replace(tmp, self.folder / f"{name}.json")

    def for_boot(self, name: str, boot: str) -> dict[str, Any]:
        """The file's content if it was written in this boot, else empty."""
        data = self.read(name)
        return data if data.get("boot_id") == boot else {}
