"""The Jinja2 environment of the report's HTML (summary page, checks tables, the Allure banner).

One environment with autoescaping on, so a node name, a probe message or a failure reason always
reaches the page as text and never as markup. Templates ship as package data
(``gpuaccept/report/templates/``). Images go in as ``data:`` URIs: a page made here loads nothing
from anywhere, on or off the network.
"""

from __future__ import annotations

import base64
import functools
import math
from typing import Any

import jinja2

__all__ = ["data_uri", "fmt", "md_cell", "render", "templates"]


def fmt(value: Any, digits: int = 4) -> str:
    """A figure as an operator reads it: ``742.3``, ``0.0012``, ``1.2e+09``; text as it is; empty for None."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.{digits}g}"
    return str(value)


def md_cell(value: Any) -> str:
    """A value for one Markdown table cell: one line, ``|`` escaped (HTML escaping is autoescape's)."""
    return " ".join(str(value if value is not None else "").split()).replace("|", "\\|")


def data_uri(png: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(png).decode('ascii')}"


@functools.lru_cache(maxsize=1)
def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpuaccept.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"], default_for_string=True, default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = fmt
    env.filters["cell"] = md_cell
    return env


def render(name: str, **context: Any) -> str:
    """Render ``templates/<name>`` with ``context`` (a missing variable is an error, not an empty cell)."""
    return templates().get_template(name).render(**context)
