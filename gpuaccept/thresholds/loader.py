"""Load the packaged thresholds.yaml, merge a site file over it, and validate before any job runs.

Errors are ``ThresholdsError`` (a pytest usage error) that name the file and the dotted key, e.g.
``site.yaml: skus.H200.limits.matmul_bf16_tflops: min 800 is greater than max 700``. A site file may
override a whole limit (with its own ``source``), add limits for known metrics, and add SKUs that say
how to ``match`` them; it may not invent metrics the probes do not produce.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gpuaccept.errors import read_input_file
from gpuaccept.thresholds.domain_site import DomainSite
from gpuaccept.thresholds.schema import Limit, MetricSpec, SkuSpec, ThresholdsFile
from gpuaccept.thresholds.storage_site import Filesystem, StorageSection
from gpuaccept.thresholds.tenant_site import TenantSite

__all__ = ["CPU_SKU", "KNOWN_SETTINGS", "Thresholds", "ThresholdsError", "default_path", "load_thresholds"]

CPU_SKU = "cpu"
KNOWN_SETTINGS = frozenset({"straggler_pct", "regression_pct"})


class ThresholdsError(pytest.UsageError):  # type: ignore[misc]  # final in typing; pytest maps it to exit 4
    """thresholds.yaml (or a site file) is unusable; the message names file and key."""


def default_path() -> Path:
    """The packaged defaults (the repository's top-level thresholds.yaml, shipped in the wheel)."""
    return Path(str(resources.files("gpuaccept") / "data" / "thresholds.yaml"))


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys silently; a limit written twice is a mistake to report."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (the later one would silently win)", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _read(path: Path) -> ThresholdsFile:
    data = read_input_file(path, "a thresholds YAML file", ThresholdsError)
    try:
        raw = yaml.load(data.decode("utf-8"), Loader=_UniqueKeyLoader)
    except UnicodeDecodeError:
        raise ThresholdsError(f"{path}: not a text file (not UTF-8): a thresholds file is YAML") from None
    except yaml.YAMLError as exc:
        raise ThresholdsError(f"{path}: not valid YAML: {exc}") from None
    if raw is None:  # empty, or comments only: a site file that sets nothing is a mistake, not a no-op
        raise ThresholdsError(f"{path}: empty: a thresholds file sets settings, defaults or skus")
    if not isinstance(raw, dict):
        raise ThresholdsError(f"{path}: the top level must be a mapping, not {type(raw).__name__}")
    try:
        return ThresholdsFile.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()
        )
        raise ThresholdsError(f"{path}: {problems}") from None


@dataclass(frozen=True)
class Thresholds:
    """The merged thresholds in force for a session."""

    metrics: dict[str, MetricSpec]
    settings: dict[str, float]
    defaults: dict[str, Limit]
    skus: dict[str, SkuSpec]
    files: tuple[Path, ...]
    digest: str = field(default="")
    file_digests: dict[str, str] = field(default_factory=dict)
    #: SKUs whose ``match`` a site file wrote: more specific than the packaged ones they may overlap
    site_skus: frozenset[str] = frozenset()
    #: the storage presets and the site's filesystems, each filesystem's contract resolved to its figures
    storage: StorageSection = field(default_factory=StorageSection)
    #: the site's ``tenant:`` declaration (the last file's that has one), None when no file declares it
    tenant: TenantSite | None = None
    #: the site's ``domain:`` declaration (the last file's that has one), None when no file declares it
    domain: DomainSite | None = None

    def sku_for_gpu(self, nvml_name: str) -> str | None:
        """The SKU one of whose ``match`` patterns fits the whole NVML device name, or None.

        Whole-name matching, because NVIDIA's names nest: "NVIDIA GB200" contains "B200", "NVIDIA GH200
        480GB" contains "H200" and "NVIDIA A100 80GB PCIe" contains "A100 80GB", and each is another
        product with other limits. A SKU a site file wrote (a calibrated one) wins over a packaged SKU
        matching the same name; two SKUs of the same standing claiming it is a usage error naming both.
        """
        found = [
            name
            for name, sku in self.skus.items()
            if any(re.fullmatch(pattern, nvml_name.strip(), re.IGNORECASE) for pattern in sku.match)
        ]
        if len(found) > 1 and len(set(found) & self.site_skus) == 1:
            return (set(found) & self.site_skus).pop()
        if len(found) > 1:
            raise ThresholdsError(
                f"{', '.join(str(f) for f in self.files)}: GPU model {nvml_name!r} matches SKUs "
                f"{' and '.join(found)}: make their 'match' patterns exclusive"
            )
        return found[0] if found else None

    def limits_for(self, sku: str) -> dict[str, Limit]:
        """Defaults, then each inherited SKU, then the SKU's own limits (later wins)."""
        if sku not in self.skus:
            raise ThresholdsError(f"SKU {sku!r} is not in {', '.join(str(f) for f in self.files)}")
        chain: list[SkuSpec] = []
        name: str | None = sku
        while name is not None:
            chain.append(self.skus[name])
            name = self.skus[name].inherits
        merged = dict(self.defaults)
        for spec in reversed(chain):
            merged.update(spec.limits)
        return merged

    def setting(self, name: str) -> float:
        return self.settings[name]

    def datasheet(self, sku: str, name: str) -> float | None:
        """A datasheet figure of ``sku`` (its own, else the nearest inherited one), or None."""
        spec: SkuSpec | None = self.skus.get(sku)
        while spec is not None:
            if name in spec.datasheet:
                return spec.datasheet[name].value
            spec = self.skus.get(spec.inherits) if spec.inherits else None
        return None


def _check_references(path: Path, data: ThresholdsFile, metrics: dict[str, MetricSpec], skus: set[str]) -> None:
    for key, limit_map in [("defaults", data.defaults)] + [
        (f"skus.{sku}.limits", spec.limits) for sku, spec in data.skus.items()
    ]:
        for metric in limit_map:
            base, _, scale = metric.partition("@")
            if scale and not scale.isdigit():
                raise ThresholdsError(f"{path}: {key}.{metric}: '@' must be followed by a rank/node count (e.g. @8)")
            if base not in metrics:
                raise ThresholdsError(f"{path}: {key}.{metric}: unknown metric (known: {', '.join(sorted(metrics))})")
            if metrics[base].report_only:
                raise ThresholdsError(
                    f"{path}: {key}.{metric}: {base} is report_only (reported, never judged: its judge records it "
                    "with judge.info), so a limit would judge nothing; a figure judged where a limit is set is "
                    "limit_optional in the catalogue"
                )
            if metrics[base].kind == "expectation":
                raise ThresholdsError(
                    f"{path}: {key}.{metric}: an expectation's expected value is computed by its test; "
                    "it takes no limit"
                )
    for sku, spec in data.skus.items():
        for i, pattern in enumerate(spec.match):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ThresholdsError(f"{path}: skus.{sku}.match.{i}: not a regular expression: {exc}") from None
        if spec.inherits is not None and spec.inherits not in skus:
            raise ThresholdsError(f"{path}: skus.{sku}.inherits: unknown SKU {spec.inherits!r}")
    for name in data.settings:
        if name not in KNOWN_SETTINGS:
            raise ThresholdsError(
                f"{path}: settings.{name}: unknown setting (known: {', '.join(sorted(KNOWN_SETTINGS))})"
            )


def _check_traced(path: Path, data: ThresholdsFile) -> None:
    """Every check of the catalogue names the requirements it serves, or why it serves none: never silently."""
    for name, spec in data.metrics.items():
        if not spec.traced:
            raise ThresholdsError(
                f"{path}: metrics.{name}: names no requirement: add `requirements: [ID, ...]` (IDs of "
                "gpuaccept/data/requirements.yaml), or `no_requirement: <why it proves none>`"
            )


def _literal(pattern: str) -> str | None:
    """The one name a ``match`` pattern fits, or None when it fits more (``^NVIDIA\\ H100$`` -> ``NVIDIA
    H100``, what gpuaccept-calibrate writes; ``NVIDIA H.*`` -> None)."""
    body = pattern.removeprefix("^").removesuffix("$")
    name: list[str] = []
    escaped = False
    for char in body:
        if escaped:
            if char.isalnum():  # \d, \s, \b: a class, not a character
                return None
            name.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ".^$*+?{}[]|()":
            return None
        else:
            name.append(char)
    return None if escaped else "".join(name)


def _names(pattern: str) -> set[str]:
    """The NVML names a packaged pattern lists: ``(NVIDIA )?H200`` -> ``NVIDIA H200`` and ``H200``."""
    candidates = {re.sub(r"\((.*?)\)\?", r"\1", pattern), re.sub(r"\((.*?)\)\?", "", pattern)}
    return {name for c in candidates if (name := _literal(c)) and re.fullmatch(pattern, name, re.IGNORECASE)}


def _check_broad_site_skus(path: Path, data: ThresholdsFile, packaged: dict[str, SkuSpec], sku: str | None) -> None:
    """A site SKU whose pattern fits more than one name and also a packaged SKU's board would judge that
    board by the site's limits without anyone choosing it (``match: [".*"]`` takes every GPU): refused,
    unless ``--sku`` picks it. Exact names (what calibration writes) win over the packaged SKU as before."""
    for name, spec in data.skus.items():
        if name in packaged or name == sku:
            continue
        for i, pattern in enumerate(spec.match):
            if _literal(pattern) is not None:
                continue
            for other, other_spec in packaged.items():
                hit = next(
                    (n for p in other_spec.match for n in sorted(_names(p)) if re.fullmatch(pattern, n, re.IGNORECASE)),
                    None,
                )
                if hit is not None:
                    raise ThresholdsError(
                        f"{path}: skus.{name}.match.{i}: {pattern!r} also matches {hit!r} of the packaged SKU "
                        f"{other}, whose GPUs it would take over: match the exact NVML name (as gpuaccept-calibrate "
                        f"writes it), or pick this SKU with --sku {name}"
                    )


def _merge_storage(merged: StorageSection, data: ThresholdsFile) -> StorageSection:
    """The file's presets and filesystems over those before it (a later file's entry of the same name wins);
    its stall limit where it sets one."""
    given = data.storage
    return StorageSection(
        presets={**merged.presets, **given.presets},
        filesystems={**merged.filesystems, **given.filesystems},
        stall_s=given.stall_s if "stall_s" in given.model_fields_set else merged.stall_s,
    )


def _resolve_storage(files: list[Path], storage: StorageSection) -> StorageSection:
    """Each filesystem's ``contract`` as its figures: a preset's name is looked up (an unknown one is a usage
    error naming the key and the presets there are)."""
    resolved: dict[str, Filesystem] = {}
    for name, fs in storage.filesystems.items():
        contract = fs.contract
        if isinstance(contract, str):
            if contract not in storage.presets:
                known = ", ".join(sorted(storage.presets)) or "none"
                raise ThresholdsError(
                    f"{files[-1]}: storage.filesystems.{name}.contract: unknown preset {contract!r} (known: {known}); "
                    "name a preset or give the figures (read_gbps, write_gbps, aggregate, ..., source)"
                )
            fs = fs.model_copy(update={"contract": storage.presets[contract], "preset": contract})
        resolved[name] = fs
    return storage.model_copy(update={"filesystems": resolved})


def load_thresholds(site: Path | None = None, *, defaults: Path | None = None, sku: str | None = None) -> Thresholds:
    """Validate the defaults and the optional site file, then merge the site file over them; ``sku``: the SKU
    ``--sku`` forces (a site SKU with a broad pattern is allowed only so)."""
    base_path = defaults or default_path()
    files = [base_path] + ([site] if site is not None else [])
    metrics: dict[str, MetricSpec] = {}
    settings: dict[str, float] = {}
    limits: dict[str, Limit] = {}
    skus: dict[str, SkuSpec] = {}
    file_digests: dict[str, str] = {}
    site_skus: set[str] = set()
    storage = StorageSection()
    tenant: TenantSite | None = None
    domain: DomainSite | None = None
    for path in files:
        data = _read(path)
        storage = _merge_storage(storage, data)
        tenant = data.tenant or tenant
        domain = data.domain or domain
        file_digests[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        if path is not base_path and data.metrics:
            raise ThresholdsError(f"{path}: metrics: a site file cannot define metrics; the probes produce a fixed set")
        _check_traced(path, data)
        metrics.update(data.metrics)
        for name, spec in data.skus.items():
            if path is not base_path and name not in skus and not spec.match and spec.inherits is None:
                raise ThresholdsError(f"{path}: skus.{name}: unknown SKU; a new SKU needs 'match' patterns")
        _check_references(path, data, metrics, set(skus) | set(data.skus))
        if path is not base_path:
            _check_broad_site_skus(path, data, skus, sku)
            site_skus.update(name for name, spec in data.skus.items() if spec.match)
        settings.update({name: s.value for name, s in data.settings.items()})
        limits.update(data.defaults)
        for name, spec in data.skus.items():
            if name in skus:
                old = skus[name]
                spec = SkuSpec(
                    match=spec.match or old.match,
                    description=spec.description or old.description,
                    inherits=spec.inherits or old.inherits,
                    limits={**old.limits, **spec.limits},
                    datasheet={**old.datasheet, **spec.datasheet},
                )
            skus[name] = spec
    if CPU_SKU not in skus:
        raise ThresholdsError(f"{base_path}: skus.{CPU_SKU}: the defaults must define the '{CPU_SKU}' SKU")
    missing = KNOWN_SETTINGS - set(settings)
    if missing:
        raise ThresholdsError(f"{base_path}: settings: missing {', '.join(sorted(missing))}")
    payload: dict[str, Any] = {
        "settings": settings,
        "defaults": {k: v.model_dump() for k, v in limits.items()},
        "skus": {k: v.model_dump() for k, v in skus.items()},
    }
    storage = _resolve_storage(files, storage)
    if storage.filesystems:  # the digest of a run without storage or a tenant section stays what it was
        payload["storage"] = storage.model_dump(mode="json")
    if tenant is not None:
        payload["tenant"] = tenant.model_dump(mode="json")
    if domain is not None:
        payload["domain"] = domain.model_dump(mode="json")
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
    return Thresholds(
        metrics,
        settings,
        limits,
        skus,
        tuple(files),
        digest,
        file_digests,
        frozenset(site_skus),
        storage,
        tenant,
        domain,
    )
