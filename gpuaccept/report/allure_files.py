"""The two files Allure reads beside the results: environment.properties and categories.json.

``environment.properties`` is the report's Overview "Environment" panel (its values are
``gpuaccept.report.identity.environment``, which the summary page's identity table reads too).
``categories.json`` sorts failures by cause, which is what a customer asks first:
is it the hardware, the configuration, our measurement, or a slide since the last run?

The cause is not guessed here from the wording of a message: the judging core decides it from the
checks (``gpuaccept.judging.categories``) and the report plugin writes it at the head of the test's
status message in Allure, ``[threshold miss] 2 failed check(s): ...``. Each category below
matches one such prefix (Allure matches a category's regex against the whole status message with
Java's ``matches()`` and DOTALL), so the Allure tab, the run record and the summary page say the
same thing. Could-not-measure and suite-error tests are *broken* in Allure, every other non-pass *failed*.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuaccept.judging.categories import CATEGORIES as CORE_CATEGORIES

__all__ = [
    "CATEGORIES",
    "CATEGORY_TITLES",
    "category_prefix",
    "read_environment",
    "write_categories",
    "write_environment",
]

#: The core's category -> what the Allure "Categories" tab and the summary page call it.
CATEGORY_TITLES: dict[str, str] = {
    "threshold miss": "Threshold miss",
    "hardware fault": "Hardware fault (ECC, XID, NVLink, IB, wrong results)",
    "drift": "Configuration drift (nodes disagree)",
    "regression": "Regression against the baseline run",
    "could not measure": "Could not measure (infrastructure)",
    "suite error": "Suite error (the suite could not judge: a fault of gpuaccept, not of the hardware)",
}
assert set(CATEGORY_TITLES) == set(CORE_CATEGORIES), "every category of the judging core needs a title"


def category_prefix(category: str) -> str:
    """``[threshold miss] ``: what the report plugin puts before a non-passed test's Allure message."""
    return f"[{category}] "


def _literal(category: str) -> str:
    """``\\[threshold miss\\]``: the prefix as a regex (the names are plain words, brackets need escaping)."""
    assert re.fullmatch(r"[a-z ]+", category), category
    return rf"\[{category}\]"


def _prefix_regex(category: str) -> str:
    return _literal(category) + ".*"


_KNOWN = "|".join(_literal(c) for c in CORE_CATEGORIES)

CATEGORIES: list[dict[str, Any]] = [
    *(
        {"name": CATEGORY_TITLES[name], "matchedStatuses": ["failed"], "messageRegex": _prefix_regex(name)}
        for name in ("hardware fault", "drift", "threshold miss", "regression")
    ),
    {
        "name": CATEGORY_TITLES["suite error"],
        "matchedStatuses": ["broken"],
        "messageRegex": _prefix_regex("suite error"),
    },
    {
        # every other broken test: ours that could not measure, and any crash the core did not sort
        "name": CATEGORY_TITLES["could not measure"],
        "matchedStatuses": ["broken"],
        "messageRegex": f"(?!{_literal('suite error')}).*",
    },
    {
        # a failure the core did not sort (a test outside the acceptance suite, a plugin of a site's own)
        "name": "Other failed check",
        "matchedStatuses": ["failed"],
        "messageRegex": f"(?!(?:{_KNOWN})).*",
    },
]


def write_categories(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "categories.json").write_text(json.dumps(CATEGORIES, indent=2) + "\n")


def _escape(text: str, key: bool) -> str:
    """Java ``Properties`` escaping (ISO-8859-1 file: everything else as ``\\uXXXX``)."""
    out = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char in "=:#!" or (char == " " and (key or index == 0)):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) > 0x7E:
            out.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else "?")
        else:
            out.append(char)
    return "".join(out)


def write_environment(directory: Path, values: Mapping[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lines = [f"{_escape(k, key=True)}={_escape(v, key=False)}" for k, v in values.items()]
    (directory / "environment.properties").write_text("\n".join(lines) + "\n", encoding="ascii")


_UNESCAPE = {"n": "\n", "t": "\t", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    """The inverse of ``_escape`` (and of Java's ``Properties.store`` for what it writes)."""
    out, index = [], 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 == len(text):
            out.append(char)
            index += 1
            continue
        nxt = text[index + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[index + 2 : index + 6]):
            out.append(chr(int(text[index + 2 : index + 6], 16)))
            index += 6
        else:
            out.append(_UNESCAPE.get(nxt, nxt))
            index += 2
    return "".join(out)


def read_environment(path: Path) -> dict[str, str]:
    """environment.properties as written by ``write_environment`` (``{}`` when there is none)."""
    if not path.is_file():
        return {}
    values: dict[str, str] = {}
    for line in path.read_text(encoding="ascii", errors="replace").splitlines():
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"((?:\\.|[^=\\])*)=(.*)", line)
        if match:
            values[_unescape(match.group(1))] = _unescape(match.group(2))
    return values
