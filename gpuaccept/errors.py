"""Exceptions that carry a verdict.

``MeasurementError`` means "we could not measure" (launch failure, node down, timeout, malformed probe
output): the plugin reports such a test as an *error*, never as a hardware failure and never as a pass.
A hardware miss is a plain ``AssertionError`` raised by ``Judge.verify``.
"""

from __future__ import annotations

__all__ = ["MeasurementError", "ProbeError", "ProbeTimeout"]


class MeasurementError(Exception):
    """The suite could not obtain a measurement; names what and where."""

    def __init__(self, message: str, *, nodes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.nodes = nodes


class ProbeError(MeasurementError):
    """A probe step failed: non-zero exit, signal, missing or malformed result lines."""


class ProbeTimeout(ProbeError):
    """A probe step ran past its timeout and was cancelled."""
