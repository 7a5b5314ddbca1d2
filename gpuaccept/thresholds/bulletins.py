"""NVIDIA's security bulletins for what a node runs: the catalogue (``gpuaccept/data/bulletins.json``) and the
one rule that says whether a version is below a fix.

The catalogue is generated, never hand-edited: ``gpuaccept.thresholds.bulletins_refresh`` reads the CSAF
documents of NVIDIA's machine-readable bulletins (github.com/NVIDIA/product-security, ``<year>/<id>/<id>.json``)
and keeps the components a node check can hold: the Linux GPU display driver by branch (``R580``), DCGM and
the DCGM exporter.

A component's fixes come in *lines*: a driver branch (``R580``: every 580.x driver), or ``*`` where the
bulletin names one line for every version (DCGM). A version is below a bulletin's fix when:

* its line is listed with a fixed version and the version is below it (580.95.05 < 580.159.03), or
* its line is listed as affected with no fixed version (no fix released for that branch), or
* its line is not listed but lines newer than it are: the bulletin fixed newer branches and left this one
  out (an end-of-life branch). A line newer than every listed one was released after the bulletin and is
  not held to it.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict

__all__ = [
    "Bulletin",
    "Catalogue",
    "Finding",
    "Line",
    "UnreadableVersion",
    "findings",
    "line_of",
    "load_catalogue",
    "version_key",
]

_NUMBERS = re.compile(r"\d+")
#: a version the fixes can be compared with: dotted numbers first (580.95.05, 4.5.2, 3.3.5-3.4.0, v4.1.1-4.0.4)
_VERSION = re.compile(r"v?\d+(\.\d+)+([-+~_ ].*)?")


class UnreadableVersion(ValueError):
    """A version reading the bulletins' fixes cannot be compared with ("garbage", "N/A", "[Unknown Error]",
    a bare "580"): could not measure, never "no known-vulnerable version"."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Line(_Model):
    """One line of a component in one bulletin: its fixed version (None: affected, no fix released) and the
    CVEs that hit it."""

    fixed: str | None
    cves: list[str]
    note: str | None = None  # what the bulletin says that the fixed version alone does not


class Bulletin(_Model):
    id: str
    title: str
    published: str  # initial release date, YYYY-MM-DD
    updated: str
    url: str
    cves: list[str]
    components: dict[str, dict[str, Line]]  # component -> line ("R580", "*") -> its fix


class Catalogue(_Model):
    source: str  # the repository and commit the catalogue was generated from
    generated: str
    bulletins: list[Bulletin]


class Finding(_Model):
    """A version below a bulletin's fix: what, which bulletin, and the fix (None: none for this line)."""

    component: str
    version: str
    line: str
    fixed: str | None
    bulletin: str
    title: str
    url: str
    cves: list[str]
    why: str


def version_key(version: str) -> tuple[int, ...]:
    """``580.159.04`` as ``(580, 159, 4)``: numeric, so 580.159.10 sorts above 580.159.9."""
    return tuple(int(n) for n in _NUMBERS.findall(version))


def line_of(component: str, version: str, listed: dict[str, Line]) -> str:
    """The line of ``version`` as the bulletin keys its lines: ``*`` where it names one line for all, else
    the driver branch ``R<major>`` (or ``major.minor`` for the other components)."""
    if "*" in listed:
        return "*"
    key = version_key(version)
    if component == "gpu_driver":
        return f"R{key[0]}" if key else version
    return ".".join(str(n) for n in key[:2])


def _below(component: str, version: str, bulletin: Bulletin) -> Finding | None:
    listed = bulletin.components.get(component)
    if not listed:
        return None
    line = line_of(component, version, listed)
    base = {
        "component": component,
        "version": version,
        "line": line,
        "bulletin": bulletin.id,
        "title": bulletin.title,
        "url": bulletin.url,
    }
    if line in listed:
        fix = listed[line]
        if fix.fixed is None:
            why = f"{component} {version}: bulletin {bulletin.id} lists {line} as affected with no fix"
            return Finding(**base, fixed=None, cves=fix.cves, why=why)
        if version_key(version) < version_key(fix.fixed):
            why = f"{component} {version} is below {fix.fixed}, the fix on {line} of bulletin {bulletin.id}"
            return Finding(**base, fixed=fix.fixed, cves=fix.cves, why=why)
        return None
    newer = [name for name in listed if version_key(name) > version_key(line)]
    if not newer:
        return None  # a line newer than every line the bulletin fixed: released after it
    cves = sorted({cve for name in newer for cve in listed[name].cves})
    why = (
        f"{component} {version}: bulletin {bulletin.id} fixes {', '.join(sorted(listed, key=version_key))} "
        f"and no fix for {line}"
    )
    return Finding(**base, fixed=None, cves=cves, why=why)


def findings(component: str, version: str | None, catalogue: Catalogue) -> list[Finding]:
    """Every bulletin of the catalogue ``version`` of ``component`` is below the fix of; none for a
    component not installed (``version`` None). ``UnreadableVersion`` for a text that is not dotted numbers:
    its line and its place against a fix cannot be known, so nothing found would be a guess."""
    if version is None:
        return []
    if not _VERSION.fullmatch(version.strip()):
        raise UnreadableVersion(
            f"{component} version {version!r} is not a version (dotted numbers) a bulletin's fix can be compared with"
        )
    found = (_below(component, version, b) for b in catalogue.bulletins)
    return [f for f in found if f is not None]


@cache
def load_catalogue(path: str | None = None) -> Catalogue:
    """The packaged catalogue (``gpuaccept/data/bulletins.json``) or the one at ``path``."""
    if path is not None:
        return Catalogue.model_validate(json.loads(Path(path).read_text()))
    raw = resources.files("gpuaccept").joinpath("data/bulletins.json").read_text()
    return Catalogue.model_validate(json.loads(raw))
