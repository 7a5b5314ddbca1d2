"""Which NVML recordings the selftests read, and how an older one reaches today's contract.

A recording is evidence of what one machine answered, read by the probe of its day (``fixtures/nvml/README.md``).
The *current* recording of a kind is its newest dated file (``h200-1gpu-YYYY-MM-DD.gpu_health.json``): the GPU
machine at hand records it again with today's probe (``benchmarks/record_gpu_health.sh``), a new date beside the
older files, and it is held to today's type exactly as recorded. Tests that replay a recording back through the
probe, or that say every metric with a limit is judged on it, read the current one.

An *older* recording stays evidence of its machine: the 2 x H200 host (``h200-2gpu``, the only recording with two
GPUs and NVLink trained, not reachable since) and the first one-H200 run. A field added to ``GpuHealth`` after it was
recorded is none of its readings, so ``older_gpu_health`` writes that field None with the errors entry
``"not recorded: <file> predates the field"``, the probe's own way of saying a reading is missing; the judges then
say "could not measure" for it, never a value. Only fields that declare their NVML reading (``contracts/nvml.Nvml``,
the way ARCHITECTURE's "Adding a metric" adds one) are filled so; any other key the recording lacks is still refused.
``older_nvlink`` does the same for the NVLink keys the older recordings predate, each edit named there.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from gpuaccept.contracts.nvml import nvml_fields
from gpuaccept.contracts.payloads import GpuHealth, PcieLink

__all__ = [
    "H200_2GPU",
    "H200_2GPU_LINKS",
    "NVML",
    "current",
    "not_recorded",
    "older_file",
    "older_gpu_health",
    "older_gpu_health_file",
    "older_nvlink",
    "older_nvlink_file",
    "read",
]

NVML = Path(__file__).resolve().parents[2] / "fixtures" / "nvml"
#: the 2 x H200 SXM 141GB host's ``gpu_health --dump`` (2026-11-22): two GPUs, so faults name GPU 1
H200_2GPU = NVML / "h200-2gpu.gpu_health.json"
#: its ``nvlink --dump``, the same minute: 18 NVLinks per GPU trained into the NVSwitch fabric
H200_2GPU_LINKS = NVML / "h200-2gpu.nvlink.json"


def _dated(probe: str, kind: str) -> list[Path]:
    return sorted(NVML.glob(f"{kind}-????-??-??.{probe}.json"))


def current(probe: str, kind: str = "h200-1gpu") -> Path:
    """The newest dated recording of ``probe`` on ``kind`` (the one the GPU machine at hand records again)."""
    dated = _dated(probe, kind)
    assert dated, f"no dated {kind} recording of {probe} in {NVML}"
    return dated[-1]


def read(path: Path) -> dict[str, Any]:
    """A recording ``<kind>[-<date>].<probe>.json`` in today's contract: the current one of its kind as recorded,
    an older one (every other) through ``older_gpu_health`` or ``older_nvlink``."""
    probe = path.name.split(".")[-2]
    kind = re.sub(r"-\d{4}-\d\d-\d\d$", "", path.name.split(".")[0])
    if _dated(probe, kind)[-1:] == [path]:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    return {"gpu_health": older_gpu_health, "nvlink": older_nvlink}[probe](path)


def not_recorded(path: Path) -> str:
    """The errors entry of a field ``path`` predates."""
    return f"not recorded: {path.name} predates the field"


def older_gpu_health(path: Path = H200_2GPU) -> dict[str, Any]:
    """An older ``gpu_health`` recording in today's contract: each ``Nvml``-declared field it lacks None, with
    ``not_recorded`` as its errors entry; nothing it holds is changed."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    why = not_recorded(path)
    for gpu in data["gpus"]:
        for typed, part, prefix in ((GpuHealth, gpu, ""), (PcieLink, gpu["pcie"], "pcie.")):
            for name in nvml_fields(typed):
                if name not in part:
                    part[name] = None
                    gpu["errors"][prefix + name] = why
    return data


def older_nvlink(path: Path = H200_2GPU_LINKS) -> dict[str, Any]:
    """An older ``nvlink`` recording in today's contract; nothing it holds is changed, and each key it lacks is
    filled as named here, from what the probe of its day did:

    - a link's ``errors``: that probe wrote it only where a getter failed, so an absent one is ``{}``;
    - a pair's ``pcie_error``: absent where the pair's ``pcie`` was read, so None;
    - the error counters' ``ecc_data`` (not read then): None, its links named in ``unread_links`` (which is
      ``{}`` else: every link answered the counters that were read); their ``per_link`` (summed, the links not
      kept): ``{}``;
    - the per-link speed (not read then): ``speed_mbps_per_link`` ``{}`` and ``speed_source`` ``"unreadable"``,
      what the probe writes when it reads no link's speed;
    - the per-link data counters ``telemetry`` (not read then): the link count and each active link's
      ``tx_kib``/``rx_kib`` None, each with ``not_recorded`` as its errors entry (judged: could not measure).
    """
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    why = not_recorded(path)
    for pair in data["pairs"]:
        pair.setdefault("pcie_error", None)
    for gpu in data["gpus"]:
        state = gpu["nvlink"]
        active = [link["link"] for link in state["links"] if link["active"]]
        for link in state["links"]:
            link.setdefault("errors", {})
        errors = state["errors"]
        if "ecc_data" not in errors:
            errors["ecc_data"] = None
            errors.setdefault("unread_links", {})["ecc_data"] = active
        errors.setdefault("unread_links", {})
        errors.setdefault("per_link", {})
        state.setdefault("speed_mbps_per_link", {})
        state.setdefault("speed_source", "unreadable")
        if "telemetry" not in state:
            names = [f"{link}.{half}" for link in active for half in ("tx_kib", "rx_kib")]
            state["telemetry"] = {
                "link_count": None,
                "per_link": {str(link): {"tx_kib": None, "rx_kib": None} for link in active},
                "errors": {name: why for name in ("link_count", *names)},
            }
    return data


def older_file(path: Path, data: dict[str, Any]) -> Path:
    """An older recording ``path`` read into today's contract (``data``), written to a file for what reads a
    recording from disk (a probe's ``--load``, the node-side injection of the loopback cluster): the same name
    under this host's temporary folder."""
    out = Path(tempfile.gettempdir()) / "gpuaccept-older-recordings" / path.name
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=out.parent, delete=False, encoding="utf-8") as part:
        part.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(part.name, out)  # whole or not at all: parallel workers read it while another writes it
    return out


def older_gpu_health_file(path: Path = H200_2GPU) -> Path:
    """``older_gpu_health`` as a file (``older_file``)."""
    return older_file(path, older_gpu_health(path))


def older_nvlink_file(path: Path = H200_2GPU_LINKS) -> Path:
    """``older_nvlink`` as a file (``older_file``)."""
    return older_file(path, older_nvlink(path))
