"""Where each test sits in the Allure report: area (epic), topic (feature), check (story), severity.

Derived from the category markers the plugin registers (``gpuaccept.plugin.MARKERS``), so a test
author only marks a module ``pytest.mark.nccl`` and the customer's report groups it under "NCCL".
The labels are applied as allure-pytest's own ``allure_label`` markers at collection time: they then
also work for ``--allure-epics``/``--allure-severities`` selection, for tests that error in setup,
and under xdist, without any code running inside the test. A test's own ``@allure.severity`` (a
marker on the function) comes first and wins.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["AREAS", "SEVERITY", "Placement", "categories_from_markers", "placement"]

#: Category marker -> the report's area (Allure epic). The seven areas customers read the report by.
AREAS: dict[str, str] = {
    "environment": "Environment",
    "slurm": "Environment",
    "storage": "Environment",
    "hygiene": "Environment",
    "gpu_health": "GPU health",
    "interconnect": "Interconnect",
    "compute": "Compute",
    "memory": "Memory",
    "nccl": "NCCL",
    "training": "Training",
}

#: Category marker -> Allure severity. Blocker: nothing can run on the node (no scheduler, a broken
#: GPU). Critical: jobs run but are wrong or slow (drift, links, FLOPs, bandwidth, collectives,
#: training). Normal: a misconfiguration that bites some workloads (limits, shared filesystem).
SEVERITY: dict[str, str] = {
    "slurm": "blocker",
    "gpu_health": "blocker",
    "environment": "critical",
    "interconnect": "critical",
    "compute": "critical",
    "memory": "critical",
    "nccl": "critical",
    "training": "critical",
    "storage": "normal",
    "hygiene": "normal",
}

#: Markers that say how a test runs, not what it checks.
NOT_CATEGORIES = frozenset({"acceptance", "multinode", "selftest"})


def categories_from_markers(markers: Iterable[str]) -> dict[str, str]:
    """``"nccl: collective communication"`` lines -> ``{"nccl": "Collective communication"}``."""
    out: dict[str, str] = {}
    for line in markers:
        name, _, description = line.partition(":")
        name = name.strip()
        if name and name not in NOT_CATEGORIES:
            text = description.strip() or name.replace("_", " ")
            out[name] = text[0].upper() + text[1:]
    return out


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


def placement(marker_names: Iterable[str], function_name: str, categories: dict[str, str]) -> Placement:
    """Area, topic and severity from the first category marker the test carries (closest first)."""
    for name in marker_names:
        if name in categories:
            area = AREAS.get(name, name.replace("_", " ").capitalize())
            return Placement(area, categories[name], _story(function_name), SEVERITY.get(name, "normal"))
    return Placement("Other", "Uncategorised checks", _story(function_name), "normal")
