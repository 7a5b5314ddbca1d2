"""How a hardware test ends: threshold misses, findings no threshold expresses, busy GPUs, gaps.

``conclude`` is the one ending every hardware judge uses, so the verdict rules hold everywhere:
a threshold miss or a listed problem is a failure (AssertionError naming node and GPU); a busy GPU or
a reading that could not be taken is an error (MeasurementError), never a pass; and a failure on one
GPU is still reported as a failure when another GPU of the node was busy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from gpuaccept.errors import MeasurementError

__all__ = ["JudgeLike", "conclude", "gpu_label"]


class JudgeLike(Protocol):
    """What the hardware readers need from the test's ``judge`` fixture (``gpuaccept.judging.Judge``)."""

    def check(self, metric: str, value: Any, *, node: str, gpu: Any = None, **extra: Any) -> Any: ...

    def expect(self, name: str, observed: Any, expected: Any, *, node: str, gpu: Any = None, **extra: Any) -> Any: ...

    def info(self, metric: str, value: Any, *, node: str, gpu: Any = None, **extra: Any) -> Any: ...

    def stragglers(self, metric: str) -> list[Any]: ...

    def verify(self) -> None: ...


def gpu_label(gpu: dict[str, Any] | None) -> str | None:
    """``3 (00000000:9A:00.0)``: the same spelling as ``RankRecord.gpu_label``, so results line up."""
    if not gpu:
        return None
    bus = gpu.get("pci_bus_id")
    return f"{gpu.get('index')}" + (f" ({bus})" if bus else "")


def _lines(title: str, items: Iterable[str]) -> str:
    items = list(items)
    return f"\n{title}:\n  " + "\n  ".join(items) if items else ""


def conclude(
    judge: JudgeLike,
    node: str,
    *,
    problems: Iterable[str] = (),
    busy: Iterable[str] = (),
    missing: Iterable[str] = (),
    details: Iterable[str] = (),
) -> None:
    """Verify ``judge`` and raise the one exception the evidence calls for (or return: passed).

    ``problems`` are hardware findings without a numeric limit (a GPU missing from the node);
    ``busy`` names GPUs someone else was using; ``missing`` names readings that could not be taken;
    ``details`` are shown under a failure (e.g. the Xid lines behind a count).
    """
    problems, busy, missing, details = list(problems), list(busy), list(missing), list(details)
    context = _lines("busy GPUs (not measured)", busy) + _lines("could not read", missing)
    try:
        judge.verify()
    except AssertionError as exc:
        raise AssertionError(str(exc) + _lines("also", problems) + _lines("details", details) + context) from None
    except MeasurementError:
        if not (problems or busy or missing):
            raise
    if problems:
        raise AssertionError(
            f"{len(problems)} hardware problem(s) on {node}:\n  "
            + "\n  ".join(problems)
            + _lines("details", details)
            + context
        )
    if busy:
        raise MeasurementError(
            f"GPU busy on {node}: other processes were running before the benchmark, so it measured the sharing, "
            "not the GPU:\n  " + "\n  ".join(busy) + _lines("could not read", missing),
            nodes=(node,),
        )
    if missing:
        raise MeasurementError(f"{node}: readings could not be taken:\n  " + "\n  ".join(missing), nodes=(node,))
