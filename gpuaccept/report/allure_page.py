"""Post-processing of Allure's generated ``index.html``: nothing phones home, the summary comes first.

Allure 2's page template adds Google Tag Manager (``googletagmanager.com/gtag/js``) unless the
generator runs with ``ALLURE_NO_ANALYTICS`` set; the same variable stops the generator itself from
posting usage data while it builds. ``gpuaccept-report`` sets it, and this module strips whatever
analytics script a future template might still carry, then refuses a page that would load anything
from outside (a report about a customer's cluster is opened on machines that must not call out).

The acceptance summary is put first: a bar across the top of every Allure page with the cluster
verdict and its counts, and a button that opens the whole summary page over the report (embedded
with ``srcdoc``, so the single-file report stays one file). The bar's HTML is a Jinja2 template.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpuaccept.report.render import render

__all__ = ["ANALYTICS_ENV", "PageError", "external_loads", "inject_summary", "strip_analytics"]

#: Allure's switch for both the page's tag and the generator's own usage ping (any value but "false").
ANALYTICS_ENV = {"ALLURE_NO_ANALYTICS": "true"}

_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script\s*>", re.IGNORECASE | re.DOTALL)
_ANALYTICS = re.compile(r"googletagmanager|google-analytics|gtag\(|dataLayer", re.IGNORECASE)
#: Elements that fetch what their attribute names when the page is opened (links a person clicks do not).
_LOADS = re.compile(
    r"<(?:script|img|iframe|link|source|embed|object|audio|video)\b[^>]*?\b(?:src|href|data)\s*=\s*"
    r"[\"']?\s*((?:https?:)?//[^\"'\s>]+)",
    re.IGNORECASE,
)
_CSS_URL = re.compile(r"url\(\s*[\"']?((?:https?:)?//[^)\"']+)", re.IGNORECASE)
_BODY = re.compile(r"<body\b[^>]*>", re.IGNORECASE)


class PageError(Exception):
    """The page cannot be made safe to open offline (the message says what it would load)."""


def strip_analytics(html: str) -> str:
    """Remove every script that loads or feeds Google's tag manager / analytics."""
    return _SCRIPT.sub(lambda m: "" if _ANALYTICS.search(m.group(0)) else m.group(0), html)


def external_loads(html: str) -> list[str]:
    """URLs the page would fetch from elsewhere when opened (scripts, styles, images, frames, CSS)."""
    found = [m.group(1) for m in _LOADS.finditer(html)] + [m.group(1) for m in _CSS_URL.finditer(html)]
    return sorted(set(found))


def inject_summary(html: str, summary: Mapping[str, Any], summary_html: str, *, link: str | None) -> str:
    """Put the verdict bar (and the embedded summary) at the top of Allure's page body.

    ``summary`` holds what the bar says (``verdict``, ``accepted``, ``reason``, ``counts``,
    ``cluster``); ``link`` is the summary's own file beside the report (None in a single file).
    """
    match = _BODY.search(html)
    if match is None:
        raise PageError("the Allure page has no <body>: not an Allure report")
    bar = render("allure_banner.html.j2", summary=summary, summary_html=summary_html, link=link)
    return html[: match.end()] + bar + html[match.end() :]
