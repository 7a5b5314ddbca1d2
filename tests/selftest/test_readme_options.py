"""Every option the settings declare is in the README's option table, with its environment variable: an option
added to ``gpuaccept/settings.py`` and left out of the README (as ``--sharedfs-path`` once was) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuaccept.settings import OPTIONS

README = Path(__file__).resolve().parents[2] / "README.md"


def _table() -> str:
    text = README.read_text()
    start = text.index("| option | env | meaning |")
    return text[start : text.index("\n\n", start)]


@pytest.mark.parametrize("option", OPTIONS, ids=[o.name for o in OPTIONS])
def test_every_option_is_in_the_readme_table(option) -> None:
    table = _table()
    row = next((line for line in table.splitlines() if re.search(rf"`{re.escape(option.flag)}[` ]", line)), None)
    assert row is not None, f"README.md's option table has no row for {option.flag}"
    if not option.flag_only:
        cells = row.split(" | ")
        env = cells[1] if len(cells) > 2 else ""
        wildcards = re.findall(r"(GPUACCEPT_[A-Z_]*)\*", env)  # `GPUACCEPT_NCCL_*` names a family
        named = option.env in env or "…" in env or any(option.env.startswith(w) for w in wildcards)
        assert named, f"{option.flag}: {option.env} not in {env!r}"
