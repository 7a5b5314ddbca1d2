"""How a payload type refuses what it does not declare: one configuration every contract type carries.

pydantic drops a key a TypedDict does not declare (and a model its extras) unless the type says otherwise, and a
TypedDict's config is its own (a base class's is not inherited, nor can ``TypeAdapter`` add one), so every payload
TypedDict is decorated ``@strict`` and every payload model sets ``model_config = FORBID``.
``tests/selftest/test_probe_contracts.py`` walks every spec's payload type and fails on one that does not.
A key a probe writes that its type does not name is then an ERROR naming the probe, node, rank and key, never a
reading that silently vanishes before its judge.
"""

from __future__ import annotations

from pydantic import ConfigDict, with_config

__all__ = ["FORBID", "strict"]

#: the configuration of every payload type: an undeclared key is refused
FORBID = ConfigDict(extra="forbid")
#: the decorator of every payload TypedDict
strict = with_config(FORBID)
