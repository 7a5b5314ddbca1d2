"""Fleet agreement of fine-tunes, judged: every GPU of one SKU and software stack trains the same loss curve.

The comparison itself (what a trajectory is, its group, the majority, where one departs from another)
is ``judging.trajectory``'s; this judge turns it into checks:

* GPUs are grouped by SKU and software stack (``stack_key``) and training profile;
* each GPU of a group of two or more is held against the group's majority trajectory (the one more
  than half the members trained exactly, weights' sha256 included); a departure beyond the SKU's
  ``train_trajectory_rel_diff`` limit FAILS naming the node, the GPU, the first departing step and by
  how much; with no majority (two GPUs, two curves) the curve that members retrained exactly from the
  ``--baseline`` run is the reference, and without one every member fails: nothing says which is right;
* against a ``--baseline`` record, each GPU is held against its own earlier trajectory: on the same
  stack it must agree (``train_trajectory_baseline_rel_diff``); on a changed stack the change is
  recorded beside the fingerprint fields that changed, not judged (a new stack trains a new curve);
* a group of one with no baseline has nothing to agree with: recorded, never a pass.

The groups and their members go on the record (``train_trajectory_group``), and so does every GPU's
exact trajectory (``train_trajectory``), which is what a later run's ``--baseline`` compares with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpuaccept.judging.baseline import summarize_changes
from gpuaccept.judging.trajectory import Trajectory, departure, key_text, majority, stack_key

if TYPE_CHECKING:
    from gpuaccept.judging.judge import Judge

__all__ = ["judge_fleet"]


def _number(value: float) -> float | str:
    """The judged value: a finite relative difference, or a text saying why there is none."""
    return value if math.isfinite(value) else "inf (a step missing or not finite)"


def judge_fleet(
    judge: Judge, runs: Sequence[Trajectory], prints: Mapping[str, Mapping[str, Any]], profile: str = "small"
) -> int:
    """Group ``runs`` (all of one training ``profile``) by SKU and stack, judge each GPU against its group
    and the baseline; return the number of judged checks (0: nothing could be compared, which the caller
    reports as not applicable). The profile is part of the key: only runs of one model are compared."""
    groups: dict[str, list[Trajectory]] = {}
    keys: dict[str, dict[str, Any]] = {}
    for run in runs:
        key = {"profile": profile, **stack_key(judge.sku(run.node), prints[run.node])}
        text = key_text(key)
        keys[text] = key
        groups.setdefault(text, []).append(run)
    judged = 0
    for number, (text, members) in enumerate(sorted(groups.items()), start=1):
        label = f"group {number} ({text})"
        ref, agree = majority(members) if len(members) > 1 else (members[0], 1)
        settled = ref is None and (ref := _confirmed_by_baseline(judge, members)) is not None
        judge.info(
            "train_trajectory_group",
            len(members),
            node=members[0].node,
            group=label,
            stack=keys[text],
            members=[m.where for m in members],
            agreeing=agree,
            reference=ref.where if ref is not None else None,
            reference_from="the baseline run (no majority)" if settled else "majority",
        )
        for run in members:
            judge.info(
                "train_trajectory",
                len(run.losses),
                node=run.node,
                gpu=run.gpu,
                losses=list(run.losses),
                checksum=run.checksum,
                stack=keys[text],
                group=label,
            )
            if len(members) > 1:
                _against_group(judge, run, members, ref, agree, label, settled)
                judged += 1
            judged += _against_baseline(judge, run, keys[text], prints[run.node])
    return judged


def _tolerance(judge: Judge, metric: str, node: str) -> float:
    limit = judge.declared(metric, node)
    return float(limit.max) if limit is not None and limit.max is not None else 0.0


def _profile_of(members: Sequence[Trajectory]) -> str:
    return members[0].profile


def _confirmed_by_baseline(judge: Judge, members: Sequence[Trajectory]) -> Trajectory | None:
    """With no majority (two GPUs, two curves), the curve members retrained exactly from the
    ``--baseline`` run, when exactly one curve is so confirmed: the other side departed since."""
    baseline = judge.baseline
    if baseline is None:
        return None
    confirmed: dict[tuple[bytes, str | None], Trajectory] = {}
    for member in members:
        earlier = baseline.trajectory(member.node, member.gpu, _profile_of(members))
        if earlier is None:
            continue
        before = Trajectory(
            member.node, member.gpu, tuple(float(v) for v in earlier["losses"]), earlier.get("checksum")
        )
        if before.signature == member.signature:
            confirmed[member.signature] = member
    return next(iter(confirmed.values())) if len(confirmed) == 1 else None


def _against_group(
    judge: Judge,
    run: Trajectory,
    members: Sequence[Trajectory],
    ref: Trajectory | None,
    agree: int,
    label: str,
    settled: bool = False,
) -> None:
    metric = "train_trajectory_rel_diff"
    tolerance = _tolerance(judge, metric, run.node)
    other = ref if ref is not None else next((m for m in members if m.signature != run.signature), run)
    dep = departure(run, other, tolerance)
    result = judge.check(
        metric,
        _number(dep.max_rel_diff),
        node=run.node,
        gpu=run.gpu,
        group=label,
        reference=other.where,
        agreeing=f"{agree} of {len(members)}",
        first_step=dep.step,
        checksum=run.checksum,
        reference_checksum=other.checksum,
    )
    if ref is None:
        result.verdict = "fail"
        note = (
            f"no majority in {label}: at most {agree} of {len(members)} trained the same curve; "
            f"against {other.where}: {dep.text()}"
        )
    elif dep.step is not None and settled:
        note = (
            f"{dep.text()} against {ref.where}, whose curve the baseline run confirms "
            f"(no majority in {label}: {agree} of {len(members)})"
        )
    elif dep.step is not None:
        note = f"{dep.text()} against the majority of {label} ({agree} of {len(members)}, e.g. {ref.where})"
    elif dep.weights_differ:
        result.verdict = "fail"
        note = (
            f"losses agree over {len(run.losses)} steps but the trained weights' sha256 {run.checksum} "
            f"!= {ref.checksum} of the majority of {label}"
        )
    else:
        return
    result.verdict = "fail"
    result.reason = f"{result.reason}; {note}" if result.reason else note


def _against_baseline(judge: Judge, run: Trajectory, key: Mapping[str, Any], fingerprint: Mapping[str, Any]) -> int:
    """This GPU against its own trajectory in the ``--baseline`` record: judged on the same stack,
    recorded beside what changed otherwise. Returns 1 when a check was judged."""
    baseline = judge.baseline
    earlier = baseline.trajectory(run.node, run.gpu, str(key["profile"])) if baseline is not None else None
    if baseline is None or earlier is None:
        return 0
    before = Trajectory(run.node, run.gpu, tuple(float(v) for v in earlier["losses"]), earlier.get("checksum"))
    changes = summarize_changes(baseline.fingerprint_changes({run.node: dict(fingerprint)}))
    changed = "; ".join(changes) if changes else "no fingerprint field changed"
    same_stack = {"profile": "small", **(earlier.get("stack") or {})} == dict(key)
    metric = "train_trajectory_baseline_rel_diff"
    dep = departure(run, before, _tolerance(judge, metric, run.node) if same_stack else 0.0)
    extra: dict[str, Any] = {"baseline": baseline.name, "first_step": dep.step, "changed": changed}
    value = _number(dep.max_rel_diff)
    if not same_stack:
        judge.info("train_trajectory_baseline_change", value, node=run.node, gpu=run.gpu, note=dep.text(), **extra)
        return 0
    result = judge.check(metric, value, node=run.node, gpu=run.gpu, **extra)
    if dep.step is not None or dep.weights_differ:
        if dep.step is None:
            result.verdict = "fail"
        note = f"trajectory changed since {baseline.name}: {dep.text()}; {changed}"
        result.reason = f"{result.reason}; {note}" if result.reason else note
    return 1
