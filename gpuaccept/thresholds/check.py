"""Judge measurements against the limits in force, collecting every miss before failing.

A test checks all GPUs of a node and only then calls ``verify()``, so one failure message names every
bad GPU and metric at once, not just the first. Nothing passes on missing data: a value of ``None``
raises ``MeasurementError`` (could not measure) and a NaN or non-number fails the limit.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuaccept.errors import MeasurementError
from gpuaccept.results.metrics import MetricResult
from gpuaccept.thresholds.loader import Thresholds
from gpuaccept.thresholds.schema import Limit

if TYPE_CHECKING:
    from gpuaccept.results.baseline import Baseline, Regression

__all__ = ["Checker", "judge"]


def judge(value: Any, limit: Limit) -> tuple[bool, str]:
    """Whether ``value`` meets ``limit``, and why not."""
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


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))


class Checker:
    """Per-test collector of judged metrics; ``verify()`` fails with all misses listed."""

    def __init__(
        self,
        thresholds: Thresholds,
        sku_of: Callable[[str], str],
        sink: Callable[[MetricResult], None],
        test: str,
        baseline: Baseline | None = None,
    ) -> None:
        self._thresholds = thresholds
        self._sku_of = sku_of
        self._sink = sink
        self.test = test
        self.results: list[MetricResult] = []
        self._baseline = baseline
        self._regressions: dict[int, Regression] = {}

    def _make(self, metric: str, value: Any, node: str, gpu: Any, extra: dict[str, Any] | None) -> MetricResult:
        spec = self._thresholds.metrics.get(metric)
        if spec is None:
            raise KeyError(f"metric {metric!r} is not in the thresholds catalogue")
        if value is None:
            where = node + (f" GPU {gpu}" if gpu is not None else "")
            raise MeasurementError(f"{metric}: no value was measured on {where}", nodes=(node,))
        return MetricResult(
            test=self.test,
            metric=metric,
            value=value,
            unit=spec.unit,
            node=node,
            sku=self._sku_of(node),
            gpu=None if gpu is None else str(gpu),
            extra=extra or {},
        )

    def _record(self, result: MetricResult) -> MetricResult:
        self.results.append(result)
        self._sink(result)
        return result

    def report(self, metric: str, value: Any, *, node: str, gpu: Any = None, **extra: Any) -> MetricResult:
        """Record a value that has no pass criterion (shown in the report, judged by nobody)."""
        return self._record(self._make(metric, value, node, gpu, extra))

    def check(
        self, metric: str, value: Any, *, node: str, gpu: Any = None, scale: int | None = None, **extra: Any
    ) -> MetricResult:
        """Judge ``value`` against the node's SKU limit; a metric with no limit there is reported.

        ``scale`` (GPUs of a node, nodes of a group) picks ``<metric>@<scale>`` when the SKU defines one,
        else the plain limit: "all_reduce busbw >= 431 GB/s with 8 GPUs, >= 310 otherwise".
        """
        result = self._make(metric, value, node, gpu, extra if scale is None else {**extra, "scale": scale})
        limits = self._thresholds.limits_for(result.sku)
        limit = (limits.get(f"{metric}@{scale}") if scale is not None else None) or limits.get(metric)
        if limit is not None:
            ok, why = judge(value, limit)
            result.min, result.max, result.equal, result.source = limit.min, limit.max, limit.equal, limit.source
            result.verdict = "pass" if ok else "fail"
            result.reason = why
        regression = self._baseline.compare(result) if self._baseline is not None else None
        if regression is not None:  # worse than the baseline run beyond tolerance: fails even above the floor
            self._regressions[id(result)] = regression
            result.verdict = "fail"
            result.reason = f"{result.reason}; {regression.reason}" if result.reason else regression.reason
        return self._record(result)

    def stragglers(self, metric: str) -> list[MetricResult]:
        """Fail values more than ``straggler_pct`` worse than their node's median for ``metric``.

        Catches a GPU that clears the absolute floor yet is clearly slower than its siblings; the
        percentage is the limit's own ``straggler_pct`` or the suite-wide setting.
        """
        spec = self._thresholds.metrics[metric]
        flagged: list[MetricResult] = []
        by_node: dict[str, list[MetricResult]] = {}
        for result in self.results:
            if result.metric == metric and _is_number(result.value):
                by_node.setdefault(result.node, []).append(result)
        for node, results in by_node.items():
            if len(results) < 2:
                continue
            limit = self._thresholds.limits_for(results[0].sku).get(metric)
            pct = (limit.straggler_pct if limit and limit.straggler_pct else None) or self._thresholds.setting(
                "straggler_pct"
            )
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

    def failures(self) -> list[MetricResult]:
        return [r for r in self.results if r.verdict == "fail"]

    def verify(self) -> None:
        """Raise one AssertionError naming every failed node, GPU, metric, value and limit."""
        failed = self.failures()
        if not failed:
            if not self.results:
                raise MeasurementError(f"{self.test}: nothing was measured, so nothing can pass")
            return

        def only_regressed(r: MetricResult) -> bool:
            regression = self._regressions.get(id(r))
            return regression is not None and r.reason == regression.reason

        def lines(results: list[MetricResult]) -> str:
            return "\n  ".join(
                f"{r.where}: {r.metric} = {r.value} {r.unit} (limit {r.limit_text()}; {r.reason})" for r in results
            )

        misses = [r for r in failed if not only_regressed(r)]
        regressed = [r for r in failed if only_regressed(r)]
        parts = [f"{len(misses)} threshold miss(es):\n  " + lines(misses)] if misses else []
        if regressed:
            parts.append(f"{len(regressed)} regression(s) vs baseline:\n  " + lines(regressed))
        raise AssertionError("\n".join(parts))
