"""One contract per probe: a rank's data arrives as its spec's payload type, or as an error naming the field.

The recorded real outputs in ``fixtures/`` are held to the types the probes declare, so a payload type that
drifts from what a probe really prints fails here, not on a GPU node.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaccept.contracts.records import RankRecord
from gpuaccept.contracts.storage import FioPayload
from gpuaccept.dispatch.result import parse_records
from gpuaccept.errors import MeasurementError
from gpuaccept.probes import specs
from gpuaccept.probes.specs import SPECS, PayloadError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _record(data: dict, node: str = "node3", rank: int = 5) -> RankRecord:
    return RankRecord(node, rank, 8, rank, None, data)


def test_recorded_nccl_output_is_its_payload_type() -> None:
    text = (FIXTURES / "nccl" / "probe_2xh200.out").read_text()
    for record in parse_records("nccl", text, 2, ("node1",)):
        typed = specs.NCCL.read(specs.NCCL.validate(record))
        assert typed["collectives"] if "collectives" in typed else typed


def test_recorded_gpu_health_is_its_payload_type() -> None:
    data = json.loads((FIXTURES / "nvml" / "h200-2gpu.gpu_health.json").read_text())
    typed = specs.GPU_HEALTH.read(_record(data))
    assert typed["driver"] == data["driver"] and len(typed["gpus"]) == len(data["gpus"])


def test_a_mistyped_field_is_an_error_naming_probe_node_rank_and_field() -> None:
    data = json.loads((FIXTURES / "nvml" / "h200-2gpu.gpu_health.json").read_text())
    data["gpus"][1]["ecc_uncorrected_volatile"] = "many"
    with pytest.raises(PayloadError) as raised:
        specs.GPU_HEALTH.validate(_record(data))
    text = str(raised.value)
    assert "probe gpu_health: node3 rank 5" in text and "gpus.1.ecc_uncorrected_volatile" in text
    assert isinstance(raised.value, MeasurementError) and raised.value.nodes == ("node3",)


def test_a_missing_field_of_a_model_payload_is_named() -> None:
    with pytest.raises(PayloadError, match=r"probe fio: node3 rank 5: .*field path: Field required"):
        specs.FIO.validate(_record({"fio": "fio-3.33"}))
    typed = specs.FIO.read(_record({"path": "/mnt/x", "fio": None}))
    assert isinstance(typed, FioPayload) and typed.fio is None


def test_every_spec_names_its_module_and_a_limit() -> None:
    for name, spec in SPECS.items():
        assert spec.module == f"gpuaccept.probes.{name}" and spec.name == name
        assert spec.limit((), 8).seconds > 0
