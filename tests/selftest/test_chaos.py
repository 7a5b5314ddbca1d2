"""The chaos matrix: the multi-node acceptance tests on a 3-node loopback cluster, broken at one moment each.

For each multi-node test, node2's slurmd is killed as the test starts (``kill-before``), half a second
into its first srun step (``kill-during``) and right after that step (``kill-between``); one step is
cancelled with ``scancel``; slurmctld is restarted with its state kept before a step (``ctld-restart``,
``slurm/dev-cluster/restart-ctld.sh``); the run record is written onto a full filesystem (``full-fs``).
The moment is chosen by ``chaos_plugin.py`` inside the inner run. Each row asserts from the run record:
the lost node or the fault named, every survivor's verdicts from the broken test on equal to a clean
run's on node1 and node3 alone (``--nodelist node1,node3``), no exception text as a verdict, the record
and summary written (the full-fs row: a non-zero exit naming the record it could not write).

The second pass of ``test_nccl_node_at_fault`` runs only after a group failed: its row slows node3's NCCL ranks
(a selftest knob) so node3 is paired with a known-good node, node1, and kills node1 as that case starts, so the
pair's own step finds the loss; node2 and node3 are held to the same run without the kill (a run of them alone
would plan a first pass of its own).

Three survivors: a 4-node cluster loses node4 as the scales start; node1-node3 are held to a clean run of them
alone on the same cluster.

CI runs one row per fault kind (``ci=True``; the scancel and the controller restart, which lose no node, share one
run); the whole matrix runs with
``GPUACCEPT_CHAOS_ALL=1 python3 -m pytest tests/selftest/test_chaos.py -p no:cacheprovider`` (docs/faults.md).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.judging.verdict import EXIT_TEST_HOOKS

from .conftest import REPO, InnerRun, run_inner, start_cluster, stop_cluster

NODES, LOST, SURVIVORS = 3, "node2", ("node1", "node3")
TESTS = (
    "test_versions_consistent",
    "test_nccl_scale",
    "test_nccl_node_at_fault",
    "test_nccl_rails",
    "test_shared_filesystem",
    "test_node_clocks",
)
#: the fabric tests that skip on CPU nodes (they must skip the same way with a node lost)
SKIPPED_ON_CPU = ("test_nccl_transport", "test_rdma_perftest", "test_ib_counter_window")
#: the multi-node tests, those, and node-local tests after them, where a node lost in a cross-node test is named
SELECT = " or ".join((*TESTS, *SKIPPED_ON_CPU, "test_dev_shm_free", "test_step_runs"))
FILES = (
    "test_environment.py",
    "test_nccl.py",
    "test_fabric.py",
    "test_storage.py",
    "test_node_state.py",
    "test_slurm.py",
)
#: what a verdict must never be: an exception of the suite's own code (a probe's traceback in a step's stderr,
#: quoted under the error naming the step, is the node's, not ours)
EXCEPTION_TEXT = re.compile(r"^(suite error|(?!gpuaccept\.errors\.)[\w.]*(Error|Exception)\b:)|min\(\) arg")


@dataclass(frozen=True)
class Chaos:
    kind: str
    test: str
    ci: bool = False
    #: the node broken (kill rows), the selftest knobs the run and its reference run have set, the cluster's size
    node: str = LOST
    env: tuple[tuple[str, str], ...] = ()
    nodes: int = NODES
    #: more faults in the same run, each (kind, test): ones that lose no node, so one run can prove them together
    also: tuple[tuple[str, str], ...] = ()

    @property
    def id(self) -> str:
        more = ("-second_pass" if self.env else "") + (f"-{self.nodes}_nodes" if self.nodes != NODES else "")
        more += "".join(f"+{kind}-{test.removeprefix('test_')}" for kind, test in self.also)
        return f"{self.kind}-{self.test.removeprefix('test_').split('[')[0]}{more}"

    @property
    def spec(self) -> str:
        """``GPUACCEPT_CHAOS`` for ``chaos_plugin.py``."""
        return ";".join([f"{self.kind}:{self.test}:{self.node}", *(f"{kind}:{test}:" for kind, test in self.also)])

    @property
    def survivors(self) -> tuple[str, ...]:
        if not self.env and self.nodes == NODES:
            return SURVIVORS
        return tuple(f"node{i}" for i in range(1, self.nodes + 1) if f"node{i}" != self.node)

    @property
    def reference(self) -> tuple[str, ...]:
        """The reference run's node options: the survivors alone; with knobs set, all nodes (a second pass
        is planned from a first pass every node took part in)."""
        return ("--nodes", str(self.nodes)) if self.env else ("--nodelist", ",".join(self.survivors))


#: node3's NCCL ranks slow (fault_rows.NCCL_ENV's knob): its groups fail, so test_nccl_node_at_fault[node3] takes the
#: second pass, paired with a known-good node (node1, the first); that node is lost as the pair's step starts
SECOND_PASS = (("GPUACCEPT_FAULT_SLOW_NODE", "node3"), ("GPUACCEPT_FAULT_SLOW_S", "0.05"))


CI_ROWS = {
    ("kill-before", "test_nccl_scale"),
    ("kill-during", "test_shared_filesystem"),
    ("kill-between", "test_nccl_rails"),
    ("full-fs", ""),
}
MATRIX = (
    *(
        Chaos(kind, test, (kind, test) in CI_ROWS)
        for test in TESTS
        for kind in ("kill-before", "kill-during", "kill-between")
        # no step of their own to break: the drift test reads the fingerprints taken before any test (a kill
        # before it is tried); the bad-node verdicts judge the scale steps test_nccl_scale took (shared) and
        # pair nodes only after a group failed, so they run on the survivors in every nccl_scale row (the
        # pairing with a lost node: test_nccl_blame.py, logic only)
        if test != "test_nccl_node_at_fault" and (kind == "kill-before" or test != "test_versions_consistent")
    ),
    Chaos("scancel", "test_nccl_rails"),
    Chaos("scancel", "test_shared_filesystem"),
    Chaos("ctld-restart", "test_nccl_scale"),
    Chaos("ctld-restart", "test_shared_filesystem"),
    # CI's row of both kinds that lose no node, in one run: the controller restarted before the scales, a step of
    # the rails test cancelled later
    Chaos("scancel", "test_nccl_rails", True, also=(("ctld-restart", "test_nccl_scale"),)),
    Chaos("full-fs", "", True),
    # the second pass's own step finds the loss: its first pair's good node is gone (needs a group that failed,
    # hence the slow node3; the reference is the same run without the kill, since a run of the survivors alone
    # would plan a first pass of its own)
    Chaos("kill-before", "test_nccl_node_at_fault[node3]", node="node1", env=SECOND_PASS),
    # three survivors: node4 of 4 lost as the scales start; node1-node3 as a clean run of node1-node3 alone
    # (scale 3 fails its efficiency floor on 2 shared cores in both: equal verdicts, failed or not, blame no
    # survivor differently)
    Chaos("kill-before", "test_nccl_scale", node="node4", nodes=4),
)


def _run(
    directory: Path,
    chaos: str,
    *args: str,
    env: tuple[tuple[str, str], ...] = (),
    select: str = SELECT,
    nodes: int = NODES,
) -> tuple[InnerRun, list[str]]:
    log = directory / "chaos.log"
    cluster = start_cluster(nodes, {"GPUACCEPT_CHAOS": chaos, "GPUACCEPT_CHAOS_LOG": str(log), **dict(env)})
    try:
        run = run_inner(
            directory,
            "-p",
            "tests.selftest.chaos_plugin",
            "-m",
            "acceptance",
            "--launcher",
            "slurm",
            "--probe-timeout",
            "60",
            "--rootdir",
            str(REPO),
            "-k",
            select,
            *args,
            *(str(REPO / "tests" / "acceptance" / f) for f in FILES),
            env=cluster.env,
            timeout=420,
        )
        # the allocation released: a job on a killed node stays COMPLETING until Slurm marks the node
        # down (SlurmdTimeout; test_node_death.py waits that out), so only RUNNING/PENDING is a leak
        left = [job for job in cluster.jobs() if not job.endswith("COMPLETING")]
    finally:
        stop_cluster(cluster)
    return run, left


def _by_node(record: dict[str, Any], node: str, since: str = "") -> dict[str, str]:
    """Test function -> the worst verdict of its cases about ``node`` (the per-node view of the summary),
    from the first test whose id holds ``since`` on (those before it ran before the fault)."""
    rank = {"error": 4, "failed": 3, "not run": 2, "passed": 1, "skipped": 0}
    tests = record["tests"]
    first = next((i for i, t in enumerate(tests) if since in t["nodeid"]), len(tests))
    out: dict[str, str] = {}
    for test in tests[first:]:
        if node in test["nodes"]:
            name = test["nodeid"].split("::")[-1].split("[")[0]
            if name not in out or rank.get(test["verdict"], 2) > rank.get(out[name], 2):
                out[name] = test["verdict"]
    return out


def _written(run: InnerRun) -> None:
    assert run.record_path.is_file(), run.output[-3000:]
    match = re.search(r"^acceptance summary: (\S+)$", run.output, re.M)
    assert match and Path(match.group(1)).is_file(), run.output[-3000:]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    run, left = _run(tmp_path_factory.mktemp("chaos-clean"), "", "--nodelist", ",".join(SURVIVORS))
    assert left == [] and run.returncode in (EXIT_TEST_HOOKS, 1), run.output[-3000:]
    yield run.record


@pytest.fixture(scope="module")
def references() -> dict[tuple[Any, ...], dict[str, Any]]:
    """The run records of the rows' own references (nothing broken), each made once."""
    return {}


def _reference(references: dict, chaos: Chaos, directory: Path) -> dict[str, Any]:
    key = (chaos.env, chaos.nodes, chaos.reference)
    if key not in references:
        directory.mkdir()
        run, left = _run(directory, "", *chaos.reference, env=chaos.env, nodes=chaos.nodes)
        assert left == [] and run.returncode in (EXIT_TEST_HOOKS, 1), run.output[-3000:]
        references[key] = run.record
    return references[key]


def _full_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, filled (root: the dev cluster needs root anyway)."""
    mount = tmp_path / "full"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={mount / 'filler'}", "bs=4k"], capture_output=True)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.parametrize("chaos", MATRIX, ids=[c.id for c in MATRIX])
def test_chaos(chaos: Chaos, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if not chaos.ci and not os.environ.get("GPUACCEPT_CHAOS_ALL"):
        pytest.skip("not one of CI's rows: the whole matrix runs with GPUACCEPT_CHAOS_ALL=1 (docs/faults.md)")
    inner = tmp_path / "inner"
    inner.mkdir()
    if chaos.kind == "full-fs":
        for mount in _full_filesystem(tmp_path):
            target = mount / "record.json"
            # the record is what breaks, whatever ran: one quick test of the matrix's run
            run, left = _run(inner, "", "--nodelist", ",".join(SURVIVORS), "--run-record", str(target), select=TESTS[0])
            assert left == [], left
            assert run.returncode != 0, run.output[-3000:]
            # the record could not be written, and the run says so in one line (never a verdict's exit 0)
            assert "gpuaccept: could not write the run record:" in run.output, run.output[-3000:]
            assert "No space left on device" in run.output, run.output[-3000:]
            assert not target.exists() or not target.read_text().endswith("}"), target
        return
    kill = chaos.kind.startswith("kill")
    if chaos.env or chaos.nodes != NODES:
        clean = _reference(request.getfixturevalue("references"), chaos, tmp_path / "reference")
    else:
        clean = request.getfixturevalue("clean")
    args = ("--nodes", str(chaos.nodes)) if kill else ("--nodelist", ",".join(SURVIVORS))
    run, left = _run(inner, chaos.spec, *args, env=chaos.env, nodes=chaos.nodes)
    tail = run.output[-4000:]
    did = (inner / "chaos.log").read_text() if (inner / "chaos.log").exists() else ""
    lines = did.splitlines()  # every fault done, once
    assert len(lines) == 1 + len(chaos.also) and all(": exit 0" in line for line in lines), (did, tail)
    assert left == [], left
    _written(run)
    record = run.record
    for test in record["tests"]:
        assert test.get("category") != "suite error", (test["nodeid"], test["message"])
        assert not EXCEPTION_TEXT.search(test["message"]), (test["nodeid"], test["message"])
    if kill:  # named: in the record, the terminal, and one ERROR (its next node-local case), skipped after
        assert list(record["cluster"]["lost_nodes"]) == [chaos.node], record["cluster"]
        assert f"{chaos.node}: lost during the run" in run.output, tail
        errors = [t for t in record["tests"] if t["verdict"] == "error" and chaos.node in t["nodes"]]
        assert len(errors) == 1 and chaos.node in errors[0]["message"], (errors, tail)
    elif chaos.kind == "scancel":  # the cancelled step's test errors naming it; nothing else changes
        assert not record["cluster"].get("lost_nodes"), record["cluster"]
        errors = [t for t in record["tests"] if t["verdict"] == "error"]
        assert [chaos.test in t["nodeid"] for t in errors] == [True], (errors, tail)
        # srun says "cancelled" when scancel reaches it first, else the tasks' SIGKILL ("Killed"): both name it
        said = errors[0]["message"].lower()
        assert "cancel" in said or "killed by signal sigkill" in said, errors[0]["message"]
    if "ctld-restart" in (chaos.kind, *(kind for kind, _ in chaos.also)):  # the run goes on as if nothing happened
        assert not record["cluster"].get("lost_nodes") and "restarted with its state kept" in did, (did, tail)
    # the survivors from the broken test on (the tests before it ran on all three nodes, before the fault)
    # (a cancelled step's test is the fault named, an ERROR with no survivor's check: left out)
    if chaos.env:  # the second pass: its survivors' blame as without the kill (later tests run on 2 nodes, not 3)
        blame = [_blame(record, node) for node in chaos.survivors]
        assert blame == [_blame(clean, node) for node in chaos.survivors], (blame, tail)
        assert blame[-1] == ("failed", "at fault"), blame  # the slow node3, paired again with the good node left
        return
    ids = [t["nodeid"] for t in record["tests"]]  # compared from the first broken test on
    since = min(
        (chaos.test, *(test for _, test in chaos.also)), key=lambda t: next(i for i, n in enumerate(ids) if t in n)
    )
    for node in chaos.survivors:
        after, alone = _by_node(record, node, since), _by_node(clean, node, since)
        if chaos.kind == "scancel":
            alone.pop(chaos.test)
        assert after == alone, (node, after, alone)


def _blame(record: dict[str, Any], node: str) -> tuple[str, str]:
    """``test_nccl_node_at_fault[node]``'s verdict and its ``nccl_node_verdict`` (empty when not a suspect)."""
    (test,) = [t for t in record["tests"] if t["nodeid"].endswith(f"test_nccl_node_at_fault[{node}]")]
    said = [m["value"] for m in record["metrics"] if m["test"] == test["nodeid"] and m["metric"] == "nccl_node_verdict"]
    return test["verdict"], "".join(said)
