"""Which NVML recordings the selftests read, and how an older one reaches today's contract.

A recording is evidence of what one machine answered, read by the probe of its day (``fixtures/nvml/README.md``).
The *current* recording of a kind is its newest dated file (``h200-1gpu-YYYY-MM-DD.gpu_health.json``): the GPU
machine at hand records it again with today's probe (``benchmarks/record_gpu_health.sh``), a new date beside the
older files, and it is held to today's type exactly as recorded. Tests that replay a recording back through the
probe, or that say every metric with a limit is judged on it, read the current one.

An *older* recording stays evidence of its machine: the 2 x H200 host (``h200-2gpu``, the only recording with two
GPUs and NVLink trained, not lent since) and the first one-H200 run. A field added to ``GpuHealth`` after it was
recorded is none of its readings, so ``older_gpu_health`` writes that field None with the errors entry
``"not recorded: <file> predates the field"``, the probe's own way of saying a reading is missing; the judges then
say "could not measure" for it, never a value. Only fields that declare their NVML reading (``contracts/nvml.Nvml``,
the way ARCHITECTURE's "Adding a metric" adds one) are filled so; any other key the recording lacks is still refused.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from gpuaccept.contracts.nvml import nvml_fields
from gpuaccept.contracts.payloads import GpuHealth, PcieLink

__all__ = ["H200_2GPU", "NVML", "current", "not_recorded", "older_gpu_health", "older_gpu_health_file"]

NVML = Path(__file__).resolve().parents[2] / "fixtures" / "nvml"
#: the 2 x H200 SXM 141GB host's ``gpu_health --dump`` (2026-11-22): two GPUs, so faults name GPU 1
H200_2GPU = NVML / "h200-2gpu.gpu_health.json"


def current(probe: str, kind: str = "h200-1gpu") -> Path:
    """The newest dated recording of ``probe`` on ``kind`` (the one the GPU machine at hand records again)."""
    dated = sorted(NVML.glob(f"{kind}-????-??-??.{probe}.json"))
    assert dated, f"no dated {kind} recording of {probe} in {NVML}"
    return dated[-1]


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


def older_gpu_health_file(path: Path = H200_2GPU) -> Path:
    """``older_gpu_health`` written to a file, for what reads a recording from disk (a probe's ``--load``, the
    node-side injection of the loopback cluster): the same name under this host's temporary folder."""
    out = Path(tempfile.gettempdir()) / "gpuaccept-older-recordings" / path.name
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=out.parent, delete=False, encoding="utf-8") as part:
        part.write(json.dumps(older_gpu_health(path), indent=1, sort_keys=True) + "\n")
    os.replace(part.name, out)  # whole or not at all: parallel workers read it while another writes it
    return out
