"""A contract field that says which NVML reading fills it: the one place a simple GPU metric's source is written.

``Annotated[int | None, Nvml("nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU")]`` on a ``GpuHealth`` field
names the getter (called with the GPU's handle, then the named ``pynvml`` constants), the attribute or item of
what it returns, and the scale to the field's unit. ``probes/gpu_health.py`` walks these markers to fill the
fields (a getter that raises leaves None and its exception's name in ``errors`` under the field's name), the
fake NVML of the selftests answers from them, and the payload type refuses a None no ``errors`` entry explains.
So a new NVML metric is its catalogue entry (``thresholds.yaml``), this field, and its judge line.

Only the marker lives here (no ``pynvml``: contracts are read on the login node); a reading that is not one
getter's value (row remapping's four numbers, the process list, the PCI identity) is written by hand.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from typing_extensions import get_type_hints

__all__ = ["Nvml", "nvml_fields", "unexplained_nulls"]


@dataclass(frozen=True)
class Nvml:
    """``call(handle, *consts)``, then ``.attr`` or ``[item]`` of the result, times ``scale``, rounded to
    ``digits`` for a float field; ``field`` instead reads one ``nvmlDeviceGetFieldValues`` id by its constant."""

    call: str = ""
    consts: tuple[str, ...] = ()
    attr: str | None = None
    item: int | None = None
    scale: float = 1.0
    digits: int | None = None
    field: str | None = None

    def __init__(self, call: str = "", *consts: str, **how: Any) -> None:
        object.__setattr__(self, "call", call)
        object.__setattr__(self, "consts", consts)
        for name in ("attr", "item", "field", "digits"):
            object.__setattr__(self, name, how.pop(name, None))
        object.__setattr__(self, "scale", float(how.pop("scale", 1.0)))
        if how or bool(call) == bool(self.field):
            raise TypeError(f"Nvml: a getter or a field id, and only attr/item/scale/digits/field: {call} {how}")


_FIELDS: dict[type[Any], dict[str, tuple[Nvml, type[Any]]]] = {}


def nvml_fields(typed_dict: type[Any]) -> dict[str, tuple[Nvml, type[Any]]]:
    """The fields of ``typed_dict`` that declare their NVML reading: name -> (marker, the value's type
    without None); walked once per type (every GPU's reading and validation asks)."""
    if typed_dict in _FIELDS:
        return _FIELDS[typed_dict]
    out: dict[str, tuple[Nvml, type[Any]]] = {}
    for name, hint in get_type_hints(typed_dict, include_extras=True).items():
        if typing.get_origin(hint) is not typing.Annotated:
            continue
        inner, *extras = typing.get_args(hint)
        markers = [e for e in extras if isinstance(e, Nvml)]
        if markers:
            kinds = [a for a in typing.get_args(inner) if a is not type(None)] or [inner]
            out[name] = (markers[0], kinds[0])
    _FIELDS[typed_dict] = out
    return out


def unexplained_nulls(
    typed_dict: type[Any], value: dict[str, Any], errors: dict[str, str], prefix: str = ""
) -> list[str]:
    """The NVML-read fields of ``value`` that are None with no ``errors`` entry saying why (the probe keys an
    entry by the field's name, ``prefix`` for a nested part)."""
    return [
        f"{prefix}{name}"
        for name in nvml_fields(typed_dict)
        if value.get(name) is None and f"{prefix}{name}" not in errors
    ]
