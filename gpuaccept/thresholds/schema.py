"""The shape of thresholds.yaml, as pydantic models that reject what they do not know.

Every number a verdict depends on carries a ``source`` (datasheet, public measurement, or our own
measurement with device and date): a limit without one is a usage error, not a default. Unknown keys
are errors too (``extra="forbid"``), so a typo such as ``mni:`` cannot silently disable a check.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpuaccept.thresholds.domain_site import DomainSite
from gpuaccept.thresholds.requirements import catalogue_path, load_catalogue
from gpuaccept.thresholds.storage_site import StorageSection
from gpuaccept.thresholds.tenant_site import TenantSite

__all__ = ["OLD_KEY", "TIGHT_MARGIN_PCT", "Display", "Limit", "MetricSpec", "Setting", "SkuSpec", "ThresholdsFile"]

#: a healthy figure closer than this to its limit (percent of the limit) needs a stated reason
#: (``MetricSpec.tight_margin``), so that no limit sits unexplained just under a healthy GPU
TIGHT_MARGIN_PCT = 5.0
#: what a catalogue entry with the old key ``informational: true`` is told to write instead
OLD_KEY = (
    "'informational' is two keys now: write 'report_only: true' if the figure is reported, never judged "
    "(no limit anywhere), or 'limit_optional: true' if it is judged where a SKU, site file or site contract "
    "sets a limit and shown unjudged elsewhere (what 'informational: true' did)"
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Display(_Strict):
    """How the report shows a metric; the report reads this, never a list of metric names of its own.

    ``heatmap``: the metric is a column of the summary page's per-GPU heat map (value against the
    SKU's floor), under this title; columns follow the catalogue's order. ``bars``: the Allure result
    of a test that measured it on several GPUs gets one bar per GPU against the limit (the default).
    ``chart``: the summary chart it feeds: ``busbw``, NCCL bus bandwidth against message size per
    scale (the metrics ``verdicts.nccl_lines.metric_name`` names); ``loss``, the fine-tune's
    loss curves the checks carry (``extra.curve``), the metric's ``max`` as the target.
    """

    heatmap: str | None = Field(default=None, min_length=1)
    bars: bool = True
    chart: Literal["busbw", "loss"] | None = None


class MetricSpec(_Strict):
    """A check the suite knows: its unit, what it means, and how a verdict on it is reached.

    ``kind: metric`` (the default) is judged against the limit the SKU sets; a test that needs one the
    SKU lacks is an error, never a silent pass. Two kinds of metric need no limit, each with its own name:

    * ``report_only: true``: reported, not judged. A figure shown beside the verdicts (temperatures,
      versions, wall times) that its judge records with ``judge.info``; no test passes on it, and the
      packaged catalogue sets it no limit (the loader refuses one: a limit would judge it).
    * ``limit_optional: true``: judged only where a limit is set (a SKU's, a site file's, or a site
      contract's such as a filesystem's), shown unjudged elsewhere: an InfiniBand rate on a SKU without
      a compute fabric, a storage figure without a declared contract.

    Both are ``informational`` to the judging core (a figure without a limit is recorded ``info``, never
    an error); the old key ``informational: true``, which said both at once, is refused naming the two.
    ``kind: expectation``
    is a named expectation whose expected value the test computes at run time ("sha256 equal to the
    one written", "the step ran on the node it was sent to"); it carries its own ``source``. ``fault``
    sorts a failing check for the report: a figure below its floor, a hardware fault (ECC, Xid, link
    errors, corrupt results) or drift between nodes. ``display`` says how the report shows it.

    ``requirements`` names the IDs of the requirements catalogue (``gpuaccept/data/requirements.yaml``)
    the check serves: the one place that says which check proves which requirement (the record, the
    summary, Allure and docs/requirements.md read it from here). A check that proves none says so on
    purpose and why, in ``no_requirement``; a catalogue entry naming neither is an error (``traced``),
    so none is left out silently.

    ``tight_margin`` says why a healthy figure sits within 5% of its limit (``TIGHT_MARGIN_PCT``): a limit
    that is the part's own specification (PCIe Gen5 x16, 18 NVLinks, the board's power), a capacity the
    driver reports a little above its floor, a convergence target a healthy run reaches almost exactly,
    a band around equality. Every other check keeps healthy figures more than 5% inside its limit, which
    tests/selftest/test_margins.py holds against the healthy GPU runs of docs/measurements.md.
    """

    unit: str
    description: str
    better: Literal["higher", "lower", "equal"] = "higher"
    kind: Literal["metric", "expectation"] = "metric"
    report_only: bool = False
    limit_optional: bool = False
    fault: Literal["threshold", "hardware", "drift"] = "threshold"
    source: str | None = Field(default=None, min_length=3)
    display: Display = Display()
    requirements: tuple[str, ...] = ()
    no_requirement: str | None = Field(default=None, min_length=10)
    tight_margin: str | None = Field(default=None, min_length=10)

    @model_validator(mode="before")
    @classmethod
    def _old_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "informational" in data:
            raise ValueError(OLD_KEY)
        return data

    @property
    def informational(self) -> bool:
        """Whether a figure of it without a limit is recorded ``info`` (shown, passes nothing) rather than an
        error: what the judging core asks, for both kinds of metric that need no limit."""
        return self.report_only or self.limit_optional

    @field_validator("requirements")
    @classmethod
    def _known(cls, ids: tuple[str, ...]) -> tuple[str, ...]:
        known = load_catalogue().by_id
        for rid in ids:
            if rid not in known:
                raise ValueError(f"unknown requirement ID {rid!r}: {catalogue_path()} has no such requirement")
        if len(set(ids)) != len(ids):
            raise ValueError(f"a requirement ID is named twice: {', '.join(ids)}")
        return ids

    @model_validator(mode="after")
    def _traced(self) -> MetricSpec:
        if self.requirements and self.no_requirement is not None:
            raise ValueError("names requirements and no_requirement: it serves them, or it serves none")
        return self

    @property
    def traced(self) -> bool:
        """It names the requirements it serves, or says why it serves none (the loader holds the packaged
        catalogue to this; a site file cannot define metrics at all)."""
        return bool(self.requirements) or self.no_requirement is not None

    @model_validator(mode="after")
    def _kind(self) -> MetricSpec:
        if self.kind == "expectation" and self.source is None:
            raise ValueError("an expectation needs a source (what says the expected value is right)")
        if self.kind == "expectation" and self.informational:
            raise ValueError("an expectation is judged; it cannot be report_only or limit_optional")
        if self.report_only and self.limit_optional:
            raise ValueError(
                "report_only and limit_optional both: a figure is never judged, or judged where a limit is set"
            )
        return self


class Limit(_Strict):
    """Pass criteria for one metric on one SKU; ``min``/``max`` inclusive, ``equal`` exact."""

    min: float | None = None
    max: float | None = None
    equal: float | str | None = None
    source: str = Field(min_length=3)
    straggler_pct: float | None = Field(default=None, gt=0, lt=100)
    regression_pct: float | None = Field(default=None, gt=0, lt=100)

    @model_validator(mode="after")
    def _bounds(self) -> Limit:
        if self.min is None and self.max is None and self.equal is None:
            raise ValueError("a limit needs at least one of min, max or equal")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is greater than max {self.max}")
        return self


class Setting(_Strict):
    """A suite-wide number (e.g. the straggler percentage) with where it comes from."""

    value: float
    source: str = Field(min_length=3)


class SkuSpec(_Strict):
    """A GPU model: how NVML names it, what a node of it has, and its limits."""

    match: list[str] = Field(
        default_factory=list,
        description="regular expressions each matched against the WHOLE NVML device name, case-insensitive "
        "('NVIDIA H200' matches 'NVIDIA H200', not 'NVIDIA GH200 480GB' nor 'NVIDIA H200 NVL')",
    )
    description: str = ""
    inherits: str | None = None
    limits: dict[str, Limit] = Field(default_factory=dict)
    datasheet: dict[str, Setting] = Field(
        default_factory=dict,
        description="hardware facts a figure is computed from, not limits (bf16_dense_tflops: the MFU divisor)",
    )


class ThresholdsFile(_Strict):
    """One YAML file: the packaged defaults or a site override (every section optional)."""

    schema_version: Literal[1] = 1
    metrics: dict[str, MetricSpec] = Field(default_factory=dict)
    settings: dict[str, Setting] = Field(default_factory=dict)
    defaults: dict[str, Limit] = Field(default_factory=dict, description="limits for every SKU")
    skus: dict[str, SkuSpec] = Field(default_factory=dict)
    storage: StorageSection = Field(
        default_factory=StorageSection,
        description="the storage contracts (presets) and the filesystems a site declares (thresholds/storage_site.py)",
    )
    tenant: TenantSite | None = Field(
        default=None,
        description="what a node handed to a tenant must have: root of trust, health agents, approved versions "
        "(thresholds/tenant_site.py); undeclared, those tests skip naming the key",
    )
    domain: DomainSite | None = Field(
        default=None,
        description="the site's NVLink domains: the domain SKU override, IMEX scope and settle window, each block's "
        "trays and those out (thresholds/domain_site.py)",
    )
