"""Which acceptance test judges which metric on which node shape: the one place that says so.

A SKU is covered when, on every node shape its users have, each test that would run finds a limit for
every metric it judges (or the catalogue calls the metric informational), and each test about a thing
the SKU declares absent (NVLink on a PCIe card, InfiniBand on a node without HCAs) skips naming that
absence instead of erroring "no limit". Each test declares what it judges (``@pytest.mark.judges``);
``coverage`` computes, for a SKU and a shape, what runs, what skips and why, and which limits are
missing, from those declarations as ``TestSpec``s handed in. It reads no test itself: the tests import
the whole plugin, and this module sits in the lowest layers (docs/ARCHITECTURE.md), so the suite reads
its own marks (``tests/selftest/test_sku_coverage.py``'s ``declared_tests``) and passes them here. The selftest
``tests/selftest/test_sku_coverage.py`` holds the declaration to the tests themselves (the metric names
in ``tests/acceptance/*.py`` and the modules they import) and to run records (``fixtures/runs/``), so a
test that starts judging a new metric, or stops, fails it.

The skip rule the tests use for a declared absence is ``declares_absent`` below, imported by them, so
the coverage and the tests cannot disagree about it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from gpuaccept.contracts.nccl_formulas import COLLECTIVES
from gpuaccept.thresholds.loader import Thresholds
from gpuaccept.thresholds.schema import Limit

__all__ = [
    "ABSENCE_METRIC",
    "LAYOUTS",
    "NETWORK_METRICS",
    "Coverage",
    "NodeLayout",
    "TestSpec",
    "coverage",
    "declares_absent",
]

Feature = Literal["nvlink", "ib", "nccl_net", "storage", "tenant"]

#: the limit whose absence (or ``equal: 0``) declares a feature absent on a SKU or site
#: a feature only a site declares (its limits are the site's, not a SKU's): absent from every packaged shape
SITE_DECLARED: dict[Feature, str] = {
    "storage": "no filesystem declared: storage.filesystems in a site file (--thresholds site.yaml) names them",
    "tenant": "no tenant section declared: tenant.root_of_trust and tenant.agents in a site file (--thresholds "
    "site.yaml) say what a node handed to a tenant must have",
}
ABSENCE_METRIC: dict[Feature, str] = {
    "nvlink": "nvlink_links_active",
    "ib": "ib_hca_count",
    "nccl_net": "nccl_net_transport",
}


def declares_absent(limit: Limit | None) -> bool:
    """Whether a SKU's limit declares the thing absent: no limit at all, or one that admits only zero
    (``equal: 0``, ``max: 0``). A test about that thing skips naming the absence, never errors on it."""
    if limit is None:
        return True
    if limit.equal is not None:
        return str(limit.equal) in ("0", "0.0")
    return limit.max is not None and limit.max <= 0 and not limit.min


@dataclass(frozen=True)
class NodeLayout:
    """A node layout users run: GPUs per node, NVLink/NVSwitch or PCIe only, InfiniBand or not, nodes."""

    gpus: int
    nvlink: bool
    ib: bool
    nodes: int

    @property
    def label(self) -> str:
        gpus = f"{self.gpus} GPU" if self.gpus else "CPU"
        link = "NVLink" if self.nvlink else ("PCIe" if self.gpus else "-")
        nodes = f"{self.nodes} node" + ("s" if self.nodes > 1 else "")
        return f"{nodes} x {gpus}, {link}, {'IB' if self.ib else 'no IB'}"


@dataclass(frozen=True)
class TestSpec:
    """One acceptance test: the metrics it judges (``judge.check``), and when it runs, as its
    ``@pytest.mark.judges(*metrics, gpus=, nodes=, absent=, optional=, scaled=)`` declares them (a test
    without the mark judges no metric with a limit: expectations only).

    ``gpus``: "any" runs on CPU nodes too; "gpu" needs a GPU; "pair" needs two GPUs on the node;
    "collective" needs two ranks on the node (two GPUs, or two gloo ranks on a CPU node). ``nodes``: the
    allocation it needs. ``absent``: the feature whose declared absence (and absence on the node)
    skips it. ``optional``: runs only when asked for or when a tool is installed (still covered).
    """

    __test__ = False  # a declaration, not a pytest test class

    metrics: tuple[str, ...]
    gpus: Literal["any", "gpu", "pair", "collective"] = "any"
    nodes: int = 1
    absent: Feature | None = None
    optional: str | None = None
    scaled: bool = False  # looked up as metric@N first (N = ranks on the node, or nodes)


#: busbw floors of the network between nodes: a property of the compute fabric, which a SKU knows only
#: when its reference design has one (``nccl_net_transport`` declared: HGX boards with 8 x NDR 400). A SKU
#: without one (L40S) leaves them to the site file that declares its network (as
#: fixtures/site/h200-socket-net.yaml does) or to ``gpuaccept-calibrate``; until then the tests
#: ERROR naming each of them.
NETWORK_METRICS = frozenset(
    [f"nccl_rail_{c}_busbw_gbs" for c in COLLECTIVES[:3]] + [f"nccl_{c}_busbw_multinode_gbs" for c in COLLECTIVES]
)

#: metrics a test judges only on GPU nodes (on a CPU node the gloo ranks have no GPU to watch)
GPU_ONLY = frozenset(
    {
        "train_gpu_util_pct",
        "train_fsdp_mem_saving_ratio",
        "infer_merged_speed_ratio",
        "infer_graph_eager_mismatch",
        "infer_agreement_mismatch",
    }
)
#: the built-in 7B-class fine-tune runs on GPUs only (a CPU node skips it, declaring no GPU); MFU needs a GPU
GPU_ONLY_PREFIXES = ("train_scale_", "train_mfu_pct", "train_pretrained_mfu_pct", "infer_decode_", "infer_prefill_")


def _gpu_only(metric: str) -> bool:
    return metric in GPU_ONLY or metric.startswith(GPU_ONLY_PREFIXES)


def _layouts(gpus: tuple[int, ...], nvlink_at: int | None, ib: tuple[bool, ...]) -> tuple[NodeLayout, ...]:
    return tuple(
        NodeLayout(g, nvlink_at is not None and g >= nvlink_at, i, n) for g in gpus for i in ib for n in (1, 2)
    )


#: SKU -> the shapes its users run (the selftest judges coverage on each). HGX boards: one GPU passed to a
#: VM has no NVSwitch fabric (PCIe only), eight share it. L40S is a PCIe card whose reference servers
#: carry no InfiniBand compute fabric: a site with one declares its floors (see docs/thresholds.md); so do
#: GB200/GB300 trays, whose scale-out NICs (InfiniBand, Ethernet, EFA) the rack's buyer chooses.
LAYOUTS: dict[str, tuple[NodeLayout, ...]] = {
    "cpu": _layouts((0,), None, (False,)),
    "H100-SXM-80GB": _layouts((1, 8), 2, (True, False)),
    "H200": _layouts((1, 8), 2, (True, False)),
    "A100-SXM4-80GB": _layouts((1, 8), 2, (True, False)),
    "B200": _layouts((1, 8), 2, (True, False)),
    "L40S": _layouts((1, 8), None, (False,)),
    # a Grace Blackwell compute tray carries 4 GPUs; its scale-out NICs are the site's (thresholds.yaml GB200)
    "GB200": _layouts((1, 4), 2, (False,)),
    "GB300": _layouts((1, 4), 2, (False,)),
    "B300": _layouts((1, 8), 2, (True, False)),
}


@dataclass
class Coverage:
    """What the suite does for one SKU on one shape."""

    sku: str
    shape: NodeLayout
    judged: dict[str, tuple[str, ...]] = field(default_factory=dict)  # test -> metrics it judges
    skipped: dict[str, str] = field(default_factory=dict)  # test -> why
    missing: dict[str, tuple[str, ...]] = field(default_factory=dict)  # test -> metrics without a limit
    site_declares: dict[str, tuple[str, ...]] = field(default_factory=dict)  # test -> network floors a site sets

    def problems(self) -> list[str]:
        return [
            f"{self.sku} on {self.shape.label}: {test} would ERROR: no limit for {', '.join(metrics)}"
            for test, metrics in sorted(self.missing.items())
        ]


def _present(shape: NodeLayout, feature: Feature) -> bool:
    return shape.nvlink if feature == "nvlink" else shape.ib


def _skip(spec: TestSpec, shape: NodeLayout, limits: dict[str, Limit], sku: str) -> str | None:
    """Why the test skips on this SKU and shape, as the test itself decides it; None when it runs."""
    if spec.gpus != "any" and spec.gpus != "collective" and not shape.gpus:
        return "partition declares no GPUs"
    if spec.gpus == "pair" and shape.gpus < 2:
        return "one GPU: no GPU pair"
    if spec.gpus == "collective" and shape.gpus == 1:
        return "one GPU: no intra-node collective"
    if spec.nodes > shape.nodes:
        return "one node"
    if spec.absent in SITE_DECLARED:
        return SITE_DECLARED[spec.absent]
    if spec.absent == "nccl_net":
        if limits.get(ABSENCE_METRIC["nccl_net"]) is None:
            return f"SKU {sku} declares no NCCL network transport"
    elif spec.absent is not None and declares_absent(limits.get(ABSENCE_METRIC[spec.absent])):
        if not _present(shape, spec.absent):
            return f"SKU {sku} declares no {'NVLink' if spec.absent == 'nvlink' else 'InfiniBand'}"
    return None


def _has_limit(metric: str, limits: dict[str, Limit], scale: int | None) -> bool:
    return metric in limits or (scale is not None and f"{metric}@{scale}" in limits)


def coverage(thresholds: Thresholds, sku: str, shape: NodeLayout, tests: Mapping[str, TestSpec]) -> Coverage:
    """Which of ``tests`` (``file::function`` -> what it declares) run on ``shape`` for ``sku``, what each
    judges, and which of those lack a limit."""
    limits = thresholds.limits_for(sku)
    result = Coverage(sku, shape)
    for test, spec in tests.items():
        reason = _skip(spec, shape, limits, sku)
        if reason is not None:
            result.skipped[test] = reason
            continue
        metrics = tuple(m for m in spec.metrics if shape.gpus or not _gpu_only(m))
        result.judged[test] = metrics
        scale = (shape.nodes if spec.nodes > 1 else shape.gpus or 2) if spec.scaled else None
        missing = tuple(
            m for m in metrics if not thresholds.metrics[m].informational and not _has_limit(m, limits, scale)
        )
        if limits.get(ABSENCE_METRIC["nccl_net"]) is None and shape.gpus:
            network = tuple(m for m in missing if m in NETWORK_METRICS)
            missing = tuple(m for m in missing if m not in NETWORK_METRICS)
            if network:
                result.site_declares[test] = network
        if missing:
            result.missing[test] = missing
    return result
