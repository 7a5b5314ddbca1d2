"""The project names a machine by what it is, never by how we came to use it.

A customer reads the limits' sources in the summary, the pages and the site files: "our measurement on
2 x H200 SXM 141GB (docs/measurements.md '2 x H200 SXM 141GB, 2026-11-22: ...')" says what was measured, on
what, and when. Words from the way the machines were borrowed say none of that: the word for a borrowed
machine, a work period with a number ("session" and a digit; pytest's own session is fine), or a machine
kind's name from the borrowing tool ("nvidia-" and a GPU model, with or without "-x<count>"). Every text
file of the product, its tests, fixtures and Slurm helpers is read, and its file name too; each hit is named
by file and line.

The patterns are assembled from pieces, so this file holds no text they match and is read like every other.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: what the product ships and says: the limits, the pages, the code, its tests, fixtures and Slurm helpers
SCOPE = ["thresholds.yaml", "README.md", "docs", "gpuaccept", "benchmarks", "tests", "fixtures", "slurm"]
#: build and tool output beside the sources (gitignored), not the project's text
SKIP_DIRS = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "node_modules"}

BANNED = {
    "the word for a borrowed machine": re.compile(r"\b" + "le" + r"nt\b", re.IGNORECASE),
    "a numbered work period": re.compile(r"\b" + "sess" + r"ions?\s+#?\d", re.IGNORECASE),
    "a borrowed machine kind's name": re.compile("nvi" + r"dia-[a-z]\d{3}(?:-x\d+)?", re.IGNORECASE),
}


def files() -> list[Path]:
    out = []
    for entry in SCOPE:
        root = REPO / entry
        found = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        out += [p for p in found if not SKIP_DIRS.intersection(p.relative_to(REPO).parts)]
    return out


def hits(name: str, text: str) -> list[str]:
    """``name:line: what (the words)`` for every banned phrase in ``text``, and ``name: ...`` for the name."""
    found = [f"{name}: {what} in the file name" for what, rule in BANNED.items() if rule.search(Path(name).name)]
    for number, line in enumerate(text.splitlines(), 1):
        for what, rule in BANNED.items():
            found += [f"{name}:{number}: {what} ({m.group()!r})" for m in rule.finditer(line)]
    return found


def _text(path: Path) -> str:
    """The file's text; '' for a binary file (an image, a compiled file), whose name is still read."""
    data = path.read_bytes()
    if b"\0" in data:
        return ""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return ""


def test_no_machine_is_named_by_how_it_was_borrowed() -> None:
    found = [hit for path in files() for hit in hits(str(path.relative_to(REPO)), _text(path))]
    assert not found, "\n".join(found)


def test_the_scope_is_read() -> None:
    read = {str(p.relative_to(REPO)) for p in files()}
    assert {"thresholds.yaml", "README.md", "docs/measurements.md", "tests/selftest/test_wording.py"} <= read
    assert any(p.startswith("fixtures/site/") for p in read) and any(p.startswith("slurm/") for p in read)
    assert not any("__pycache__" in p for p in read)


@pytest.mark.parametrize(
    "planted",
    [
        "our measurement on the " + "le" + "nt H200",
        "LE" + "NT 2xH200",
        "docs/measurements.md " + "Sess" + "ion 3",
        "in " + "sess" + "ions 4 and 5",
        "on the " + "nvi" + "dia-h200-x2",
        "nvi" + "dia-h100",
        "nvi" + "dia-b200-x8",
    ],
)
def test_a_banned_phrase_is_named_with_its_line(planted: str) -> None:
    found = hits("thresholds.yaml", f"a: 1\nb: {planted}\n")
    assert len(found) == 1 and found[0].startswith("thresholds.yaml:2: "), found


@pytest.mark.parametrize(
    "fine",
    [
        "silent data corruption",
        "an excellent fit",
        "the pytest session's verdict, session-scoped fixtures",
        "this session asks for gpuaccept",
        "nvidia-smi nvlink -e",
        "NVIDIA H200 SXM 141GB, driver 580.159.04",
        "fixtures/site/h200-multi-gpu-no-ib.yaml",
    ],
)
def test_words_that_only_look_alike_pass(fine: str) -> None:
    assert hits("README.md", fine) == []


def test_a_file_name_is_read_too() -> None:
    assert hits("fixtures/site/" + "le" + "nt-h100-x1.yaml", "") == [
        "fixtures/site/" + "le" + "nt-h100-x1.yaml: the word for a borrowed machine in the file name"
    ]
