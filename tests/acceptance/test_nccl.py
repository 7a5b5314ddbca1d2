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
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.contracts.nccl_formulas import COLLECTIVES
from gpuaccept.contracts.nccl_sweep import GroupTable, algo_args, group_tables
from gpuaccept.nccl.facts import RunFacts
from gpuaccept.nccl.plan import lost_text, scale_id, scales_for
from gpuaccept.probes.specs import NCCL, NCCL_TESTS
from gpuaccept.report import attach
from gpuaccept.report.charts.nccl import plot_busbw
from gpuaccept.state import STATE_KEY
from gpuaccept.verdicts.nccl import (
    FAULT_METRICS,
    FIDELITY_METRICS,
    NODE_METRICS,
    SCALE_METRICS,
    judge_fidelity,
    judge_nccl_tests_found,
    judge_node,
    judge_scale,
)
from gpuaccept.verdicts.nccl_lines import metric_name, sweep_lines

from .nccl_passes import PairPasses, first_pass, layout, node_verdict, rank_labels, run_facts, sweep_args

pytestmark = [pytest.mark.acceptance, pytest.mark.nccl]

FIDELITY_BYTES = 4 << 30  # the size of our nccl-tests reference figures (docs/measurements.md)


@pytest.fixture(scope="module")
def pair_passes() -> PairPasses:
    """The second pass's outcomes for this module: every suspect's case reads the one pass."""
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


def _node_sweep(cluster: Any, settings: Any, node: str, tasks: int, gpt: int) -> Any:
    """All GPUs of the node in one sweep, once per session: ``test_nccl_node`` judges it and the
    fidelity test compares nccl-tests with it."""
    args = sweep_args(settings, bool(gpt))
    return cluster.run_shared(NCCL, nodes=[node], tasks_per_node=tasks, gpus_per_task=gpt, args=args)


# ---- one node ---------------------------------------------------------------------------------------


@pytest.mark.judges(*NODE_METRICS, gpus="collective", scaled=True)
def test_nccl_node(node, cluster, judge, settings, request):
    """All GPUs of the node: busbw per collective at the largest size, every result verified."""
    tasks, gpt = layout(cluster, node, multinode=False)
    if gpt and tasks < 2:
        pytest.skip(f"{node} declares {tasks} GPU: no intra-node collective")
    result = _node_sweep(cluster, settings, node, tasks, gpt)
    table = group_tables(result.records)[0]
    facts = run_facts(result)
    print(f"{node}: {tasks} ranks, {facts.backend} {facts.nccl_version or ''}")
    print("\n".join(sweep_lines(table, facts.algorithms)))
    print(json.dumps(facts.shown(), indent=1, sort_keys=True))
    judge_node(table, result.records, facts, rank_labels(result), judge, node, tasks)
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
    tasks, gpt = layout(cluster, node, multinode=False)
    table = group_tables(_node_sweep(cluster, settings, node, tasks, gpt).records)[0]
    if table.at("all_reduce", size) is None:  # the sweep stopped below this size (--nccl-max-bytes)
        args = sweep_args(settings, True, collectives="all_reduce,all_gather", min_bytes=size, max_bytes=size)
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
        tables, failing, base = first_pass(cluster, settings, judge, nodes)
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


@pytest.mark.judges(*FAULT_METRICS, nodes=2, scaled=True)
@pytest.mark.multinode
def test_nccl_node_at_fault(suspect, cluster, judge, settings, pair_passes):
    """The node's verdict from the scales and, if one of its groups failed, from pairs with good nodes."""
    if suspect is None:
        pytest.skip("the allocation has one node: no multi-node scale")

    def measure(nodes: list[str]) -> tuple[list[str], dict, dict]:
        if suspect in cluster.lost:  # named where it was lost (its own node-local case or the step's test)
            pytest.skip(lost_text({suspect: cluster.lost[suspect]}))
        tables, failing, _ = first_pass(cluster, settings, judge, nodes)
        return nodes, tables, {s: f for s, f in failing.items() if f}

    nodes, tables, failing = cluster.across_nodes(measure, what=f"the NCCL verdict on {suspect}")
    node_verdict(pair_passes, cluster, settings, judge, suspect, nodes, tables, failing)
