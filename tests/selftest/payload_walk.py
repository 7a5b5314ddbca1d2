"""Walks for the contract selftests: the types a payload type reaches, and a recording with one key taken out."""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, RootModel
from typing_extensions import NotRequired, is_typeddict


def _reached(tp: Any, seen: set[int]) -> Iterator[Any]:
    """Every TypedDict and pydantic model ``tp`` reaches through unions, containers and fields."""
    if id(tp) in seen:
        return
    seen.add(id(tp))
    if is_typeddict(tp):
        yield tp
        for hint in typing.get_type_hints(tp).values():
            yield from _reached(hint, seen)
    elif isinstance(tp, type) and issubclass(tp, BaseModel):
        yield tp
        for field in tp.model_fields.values():
            yield from _reached(field.annotation, seen)
    for arg in typing.get_args(tp):
        yield from _reached(arg, seen)


def loose_types(payload: Any) -> list[str]:
    """The names of the types ``payload`` reaches that do not refuse an undeclared key."""
    loose = []
    for tp in _reached(payload, set()):
        if isinstance(tp, type) and issubclass(tp, RootModel):
            continue  # a root model holds no keys of its own (pydantic refuses extra= on one): its members are walked
        config = getattr(tp, "model_config", None) if isinstance(tp, type) and issubclass(tp, BaseModel) else None
        config = config if config is not None else getattr(tp, "__pydantic_config__", None) or {}
        if config.get("extra") != "forbid":
            loose.append(f"{tp.__module__}.{tp.__qualname__}")
    return loose


def _paths(value: Any, where: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            if str(key).isidentifier():  # a key of the probe's; a PCI address or a size keys data: not deleted
                yield (*where, str(key))
            yield from _paths(item, (*where, str(key)))
    elif isinstance(value, list) and value:
        yield from _paths(value[0], (*where, "0"))


def _without(data: Any, where: tuple[str, ...]) -> Any:
    edited = copy.deepcopy(data)
    holder = edited
    for step in where[:-1]:
        holder = holder[int(step)] if isinstance(holder, list) else holder[step]
    del holder[where[-1]]
    return edited


def optional_keys(payload: Any) -> set[str]:
    """The keys some TypedDict ``payload`` reaches declares ``NotRequired`` (a recording may lack them)."""
    return {
        key
        for tp in _reached(payload, set())
        if is_typeddict(tp)
        # postponed annotations hide NotRequired from __optional_keys__: read it from the evaluated hints
        for key, hint in typing.get_type_hints(tp, include_extras=True).items()
        if typing.get_origin(hint) is NotRequired
    }


def deletions(data: dict[str, Any]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """``(path, data without the key at path)`` for every key of ``data`` at any depth; of a list, its first item's
    keys stand for every item's. A dict keyed by data (a PCI address, a size) is walked into, but its own keys are
    not deleted: an entry fewer is another reading, not a missing field."""
    for where in _paths(data, ()):
        yield where, _without(data, where)


def _members(tp: Any) -> list[Any]:
    """``tp`` with Annotated, unions and root models taken apart: the shapes a value of it may have."""
    if typing.get_origin(tp) is typing.Annotated:
        return _members(typing.get_args(tp)[0])
    if isinstance(tp, type) and issubclass(tp, RootModel):
        return _members(tp.model_fields["root"].annotation)
    args = typing.get_args(tp)
    if args and typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [m for arg in args for m in _members(arg)]
    return [tp]


def _fields(tp: Any) -> dict[str, Any] | None:
    """A TypedDict's or model's declared fields, None for anything else."""
    if is_typeddict(tp):
        return typing.get_type_hints(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return {name: field.annotation for name, field in tp.model_fields.items()}
    return None


def keyed_by_data(payload: Any, where: tuple[str, ...]) -> bool:
    """Whether the key at ``where`` is a key of a ``dict[...]`` (a reading keyed by names: environment variables,
    NICs, sizes) in every shape ``payload`` allows there, rather than a field some type declares."""
    shapes = _members(payload)
    for step in where[:-1]:
        nxt: list[Any] = []
        for shape in shapes:
            fields = _fields(shape)
            origin = typing.get_origin(shape)
            if fields is not None and step in fields:
                nxt += _members(fields[step])
            elif origin in (list, tuple) and step.isdigit():
                nxt += [m for arg in typing.get_args(shape)[:1] for m in _members(arg)]
            elif origin is dict:
                nxt += _members(typing.get_args(shape)[1])
        shapes = nxt
    holders = [s for s in shapes if _fields(s) is not None or typing.get_origin(s) is dict]
    return bool(holders) and all(typing.get_origin(s) is dict for s in holders)
