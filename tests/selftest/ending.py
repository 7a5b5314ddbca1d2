"""How the selftests read a judge's ending: ``judging.outcome`` over its checks, as the plugin does.

``with ends(judge, "failed", match=...) as ended:`` runs the block (a hardware judge, a rule) and then
asserts the verdict the recorded checks call for and that its message matches; ``ended.value`` is the
message, for further asserts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from gpuaccept.judging.outcome import outcome

__all__ = ["ends"]


@dataclass
class Ended:
    value: str = ""


@contextmanager
def ends(judge: Any, verdict: str, match: str | None = None) -> Iterator[Ended]:
    ended = Ended()
    yield ended
    result = outcome(judge.results, getattr(judge, "test", ""))
    ended.value = result.message
    assert result.verdict == verdict, f"expected {verdict}, got {result.verdict}: {result.message}"
    if match is not None:
        assert re.search(match, result.message), f"{match!r} not in:\n{result.message}"
