"""Exceptions that carry a verdict.

``MeasurementError`` means "we could not measure" (launch failure, node down, timeout, malformed probe
output): the plugin reports such a test as an *error*, never as a hardware failure and never as a pass.
A hardware miss is a plain ``AssertionError`` raised by ``Judge.verify``. ``ToolMissing`` means "not
run": a check that needs a tool the node lacks (nccl-tests) is neither a property of the cluster (a
skip) nor a measurement gone wrong; the plugin records it as ``not run`` and the cluster verdict lists it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["MeasurementError", "ProbeError", "ProbeTimeout", "ToolMissing", "read_input_file"]


class MeasurementError(Exception):
    """The suite could not obtain a measurement; names what and where."""

    def __init__(self, message: str, *, nodes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.nodes = nodes


class ProbeError(MeasurementError):
    """A probe step failed: non-zero exit, signal, missing or malformed result lines."""


class ProbeTimeout(ProbeError):
    """A probe step ran past its timeout and was cancelled."""


class ToolMissing(pytest.skip.Exception):  # type: ignore[misc,name-defined]  # pytest counts it skipped
    """A check could not run because a tool is not installed: recorded ``not run``, never ``skipped``.

    Raised through ``Judge.tool_missing``; pytest sees a skip (the session still exits 0), the plugin's
    outcome turns it into the verdict ``not run`` with ``check`` and ``tool`` on the record.
    """

    def __init__(self, check: str, tool: str, detail: str = "", *, nodes: tuple[str, ...] = ()) -> None:
        self.check, self.tool, self.detail, self.nodes = check, tool, detail, nodes
        where = f" on {', '.join(nodes)}" if nodes else ""
        super().__init__(f"not run: {check}: {tool} not installed{where}" + (f" ({detail})" if detail else ""))


def read_input_file(path: Path, what: str, error: type[Exception]) -> bytes:
    """The bytes of a file the operator named (a key, a thresholds file), or ``error`` saying which path and why it
    could not be read: missing, a folder where ``what`` (``"a key file"``) was wanted, or refused by the system."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: no such file ({what})") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, not {what}") from None
    except OSError as exc:
        raise error(f"{path}: cannot be read: {exc.strerror or exc}") from None
