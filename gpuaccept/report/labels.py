"""Where each test sits in the Allure report: area (epic), topic (feature), check (story), severity, and
the requirements its checks prove.

Read from the one table of areas (``gpuaccept.markers.AREAS``), so a test author only marks a module
``pytest.mark.nccl`` and the customer's report groups it under "NCCL". The labels are applied as
allure-pytest's own ``allure_label`` markers at collection time: they then also work for
``--allure-epics``/``--allure-severities`` selection, for tests that error in setup, and under xdist,
without any code running inside the test. A test's own ``@allure.severity`` (a marker on the
function) comes first and wins. The requirements are known from the checks the test made (each names the
IDs it proves): the plugin adds a ``requirement`` label per ID and a link to its source document.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuaccept.markers import AREAS, Area, area_named
from gpuaccept.results.metrics import MetricResult
from gpuaccept.thresholds.requirements import Catalogue

__all__ = ["Placement", "RequirementLink", "placement", "requirement_links", "topics"]


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


@dataclass(frozen=True)
class RequirementLink:
    """A requirement a test's checks prove: its ID (the label), ``ID: title`` and its source document."""

    id: str
    name: str
    url: str | None


def requirement_links(checks: Iterable[MetricResult], catalogue: Catalogue) -> list[RequirementLink]:
    """Each requirement the checks name, once, in the catalogue's order (an ID it lacks: last, no link)."""
    ids = {rid for check in checks for rid in check.requirements}
    order = {req.id: i for i, req in enumerate(catalogue.requirements)}
    links = []
    for rid in sorted(ids, key=lambda r: (order.get(r, len(order)), r)):
        req = catalogue.by_id.get(rid)
        if req is None:
            links.append(RequirementLink(rid, rid, None))
        else:
            links.append(RequirementLink(rid, f"{rid}: {req.title}", catalogue.sources[req.source].url))
    return links
