"""NCCL collectives: bus bandwidth per node and per scale, verified results, and the bad node named.

* ``test_nccl_node[node]``: all GPUs of one node (NVLink/PCIe), every collective over the size sweep;
  busbw at the largest size against the SKU's floor; every result checked (a wrong one fails, naming
  collective, size, rank and GPU). CPU nodes run the same sweep with gloo (2 ranks, small sizes).
* ``test_nccl_tests_fidelity[node]``: nccl-tests' all_reduce_perf/all_gather_perf beside our figures.
* ``test_nccl_scale[N-nodes]`` (multinode): groups of 2, 4, ... nodes side by side, and all nodes; busbw
  per group, groups against each other, scaling efficiency against the smallest scale.
* ``test_nccl_node_at_fault[node]`` (multinode): when a scale fails, every node of its failing groups is
  re-tested with a node that passed (cluster-health-scanner's second pass); the verdict names the node.

Scales, groups, suspects and pairs are planned by ``nccl.plan`` on the nodes still in the run
(``cluster.plan()``, ``cluster.across_nodes``): a node lost mid-run is left out of every later step,
a step that loses one is measured again on the survivors, and a scale that no longer fits is re-planned
(all-nodes becomes all nodes left) or skipped naming the loss.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.contracts.nccl_formulas import COLLECTIVES
from gpuaccept.contracts.nccl_sweep import GroupTable, algo_args, group_tables
from gpuaccept.dispatch.result import ProbeResult
from gpuaccept.errors import MeasurementError
from gpuaccept.nccl.facts import RunFacts
from gpuaccept.nccl.plan import (
    lost_text,
    pair_rounds,
    scale_groups,
    scale_id,
    scales_for,
    suspects_and_good,
)
from gpuaccept.probes.specs import NCCL, NCCL_TESTS
from gpuaccept.report import attach
from gpuaccept.report.charts.nccl import plot_busbw
from gpuaccept.state import STATE_KEY
from gpuaccept.verdicts.nccl import (
    FAULT_METRICS,
    FIDELITY_METRICS,
    NODE_METRICS,
    SCALE_METRICS,
    group_failures,
    judge_fidelity,
    judge_nccl_tests_found,
    judge_node,
    judge_scale,
)
from gpuaccept.verdicts.nccl_blame import (
    PairOutcome,
    judge_blame,
    judge_cleared,
    pair_limits,
    pair_outcome,
    pair_reference,
)
from gpuaccept.verdicts.nccl_lines import median_busbw, metric_name, sweep_lines

pytestmark = [pytest.mark.acceptance, pytest.mark.nccl]

CPU_RANKS = 2  # gloo ranks per CPU node for the intra-node sweep (one collective needs two)
CPU_MIN_BYTES, CPU_MAX_BYTES = 64 << 10, 1 << 20  # gloo over loopback: CI's whole NCCL section in seconds
FIDELITY_BYTES = 4 << 30  # the size of our nccl-tests reference figures (docs/measurements.md)

Pairs = dict[tuple[tuple[str, ...], tuple[str, ...]], dict[tuple[str, str], PairOutcome]]


@pytest.fixture(scope="module")
def pair_passes() -> Pairs:
    """The second pass's outcomes, by (suspects, good nodes): every suspect's case reads the one pass."""
    return {}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``scale``: 2, 4, ... and all nodes of the allocation; ``suspect``: every node (bad-node verdicts).

    Collected from the allocation, before any test runs; each case asks ``nccl.plan`` at run time what
    its scale means on the nodes still in the run."""
    if "scale" not in metafunc.fixturenames and "suspect" not in metafunc.fixturenames:
        return
    nodes = metafunc.config.stash[STATE_KEY].cluster.nodes
    if "scale" in metafunc.fixturenames:
        scales: list[int | None] = [*scales_for(len(nodes))] or [None]
        metafunc.parametrize("scale", scales, ids=[scale_id(s, len(nodes)) for s in scales])
    if "suspect" in metafunc.fixturenames:
        metafunc.parametrize(
            "suspect", nodes if len(nodes) > 1 else [None], ids=nodes if len(nodes) > 1 else ["one-node"]
        )


# ---- helpers ---------------------------------------------------------------------------------------


def _layout(cluster: Any, node: str, multinode: bool) -> tuple[int, int]:
    """(tasks per node, GPUs per task): one rank per GPU, or gloo ranks on a CPU node."""
    gpus = cluster.gpus_on(node)
    if gpus:
        return gpus, 1
    return (1 if multinode else CPU_RANKS), 0


def _sweep_args(settings: Any, gpu: bool, multinode: bool = False, **override: Any) -> list[str]:
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


def _rank_labels(result: ProbeResult) -> dict[int, str]:
    return {
        r.rank: f"rank {r.rank} ({r.node}" + (f" GPU {r.gpu_label})" if r.gpu_label else ")") for r in result.records
    }


def _facts(result: ProbeResult) -> RunFacts:
    """NCCL version, algorithms, transports, NICs: rank 0's parsed log plus the union of transports."""
    return RunFacts.of([NCCL.read(record) for record in result.records])


def _plot(request: pytest.FixtureRequest, name: str, tables: list[GroupTable], judge: Any, multinode: bool) -> Path:
    series = {c: {t.label: [(r.size, r.busbw) for r in t.by_collective(c)] for t in tables} for c in COLLECTIVES}
    floors = {}
    for c in COLLECTIVES:
        scale = len(tables[0].nodes) if multinode else len(tables[0].ranks)
        limit = judge.declared(metric_name(c, multinode), tables[0].nodes[0], scale)
        floors[c] = limit.min if limit is not None else None
    path = Path(request.config.rootpath) / "reports" / "nccl" / f"{name}.png"
    plot_busbw(series, path, title=f"NCCL busbw: {name}", thresholds=floors)
    attach.png(path.read_bytes(), f"busbw {name}")
    return path


def _run_groups(
    cluster: Any, settings: Any, groups: Sequence[tuple[str, ...]], shared: bool = False, **override: Any
) -> list[GroupTable]:
    """Groups of nodes measured side by side in one step (``shared``: once per session, for a scale that
    several tests judge)."""
    nodes = [n for g in groups for n in g]
    tasks, gpt = _layout(cluster, nodes[0], multinode=True)
    args = [
        *_sweep_args(settings, bool(gpt), True, **override),
        "--groups=" + ";".join(",".join(g) for g in groups),
    ]
    run = cluster.run_shared if shared else cluster.run
    result = run(NCCL, nodes=nodes, tasks_per_node=tasks, gpus_per_task=gpt, args=args)
    tables = group_tables(result.records)
    for table in tables:
        table.info["facts"] = _facts(result)
        table.info["labels"] = _rank_labels(result)
        table.info["algo"] = "Ring (NCCL_ALGO=Ring)" if "--ring" in args else "NCCL's choice"
    return tables


def _scale(cluster: Any, settings: Any, scale: int, nodes: list[str]) -> list[GroupTable]:
    """Every group of ``scale`` of ``nodes`` (the live ones) measured side by side, once per session
    (``cluster.run_shared``): the scale test and the bad-node verdicts judge the same step; a broken
    step errors every user (one that lost a node is re-planned by the caller's ``across_nodes``)."""
    try:
        return _run_groups(cluster, settings, scale_groups(nodes, scale), shared=True)
    except MeasurementError as exc:
        raise MeasurementError(f"NCCL at scale {scale} could not be measured: {exc}", nodes=exc.nodes) from None


def _node_sweep(cluster: Any, settings: Any, node: str, tasks: int, gpt: int) -> Any:
    """All GPUs of the node in one sweep, once per session: ``test_nccl_node`` judges it and the
    fidelity test compares nccl-tests with it."""
    args = _sweep_args(settings, bool(gpt))
    return cluster.run_shared(NCCL, nodes=[node], tasks_per_node=tasks, gpus_per_task=gpt, args=args)


def _first_pass(cluster: Any, settings: Any, judge: Any, nodes: list[str]) -> tuple[dict, dict, float | None]:
    """Every scale of ``nodes``: ``({scale: tables}, {scale: {group: why it failed}}, smallest scale's median)``."""
    scales = scales_for(len(nodes))
    tables = {s: _scale(cluster, settings, s, nodes) for s in scales}
    base = median_busbw(tables[scales[0]])
    failing = {
        s: group_failures(t, judge, multinode=True, baseline=base if s != scales[0] else None)
        for s, t in tables.items()
    }
    return tables, failing, base


# ---- one node ---------------------------------------------------------------------------------------


@pytest.mark.judges(*NODE_METRICS, gpus="collective", scaled=True)
def test_nccl_node(node, cluster, judge, settings, request):
    """All GPUs of the node: busbw per collective at the largest size, every result verified."""
    tasks, gpt = _layout(cluster, node, multinode=False)
    if gpt and tasks < 2:
        pytest.skip(f"{node} declares {tasks} GPU: no intra-node collective")
    result = _node_sweep(cluster, settings, node, tasks, gpt)
    table = group_tables(result.records)[0]
    facts = _facts(result)
    print(f"{node}: {tasks} ranks, {facts.backend} {facts.nccl_version or ''}")
    print("\n".join(sweep_lines(table, facts.algorithms)))
    print(json.dumps(facts.shown(), indent=1, sort_keys=True))
    judge_node(table, result.records, facts, _rank_labels(result), judge, node, tasks)
    _plot(request, f"node-{node}", [table], judge, multinode=False)


@pytest.mark.judges(*FIDELITY_METRICS, gpus="pair", optional="nccl-tests installed")
def test_nccl_tests_fidelity(node, cluster, judge, settings):
    """nccl-tests on the same GPUs and size: its busbw beside ours, within 5%."""
    gpus = cluster.require_gpus(node)
    if gpus < 2:
        pytest.skip(f"{node} declares {gpus} GPU: no intra-node collective")
    size = min(FIDELITY_BYTES, settings.nccl_max_bytes)
    ring = algo_args(gpu=True, multinode=False, forced_ring=settings.nccl_ring)
    args = [f"--ngpus={gpus}", f"--min-bytes={size}", f"--max-bytes={size}", *ring]
    if settings.nccl_tests_dir:
        args.append(f"--dir={settings.nccl_tests_dir}")
    ran = cluster.run(NCCL_TESTS, nodes=[node], tasks_per_node=1, gpus_per_task=gpus, args=args).one()
    theirs = NCCL_TESTS.read(ran)
    judge_nccl_tests_found(theirs, judge, node)  # none installed: "not run", listed in the verdict
    tasks, gpt = _layout(cluster, node, multinode=False)
    table = group_tables(_node_sweep(cluster, settings, node, tasks, gpt).records)[0]
    if table.at("all_reduce", size) is None:  # the sweep stopped below this size (--nccl-max-bytes)
        args = _sweep_args(settings, True, collectives="all_reduce,all_gather", min_bytes=size, max_bytes=size)
        result = cluster.run(NCCL, nodes=[node], tasks_per_node=gpus, gpus_per_task=1, args=args)
        table = group_tables(result.records)[0]
    judge_fidelity(theirs["runs"], table, size, judge, node)


# ---- across nodes -----------------------------------------------------------------------------------


@pytest.mark.judges(*SCALE_METRICS, nodes=2, scaled=True)
@pytest.mark.multinode
def test_nccl_scale(scale, cluster, judge, settings, request):
    """Groups of ``scale`` nodes side by side: busbw per group, groups vs each other, scaling efficiency."""

    def measure(nodes: list[str]) -> tuple[int, dict, dict, float | None]:
        live, why = cluster.plan().scale(scale)
        if live is None:
            pytest.skip(why)
        tables, failing, base = _first_pass(cluster, settings, judge, nodes)
        return live, tables, failing, base

    live, tables_by_scale, failing, first_base = cluster.across_nodes(measure, what=f"NCCL at scale {scale}")
    tables, failures = tables_by_scale[live], failing[live]
    base = first_base if live != min(tables_by_scale) else None
    if live != scale:
        print(f"scale {scale} of the allocation measured as all {live} nodes left ({lost_text(cluster.lost)})")
    for table in tables:
        facts: RunFacts = table.info["facts"]
        print(f"group {table.label} ({len(table.ranks)} ranks), NCCL {facts.nccl_version}:")
        print("\n".join(sweep_lines(table, facts.algorithms)))
    judge_scale(tables, failures, base, live, judge)
    _plot(request, f"scale-{live}", tables, judge, multinode=True)


def _pair_pass(
    done: Pairs,
    cluster: Any,
    settings: Any,
    suspects: list[str],
    good: list[str],
    floor: Any,
    ref: float | None,
    pct: float,
) -> dict[tuple[str, str], PairOutcome]:
    """Second pass: each suspect with a known-good node; a round that breaks is re-run pair by pair (a pair
    that does not complete fails with why); each pair judged by ``pair_outcome``."""
    key = (tuple(suspects), tuple(good))
    if key in done:
        return done[key]
    size = settings.nccl_max_bytes if cluster.gpus_on(suspects[0]) else None
    override: dict[str, Any] = {"collectives": "all_reduce", "min_bytes": size, "max_bytes": size}
    outcome: dict[tuple[str, str], PairOutcome] = {}
    for pairs in pair_rounds(suspects, good, lambda: cluster.lost):  # re-planned on the nodes left
        try:
            tables = {t.nodes: t for t in _run_groups(cluster, settings, pairs, **override)}
        except MeasurementError:
            tables = {}
            for pair in pairs:
                try:
                    tables.update({t.nodes: t for t in _run_groups(cluster, settings, [pair], **override)})
                except MeasurementError as exc:
                    outcome[pair] = (False, f"did not complete: {str(exc).splitlines()[0][:300]}", float("nan"))
        for met, table in tables.items():
            outcome[(met[0], met[1])] = pair_outcome(table, floor=floor, reference=ref, straggler_pct=pct)
    done[key] = outcome
    return outcome


@pytest.mark.judges(*FAULT_METRICS, nodes=2, scaled=True)
@pytest.mark.multinode
def test_nccl_node_at_fault(suspect, cluster, judge, settings, pair_passes):
    """The node's verdict from the scales and, if one of its groups failed, from pairs with good nodes."""
    if suspect is None:
        pytest.skip("the allocation has one node: no multi-node scale")

    def measure(nodes: list[str]) -> tuple[list[str], dict, dict]:
        if suspect in cluster.lost:  # named where it was lost (its own node-local case or the step's test)
            pytest.skip(lost_text({suspect: cluster.lost[suspect]}))
        tables, failing, _ = _first_pass(cluster, settings, judge, nodes)
        return nodes, tables, {s: f for s, f in failing.items() if f}

    nodes, tables, failing = cluster.across_nodes(measure, what=f"the NCCL verdict on {suspect}")
    groups = {s: [t.nodes for t in ts] for s, ts in tables.items()}
    first, suspects, good = suspects_and_good(nodes, groups, failing, lost=cluster.lost)
    if first is None or suspect not in suspects:  # no failing scale: no suspect
        role = "every group passed" if not failing else f"not a suspect (suspects: {', '.join(suspects) or 'none'})"
        print(f"{suspect}: {role}")
        judge_cleared(suspect, tables, nodes, role, judge)
        return
    floor, pct = pair_limits(judge, suspect)
    pairs = _pair_pass(pair_passes, cluster, settings, suspects, good, floor, pair_reference(tables, failing), pct)
    pairs = {p: v for p, v in pairs.items() if all(n not in cluster.lost for n in p)}  # incomplete: blames nobody
    judge_blame(suspect, pairs, suspects, good, first, failing[first], judge)
