"""Attach things to the current test in the Allure report, from a test or a plugin.

For the plugin and the per-area modules (NCCL sweeps, training curves, P2P matrices)::

    from gpuaccept.report import attach
    attach.png(png_bytes, "busbw vs size")
    attach.text(log, "srun output")

Every function is a no-op when no Allure results are being written (no ``--alluredir``): allure's
hooks then have no listener. Names are what the report shows; keep them short and stable.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["files", "html", "png", "table", "table_html", "text"]


def _attach(body: str | bytes, name: str, kind: str) -> None:
    try:
        import allure
    except ImportError:  # allure-pytest is a dependency; a stripped install still runs the suite
        return
    allure.attach(body, name=name, attachment_type=getattr(allure.attachment_type, kind))


def text(body: str, name: str) -> None:
    _attach(body, name, "TEXT")


def png(data: bytes, name: str) -> None:
    _attach(data, name, "PNG")


def html(body: str, name: str) -> None:
    _attach(body, name, "HTML")


def files(paths: Iterable[Path], prefix: str) -> None:
    """Files a test wrote (a chart, its JSON), each as ``{prefix}: {file name}``: a PNG as an image, else text."""
    for path in paths:
        if path.suffix == ".png":
            png(path.read_bytes(), f"{prefix}: {path.name}")
        else:
            text(path.read_text(), f"{prefix}: {path.name}")


_TABLE_CSS = (
    "<style>table{border-collapse:collapse;font:12px sans-serif}td,th{border:1px solid #ccc;padding:2px 6px}"
    "th{background:#eee}tr.fail td{background:#fdecea}</style>"
)


def table_html(frame: pd.DataFrame, *, highlight: str | None = None, values: tuple[str, ...] = ()) -> str:
    """A DataFrame as a small standalone HTML table; rows whose ``highlight`` cell is in ``values`` are red."""
    columns = [str(c) for c in frame.columns]
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for record in frame.to_dict(orient="records"):
        marked = highlight is not None and record.get(highlight) in values
        cells = "".join(f"<td>{escape(_cell(record.get(c)))}</td>" for c in frame.columns)
        body.append(f'<tr class="fail">{cells}</tr>' if marked else f"<tr>{cells}</tr>")
    return f"{_TABLE_CSS}<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def table(frame: pd.DataFrame, name: str, *, highlight: str | None = None, values: tuple[str, ...] = ()) -> None:
    """Attach a DataFrame as an HTML table (and nothing when it is empty)."""
    if not frame.empty:
        html(table_html(frame, highlight=highlight, values=values), name)
