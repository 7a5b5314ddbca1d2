"""A judge that records what the tenant judges asked (``gpuaccept.contracts.judge.JudgeLike``): the tenant
selftests check each judge's calls, independent of the catalogue's limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Call:
    kind: str  # check, expect, info, unreadable
    metric: str
    value: Any
    expected: Any
    node: str
    extra: dict[str, Any]

    @property
    def passed(self) -> bool:
        """An expectation met (``observed == expected``); checks and infos are not judged here."""
        return self.kind == "expect" and self.value == self.expected


@dataclass
class RecordingJudge:
    calls: list[Call] = field(default_factory=list)

    def check(self, metric: str, value: Any, *, node: str, **extra: Any) -> None:
        self.calls.append(Call("check", metric, value, None, node, extra))

    def expect(self, name: str, observed: Any, expected: Any, *, node: str, **extra: Any) -> None:
        self.calls.append(Call("expect", name, observed, expected, node, extra))

    def info(self, metric: str, value: Any, *, node: str, **extra: Any) -> None:
        self.calls.append(Call("info", metric, value, None, node, extra))

    def unreadable(self, metric: str, why: str, *, node: str, **subject: Any) -> None:
        self.calls.append(Call("unreadable", metric, why, None, node, subject))

    def stragglers(self, metric: str) -> list[Any]:
        return []

    def busy(self, processes: str, *, node: str, gpu: Any) -> None:
        self.calls.append(Call("busy", "gpu_idle", processes, None, node, {"gpu": gpu}))

    def sku(self, node: str) -> str:
        return "H100"

    def datasheet(self, sku: str, name: str) -> float | None:
        return None

    def declared(self, metric: str, node: str, scale: int | None = None) -> Any:
        return None

    def setting(self, name: str) -> float:
        raise KeyError(name)  # the tenant judges read no suite setting

    def tool_missing(self, check: str, tool: str, *, node: str, detail: str = "") -> None:
        self.calls.append(Call("tool_missing", check, tool, None, node, {"detail": detail}))

    def of(self, metric: str) -> list[Call]:
        return [c for c in self.calls if c.metric == metric]
