"""Every figure a limit's source cites as our own measurement is in docs/measurements.md, and so is
every section it cites.

A source that says "docs/measurements.md: ... 296.9 GB/s" is only followable if the reader finds 296.9
there. The sentences of a source that name docs/measurements.md or "our measurement" are its measured
part; every number in them must be a number of docs/measurements.md (as written there, to its last
digit). Percentages ("floor 90%", "94-99% busy") and factors ("x 0.87") are the source's own reasoning
about those figures and are not looked up. Public figures go in sentences of their own.

A source, site file or page that says "docs/measurements.md '2 x H200 SXM 141GB, 2026-11-22: ...'" names a
section by its heading (or the heading's start): that heading must exist, so a renamed section cannot leave
its citations pointing nowhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
#: the index: every section's heading and the dated file that holds it
MEASUREMENTS = REPO / "docs" / "measurements.md"
#: the sections, one file per day
DATED = sorted((REPO / "docs" / "measurements").glob("*.md"))
FILES = [REPO / "thresholds.yaml", *sorted((REPO / "fixtures" / "site").glob("*.yaml"))]
#: where a reader meets a section title of docs/measurements.md: the limits' sources, the site files (their
#: comments too), the pages
CITING = [*FILES, REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *DATED]


def measured_text() -> str:
    """What a reader following a ``docs/measurements.md`` citation reads: the index and every dated file."""
    return "\n".join(path.read_text() for path in [MEASUREMENTS, *DATED])


_PERCENT_RANGE = re.compile(r"\d+(?:\.\d+)?\s*[-\u2013/]\s*\d+(?:\.\d+)?\s*%")
_MEASURED = re.compile(r"docs/measurements\.md|our measurement", re.IGNORECASE)


def numbers(text: str) -> set[str]:
    """Number tokens as written: '295,884' -> '295884'; percentages, ranges of them and 'x 0.87' factors
    dropped; a word with digits in it (2xH200, NV18, H100) is a name, not a number."""
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    text = _PERCENT_RANGE.sub(" ", text)
    found = set()
    for m in re.finditer(r"(?<![\w.])\d+(?:\.\d+)*", text):
        after = text[m.end() : m.end() + 1]
        before = text[max(0, m.start() - 2) : m.start()]
        if after.isalpha() or after in ("%", "_") or before == "x ":
            continue  # 2xH200, 512x, 90%, x 0.87
        found.add(m.group())
    return found


def _known() -> set[str]:
    """Every number of docs/measurements.md, and each leading part of a version (2.11.0 -> 2.11)."""
    known = set()
    for token in re.findall(r"\d+(?:\.\d+)*", re.sub(r"(?<=\d),(?=\d{3}\b)", "", measured_text())):
        parts = token.split(".")
        known.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return known


def measured_sentences(source: str) -> Iterator[str]:
    for sentence in re.split(r";|\.\s", source):
        if _MEASURED.search(sentence):
            yield sentence.strip()


def sources(data: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(data, dict):
        if isinstance(data.get("source"), str):
            yield path, data["source"]
        for key, value in data.items():
            yield from sources(value, f"{path}.{key}" if path else str(key))


def _cases() -> list[tuple[str, str, str]]:
    return [
        (f"{f.relative_to(REPO)}:{path}", sentence, f.name)
        for f in FILES
        for path, source in sources(yaml.safe_load(f.read_text()))
        for sentence in measured_sentences(source)
    ]


def test_the_rule_reads_numbers_as_a_reader_would():
    assert numbers("all_reduce 343.16 / 345.9 GB/s on 2xH200 NV18, floor 90% of 345") == {"343.16", "345.9", "345"}
    assert numbers("295,884 tokens/s, GPUs 94-99% busy, x 0.87, torch 2.11") == {"295884", "2.11"}


def _missing(training: bool) -> list[str]:
    known = _known()
    return [
        f"{where}: {', '.join(sorted(absent))} not in docs/measurements.md ({sentence[:140]})"
        for where, sentence, _ in _cases()
        if (".train_" in where) == training and (absent := numbers(sentence) - known)
    ]


def test_measured_figures_are_in_measurements_md():
    missing = _missing(training=False)
    assert not missing, "\n".join(missing)


def test_training_figures_are_in_measurements_md():
    missing = _missing(training=True)
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("planted", ["296.9", "682.4"])
def test_a_figure_not_recorded_is_found(planted):
    sentence = f"docs/measurements.md: reduce_scatter {planted} GB/s on 2xH200"
    assert planted in numbers(sentence) - _known()


#: "docs/measurements.md 'A'", "docs/measurements.md, 'A' and 'B'", 'docs/measurements.md "A", "B"': the
#: quoted titles that follow the file's name, joined by commas or "and" (a title holds no quote of its kind)
_CITATION = re.compile(
    r"""measurements\.md[,:]?\s+((['"])(?:(?!\2).)+?\2(?:(?:\s*,\s*|\s+and\s+)(['"])(?:(?!\3).)+?\3)*)"""
)
_TITLE = re.compile(r"""(['"])(.+?)\1""")


def headings(markdown: str) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"^#{2,6}\s+(.+)$", markdown, re.M)]


def cited_titles(text: str) -> list[str]:
    """The section titles ``text`` cites, a YAML comment's ``#`` and line breaks taken out first (a title
    may wrap)."""
    flat = " ".join(re.sub(r"^\s*#\s?", "", line) for line in text.splitlines())
    flat = re.sub(r"\s+", " ", flat)
    return [t.group(2) for m in _CITATION.finditer(flat) for t in _TITLE.finditer(m.group(1))]


def test_the_rule_reads_cited_titles_as_a_reader_would():
    text = "docs/measurements.md 'Fabric' and 'Host\n# links', then docs/measurements.md, \"CI's run\": 1 s"
    assert cited_titles(text) == ["Fabric", "Host links", "CI's run"]
    assert cited_titles("docs/measurements.md: 55.4 GB/s 'on' the box") == []


def not_headings(text: str, known: list[str]) -> list[str]:
    """The titles ``text`` cites that are neither a heading of docs/measurements.md nor the start of one."""
    return [title for title in cited_titles(text) if not any(h.startswith(title) for h in known)]


def test_cited_sections_exist():
    known = headings(measured_text())
    missing = [
        f"{f.relative_to(REPO)}: '{title}' is no heading of docs/measurements.md (nor the start of one)"
        for f in CITING
        for title in not_headings(f.read_text(), known)
    ]
    assert not missing, "\n".join(missing)


def test_a_section_that_is_not_there_is_found():
    known = ["2 x H200 SXM 141GB, 2026-11-22: the hardware section through real Slurm", "Fabric: rails"]
    text = "source: docs/measurements.md '2 x H200 SXM 141GB, 2026-11-22' and 'Hardware section', 'Fabric'"
    assert not_headings(text, known) == ["Hardware section"]


def test_the_index_lists_every_section_and_its_file() -> None:
    """Each ``## `` section of a dated file is a row of the index naming that file, and each row a section there:
    a citation's heading is found through the index."""
    rows = re.findall(r"^\| (.+?) \| \[[^]]+\]\(measurements/([^)]+)\) \|$", MEASUREMENTS.read_text(), re.M)
    listed = {(title, name) for title, name in rows}
    held = {
        (m.group(1).strip().replace("|", "/"), path.name)
        for path in DATED
        for m in re.finditer(r"^## (.+)$", path.read_text(), re.M)
    }
    assert DATED and listed == held, (
        f"not in the index: {sorted(held - listed)}; not in a file: {sorted(listed - held)}"
    )
