"""Small helpers around nvidia-ml-py shared by the probes (never a parser of nvidia-smi text)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["nvml", "safe", "text"]

T = TypeVar("T")


def nvml() -> Any | None:
    """The initialised ``pynvml`` module, or None where there is no driver or no nvidia-ml-py."""
    try:
        import pynvml  # type: ignore[import-untyped]

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def safe(call: Callable[[], T]) -> T | str:
    """Call an NVML getter; "not supported" and friends become a readable string, not a crash."""
    try:
        return call()
    except Exception as exc:
        name = type(exc).__name__
        return f"unavailable ({name})"
