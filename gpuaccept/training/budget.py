"""The fine-tune launch's time limit, derived from its plan: the work each strategy will do at the SKU's
floor, plus the measured costs that do not scale with that work.

Why derived: a fixed limit is a guess that healthy nodes outgrow. The fixed 300 s it replaces was written
four times over the code while a 4 x H200 node's 7B launch took 292-295 s (docs/measurements.md
'4 x H200 SXM 141GB, 2026-11-27': 294.59 s and 292.46 s), and a cancelled launch named no GPU. The launch's
limit is now a prediction from what it will do:

- each strategy's optimizer steps x tokens a step, at the slowest rate a healthy GPU of the SKU may train
  (the SKU's floor: MFU x dense BF16 peak / FLOPs per token for the 7B-class and ``--model-path`` runs,
  tokens/s for the small model and CPU ranks); ``phases`` keeps where each strategy ends at that rate, so
  a GPU still training then is proven below the floor by its own progress (``gpuaccept.verdicts.launch_time``);
- plus the costs measured on H100 and H200 nodes that do not scale with the steps (``FIXED_S``), each taken
  at about twice the largest seen;
- times ``MARGIN`` on the whole, so that a healthy launch uses well under two thirds of its limit.

Pure arithmetic on plain numbers: the plan (``gpuaccept.training.plan.FinetunePlan``) gathers the floors from the
thresholds and the FLOPs from the model's config (``gpuaccept.training.flops.flops_from_config``). The launch carries
that plan as its ``--plan`` argument (``plan_arg``), so the ``finetune`` spec derives its step's limit from its own
arguments (``limit_of_args``, like every other spec) and the probe reads its solo floor from the same plan
(``solo_floor``). The standard library and pydantic only: the spec table imports it on the login node.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from pydantic import TypeAdapter

from gpuaccept.timelimits import TimeLimit

__all__ = [
    "FIXED_S",
    "MARGIN",
    "NO_PLAN_S",
    "LaunchPlan",
    "StrategyWork",
    "launch_limit",
    "limit_of_args",
    "plan_arg",
    "read_plan",
]

#: Seconds a launch spends beyond its optimizer steps, each about twice or more the largest seen on H100 and H200
#: nodes (docs/measurements.md '1 x H100 80GB HBM3 and 1 x H200, 2026-11-25: training at real scale',
#: '2 x H100 80GB HBM3, 2026-11-25' and '4 x H200 SXM 141GB, 2026-11-27':
#: start-up 11.82-17.0 s on one H100, 13.71-14.63 s on 4 H200s; set-up 6.37-7.98 s for three strategies;
#: evals and checkpoints 5.98-6.06 s for three; lifecycle 12.09 s on one H100, 37.06-41.47 s on 4 H200s; every
#: GPU serving its own adapter 14.51-14.96 s).
FIXED_S: dict[str, float] = {
    "start-up": 45.0,
    "set-up": 10.0,  # per strategy
    "warm-up": 5.0,  # per strategy, beyond its steps at the floor rate
    "evals and checkpoints": 10.0,  # per strategy
    "lifecycle": 90.0,
    "serving": 45.0,
}
#: The whole prediction's margin: at the floor rates and the fixed costs above a launch would take 1/MARGIN
#: of its limit; a healthy one, faster than its floors, takes less.
MARGIN = 1.25


@dataclass(frozen=True)
class StrategyWork:
    """One strategy of the launch: how many steps of how many tokens (per rank, an upper bound), and the
    slowest rate a healthy GPU (or CPU rank) of the SKU may train them at, in tokens/s per rank."""

    name: str
    steps: int
    tokens_per_step: int
    floor_tokens_per_s: float
    #: where the floor rate comes from, in words ("train_mfu_pct >= 30% of 989 TFLOPS at 3.2e10 FLOPs/token")
    floor_basis: str


@dataclass(frozen=True)
class LaunchPlan:
    """What one launch does: its strategies in order, whether one saves and gets the lifecycle, whether
    every GPU serves its adapter at the end."""

    strategies: tuple[StrategyWork, ...]
    lifecycle: bool
    serving: bool
    #: work whose time is the storage's, not the GPU's, each at its filesystem's contracted rate: (what, seconds)
    storage: tuple[tuple[str, float], ...] = ()

    @property
    def solo_floor(self) -> float | None:
        """The tokens/s every GPU's own run must reach before the node-wide strategies (the probe's check,
        ``_finetune_ranks.below_floor``): the solo work's floor where the launch trains more than its GPUs alone."""
        if len(self.strategies) < 2:
            return None
        return next((round(w.floor_tokens_per_s, 1) for w in self.strategies if w.name == "solo"), None)


#: a launch without a plan (a strategy without a declared floor: a checkpoint on CPU ranks, whose speed is reported,
#: not judged): the fixed limit the ``finetune`` spec gave every launch before limits were planned
NO_PLAN_S = 600.0


_PLAN: TypeAdapter[LaunchPlan] = TypeAdapter(LaunchPlan)


def plan_arg(plan: LaunchPlan) -> list[str]:
    """The launch's ``--plan`` argument: the plan as JSON, read back by ``read_plan``."""
    return ["--plan", json.dumps(asdict(plan), separators=(",", ":"))]


def read_plan(text: str) -> LaunchPlan:
    """A plan as ``plan_arg`` wrote it (the probe's ``--plan`` type), every field checked."""
    return _PLAN.validate_json(text)


def limit_of_args(args: Sequence[str], gpus: int) -> TimeLimit:
    """The ``finetune`` spec's limit: its ``--plan``'s (``launch_limit``), else ``NO_PLAN_S``."""
    text = next((args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--plan"), None)
    if text is None:
        return TimeLimit(NO_PLAN_S, "no plan given: a strategy without a declared floor (gpuaccept.training.plan)")
    return launch_limit(read_plan(text))


def launch_limit(plan: LaunchPlan) -> TimeLimit:
    """The launch's limit and, per strategy, the moment (from the launch's start) a GPU at the floor has
    finished it: ``MARGIN`` x (fixed costs + steps at the floor)."""
    fixed = FIXED_S
    t = fixed["start-up"]
    ends: list[tuple[str, float]] = []
    terms = [f"start-up {fixed['start-up']:g} s"]
    for work in plan.strategies:
        at_floor = work.steps * work.tokens_per_step / work.floor_tokens_per_s
        own = fixed["set-up"] + fixed["warm-up"] + fixed["evals and checkpoints"]
        t += own + at_floor
        ends.append((work.name, round(MARGIN * t, 1)))
        terms.append(
            f"{work.name} {own:g} s + {work.steps} steps x {work.tokens_per_step} tokens at "
            f"{work.floor_tokens_per_s:,.0f} tokens/s ({work.floor_basis}) = {at_floor:.1f} s"
        )
    for name, wanted in (("lifecycle", plan.lifecycle), ("serving", plan.serving)):
        if wanted:
            t += fixed[name]
            terms.append(f"{name} {fixed[name]:g} s")
    for name, seconds in plan.storage:
        t += seconds
        terms.append(f"{name} {seconds:.1f} s")
    basis = f"x{MARGIN:g} of ({' + '.join(terms)}) = {MARGIN * t:.0f} s"
    return TimeLimit(round(MARGIN * t, 1), basis, tuple(ends))
