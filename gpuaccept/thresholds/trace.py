"""Which checks prove which requirement: the metrics catalogue (``requirements:``) joined to the requirements
catalogue (``gpuaccept/data/requirements.yaml``), and whether the two agree.

A requirement is

* **covered** when at least one judged check (a metric or expectation of thresholds.yaml that is not
  informational) names it and the requirements catalogue says of it no ``partly``;
* **partly covered** when judged checks name it but the requirement asks more than they measure: the
  catalogue's ``partly`` says what (e.g. the one-second bound of a cross-node read that is not timed);
* **not covered** when no check names it: the catalogue's ``not_covered`` must then say why (a scope such
  as ``kubernetes`` or ``provider_api``).

Informational figures naming a requirement are listed with it but never make it covered on their own:
they are judged only on the SKUs that set a limit for them, and pass nothing elsewhere. The two files
must agree: a requirement named by a check cannot be declared not covered, one no
check names must say why, and a ``partly`` without a check is a contradiction. ``trace`` refuses them all
at once (``TraceError``), so docs/requirements.md and the selftest cannot drift from the declarations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from gpuaccept.thresholds.requirements import Catalogue, Requirement
from gpuaccept.thresholds.schema import MetricSpec

__all__ = ["COVERAGE", "Coverage", "TraceError", "Traced", "trace"]

Coverage = Literal["covered", "partly covered", "not covered"]
COVERAGE: tuple[Coverage, ...] = ("covered", "partly covered", "not covered")


class TraceError(ValueError):
    """The metrics catalogue and the requirements catalogue disagree; the message lists every disagreement."""


@dataclass(frozen=True)
class Traced:
    """A requirement, how far the suite covers it, and the checks that name it (in the catalogue's order)."""

    requirement: Requirement
    coverage: Coverage
    #: judged checks (metrics with limits, expectations): what proves it
    judged: tuple[str, ...]
    #: informational figures naming it: judged only where a SKU sets a limit for them
    informational: tuple[str, ...]


def trace(metrics: Mapping[str, MetricSpec], catalogue: Catalogue) -> list[Traced]:
    """Every requirement of ``catalogue`` with its coverage and checks, or ``TraceError`` naming each
    disagreement between the two catalogues."""
    naming: dict[str, list[tuple[str, MetricSpec]]] = {}
    problems: list[str] = []
    for name, spec in metrics.items():
        for rid in spec.requirements:
            if rid not in catalogue.by_id:
                problems.append(f"metrics.{name}.requirements: unknown requirement ID {rid!r}")
            naming.setdefault(rid, []).append((name, spec))
    out: list[Traced] = []
    for req in catalogue.requirements:
        found = naming.get(req.id, [])
        judged = tuple(name for name, spec in found if not spec.informational)
        informational = tuple(name for name, spec in found if spec.informational)
        if req.not_covered is not None and found:
            problems.append(
                f"{req.id}: declared not covered ({req.not_covered}) but named by {', '.join(n for n, _ in found)}"
            )
        elif req.not_covered is None and not judged:
            why = f" (only informational figures name it: {', '.join(informational)})" if informational else ""
            problems.append(
                f"{req.id}: no judged check names it{why}: name it in a metric's `requirements`, "
                "or declare it `not_covered: <scope>` in the requirements catalogue"
            )
        coverage: Coverage = "not covered" if not judged else "partly covered" if req.partly else "covered"
        out.append(Traced(req, coverage, judged, informational))
    if problems:
        raise TraceError("the checks and the requirements catalogue disagree:\n  " + "\n  ".join(problems))
    return out
