"""README.md's option table is generated from ``gpuaccept/settings.py`` (``python3 -m gpuaccept.settings_doc``;
tests/selftest/test_generated_docs.py holds the README to it): every option has its row, with its environment
variable, and an option added to the settings is in the table without anyone writing it (``--sharedfs-path``
was once left out of a table kept by hand)."""

from __future__ import annotations

import pytest

from gpuaccept.settings import OPTIONS
from gpuaccept.settings_doc import BEGIN, END, PAGE, render, table

pytestmark = pytest.mark.selftest


@pytest.mark.parametrize("option", OPTIONS, ids=[o.name for o in OPTIONS])
def test_every_option_has_its_row(option) -> None:
    rows = [line for line in table().splitlines() if line.startswith((f"| `{option.flag}`", f"| `{option.flag} "))]
    assert len(rows) == 1, f"{option.flag}: {rows}"
    env = rows[0].split(" | ")[1]
    assert env == ("" if option.flag_only else f"`{option.env}`"), rows[0]


def test_the_readme_holds_the_generated_table() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "README.md's option table lost its markers"
    assert table() in text, "README.md's option table is out of date: run `python3 -m gpuaccept.settings_doc`"


def test_a_readme_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="no option table"):
        render("# a README without an option table\n")
    assert render(f"before\n{BEGIN}\nstale\n{END}\nafter\n") == f"before\n{table()}\nafter\n"
