"""The requirements catalogue (``gpuaccept/data/requirements.yaml``): what an acceptance is run against.

Every requirement of NVIDIA's catalogue (NVIDIA/ai-cloud-validation, at the commit each source names) is
there with its ID, section and short title, and with gpuaccept's own reading of it: ``partly`` says what
the requirement asks beyond what the checks naming it measure; ``not_covered`` names the scope (a key of
``scopes``) that puts it out of the suite's reach. Which checks prove a requirement is not said here but
in the metrics catalogue of thresholds.yaml (``requirements: [ID, ...]``), the one place a check is
declared; ``gpuaccept.thresholds.trace`` joins the two.

Loaded and validated once (pydantic, unknown keys refused, IDs unique, every source and scope known), so
a metric naming an ID can be checked against it while thresholds.yaml is read.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = ["Catalogue", "CatalogueError", "Requirement", "Source", "catalogue_path", "load_catalogue"]


class CatalogueError(ValueError):
    """The requirements catalogue is unusable; the message names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    """One requirements document, as NVIDIA/ai-cloud-validation keeps it: where, at which commit, under
    which licence (it must allow copying the IDs and titles)."""

    title: str = Field(min_length=3)
    version: str | None = None
    repository: str = Field(pattern=r"^https://github\.com/[^/]+/[^/]+$")
    path: str = Field(min_length=3)
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    license: str = Field(min_length=3)

    @property
    def url(self) -> str:
        """The document at the commit it was read from."""
        return f"{self.repository}/blob/{self.commit}/{self.path}"


class Requirement(_Strict):
    """One requirement: its ID, where it sits in its document, a short title, and our reading of it.

    ``partly``: what it asks that the checks naming it do not measure (its checks cover it only in part).
    ``not_covered``: the scope that puts it out of the suite's reach (no check may then name it).
    ``note``: what a reader would otherwise ask (e.g. which covered requirement's checks come closest).
    """

    id: str = Field(pattern=r"^(?:[A-Z][A-Z0-9]*[0-9]{2}|N-[0-9]{3}[a-z]?)$")
    source: str
    section: str
    title: str = Field(min_length=2)
    partly: str | None = Field(default=None, min_length=10)
    not_covered: str | None = None
    note: str | None = Field(default=None, min_length=10)

    @model_validator(mode="after")
    def _one_reading(self) -> Requirement:
        if self.partly is not None and self.not_covered is not None:
            raise ValueError("a requirement is partly covered or not covered, not both")
        return self


class Catalogue(_Strict):
    """The whole file: its sources, the scopes an uncovered requirement may name, and the requirements."""

    schema_version: Literal[1] = 1
    sources: dict[str, Source]
    scopes: dict[str, str]
    requirements: list[Requirement]

    @model_validator(mode="after")
    def _references(self) -> Catalogue:
        seen: set[str] = set()
        for i, req in enumerate(self.requirements):
            where = f"requirements.{i} ({req.id})"
            if req.id in seen:
                raise ValueError(f"{where}: the ID is listed twice")
            seen.add(req.id)
            if req.source not in self.sources:
                raise ValueError(f"{where}.source: unknown source {req.source!r} (known: {', '.join(self.sources)})")
            if req.not_covered is not None and req.not_covered not in self.scopes:
                raise ValueError(
                    f"{where}.not_covered: unknown scope {req.not_covered!r} (known: {', '.join(self.scopes)})"
                )
        return self

    @functools.cached_property
    def by_id(self) -> dict[str, Requirement]:
        return {req.id: req for req in self.requirements}


def catalogue_path() -> Path:
    """The packaged catalogue (shipped in the wheel beside the thresholds)."""
    return Path(str(resources.files("gpuaccept") / "data" / "requirements.yaml"))


def _read(path: Path) -> Catalogue:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        return Catalogue.model_validate(raw)
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogueError(f"{path}: cannot be read: {exc}") from None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()
        )
        raise CatalogueError(f"{path}: {problems}") from None


@functools.cache
def load_catalogue(path: Path | None = None) -> Catalogue:
    """The catalogue at ``path`` (the packaged one by default), read and validated once per process."""
    return _read(path or catalogue_path())
