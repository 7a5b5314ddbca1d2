"""Every way a probe can break is an ERROR, never a pass — through real srun and the local launcher."""

from __future__ import annotations

import pytest

from gpuaccept.dispatch.exits import describe_exit
from gpuaccept.judging.verdict import EXIT_COULD_NOT_JUDGE
from gpuaccept.probes import specs

from .conftest import run_inner, write_suite

INNER = """
from gpuaccept.probes import specs
import pytest

@pytest.mark.parametrize("fault", ["ok", "exit3", "garbage", "short", "hang"])
def test_fault(cluster, fault):
    result = cluster.run(specs.FAULTS, nodes=[cluster.nodes[0]], tasks_per_node=2, args=["--fault", fault])
    assert [r.rank for r in result.records] == [0, 1]
"""

EXPECTED = {
    "test_fault[ok]": "passed",
    "test_fault[exit3]": "error",
    "test_fault[garbage]": "error",
    "test_fault[short]": "error",
    "test_fault[hang]": "error",
}


def _check(run, timeout_s: float) -> None:
    assert run.verdicts() == EXPECTED, run.output[-3000:]
    messages = run.messages()
    assert "exit status 3" in messages["test_fault[exit3]"]
    assert "malformed result line" in messages["test_fault[garbage]"]
    assert "1 of 2 ranks reported" in messages["test_fault[short]"]
    assert f"no result within {timeout_s:g} s" in messages["test_fault[hang]"]
    assert run.returncode == EXIT_COULD_NOT_JUDGE  # errors only: the suite could not judge, no hardware failed
    assert "ERROR" in run.output and "4 error" in run.output, run.output[-2000:]


#: srun 22.05's stderr when both ranks exit 3 and srun (``--kill-on-bad-exit``) terminates rank 1 before it has:
#: test_faults_slurm's exit3 case on CI's loaded cores, 2026-12-03 (the step's status was 143)
SRUN_BAD_EXIT = """srun: error: node1: task 0: Exited with exit code 3
slurmstepd: error: *** STEP 27040.2 ON node1 CANCELLED AT 2026-12-03T08:32:07 ***
srun: error: node1: task 1: Terminated
srun: Force Terminated StepId=27040.2
"""


def test_a_step_srun_ended_names_the_task_that_exited_first() -> None:
    """srun's status is its tasks' highest: the rank it terminated (143) is not the one that broke (3)."""
    said = describe_exit(143, SRUN_BAD_EXIT)
    assert said.startswith("exit status 143: task 0 on node1 exited with exit status 3 first"), said
    assert describe_exit(3, SRUN_BAD_EXIT) == "exit status 3"  # the task's own status: nothing to add
    assert describe_exit(3) == "exit status 3" and describe_exit(-9) == "killed by signal SIGKILL"


def test_faults_local(tmp_path):
    run = run_inner(write_suite(tmp_path, INNER), "--launcher", "local", "--probe-timeout", "5")
    _check(run, 5)


def test_faults_slurm(tmp_path, dev_cluster):
    before = dev_cluster.last_job_id()
    run = run_inner(write_suite(tmp_path, INNER), "--launcher", "slurm", "--probe-timeout", "8", env=dev_cluster.env)
    _check(run, 8)
    assert run.record["cluster"]["launcher"] == "slurm"
    assert int(run.record["cluster"]["job_id"]) > before
    assert "srun --jobid=" in run.record["tests"][0]["commands"][0]
    # the hung step was cancelled and the allocation released: nothing of ours is left in the queue
    assert dev_cluster.jobs() == [], dev_cluster.jobs()
    assert dev_cluster.steps() == [], dev_cluster.steps()


@pytest.mark.parametrize("launcher", ["local", "slurm"])
def test_dry_run_prints_commands_and_submits_nothing(tmp_path, launcher, request):
    env = None
    before = None
    if launcher == "slurm":
        cluster = request.getfixturevalue("dev_cluster")
        env, before = cluster.env, cluster.last_job_id()
    suite = write_suite(
        tmp_path,
        "from gpuaccept.probes import specs\n\n"
        "def test_x(node, cluster):\n    cluster.run(specs.HYGIENE, nodes=[node])\n",
    )
    run = run_inner(suite, "--launcher", launcher, "--dry-run", "-s", env=env)
    assert "[gpuaccept dry run]" in run.output and "gpuaccept.probes.hygiene" in run.output, run.output
    if launcher == "slurm":
        assert 'srun --jobid="$SLURM_JOB_ID"' in run.output and "--nodelist=node1" in run.output
        assert request.getfixturevalue("dev_cluster").last_job_id() == before, "a dry run submitted a job"


FANOUT = """
from gpuaccept.probes import specs
import pytest

STEPS = {}


@pytest.mark.parametrize("fault", ["ok", "exit3", "hang", "garbage"])
def test_fan(node, cluster, fault):
    result = cluster.run(specs.FAULTS, nodes=[node], tasks_per_node=2, args=["--fault", fault, "--on", "node2"])
    assert [(r.node, r.rank, r.world_size) for r in result.records] == [(node, 0, 2), (node, 1, 2)]
    STEPS.setdefault(fault, set()).add(result.command[2])  # --job-name=gpuaccept-<id>: one step per test
    assert len(STEPS[fault]) == 1, STEPS


def test_each(cluster):
    results = cluster.run_each(specs.FAULTS, cluster.nodes, args=["--fault", "exit3", "--on", "node1"])
    assert isinstance(results["node1"], Exception) and "exit status 3" in str(results["node1"])
    assert results["node2"].one().node == "node2"
"""


def test_fanout_slices_and_one_node_faults(tmp_path, dev_cluster):
    """One step per node-parametrized test, each node judging its own slice (node-local ranks 0..1);
    a node that crashes, hangs or prints garbage errors alone, named; the other node's case passes."""
    run = run_inner(
        write_suite(tmp_path, FANOUT),
        "--launcher",
        "slurm",
        "--nodes",
        "2",
        "--probe-timeout",
        "8",
        env=dev_cluster.env,
    )
    verdicts, messages = run.verdicts(), run.messages()
    for fault in ("ok", "exit3", "hang", "garbage"):
        assert verdicts[f"test_fan[node1-{fault}]"] == "passed", run.output[-3000:]
    assert verdicts["test_fan[node2-ok]"] == "passed", run.output[-3000:]
    assert "node2" in messages["test_fan[node2-exit3]"] and "exit status 3" in messages["test_fan[node2-exit3]"]
    assert "no result within 8 s; ranks [0, 1] on node2" in messages["test_fan[node2-hang]"]
    assert "malformed result line" in messages["test_fan[node2-garbage]"]
    assert {verdicts[f"test_fan[node2-{f}]"] for f in ("exit3", "hang", "garbage")} == {"error"}
    assert verdicts["test_each"] == "passed", run.output[-3000:]
    # the fingerprints before any test, 4 fanned-out tests, 1 run_each: one step each for 2 nodes
    assert run.record["cluster"]["srun_steps"] == 6
    assert run.record["cluster"]["lost_nodes"] == {}
    assert dev_cluster.jobs() == [] and dev_cluster.steps() == []


# srun -v --label of a 4-node fan-out on Slurm 22.05 (loopback cluster, 2026-11-23), trimmed: task 5 on
# node3 exited 3; a second step where node2's slurmd had been SIGKILLed
RECORDED_STDERR = """srun: jobid 2: nodes(4):`node[1-4]', cpu counts: 4(x4)
srun: launching StepId=2.0 on host node1, 2 tasks: [0-1]
srun: launching StepId=2.0 on host node2, 2 tasks: [2-3]
srun: launching StepId=2.0 on host node3, 2 tasks: [4-5]
srun: launching StepId=2.0 on host node4, 2 tasks: [6-7]
srun: launch/slurm: _task_start: Node node3, 2 tasks started
5: err
srun: error: node3: task 5: Exited with exit code 3
srun: launch/slurm: _task_finish: node4: tasks 6-7: Completed
"""
RECORDED_STDOUT = "".join(f"{t}: GPUACCEPT_TASK node{t // 2 + 1}\n{t}: out {t}\n" for t in range(8))
LAUNCH_FAILED = """srun: launching StepId=2.2 on host node2, 1 tasks: 1
srun: error: Task launch for StepId=2.2 failed on node node2: Communication connection failure
srun: error: Application launch failed: Communication connection failure
srun: Job step aborted
"""


def test_fanout_output_parsed_per_node():
    from gpuaccept.dispatch.fanout import lost_from_stderr, parse_fanout

    parsed = parse_fanout(RECORDED_STDOUT, RECORDED_STDERR)
    assert parsed.tasks_of == {"node1": [0, 1], "node2": [2, 3], "node3": [4, 5], "node4": [6, 7]}
    assert parsed.stdout_of["node3"] == ["out 4", "out 5"]
    assert parsed.stderr_of == {"node3": ["5: err"]}
    assert parsed.exit_code == {"node3": 3}
    # without srun -v's "launching" lines (their wording is not an interface) the tasks' own
    # GPUACCEPT_TASK lines (SLURMD_NODENAME) place them
    quiet = parse_fanout(
        RECORDED_STDOUT, "\n".join(line for line in RECORDED_STDERR.splitlines() if "launching" not in line)
    )
    assert quiet.tasks_of == parsed.tasks_of and quiet.exit_code == {"node3": 3}
    assert lost_from_stderr(LAUNCH_FAILED) == {"node2": "Communication connection failure"}


def test_node_taken_out_of_the_job_is_lost_and_the_step_runs_on_the_others(dev_cluster):
    """A node no longer in the job (Slurm excised it under --no-kill): srun refuses any step naming it,
    so the fan-out finds it gone (squeue), names it, and runs once more on the others."""
    import os

    from gpuaccept.dispatch.allocation import Allocation
    from gpuaccept.dispatch.slurm import SlurmLauncher
    from gpuaccept.dispatch.step import Step

    out = dev_cluster.cmd("salloc", "--no-shell", "-N1", "-w", "node1", "--exclusive", "--no-kill", "-J", "excised")
    job = dev_cluster.cmd("squeue", "-h", "-n", "excised", "-o", "%i").split()[0]
    saved = dict(os.environ)
    os.environ.update(dev_cluster.env)
    try:
        launcher = SlurmLauncher(Allocation(job, ["node1", "node2"], owned=False))
        results = launcher.run_fanout(Step(specs.VISIBILITY, ("node1", "node2"), timeout_s=60))
    finally:
        os.environ.clear()
        os.environ.update(saved)
        dev_cluster.cmd("scancel", job, check=False)
    assert results["node1"].one().node == "node1", (out, results)
    assert f"node2 was lost during the run: Slurm took it out of job {job}" in str(results["node2"])
    assert launcher.steps_launched == 2 and list(launcher.lost) == ["node2"]


def test_node_reads_shared_within_one_test_function(dev_cluster, monkeypatch):
    """Every case of one node-parametrized test function reads node states from one scontrol call
    (as a fan-out step measures every node at once); outside a function each call asks Slurm."""
    from gpuaccept.dispatch import slurm_cli

    for key, value in dev_cluster.env.items():
        monkeypatch.setenv(key, value)
    calls: list[list[str]] = []
    real = slurm_cli.slurm_cmd
    monkeypatch.setattr(slurm_cli, "slurm_cmd", lambda argv, *a: calls.append(argv) or real(argv, *a))
    try:
        slurm_cli.share_node_reads(("test_node_usable",))
        infos = [slurm_cli.node_info(node) for node in dev_cluster.nodes]
    finally:
        slurm_cli.share_node_reads(None)
    assert [i.name for i in infos] == dev_cluster.nodes and all(i.usable for i in infos)
    assert calls == [["scontrol", "-o", "show", "node"]]
    slurm_cli.node_info(dev_cluster.nodes[0])
    assert calls[-1] == ["scontrol", "show", "node", dev_cluster.nodes[0]]
