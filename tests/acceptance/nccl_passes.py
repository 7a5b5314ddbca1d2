"""The NCCL bisection as steps: the first pass (every scale's groups side by side) and the second pass (each
suspect paired with known-good nodes), over any list of nodes, and one node's verdict from the two.

Why here: ``test_nccl`` runs the two passes over the whole allocation, ``test_nvlink_domain`` over each block's
trays (an NVLink domain's slow tray is found the same way, among its block peers). It launches steps and hands
their tables to the judges, what only the suite does (no gpuaccept layer may import both ``cluster`` and
``verdicts``: docs/ARCHITECTURE.md); the planning is ``nccl.plan``'s, the rules ``verdicts.nccl`` (which groups
fail) and ``verdicts.nccl_blame`` (who is at fault).
``env`` goes on every step (the domain's ``NCCL_MNNVL_ENABLE=1``); each pass runs once per session for the same
nodes and environment (``cluster.run_shared``, and the caller's module-scoped ``PairPasses``), so several tests
judge one measurement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuaccept.contracts.nccl_sweep import GroupTable, algo_args, group_tables
from gpuaccept.dispatch.result import ProbeResult
from gpuaccept.errors import MeasurementError
from gpuaccept.nccl.facts import RunFacts
from gpuaccept.nccl.plan import Group, pair_rounds, scale_groups, scales_for, suspects_and_good
from gpuaccept.probes.specs import NCCL
from gpuaccept.verdicts.nccl import group_failures
from gpuaccept.verdicts.nccl_blame import (
    PairOutcome,
    judge_blame,
    judge_cleared,
    pair_limits,
    pair_outcome,
    pair_reference,
)
from gpuaccept.verdicts.nccl_lines import median_busbw

__all__ = [
    "CPU_MAX_BYTES",
    "CPU_MIN_BYTES",
    "CPU_RANKS",
    "PairPasses",
    "first_pass",
    "layout",
    "node_verdict",
    "rank_labels",
    "run_facts",
    "run_groups",
    "sweep_args",
]

CPU_RANKS = 2  # gloo ranks per CPU node for the intra-node sweep (one collective needs two)
CPU_MIN_BYTES, CPU_MAX_BYTES = 64 << 10, 1 << 20  # gloo over loopback: CI's whole NCCL section in seconds

#: Tables of one scale: one per group. Failing: scale -> {group: why it failed}.
Tables = dict[int, list[GroupTable]]
Failing = dict[int, dict[Group, list[str]]]

#: The second pass's outcomes by (suspects, good nodes, environment): a test module's fixture holds one, so every
#: suspect's case reads the one pass
PassKey = tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, str], ...]]
PairPasses = dict[PassKey, dict[tuple[str, str], PairOutcome]]


def layout(cluster: Any, node: str, multinode: bool) -> tuple[int, int]:
    """(tasks per node, GPUs per task): one rank per GPU, or gloo ranks on a CPU node."""
    gpus = cluster.gpus_on(node)
    if gpus:
        return gpus, 1
    return (1 if multinode else CPU_RANKS), 0


def sweep_args(settings: Any, gpu: bool, multinode: bool = False, **override: Any) -> list[str]:
    """Probe arguments from the settings; CPU nodes get small sizes unless the operator chose sizes;
    multi-node GPU passes run Ring, the algorithm their floors were measured with (``algo_args``)."""
    lo, hi = settings.nccl_min_bytes, settings.nccl_max_bytes
    if not gpu:
        lo = lo if settings.sources.get("nccl_min_bytes", "default") != "default" else CPU_MIN_BYTES
        hi = hi if settings.sources.get("nccl_max_bytes", "default") != "default" else CPU_MAX_BYTES
    opts: dict[str, Any] = {
        "min-bytes": lo,
        "max-bytes": max(lo, hi),
    }
    if not gpu:
        opts.update({"iters": 5, "warmup": 2})
    opts.update({k.replace("_", "-"): v for k, v in override.items() if v is not None})
    args = [f"--{k}={v}" for k, v in opts.items()]  # --op-timeout: the NCCL spec's, from its step's limit
    return args + algo_args(gpu=gpu, multinode=multinode, forced_ring=settings.nccl_ring)


def rank_labels(result: ProbeResult) -> dict[int, str]:
    return {
        r.rank: f"rank {r.rank} ({r.node}" + (f" GPU {r.gpu_label})" if r.gpu_label else ")") for r in result.records
    }


def run_facts(result: ProbeResult) -> RunFacts:
    """NCCL version, algorithms, transports, NICs: rank 0's parsed log plus the union of transports."""
    return RunFacts.of([NCCL.read(record) for record in result.records])


def run_groups(
    cluster: Any,
    settings: Any,
    groups: Sequence[tuple[str, ...]],
    shared: bool = False,
    env: Mapping[str, str] | None = None,
    **override: Any,
) -> list[GroupTable]:
    """Groups of nodes measured side by side in one step (``shared``: once per session, for a scale that
    several tests judge)."""
    nodes = [n for g in groups for n in g]
    tasks, gpt = layout(cluster, nodes[0], multinode=True)
    args = [
        *sweep_args(settings, bool(gpt), True, **override),
        "--groups=" + ";".join(",".join(g) for g in groups),
    ]
    run = cluster.run_shared if shared else cluster.run
    options: dict[str, Any] = {"env": dict(env)} if env else {}
    result = run(NCCL, nodes=nodes, tasks_per_node=tasks, gpus_per_task=gpt, args=args, **options)
    tables = group_tables(result.records)
    for table in tables:
        table.info["facts"] = run_facts(result)
        table.info["labels"] = rank_labels(result)
        table.info["algo"] = "Ring (NCCL_ALGO=Ring)" if "--ring" in args else "NCCL's choice"
    return tables


def _scale(
    cluster: Any, settings: Any, scale: int, nodes: list[str], env: Mapping[str, str] | None, override: Any
) -> list[GroupTable]:
    """Every group of ``scale`` of ``nodes`` (the live ones) measured side by side, once per session
    (``cluster.run_shared``): the scale test and the bad-node verdicts judge the same step; a broken
    step errors every user (one that lost a node is re-planned by the caller's ``across_nodes``)."""
    try:
        return run_groups(cluster, settings, scale_groups(nodes, scale), shared=True, env=env, **override)
    except MeasurementError as exc:
        raise MeasurementError(f"NCCL at scale {scale} could not be measured: {exc}", nodes=exc.nodes) from None


def first_pass(
    cluster: Any,
    settings: Any,
    judge: Any,
    nodes: list[str],
    env: Mapping[str, str] | None = None,
    **override: Any,
) -> tuple[Tables, Failing, float | None]:
    """Every scale of ``nodes``: ``({scale: tables}, {scale: {group: why it failed}}, smallest scale's median)``."""
    scales = scales_for(len(nodes))
    tables = {s: _scale(cluster, settings, s, nodes, env, override) for s in scales}
    base = median_busbw(tables[scales[0]])
    failing = {
        s: group_failures(t, judge, multinode=True, baseline=base if s != scales[0] else None)
        for s, t in tables.items()
    }
    return tables, failing, base


def _pair_pass(
    done: PairPasses,
    cluster: Any,
    settings: Any,
    suspects: list[str],
    good: list[str],
    limits: tuple[Any, float | None, float],
    env: Mapping[str, str] | None,
) -> dict[tuple[str, str], PairOutcome]:
    """Second pass: each suspect with a known-good node; a round that breaks is re-run pair by pair (a pair
    that does not complete fails with why); each pair judged by ``pair_outcome`` (``limits``: floor, the
    first pass's reference, the straggler margin)."""
    key = (tuple(suspects), tuple(good), tuple(sorted((env or {}).items())))
    if key in done:
        return done[key]
    floor, ref, pct = limits
    size = settings.nccl_max_bytes if cluster.gpus_on(suspects[0]) else None
    override: dict[str, Any] = {"collectives": "all_reduce", "min_bytes": size, "max_bytes": size}
    outcome: dict[tuple[str, str], PairOutcome] = {}
    for pairs in pair_rounds(suspects, good, lambda: cluster.lost):  # re-planned on the nodes left
        try:
            tables = {t.nodes: t for t in run_groups(cluster, settings, pairs, env=env, **override)}
        except MeasurementError:
            tables = {}
            for pair in pairs:
                try:
                    tables.update({t.nodes: t for t in run_groups(cluster, settings, [pair], env=env, **override)})
                except MeasurementError as exc:
                    outcome[pair] = (False, f"did not complete: {str(exc).splitlines()[0][:300]}", float("nan"))
        for met, table in tables.items():
            outcome[(met[0], met[1])] = pair_outcome(table, floor=floor, reference=ref, straggler_pct=pct)
    done[key] = outcome
    return outcome


def node_verdict(
    done: PairPasses,
    cluster: Any,
    settings: Any,
    judge: Any,
    suspect: str,
    nodes: list[str],
    tables: Tables,
    failing: Failing,
    env: Mapping[str, str] | None = None,
) -> None:
    """``suspect``'s verdict among ``nodes`` from their first pass (``tables``; ``failing``: the scales with a
    failing group only): cleared on its own worst figure where no failing group made it a suspect, else the
    second pass's blame (``nccl_node_verdict``)."""
    groups = {s: [t.nodes for t in ts] for s, ts in tables.items()}
    first, suspects, good = suspects_and_good(nodes, groups, failing, lost=cluster.lost)
    if first is None or suspect not in suspects:  # no failing scale: no suspect
        role = "every group passed" if not failing else f"not a suspect (suspects: {', '.join(suspects) or 'none'})"
        print(f"{suspect}: {role}")
        judge_cleared(suspect, tables, nodes, role, judge, suspects)
        return
    floor, pct = pair_limits(judge, suspect)
    limits = (floor, pair_reference(tables, failing), pct)
    pairs = _pair_pass(done, cluster, settings, suspects, good, limits, env)
    pairs = {p: v for p, v in pairs.items() if all(n not in cluster.lost for n in p)}  # incomplete: blames nobody
    judge_blame(suspect, pairs, suspects, good, first, failing[first], judge)
