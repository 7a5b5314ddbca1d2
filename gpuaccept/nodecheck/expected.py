"""The cluster's expected fingerprint: what the acceptance run found on most nodes, for the node check.

Written by the plugin at the end of every acceptance run that fingerprinted nodes
(``reports/expected-fingerprint.json``); an operator copies the file of an accepted run to where the
node check reads it (``/etc/gpuaccept/expected-fingerprint.json`` by default, or a shared filesystem).
The reference value of each field is the one most nodes had, as the cross-node drift check takes it
(``judging.fields.drift``), so one odd node in the run does not become the expectation.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_EXPECTED",
    "GATED_FIELDS",
    "ExpectedError",
    "expected_fingerprint",
    "read_expected",
    "write_expected",
]

DEFAULT_EXPECTED = Path("/etc/gpuaccept/expected-fingerprint.json")
#: The fields the node check compares (labels of ``judging.fields.FINGERPRINT_FIELDS``). The others
#: (kernel, OS, torch) are in the file for the record; a rolling kernel update is not a node fault.
GATED_FIELDS = ("driver", "CUDA", "NCCL")
SCHEMA = "gpuaccept.expected-fingerprint/1"


class ExpectedError(ValueError):
    """The expected-fingerprint file is unusable; the message names the file and why."""


def expected_fingerprint(fingerprints: dict[str, Any], run: dict[str, Any]) -> dict[str, Any] | None:
    """The majority value of every cross-node field over the nodes fingerprinted, or None if none was."""
    prints = {node: fp for node, fp in fingerprints.items() if isinstance(fp, dict) and "error" not in fp}
    if not prints:
        return None
    from gpuaccept.judging.fields import drift  # here: the node check reads this module without the judging core

    values, _odd = drift(prints)
    fields = {label: Counter(seen.values()).most_common(1)[0][0] for label, seen in values.items()}
    return {"schema": SCHEMA, "fields": fields, "nodes": sorted(prints), "run": run}


def write_expected(fingerprints: dict[str, Any], path: Path, record: Path, status: str) -> Path | None:
    """Write the expected fingerprint atomically, naming the run record it came from and that run's
    status (an operator installs the file of an accepted run); nothing when no node was fingerprinted."""
    now = _dt.datetime.now(_dt.timezone.utc).isoformat()
    data = expected_fingerprint(fingerprints, {"record": str(record), "status": status, "written": now})
    if data is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".expected-", suffix=".json")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=1, default=str)
    os.replace(tmp, path)
    return path


def read_expected(path: Path) -> dict[str, Any]:
    """``label -> expected value`` from a file ``write_expected`` wrote."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ExpectedError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ExpectedError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("fields"), dict):
        raise ExpectedError(f"{path}: not a gpuaccept expected fingerprint (schema {SCHEMA})")
    return dict(data["fields"])
