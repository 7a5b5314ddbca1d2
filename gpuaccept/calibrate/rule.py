"""The calibration rule: a limit from figures measured on nodes declared known-good, or a refusal.

For a metric where higher is better, with every value ``v`` over GPUs x nodes x runs, ``M`` their
median, ``s`` their sample standard deviation, ``k`` (default 3) and ``p`` the straggler percentage
(``straggler_pct``, 10 by default)::

    floor = max(min(v) - k * s,  M * (1 - p/100))        rounded down to 3 significant digits

and the mirror image where lower is better (``ceiling = min(max(v) + k*s, M * (1 + p/100))``, rounded
up). ``min(v) - k*s``: with a handful of runs the worst healthy value seen is the best estimate of the
low edge, and ``k*s`` below it leaves room for the run-to-run noise not seen yet, as a Shewhart chart's
3-sigma lower control limit does (NIST/SEMATECH e-Handbook of Statistical Methods, section 6.3.1 "What
are Control Charts?": limits at the centre line +- k sigma, k = 3). ``M * (1 - p/100)`` caps the
margin: a floor never sits further below the typical value than the straggler rule lets a GPU sit
below its siblings, so a noisy calibration cannot produce a floor nothing would miss. A metric
compared for equality takes the value every GPU, node and run agreed on.

Refusals (a bad node must not set the floor): before any limit, the values are compared the way the
straggler rule compares GPUs, at three levels. Each node's median against the nodes' reference, each
GPU's median against its node's reference, and then every single value against the median of all.
The reference is the median of the medians with 3 or more members, else the best of them (with two
nodes the median is their mean and cannot tell which one is slow). A member worse than the reference
by more than ``p`` percent refuses the calibration, naming node, GPU and run. Since every value then
lies within ``p`` percent of ``M``, every calibration value meets its own floor.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Calibrated", "Refusal", "Sample", "calibrate_metric", "round_sig"]


@dataclass(frozen=True)
class Sample:
    """One measured value: where (node, GPU or other component) and in which run record."""

    value: float | str
    node: str
    gpu: str | None
    run: str

    @property
    def where(self) -> str:
        return f"{self.node}" + (f" GPU {self.gpu}" if self.gpu is not None else "") + f" in {self.run}"


@dataclass(frozen=True)
class Calibrated:
    """A limit (``min``, ``max`` or ``equal``) and the figures behind it, for the limit's source."""

    min: float | None
    max: float | None
    equal: float | str | None
    count: int
    low: float | None = None
    median: float | None = None
    high: float | None = None
    stdev: float | None = None

    def figures(self) -> str:
        if self.equal is not None:
            return f"{self.count} values, all {self.equal}"
        return (
            f"{self.count} values, min {self.low:.4g} median {self.median:.4g} max {self.high:.4g} sd {self.stdev:.3g}"
        )


class Refusal(ValueError):
    """The values disagree beyond the straggler rule: the message names the node, GPU and run."""


def round_sig(value: float, digits: int = 3, *, down: bool) -> float:
    """``value`` to ``digits`` significant digits, rounded down (a floor) or up (a ceiling)."""
    if value == 0 or not math.isfinite(value):
        return value
    step = 10 ** (math.floor(math.log10(abs(value))) - digits + 1)
    rounded = (math.floor if down else math.ceil)(value / step) * step
    return float(f"{rounded:.{digits + 2}g}")


def _worse(better: str, pct: float) -> Callable[[float, float], bool]:
    """``worse(value, reference)``: beyond ``pct`` percent on the wrong side of the reference."""
    if better == "higher":
        return lambda value, ref: value < ref * (1 - pct / 100)
    return lambda value, ref: value > ref * (1 + pct / 100)


def _reference(medians: Sequence[float], better: str) -> float:
    if len(medians) >= 3:
        return statistics.median(medians)
    return max(medians) if better == "higher" else min(medians)


def _outlying_groups(groups: dict[str, list[float]], better: str, pct: float) -> list[tuple[str, float, float]]:
    """Groups whose median is worse than the groups' reference by more than ``pct`` percent."""
    if len(groups) < 2:
        return []
    medians = {name: statistics.median(values) for name, values in groups.items()}
    ref = _reference(list(medians.values()), better)
    worse = _worse(better, pct)
    return [(name, med, ref) for name, med in sorted(medians.items()) if worse(med, ref)]


def _refuse_outliers(metric: str, samples: Sequence[Sample], better: str, pct: float) -> None:
    numbers = [s for s in samples if isinstance(s.value, (int, float))]
    problems: list[str] = []
    by_node: dict[str, list[float]] = {}
    for s in numbers:
        by_node.setdefault(s.node, []).append(float(s.value))
    for node, med, ref in _outlying_groups(by_node, better, pct):
        problems.append(f"node {node}: median {med:.4g} vs {ref:.4g} on the other nodes")
    for node in sorted(by_node):
        by_gpu: dict[str, list[float]] = {}
        for s in numbers:
            if s.node == node and s.gpu is not None:
                by_gpu.setdefault(s.gpu, []).append(float(s.value))
        for gpu, med, ref in _outlying_groups(by_gpu, better, pct):
            problems.append(f"{node} GPU {gpu}: median {med:.4g} vs {ref:.4g} on {node}'s other GPUs")
    if not problems:
        pooled = statistics.median(float(s.value) for s in numbers)
        worse = _worse(better, pct)
        problems += [
            f"{s.where}: {float(s.value):.4g} vs median {pooled:.4g} of all runs"
            for s in numbers
            if worse(float(s.value), pooled)
        ]
    if problems:
        raise Refusal(
            f"{metric}: values disagree by more than the straggler rule ({pct:g}%), so they cannot set a limit "
            "(a bad node must not set the floor):\n  " + "\n  ".join(problems)
        )


def calibrate_metric(metric: str, samples: Iterable[Sample], *, better: str, pct: float, k: float) -> Calibrated:
    """The limit for ``metric`` from ``samples`` by the rule above, or ``Refusal`` naming who disagrees."""
    samples = list(samples)
    if not samples:
        raise ValueError(f"{metric}: no values")
    if better == "equal":
        seen = {s.value for s in samples}
        if len(seen) > 1:
            counts = {v: [s for s in samples if s.value == v] for v in seen}
            majority = max(counts, key=lambda v: len(counts[v]))
            odd = [f"{s.where}: {s.value}" for v, group in counts.items() if v != majority for s in group]
            raise Refusal(f"{metric}: values disagree (most read {majority}):\n  " + "\n  ".join(odd))
        return Calibrated(None, None, samples[0].value, len(samples))
    if not all(isinstance(s.value, (int, float)) and not isinstance(s.value, bool) for s in samples):
        odd = [f"{s.where}: {s.value!r}" for s in samples if not isinstance(s.value, (int, float))]
        raise Refusal(f"{metric}: not a number:\n  " + "\n  ".join(odd))
    _refuse_outliers(metric, samples, better, pct)
    values: list[float] = [float(s.value) for s in samples]
    med = statistics.median(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    low, high = min(values), max(values)
    if better == "higher":
        floor = round_sig(max(low - k * sd, med * (1 - pct / 100)), down=True)
        return Calibrated(min(floor, low), None, None, len(values), low, med, high, sd)
    ceiling = round_sig(min(high + k * sd, med * (1 + pct / 100)), down=False)
    return Calibrated(None, max(ceiling, high), None, len(values), low, med, high, sd)
