"""A spec's payload may be any type form pydantic validates: a tagged union reads back as its member."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from gpuaccept.contracts.records import RankRecord
from gpuaccept.contracts.strict import FORBID
from gpuaccept.probes.probe_spec import members
from gpuaccept.probes.specs import PayloadError, ProbeSpec
from gpuaccept.timelimits import TimeLimit


class Measured(BaseModel):
    model_config = FORBID
    outcome: Literal["measured"]
    gbps: float


class Skipped(BaseModel):
    model_config = FORBID
    outcome: Literal["busy"]
    why: str


Outcome = Annotated[Measured | Skipped, Field(discriminator="outcome")]
UNION: ProbeSpec[Measured | Skipped] = ProbeSpec(
    "gpuaccept.probes.example", Outcome, lambda args, gpus: TimeLimit(60, "a test's")
)


def _record(data: dict) -> RankRecord:
    return RankRecord("node3", 5, 8, 5, None, data)


def test_a_tagged_union_payload_reads_back_as_the_member_its_tag_names() -> None:
    assert UNION.read(_record({"outcome": "measured", "gbps": 40.5})) == Measured(outcome="measured", gbps=40.5)
    assert isinstance(UNION.read(_record({"outcome": "busy", "why": "pid 7 on GPU 0"})), Skipped)


def test_a_union_member_missing_a_field_is_named_with_the_member() -> None:
    with pytest.raises(PayloadError) as raised:
        UNION.validate(_record({"outcome": "measured"}))
    text = str(raised.value)
    assert "probe example: node3 rank 5: payload is not Measured | Skipped" in text and "measured.gbps" in text
    with pytest.raises(PayloadError, match="outcome"):  # no tag, or one the union does not hold
        UNION.validate(_record({"outcome": "lost"}))


def test_a_union_is_made_of_its_members() -> None:
    assert members(Outcome) == [Measured, Skipped] and members(Measured) == [Measured]
