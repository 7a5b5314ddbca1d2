"""The judging core: every verdict of the suite is reached here, and every check lands on the record.

A test measures through ``cluster`` and hands what it measured to its ``Judge`` (the ``judge``
fixture): ``check`` a figure against the limit the node's SKU sets, ``expect`` a named expectation
whose expected value the test computed ("sha256 equal to the one written on node1"), ``info`` a
figure the catalogue declares informational, ``stragglers`` for the relative rule; ``busy`` and
``unreadable`` for what could not be measured. Then the test returns: the plugin decides its outcome
from these checks (``judging.outcome``). Tests never read limits to decide anything themselves.

Rules that hold everywhere because they live only here:

* nothing passes on missing data: "could not measure" is said one way, ``unreadable`` (a check recorded
  ``unmeasured``: the test ends an ERROR naming it, and a check that failed elsewhere still FAILS it); a
  value of ``None`` handed to ``check``/``expect``/``info`` is recorded so; a NaN or a non-number misses
  its limit;
* a metric the test needs but the SKU has no limit for is recorded ``unjudged`` and the test ends
  as an ERROR "cannot judge X on SKU Y: no limit (add one in a site file)";
* a test passes on at least one judged check and no failed one; informational figures never count;
* in a calibration run (``--calibrate``) a figure without a limit is ``measured``: recorded for
  ``gpuaccept-calibrate``, no error and no pass (the plugin ends such a test ``measured``);
* a baseline run (``--baseline``) fails a figure that got worse beyond tolerance, even above its floor;
* every miss is collected before failing, so one message names every bad node, GPU and metric.
"""

from __future__ import annotations

import fnmatch
import math
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from gpuaccept.errors import ToolMissing
from gpuaccept.judging.outcome import BUSY_METRIC
from gpuaccept.results.metrics import SUBJECT_KINDS, MetricResult, SubjectKind, Verdict
from gpuaccept.thresholds.loader import Thresholds
from gpuaccept.thresholds.schema import Limit, MetricSpec

if TYPE_CHECKING:
    from gpuaccept.judging.baseline import Baseline

__all__ = ["NO_VALUE", "Judge", "judge_value", "no_limit_message"]

#: why a check handed ``None`` is unreadable
NO_VALUE = "no value was measured"

#: the subject keywords a test may name a check's subject with (``gpu=3``, ``hca="mlx5_0 port 1"``, ...)
SUBJECT_KEYWORDS = tuple(k for k in SUBJECT_KINDS if k != "node")


def _subject(extra: dict[str, Any]) -> tuple[str | None, SubjectKind]:
    """Take the one subject keyword out of ``extra`` (``gpu=``, ``pair=``, ``hca=``, ``rail=``, ``rank=``,
    ``field=``, ``partition=``, ``fspath=``): what the check is about beside its node; none of them = the node."""
    on = {k: extra.pop(k) for k in SUBJECT_KEYWORDS if k in extra}
    named = [(kind, label) for kind, label in on.items() if label is not None]
    if len(named) > 1:
        raise TypeError(f"a check is about one subject, got {', '.join(k + '=' for k, _ in named)}")
    if not named:
        return None, "node"
    kind, label = named[0]
    return str(label), cast(SubjectKind, kind)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))


def judge_value(value: Any, limit: Limit) -> tuple[bool, str]:
    """Whether ``value`` meets ``limit``, and why not (the one comparison every verdict uses)."""
    if limit.equal is not None:
        ok = value == limit.equal or (
            _is_number(value) and _is_number(limit.equal) and float(value) == float(limit.equal)
        )
        return ok, "" if ok else f"{value} != {limit.equal}"
    if not _is_number(value):
        return False, f"{value!r} is not a finite number"
    number = float(value)
    if limit.min is not None and number < limit.min:
        return False, f"{number:g} < min {limit.min:g}"
    if limit.max is not None and number > limit.max:
        return False, f"{number:g} > max {limit.max:g}"
    return True, ""


def no_limit_message(metric: str, sku: str, scale: int | None = None) -> str:
    at = f" (or {metric}@{scale})" if scale is not None else ""
    return f"cannot judge {metric}{at} on SKU {sku}: no limit (add one in a site file)"


class Judge:
    """One test's judge: judges and records its checks (the plugin ends the test from them)."""

    def __init__(
        self,
        thresholds: Thresholds,
        sku_of: Callable[[str], str],
        sink: Callable[[MetricResult], None],
        test: str,
        baseline: Baseline | None = None,
        *,
        calibrating: bool = False,
        recalibrate: tuple[str, ...] = (),
    ) -> None:
        self._thresholds = thresholds
        self._calibrating = calibrating
        self._recalibrate = recalibrate
        self._sku_of = sku_of
        self._sink = sink
        self.test = test
        self.results: list[MetricResult] = []
        self._baseline = baseline

    # ---- what the SKU declares (skip decisions and plot lines; never a verdict) ----------------------

    def _spec(self, metric: str) -> MetricSpec:
        spec = self._thresholds.metrics.get(metric)
        if spec is None:
            raise KeyError(f"metric {metric!r} is not in the thresholds catalogue")
        return spec

    def _limit(self, metric: str, sku: str, scale: int | None) -> Limit | None:
        limits = self._thresholds.limits_for(sku)
        return (limits.get(f"{metric}@{scale}") if scale is not None else None) or limits.get(metric)

    def declared(self, metric: str, node: str, scale: int | None = None) -> Limit | None:
        """The limit the node's SKU sets for ``metric`` (at ``scale``), or None: "does this SKU have
        NVLink at all", "which Xid codes count as hardware", "where to draw the floor on a plot"."""
        self._spec(metric)
        return self._limit(metric, self._sku_of(node), scale)

    def sku(self, node: str) -> str:
        return self._sku_of(node)

    @property
    def baseline(self) -> Baseline | None:
        """The ``--baseline`` run record this session compares with (None without one), for rules that
        compare more than one figure with it (``verdicts.trajectory``)."""
        return self._baseline

    def datasheet(self, sku: str, name: str) -> float | None:
        """A hardware fact of the SKU a figure is computed from (e.g. its dense BF16 peak for MFU)."""
        return self._thresholds.datasheet(sku, name)

    def setting(self, name: str) -> float:
        """A suite-wide setting (``straggler_pct``, ``regression_pct``)."""
        return self._thresholds.setting(name)

    # ---- recording -----------------------------------------------------------------------------------

    def _make(self, metric: str, value: Any, node: str, extra: dict[str, Any], sku: str) -> MetricResult:
        spec = self._spec(metric)
        subject, subject_kind = _subject(extra)
        result = MetricResult(
            test=self.test,
            metric=metric,
            value=value,
            unit=spec.unit,
            node=node,
            sku=sku,
            subject=subject,
            subject_kind=subject_kind,
            kind=spec.kind,
            extra=extra,
            requirements=list(spec.requirements),
        )
        return result

    def _record(self, result: MetricResult) -> MetricResult:
        if self._baseline is not None and "baseline" not in result.extra:  # info figures and expectations too
            result.extra["baseline"] = self._baseline.compare(result).to_dict()
        self.results.append(result)
        self._sink(result)
        return result

    # ---- the three ways to hand over a measurement ---------------------------------------------------

    def check(
        self,
        metric: str,
        value: Any,
        *,
        node: str,
        scale: int | None = None,
        limit: Limit | None = None,
        unread: str = NO_VALUE,
        **extra: Any,
    ) -> MetricResult:
        """Judge ``value`` against the node's SKU limit (``<metric>@<scale>`` first when ``scale`` is given), or
        against ``limit`` where the site declared one for this very check (a filesystem's contract: storage is
        no property of the GPU's SKU).

        What it is about beside ``node`` is one subject keyword in ``extra`` (``gpu=``, ``pair=``,
        ``hca=``, ``rail=``, ``rank=``, ``field=``, ``partition=``, ``fspath=``); the rest of ``extra`` rides along on
        the record. An informational metric without a limit is recorded as ``info``; any other metric
        without a limit is ``unjudged`` and makes the test an ERROR.

        A ``value`` of None is a reading not taken (``unread`` says why): could not measure (an ERROR) where
        the figure is judged, and ``info`` where it is only shown, an informational metric with no limit here
        (passed, or the SKU's): a driver without a figure nothing judges on this SKU is no fault of the node.
        """
        spec = self._spec(metric)
        if spec.kind == "expectation":
            raise TypeError(f"{metric} is an expectation: use judge.expect(...)")
        if value is None:
            subject = extra if scale is None else {**extra, "scale": scale}
            shown = spec.informational and limit is None and self._limit(metric, self._sku_of(node), scale) is None
            return self._unread(metric, unread, node, subject, "info" if shown else "unmeasured")
        sku = self._sku_of(node)
        result = self._make(metric, value, node, extra if scale is None else {**extra, "scale": scale}, sku)
        limit = limit if limit is not None else self._limit(metric, sku, scale)
        if limit is not None and self._calibrating and any(fnmatch.fnmatchcase(metric, g) for g in self._recalibrate):
            limit = None  # --calibrate-metric: this limit is being measured anew (a site fabric)
        if limit is None:
            if spec.informational:
                result.verdict, result.reason = "info", ""
            elif self._calibrating:
                result.verdict, result.reason = (
                    "measured",
                    "calibration: no limit yet; measured for gpuaccept-calibrate",
                )
            else:
                result.verdict, result.reason = "unjudged", no_limit_message(metric, sku, scale)
            return self._record(result)
        ok, why = judge_value(value, limit)
        result.min, result.max, result.equal, result.source = limit.min, limit.max, limit.equal, limit.source
        result.verdict = "pass" if ok else "fail"
        result.reason = why
        comparison = self._baseline.compare(result) if self._baseline is not None else None
        if comparison is not None:  # carried on the check: every reader takes it from there
            result.extra["baseline"] = comparison.to_dict()
        if comparison is not None and comparison.regressed:  # worse beyond tolerance: fails even above the floor
            result.extra["regressed_only"] = ok
            result.verdict = "fail"
            why = comparison.reason(result)
            result.reason = f"{result.reason}; {why}" if result.reason else why
        return self._record(result)

    def expect(self, name: str, observed: Any, expected: Any, *, node: str, **extra: Any) -> MetricResult:
        """A named expectation: ``observed`` must equal ``expected`` (computed by the test), with the
        catalogue's source for why ("node1 state usable", "CUDA_VISIBLE_DEVICES disjoint")."""
        spec = self._spec(name)
        if spec.kind != "expectation":
            raise TypeError(f"{name} is a metric with limits in thresholds.yaml: use judge.check(...)")
        if observed is None:
            return self.unreadable(name, NO_VALUE, node=node, **extra)
        result = self._make(name, observed, node, extra, sku="")
        result.equal, result.source = expected, spec.source
        result.verdict = "pass" if observed == expected else "fail"
        result.reason = "" if result.verdict == "pass" else f"{observed} != {expected}"
        return self._record(result)

    def info(self, metric: str, value: Any, *, node: str, **extra: Any) -> MetricResult:
        """Record a figure the catalogue declares informational (shown in the report, passes nothing)."""
        spec = self._spec(metric)
        if not spec.informational:
            raise TypeError(f"{metric} is not declared informational in the catalogue: judge it with check()")
        if value is None:
            return self.unreadable(metric, NO_VALUE, node=node, **extra)
        sku = self._sku_of(node) if spec.kind == "metric" and value is not None else ""
        return self._record(self._make(metric, value, node, extra, sku))

    def busy(self, processes: str, *, node: str, gpu: Any) -> MetricResult:
        """Record that other processes used ``gpu`` while it was measured (``processes``: who): its figures
        measured the sharing, not the GPU, so the test is an ERROR naming it (a FAILED elsewhere stays)."""
        result = self._make(BUSY_METRIC, processes, node, {"gpu": gpu}, sku="")
        result.equal, result.source = "no other process", self._spec(BUSY_METRIC).source
        result.verdict, result.reason = "unmeasured", processes
        return self._record(result)

    def unreadable(self, metric: str, why: str, *, node: str, **subject: Any) -> MetricResult:
        """Record that ``metric`` could not be read (``why``): an ERROR for the test, never a pass, while
        every other reading of it is still judged (a GPU that failed elsewhere still FAILS).

        The one way a judge says "could not measure" (a reading missing, a result without the figures it
        needs, a datasheet figure a rule divides by): it records this and returns, and the plugin ends the
        test from its checks (``judging.outcome``); no judge raises for it."""
        return self._unread(metric, why, node, subject, "unmeasured")

    def _unread(self, metric: str, why: str, node: str, subject: dict[str, Any], verdict: Verdict) -> MetricResult:
        spec = self._spec(metric)
        result = self._make(metric, "unreadable", node, dict(subject), sku="")
        result.unit, result.verdict, result.reason = spec.unit, verdict, why
        return self._record(result)

    def tool_missing(self, check: str, tool: str, *, node: str, detail: str = "") -> None:
        """End the test as ``not run``: ``check`` needs ``tool``, which ``node`` lacks. Not a skip (the
        cluster declares nothing absent) and not an error (nothing was mis-measured); the cluster
        verdict lists it ("ACCEPTED (not run: ...)"), so a missing tool never reads as a passed check."""
        raise ToolMissing(check, tool, detail, nodes=(node,))

    # ---- relative rule -------------------------------------------------------------------------------

    def stragglers(self, metric: str) -> list[MetricResult]:
        """Fail values more than ``straggler_pct`` worse than their node's median for ``metric``.

        Catches a GPU that clears the absolute floor yet is clearly slower than its siblings; the
        percentage is the limit's own ``straggler_pct`` or the suite-wide setting.
        """
        spec = self._spec(metric)
        flagged: list[MetricResult] = []
        by_node: dict[str, list[MetricResult]] = {}
        for result in self.results:
            if result.metric == metric and _is_number(result.value):
                by_node.setdefault(result.node, []).append(result)
        for node, results in by_node.items():
            if len(results) < 2:
                continue
            limit = self._thresholds.limits_for(results[0].sku).get(metric) if results[0].sku else None
            pct = (limit.straggler_pct if limit and limit.straggler_pct else None) or self.setting("straggler_pct")
            median = statistics.median(float(r.value) for r in results)  # type: ignore[arg-type]
            for result in results:
                value = float(result.value)  # type: ignore[arg-type]
                worse = (
                    value < median * (1 - pct / 100) if spec.better == "higher" else value > median * (1 + pct / 100)
                )
                if worse:
                    result.verdict = "fail"
                    side = "below" if spec.better == "higher" else "above"
                    note = f"{value:g} is more than {pct:g}% {side} {node}'s median {median:g}"
                    result.reason = f"{result.reason}; {note}" if result.reason else note
                    flagged.append(result)
        return flagged

    # ---- the verdict (decided by the plugin from these checks: ``judging.outcome``) -------------------

    def failures(self) -> list[MetricResult]:
        return [r for r in self.results if r.verdict == "fail"]
