"""docs/faults.md is generated from the catalogue's declarations, and every proof it cites exists."""

from __future__ import annotations

import re

from .conftest import REPO
from .fault_rows import END_TO_END, LOOP
from .faults_page import PAGE, ROWS, render


def test_page_is_generated_from_the_declarations() -> None:
    assert PAGE.read_text() == render(), (
        "docs/faults.md differs from tests/selftest/fault_rows*.py: regenerate it with "
        "`python3 -m tests.selftest.faults_page` (and edit the declarations, not the page)"
    )


def test_every_cited_selftest_exists() -> None:
    for row in ROWS:
        for cited in row.selftests:
            if not cited.startswith("tests/"):
                continue
            path, _, name = cited.partition("::")
            assert (REPO / path).is_file(), (row.key, cited)
            function = re.sub(r"\[.*", "", name)
            if function:
                assert re.search(rf"^def {function}\(", (REPO / path).read_text(), re.M), (row.key, cited)


def test_rows_are_unique_and_end_to_end_rows_name_their_proof() -> None:
    keys = [r.key for r in ROWS]
    assert len(keys) == len(set(keys)), keys
    for row in ROWS:
        if row.inject or row.inject_after:
            assert row.proof == END_TO_END and row.named and row.selftests == (f"{LOOP}[{row.key}]",), row.key
