"""The product speaks to a customer, who can follow a public document or a section of docs/measurements.md
but not how the product came about: "the seeds" (the figures it started from), "demo day", "the last
round", a development session. Such words in a product file (gpuaccept/, thresholds.yaml, README.md, docs/
except docs/measurements.md, the dated history of our measurements) fail here, named with file and line,
to be replaced by the document or the measurements.md section the claim rests on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = pytest.mark.selftest

#: words about the product's own making, which no customer can look up
ORIGIN = re.compile(
    r"\bthe seeds\b|\bseed (?:runs?|figures?|records?|measurements?|repo\w*)\b|\bdemo[- ]day\b|\bthe last round\b"
    r"|\b(?:an?|this|that|the|our|previous|earlier|last|next) (?:agent|helper|coding|development|dev) sessions?\b",
    re.IGNORECASE,
)
SUFFIXES = (".py", ".yaml", ".yml", ".j2", ".md", ".json", ".toml", ".txt")


def _product_files() -> list[Path]:
    package = [p for p in (REPO / "gpuaccept").rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    docs = [p for p in (REPO / "docs").glob("*.md") if p.name != "measurements.md"]
    return sorted({*package, REPO / "thresholds.yaml", REPO / "README.md", *docs})


def origin_words(text: str) -> list[tuple[int, str]]:
    """(line, word) of every word about the product's making in ``text``."""
    return [(n, m.group()) for n, line in enumerate(text.splitlines(), 1) for m in ORIGIN.finditer(line)]


def test_no_product_file_speaks_of_how_it_came_about() -> None:
    found = [
        f"{path.relative_to(REPO)}:{n}: {word!r}"
        for path in _product_files()
        if "__pycache__" not in path.parts
        for n, word in origin_words(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not found, "cite the public document or the docs/measurements.md section instead:\n" + "\n".join(found)


def test_the_words_are_caught_and_product_words_are_not() -> None:
    caught = [
        "floor from the seeds",
        "the seed run's figure",
        "as shown on demo day",
        "fixed in the last round",
        "measured in an earlier agent session",
    ]
    assert all(origin_words(text) for text in caught), [t for t in caught if not origin_words(t)]
    kept = [
        "a fixed-seed checksum",
        "the seed makes every GPU build the same weights",
        "the pytest session",
        "this session's run record",
        "seeded LoRA init",
    ]
    assert not any(origin_words(text) for text in kept), [t for t in kept if origin_words(t)]
