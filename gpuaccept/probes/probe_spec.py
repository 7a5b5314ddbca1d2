"""The contract one probe's spec states: its module, the type of what each rank hands back, its time limit.

Apart from the table (``gpuaccept.probes.specs``), which re-exports it: the class and its validation are what
dispatch, the judges' ``SPEC.read`` and the selftests hold to; the table is the list of probes. The standard
library and pydantic only: it is read on the login node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import UnionType
from typing import Annotated, Any, Generic, TypeVar, Union, cast, get_args, get_origin

from pydantic import TypeAdapter, ValidationError

from gpuaccept.contracts.records import RankRecord
from gpuaccept.errors import ProbeError
from gpuaccept.timelimits import TimeLimit

__all__ = ["PayloadError", "ProbeSpec", "members", "type_name"]

P = TypeVar("P")


class PayloadError(ProbeError):
    """A rank's ``data`` is not its probe's payload type: the probe, node, rank and field, and what was wrong."""


@dataclass(frozen=True, eq=False)  # one object per probe: compared by identity (a type form may not hash)
class ProbeSpec(Generic[P]):
    """One probe: ``python -m <module>``, the type of each rank's ``data``, and its time limit from its arguments
    and the GPUs per task.

    ``payload`` is a type form pydantic validates (``TypeAdapter``): a TypedDict or pydantic model of
    ``gpuaccept.contracts``, or a tagged union of them (``Annotated[A | B, Field(discriminator="outcome")]``);
    every spec of ``SPECS`` has one (``tests/selftest/test_probe_contracts.py``); None only for a selftest's
    own probe (``SELFTEST_SPECS``), whose ranks' ``data`` crosses as it came. ``stage``: the type of the
    result a rank sends as each stage of its work ends (``_protocol.emit(stage=...)``, the fine-tune's
    strategies), which ``dispatch.result.stage_records`` validates. ``host_side``: why the probe must run
    on the host, outside any image the steps run in (``dispatch/slurm``: with the host's Python, and not
    run where the host has no suite); None runs in the image. ``derived_args``: the arguments a step adds to
    those it was given, from them and its limit as ``--probe-timeout`` resolved it (NCCL's op timeout, a share of
    its step's limit: ``Cluster`` calls it); None adds none."""

    module: str
    payload: Any
    limit: Callable[[Sequence[str], int], TimeLimit]
    stage: Any = None
    host_side: str | None = None
    derived_args: Callable[[tuple[str, ...], TimeLimit], tuple[str, ...]] | None = None

    @property
    def name(self) -> str:
        """What records, the terminal and the launcher call the probe (the module's last part)."""
        return self.module.rpartition(".")[2]

    def validate(self, record: RankRecord) -> RankRecord:
        """``record`` with its payload checked against the spec's type and kept typed in ``record.payload``;
        ``PayloadError`` naming the probe, node, rank and field when it is not that type."""
        if self.payload is None:
            return record
        return replace(record, payload=self._checked(self.payload, record, "payload"))

    def validate_stage(self, record: RankRecord, stage: str) -> RankRecord:
        """A stage's result (``stage``) checked against the spec's stage type, as ``validate`` checks the
        whole result; a probe that declares no stage type sends none, so one arriving is an error too."""
        if self.stage is None:
            raise PayloadError(
                f"probe {self.name}: {record.node} rank {record.rank}: sent a {stage} stage result, "
                "but its spec declares no stage type",
                nodes=(record.node,),
            )
        return replace(record, payload=self._checked(self.stage, record, f"{stage} stage result"))

    def _checked(self, form: Any, record: RankRecord, what: str) -> Any:
        try:
            return _adapter(form).validate_python(record.data)
        except ValidationError as exc:
            where = f"probe {self.name}: {record.node} rank {record.rank}"
            problems = "; ".join(
                f"field {'.'.join(str(p) for p in err['loc']) or '(payload)'}: {err['msg']}" for err in exc.errors()
            )
            raise PayloadError(f"{where}: {what} is not {type_name(form)}: {problems}", nodes=(record.node,)) from None

    def read(self, record: RankRecord) -> P:
        """The rank's payload as the spec's type (validated when the step's result arrived; again if not)."""
        if self.payload is None:
            raise TypeError(f"probe {self.name} declares no payload type: read record.data")
        if record.payload is None:
            record = self.validate(record)
        return cast(P, record.payload)


_ADAPTERS: dict[int, tuple[Any, TypeAdapter[Any]]] = {}


def _adapter(form: Any) -> TypeAdapter[Any]:
    """One pydantic adapter per payload type form (building one walks the type: once per session). Keyed by
    identity: an ``Annotated`` union holds a ``FieldInfo``, which does not hash; the form is kept beside its
    adapter, so its id stays its own."""
    if id(form) not in _ADAPTERS:
        _ADAPTERS[id(form)] = (form, TypeAdapter(form))
    return _ADAPTERS[id(form)][1]


def members(form: Any) -> list[Any]:
    """The types a payload type form is made of: itself, or each member of a union (``Annotated`` unwrapped)."""
    origin = get_origin(form)
    if origin is Annotated:
        return members(get_args(form)[0])
    if origin in (Union, UnionType):
        return [member for arg in get_args(form) for member in members(arg)]
    return [form]


def type_name(form: Any) -> str:
    """A payload type form as an error names it: a class by its name, a union by its members'."""
    return " | ".join(str(getattr(member, "__name__", member)) for member in members(form))
