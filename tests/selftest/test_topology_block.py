"""The NVLink domain as a Slurm block: ``scontrol show topology`` as each Slurm printed it, read into blocks,
and the block judges (one clique a block, one block a clique, the trays the site expects).

The recordings are real: ``fixtures/slurm/26.05/show-topology.block-2x2.txt`` from a 4-node dev cluster started
with ``up.sh --slurm 26.05 --blocks 2`` (``fixtures/slurm/24.11/``'s from ``--slurm 24.11``, whose blocks come from
a topology.conf, 2026-12-03), ``show-topology.flat.txt`` from 26.05 without a topology plugin, and
``fixtures/slurm/22.05/show-topology.txt`` (+ ``.stderr``) from the host's 22.05, which has no topology/block.
Hostlists are expanded by Slurm's own ``scontrol show hostnames`` (the host's, against a minimal slurm.conf).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpuaccept.contracts.imex import ImexRecord
from gpuaccept.contracts.nccl_sweep import GroupTable, Row
from gpuaccept.dispatch.result import parse_records
from gpuaccept.dispatch.slurm_cli import SlurmError, expand_hostlist
from gpuaccept.dispatch.topology import parse_topology
from gpuaccept.judging.judge import Judge
from gpuaccept.probes import specs
from gpuaccept.results.metrics import MetricResult
from gpuaccept.thresholds.domain_site import BlockExpect, DomainSite
from gpuaccept.thresholds.loader import ThresholdsError, load_thresholds
from gpuaccept.verdicts.imex import judge_imex_channel, judge_imex_domain
from gpuaccept.verdicts.nvlink_block import (
    DERIVED_MODEL,
    blocks_absent,
    judge_block_cliques,
    judge_block_trays,
    judge_domain_busbw,
)

from .conftest import DevCluster, repository_view, run_inner, start_cluster, stop_cluster

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
UUID_A = "9a3f6c2e-1b7d-4e8a-b5c4-0d2e6f8a1b3c"
UUID_B = "5e1d7b9c-3a2f-4c6e-8d0b-7f4a2c9e6b1d"

pytestmark = pytest.mark.skipif(shutil.which("scontrol") is None, reason="needs Slurm's scontrol (hostlists)")


@pytest.fixture(autouse=True)
def _slurm_conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``scontrol show hostnames`` reads a slurm.conf before it expands anything: a minimal one."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=selftest\nSlurmctldHost=localhost\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    yield


def recorded(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text()


def judge() -> tuple[Judge, list[MetricResult]]:
    results: list[MetricResult] = []
    return Judge(load_thresholds(), lambda node: "cpu", results.append, "test_nvlink_domain"), results


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_blocks_read_with_nodes_counted_from_the_hostlist(version: str) -> None:
    """24.11 reads its blocks from topology.conf (``BlockName=... Nodes=...``, ``BlockSizes=2``), 26.05 from
    topology.yaml; both print the same lines."""
    topo = parse_topology(recorded(version, "show-topology.block-2x2.txt"))
    assert topo.kind == "block"
    assert [(b.name, b.index, b.nodes, b.planning_size) for b in topo.blocks] == [
        ("b1", 0, ("node1", "node2"), 2),
        ("b2", 1, ("node3", "node4"), 2),
    ]
    assert topo.block_of("node3") is not None and topo.block_of("node3").name == "b2"  # type: ignore[union-attr]
    assert topo.why_no_blocks is None


@pytest.mark.parametrize(("version", "name"), [("22.05", "show-topology.txt"), ("26.05", "show-topology.flat.txt")])
def test_no_blocks_reads_as_not_applicable(version: str, name: str) -> None:
    """22.05 prints nothing (its error goes to stderr, exit 0); 26.05 without a plugin prints nothing."""
    if version == "22.05":
        assert "No topology information available" in recorded(version, name + ".stderr")
    topo = parse_topology(recorded(version, name))
    assert (topo.kind, topo.blocks) == ("none", ())
    why = blocks_absent({b.name: b.nodes for b in topo.blocks}, topo.why_no_blocks)
    assert why is not None and why.startswith("not applicable") and "fabric state alone" in why


def test_tree_topology_is_no_block_and_an_unknown_line_is_an_error() -> None:
    tree = parse_topology("SwitchName=s0 Level=0 LinkSpeed=1 Nodes=node[1-2]\n")
    assert tree.kind == "tree" and tree.why_no_blocks is not None and "topology/tree" in tree.why_no_blocks
    with pytest.raises(SlurmError, match="naming no BlockName"):
        parse_topology("Topology=weird Nodes=node1\n")


def blocks() -> dict[str, tuple[str, ...]]:
    return {b.name: b.nodes for b in parse_topology(recorded("26.05", "show-topology.block-2x2.txt")).blocks}


def by_metric(results: list[MetricResult], metric: str) -> list[MetricResult]:
    return [r for r in results if r.metric == metric]


def test_healthy_blocks_pass_one_clique_each_one_block_each() -> None:
    j, results = judge()
    cliques: dict[str, set[tuple[str, int]] | None] = {
        "node1": {(UUID_A, 32766)},
        "node2": {(UUID_A, 32766)},
        "node3": {(UUID_B, 32766)},
        "node4": {(UUID_B, 32766)},
    }
    judge_block_cliques(blocks(), cliques, j)
    assert [r.verdict for r in results] == ["pass"] * 4
    assert len(by_metric(results, "nvlink_block_one_clique")) == 2
    assert len(by_metric(results, "nvlink_clique_one_block")) == 2


def test_placeholder_clique_id_with_distinct_uuids_is_two_cliques() -> None:
    """CliqueId 32766 on both racks: only the ClusterUUID tells them apart (torchcomms #3612)."""
    j, results = judge()
    cliques: dict[str, set[tuple[str, int]] | None] = {"node1": {(UUID_A, 32766)}, "node2": {(UUID_B, 32766)}}
    judge_block_cliques(blocks(), cliques, j)
    split = by_metric(results, "nvlink_block_one_clique")[0]
    assert split.verdict == "fail" and split.node == "node1" and "2 cliques" in str(split.value)


def test_a_node_in_another_blocks_clique_fails_naming_it() -> None:
    j, results = judge()
    cliques: dict[str, set[tuple[str, int]] | None] = {
        "node1": {(UUID_A, 1)},
        "node2": {(UUID_A, 1)},
        "node3": {(UUID_A, 1)},  # cabled to b1's switches
        "node4": {(UUID_B, 1)},
    }
    judge_block_cliques(blocks(), cliques, j)
    failed = {(r.metric, r.node) for r in results if r.verdict == "fail"}
    assert ("nvlink_clique_one_block", "node3") in failed
    assert ("nvlink_block_one_clique", "node3") in failed


def test_unread_clique_is_unmeasured_never_a_pass() -> None:
    j, results = judge()
    judge_block_cliques(blocks(), {"node1": None, "node2": {(UUID_A, 1)}}, j)
    assert [(r.node, r.verdict) for r in by_metric(results, "nvlink_block_one_clique")] == [
        ("node1", "unmeasured"),
        ("node1", "pass"),
    ]


def site(**blocks_: BlockExpect) -> DomainSite:
    return DomainSite(source="selftest plan", blocks=blocks_)


def test_block_short_of_a_tray_fails_naming_it_unless_listed_out() -> None:
    short = {"b1": ("node1",), "b2": ("node3", "node4")}
    j, results = judge()
    judge_block_trays(short, site(b1=BlockExpect(trays=("node[1-2]",))), j, expand_hostlist)
    (check,) = results
    assert (check.verdict, check.node, check.value) == ("fail", "node2", "missing node2")
    j, results = judge()
    judge_block_trays(short, site(b1=BlockExpect(trays=("node[1-2]",), out=("node2",))), j, expand_hostlist)
    assert [(r.verdict, r.value) for r in results] == [("pass", "all 1 trays")]


def test_declared_block_absent_and_undeclared_tray_fail() -> None:
    j, results = judge()
    declared = site(b1=BlockExpect(trays=("node1",)), b9=BlockExpect(trays=("gb[01-18]",)))
    judge_block_trays(blocks(), declared, j, expand_hostlist)
    assert [(r.extra["block"], r.verdict, r.value) for r in results] == [
        ("b1", "fail", "holds undeclared node2"),
        ("b9", "fail", "absent from scontrol show topology"),
    ]
    assert results[1].extra["missing"][0] == "gb01" and len(results[1].extra["missing"]) == 18


def test_site_domain_keys_are_validated_naming_file_and_key(tmp_path: Path) -> None:
    good = tmp_path / "site.yaml"
    good.write_text(
        "domain:\n  source: rack plan r3\n  imex_domain: block\n  blocks:\n    b1: {trays: ['node[1-2]']}\n"
    )
    loaded = load_thresholds(good).domain
    assert loaded is not None and loaded.imex_domain == "block" and loaded.imex_settle_s == 10.0
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "domain:\n  source: rack plan r3\n  nvlink_domain: nvl36\n  blocks:\n    b1: {trays: [], outt: []}\n"
    )
    with pytest.raises(ThresholdsError) as info:
        load_thresholds(bad)
    message = str(info.value)
    assert str(bad) in message and "domain.nvlink_domain" in message
    assert "domain.blocks.b1.trays" in message and "domain.blocks.b1.outt" in message


# ---- for real: a Slurm 26.05 dev cluster of two blocks of 2 nodes with switch/nvidia_imex -------------------

ROOT_26 = Path(os.environ.get("GPUACCEPT_SLURM_CACHE", "/var/cache/gpuaccept-slurm")) / "slurm-26.05"
IMEX_TOOL = Path(__file__).resolve().parents[2] / "fixtures" / "imex"


def _require_root_26() -> None:
    """Skip where no Slurm 26.05 root is built (never building one here); in CI, fail: .ci/run builds it before
    the loopback selftests."""
    if (ROOT_26 / ".gpuaccept-slurm-version").is_file():
        return
    why = f"no Slurm 26.05 root at {ROOT_26} (slurm/dev-cluster/chroot.sh 26.05 builds it)"
    if os.environ.get("CI"):
        pytest.fail(why + ": .ci/run builds it before the loopback selftests")
    pytest.skip(why)


@pytest.fixture(scope="module")
def blocks_cluster() -> Iterator[DevCluster]:
    """4 nodes under Slurm 26.05, ``up.sh --blocks 2 --imex``; only where chroot.sh's root is built (CI builds it
    in the background, before its loopback selftests), never building one here."""
    _require_root_26()
    cluster = start_cluster(4, up_args=["--slurm", "26.05", "--blocks", "2", "--imex"])
    # the steps' nvidia-imex-ctl: a recording (srun hands the environment on), after the cluster's own PATH
    cluster.env["PATH"] = f"{IMEX_TOOL / 'bin'}:{cluster.env['PATH']}"
    cluster.env["GPUACCEPT_IMEX_RECORDING"] = str(IMEX_TOOL / "loopback-b1.ready.txt")
    try:
        yield cluster
    finally:
        stop_cluster(cluster)
    assert not Path("/dev/nvidia-caps-imex-channels").exists(), "down.sh left the IMEX channel folder"


def imex_step(cluster: DevCluster, *srun: str, settle: float = 0.0) -> dict[str, ImexRecord]:
    """The IMEX probe as one srun step; each node's record, validated by the spec."""
    argv = [
        "srun",
        *srun,
        "--ntasks-per-node=1",
        sys.executable,
        "-m",
        "gpuaccept.probes.imex",
        "--settle-s",
        str(settle),
    ]
    out = cluster.cmd(*argv)
    nodes = int(srun[srun.index("-N") + 1])
    return {r.node: specs.IMEX.read(r) for r in parse_records("imex", out, nodes, tuple(cluster.nodes))}


#: the IMEX and tray-count rows leave the slow-tray test out: its bisection's steps judge none of their faults and
#: cost each run seconds of gloo; it has its own end-to-end row (test_domain_slow_tray_end_to_end)
NOT_TRAYS = "not test_domain_tray_at_fault"


def test_domain_channel_missing_end_to_end(tmp_path: Path) -> None:
    """The acceptance file on a 26.05 cluster of one block without switch/nvidia_imex: no step gets a channel, and
    ``test_imex_channel`` FAILS naming each node (``missing``) while the IMEX domain itself passes. It runs before
    the module's IMEX cluster starts: the channel folder is the host's, and that cluster's would be seen here."""
    _require_root_26()
    assert not Path("/dev/nvidia-caps-imex-channels").exists(), "another cluster's IMEX channels are on this host"
    cluster = start_cluster(2, up_args=["--slurm", "26.05", "--blocks", "1"])
    try:
        site = tmp_path / "site.yaml"
        site.write_text(SITE.split("  blocks:")[0])
        env = {
            **cluster.env,
            "PATH": f"{IMEX_TOOL / 'bin'}:{cluster.env['PATH']}",
            "GPUACCEPT_IMEX_RECORDING": str(IMEX_TOOL / "loopback-b1.ready.txt"),
        }
        view = repository_view(tmp_path / "repo")
        args = ["tests/acceptance/test_nvlink_domain.py", "--launcher=slurm", "--nodes=2", f"--thresholds={site}"]
        args += ["-k", NOT_TRAYS]
        run = run_inner(view, *args, env=env, timeout=120)
    finally:
        stop_cluster(cluster)
    got = run.verdicts()
    assert (got["test_imex_domain"], got["test_imex_channel"]) == ("passed", "failed"), run.output[-3000:]
    channel = next(t for t in run.record["tests"] if t["nodeid"].endswith("::test_imex_channel"))
    assert {(c["check"], c["where"], c["observed"], c["verdict"]) for c in channel["checks"]} == {
        ("imex_channel", "node1", "missing", "fail"),
        ("imex_channel", "node2", "missing", "fail"),
    }


#: the slow-tray row's fault: node4's NCCL ranks (block b1's fourth tray) sleep before every collective launch,
#: 30x a 1 MiB gloo all_reduce on the loopback cluster (fault_rows.NCCL_ENV's figure, the NCCL slow-node row's)
SLOW_TRAY = {"GPUACCEPT_FAULT_SLOW_NODE": "node4", "GPUACCEPT_FAULT_SLOW_S": "0.05"}
#: the slow-tray run's straggler margin: gloo on the shared 2-core loopback host spreads healthy groups of one
#: block far apart (this test, 2026-12-03: b2's node5+node6 at 0.555 GB/s beside node7+node8 at 1.12; in the
#: loopback step beside the other worker, node3 paired with node1 at 0.387 GB/s beside the first pass's 1.82,
#: 4.7x apart, which failed node3 at 75%), so the packaged 10% failed healthy trays. The slowed tray is held to its
#: sleep whatever the load (1 MiB a 0.05 s sleep: 0.02 GB/s, 1.1% of 1.82), under the CPU SKU's 2-node floor too;
#: 95% still fails it and leaves healthy pairs 20x of room
SLOW_TRAY_SETTINGS = """settings:
  straggler_pct:
    value: 95
    source: "selftest: gloo pairs on the 2-core loopback host spread up to 4.7x (test_domain_slow_tray_end_to_end)"
"""


def test_domain_slow_tray_end_to_end(tmp_path: Path) -> None:
    """A slow tray, for real: 8 nodes under 26.05 in two blocks of 4 (``up.sh --blocks 2``), node4's ranks slowed
    at the NCCL probe's launch; ``test_domain_tray_at_fault`` over both blocks FAILS ``nccl_node_verdict`` on node4
    alone (its pair of b1 straggles beside node1+node2, and paired with known-good node2 it still fails), node3 is
    cleared by the second pass, and every tray of b2 passes. It runs before the module's IMEX cluster starts (one
    dev cluster at a time on the host)."""
    _require_root_26()
    cluster = start_cluster(8, up_args=["--slurm", "26.05", "--blocks", "2"])
    try:
        site = tmp_path / "site.yaml"
        site.write_text(SLOW_TRAY_SETTINGS + SITE.split("  blocks:")[0])
        view = repository_view(tmp_path / "repo")
        args = ["tests/acceptance/test_nvlink_domain.py::test_domain_tray_at_fault", "--launcher=slurm", "--nodes=8"]
        run = run_inner(view, *args, f"--thresholds={site}", env={**cluster.env, **SLOW_TRAY}, timeout=300)
    finally:
        stop_cluster(cluster)
    assert run.verdicts() == {"test_domain_tray_at_fault": "failed"}, run.output[-3000:]
    (test,) = run.record["tests"]
    verdicts = {c["where"]: (c["observed"], c["verdict"]) for c in test["checks"] if c["check"] == "nccl_node_verdict"}
    assert verdicts["node4"] == ("at fault", "fail"), verdicts
    assert verdicts.get("node3") == ("not at fault", "pass"), verdicts
    failed = {c["where"] for c in test["checks"] if c["verdict"] == "fail"}
    assert failed == {"node4"}, [c for c in test["checks"] if c["verdict"] == "fail"]
    b2 = {c["where"]: c["verdict"] for c in test["checks"] if c["where"] in {f"node{n}" for n in range(5, 9)}}
    assert set(b2) == {"node5", "node6", "node7", "node8"} and set(b2.values()) == {"pass"}, b2


def test_dev_cluster_blocks_place_jobs_and_give_each_step_its_channel(blocks_cluster: DevCluster) -> None:
    """Real block placement and real channels (issue 56, "Where it runs"): the blocks Slurm reports, a job refused
    across two blocks, two jobs at once on distinct channels, one job a channel per block."""
    cluster = blocks_cluster
    topo = parse_topology(
        cluster.cmd("scontrol", "show", "topology"),
        expand=lambda h: cluster.cmd("scontrol", "show", "hostnames", h).split(),
    )
    assert {b.name: b.nodes for b in topo.blocks} == {"b1": ("node1", "node2"), "b2": ("node3", "node4")}
    refused = subprocess.run(
        ["srun", "-N2", "-w", "node2,node3", "true"], env=cluster.env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0 and "node configuration is not available" in refused.stderr
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(imex_step, cluster, "-N", "2", "-w", "node1,node2", settle=3.0)
        time.sleep(1.5)  # the first job holds its channel (settling) while the second starts
        second = pool.submit(imex_step, cluster, "-N", "2", "-w", "node1,node2")
        a, b = first.result(), second.result()
    minors = {name: {r.channel.minor for r in records.values()} for name, records in (("a", a), ("b", b))}
    assert len(minors["a"]) == len(minors["b"]) == 1 and minors["a"] != minors["b"], minors
    per_block = imex_step(cluster, "-N", "4", "--segment=2", "--network=unique-channel-per-segment")
    channel = {node: r.channel.minor for node, r in per_block.items()}
    assert channel["node1"] == channel["node2"] != channel["node3"] == channel["node4"], channel
    j, results = judge()
    judge_imex_channel(a, j)
    assert {(r.metric, r.verdict) for r in results} == {("imex_channel", "pass"), ("imex_channel_open", "unmeasured")}
    j, results = judge()
    judge_imex_domain(a, ["node1", "node2"], "job", j, block="b1")
    assert {r.verdict for r in results} == {"pass"}, [
        (r.metric, r.node, r.value) for r in results if r.verdict != "pass"
    ]


def test_domain_busbw_without_a_cited_floor_is_shown_with_the_derived_one() -> None:
    """8 GPUs of a block: no figure at 8, so busbw is shown (info), carrying the flat-NVLS model's derived floor."""
    rows = [
        Row(c, 8 << 30, 8, 1.0e4, 800.0, busbw, {}, {}, {})
        for c, busbw in (("all_reduce", 700.0), ("all_gather", 650.0))
    ]
    table = GroupTable(0, ("node1", "node2"), tuple(range(8)), rows)
    j, results = judge()
    judge_domain_busbw([table], j, block="b1", node="node1")
    assert [(r.extra["collective"], r.verdict, r.value) for r in results] == [
        ("all_reduce", "info", 700.0),
        ("all_gather", "info", 650.0),
    ]
    assert results[0].extra["model"] == DERIVED_MODEL and results[0].extra["scale"] == 8


#: the site file of the end-to-end runs: the dev cluster's blocks as NVLink domains, IMEX read at once
SITE = """domain:
  source: "selftest: the 26.05 dev cluster's two blocks as NVLink domains"
  nvlink_domain: nvl72
  imex_settle_s: 0
  blocks:
    b1: {trays: [%s]}
    b2: {trays: ["node[3-4]"]}
"""
#: key -> (b1's declared trays, the nvidia-imex-ctl recording, {test: verdict}, (check, node, value) that fails)
CASES: dict[str, tuple[str, str, dict[str, str], tuple[str, str, str] | None]] = {
    "healthy": ('"node[1-2]"', "loopback-b1.ready.txt", {"test_imex_domain": "passed"}, None),
    "imex-member-unavailable": (
        '"node[1-2]"',
        "loopback-b1.unavailable.txt",
        {"test_imex_domain": "failed"},
        ("imex_members_ready", "node2", "127.0.0.1 (node2) UNAVAILABLE"),
    ),
    "imex-version-mismatch": (
        '"node[1-2]"',
        "loopback-b1.version-mismatch.txt",
        {"test_imex_domain": "failed"},
        (
            "imex_connectivity",
            "node1",
            "127.0.0.1 (node1) -> 127.0.0.1 (node2): !V!; 127.0.0.1 (node2) -> 127.0.0.1 (node1): !V!",
        ),
    ),
    "imex-extra-member": (
        '"node[1-2]"',
        "loopback-b1.extra-member.txt",
        {"test_imex_domain": "failed"},
        ("imex_extra_member", "node1", "127.0.0.1 (node3)"),
    ),
    "block-short-of-a-tray": (
        '"node[1-2]", "node9"',
        "loopback-b1.ready.txt",
        {"test_nvlink_block_trays": "failed", "test_imex_domain": "passed"},
        ("nvlink_block_trays", "node9", "missing node9"),
    ),
}


@pytest.mark.parametrize("key", list(CASES))
def test_domain_faults_end_to_end(key: str, blocks_cluster: DevCluster, tmp_path: Path) -> None:
    """The acceptance file on block b1 (``--nodelist node1,node2``) through salloc/srun, IMEX answered by a
    recording: the healthy case passes what can pass (the channel's open is unmeasured: no IMEX driver), each
    fault FAILS naming its node."""
    trays, recording, verdicts, failing = CASES[key]
    site = tmp_path / "site.yaml"
    site.write_text(SITE % trays)
    env = {**blocks_cluster.env, "GPUACCEPT_IMEX_RECORDING": str(IMEX_TOOL / recording)}
    view = repository_view(tmp_path / "repo")
    run = run_inner(
        view,
        "tests/acceptance/test_nvlink_domain.py",
        "-k",
        NOT_TRAYS,
        "--launcher=slurm",
        "--nodelist=node1,node2",
        f"--thresholds={site}",
        env=env,
        timeout=120,
    )
    got = run.verdicts()
    assert {t: got.get(t) for t in verdicts} == verdicts, run.output[-3000:]
    assert got["test_nvlink_block_trays"] in {"passed", "failed"} and got["test_imex_channel"] == "error"
    tests = {t["nodeid"].split("::")[-1]: t for t in run.record["tests"]}
    channel = {(c["check"], c["verdict"]) for c in tests["test_imex_channel"]["checks"]}
    assert channel == {("imex_channel", "pass"), ("imex_channel_open", "unmeasured")}
    failed = [
        (c["check"], c["where"], c["observed"]) for t in tests.values() for c in t["checks"] if c["verdict"] == "fail"
    ]
    if failing is None:
        assert not failed and got["test_nvlink_block_trays"] == "passed", failed
    else:
        assert any(c == failing[0] and w.startswith(failing[1]) and o == failing[2] for c, w, o in failed), failed
