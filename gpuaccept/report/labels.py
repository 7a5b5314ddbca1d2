"""Where each test sits in the Allure report: area (epic), topic (feature), check (story), severity.

Read from the one table of areas (``gpuaccept.markers.AREAS``), so a test author only marks a module
``pytest.mark.nccl`` and the customer's report groups it under "NCCL". The labels are applied as
allure-pytest's own ``allure_label`` markers at collection time: they then also work for
``--allure-epics``/``--allure-severities`` selection, for tests that error in setup, and under xdist,
without any code running inside the test. A test's own ``@allure.severity`` (a marker on the
function) comes first and wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuaccept.markers import AREAS, Area, area_named

__all__ = ["Placement", "placement", "topics"]


def topics(areas: Iterable[Area] = AREAS) -> dict[str, str]:
    """``{"nccl": "Collective communication"}``: each area marker and what it covers (Allure's feature)."""
    return {area.marker: area.covers[:1].upper() + area.covers[1:] for area in areas}


@dataclass(frozen=True)
class Placement:
    """The labels one test gets."""

    epic: str
    feature: str
    story: str
    severity: str


def _story(function_name: str) -> str:
    words = function_name.removeprefix("test_").replace("_", " ").strip()
    return (words[:1].upper() + words[1:]) or function_name


def placement(marker_names: Iterable[str], function_name: str, categories: Mapping[str, str]) -> Placement:
    """Area, topic and severity from the first category marker the test carries (closest first);
    ``categories`` maps each category marker to its topic (``topics()``, or a site's own)."""
    for name in marker_names:
        if name in categories:
            area = area_named(name)
            title = area.title if area is not None else name.replace("_", " ").capitalize()
            return Placement(title, categories[name], _story(function_name), area.severity if area else "normal")
    return Placement("Other", "Uncategorised checks", _story(function_name), "normal")
