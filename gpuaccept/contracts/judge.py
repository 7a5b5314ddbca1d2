"""What the per-area hardware judges need from a test's ``judge`` (``gpuaccept.judging.judge.Judge``), and the
one spelling of a GPU's label.

The judges in this package record checks (``check``/``expect``/``info``/``stragglers``, and ``busy`` /
``unreadable`` for what could not be measured) and return; they never dispatch, skip or raise a verdict:
the plugin ends each test from its recorded checks (``judging.outcome``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["JudgeLike", "gpu_label"]


class JudgeLike(Protocol):
    """The part of ``gpuaccept.judging.judge.Judge`` the hardware judges use."""

    def check(self, metric: str, value: Any, *, node: str, **extra: Any) -> Any: ...

    def expect(self, name: str, observed: Any, expected: Any, *, node: str, **extra: Any) -> Any: ...

    def info(self, metric: str, value: Any, *, node: str, **extra: Any) -> Any: ...

    def stragglers(self, metric: str) -> list[Any]: ...

    def busy(self, processes: str, *, node: str, gpu: Any) -> Any: ...

    def unreadable(self, metric: str, why: str, *, node: str, **subject: Any) -> Any: ...

    def sku(self, node: str) -> str: ...

    def datasheet(self, sku: str, name: str) -> float | None: ...

    def declared(self, metric: str, node: str, scale: int | None = None) -> Any: ...

    def setting(self, name: str) -> float: ...

    def tool_missing(self, check: str, tool: str, *, node: str, detail: str = "") -> None: ...


def gpu_label(gpu: Mapping[str, Any] | None) -> str | None:
    """``3 (00000000:9A:00.0)``: a GPU's one spelling; ``RankRecord.gpu_label`` is it too, so results line up."""
    if not gpu:
        return None
    bus = gpu.get("pci_bus_id")
    return f"{gpu.get('index')}" + (f" ({bus})" if bus else "")
