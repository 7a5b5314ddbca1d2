"""The dispatcher's Slurm readers against what each Slurm version really printed.

``fixtures/slurm/<version>/`` holds the outputs of 22.05 (Debian bookworm), 24.11 (trixie) and 26.05
(sid), recorded by ``slurm/dev-cluster/record-fixtures.sh`` on a 2-node loopback cluster with node2
drained by gpuaccept and then killed. Each test replays one version's outputs through the same
readers a run uses (``slurm_cmd`` answers from the recording), so a format change between versions
fails here, naming the version.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gpuaccept.dispatch import preflight, slurm_cli, versions
from gpuaccept.dispatch.fanout import parse_fanout
from gpuaccept.dispatch.versions import SlurmVersion, parse_version, removed_srun_options

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
VERSIONS = sorted(p.name for p in FIXTURES.iterdir() if (p / "version.txt").is_file())


def test_every_version_the_dev_cluster_starts_is_recorded() -> None:
    assert VERSIONS == ["22.05", "24.11", "26.05"]


def recorded(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text()


def replay(monkeypatch: pytest.MonkeyPatch, version: str, answers: dict[str, str]) -> list[list[str]]:
    """``slurm_cmd`` answers from ``version``'s recording: the first key found in the argv picks the file."""
    calls: list[list[str]] = []

    def fake(argv: list[str], timeout_s: float = 30.0) -> str:
        calls.append(argv)
        line = " ".join(argv)
        for key, name in answers.items():
            if key in line:
                return recorded(version, name)
        raise AssertionError(f"no recorded answer for {line}")

    for module in (preflight, slurm_cli, versions):
        monkeypatch.setattr(module, "slurm_cmd", fake)
    versions.detect.cache_clear()
    return calls


@pytest.fixture(autouse=True)
def _fresh_detect() -> None:
    versions.detect.cache_clear()


@pytest.mark.parametrize("version", VERSIONS)
def test_version_is_read_from_sinfo(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    replay(monkeypatch, version, {"--version": "version.txt"})
    found = versions.detect()
    assert f"{found.major}.{found.minor:02d}" == version


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("slurm-wlm 22.05.8\n", SlurmVersion(22, 5, 8)),
        ("slurm 24.11.5\n", SlurmVersion(24, 11, 5)),
        ("slurm 23.02.7-1\n", SlurmVersion(23, 2, 7)),
        ("slurm 25.05\n", SlurmVersion(25, 5, 0)),
    ],
)
def test_version_strings(text: str, expected: SlurmVersion) -> None:
    assert parse_version(text) == expected


def test_unreadable_version_is_an_error_quoting_it() -> None:
    with pytest.raises(slurm_cli.SlurmError, match="'sinfo: fatal"):
        parse_version("sinfo: fatal: Could not establish a configuration source")


@pytest.mark.parametrize("version", VERSIONS)
def test_partition_nodes_and_reasons(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    """sinfo's rows: node1 idle and usable, node2 drained by gpuaccept and dead, named with its reason."""
    replay(monkeypatch, version, {"show partition": "scontrol-show-partition.txt", "sinfo": "sinfo-nodes.txt"})
    name, state, fields = preflight.read_partition(None)
    assert (name, state, fields["Nodes"]) == ("main", "UP", "node[1-2]")
    rows = {row.name: row for row in preflight.read_nodes("main")}
    assert rows["node1"].usable and rows["node1"].idle
    dead = rows["node2"]
    assert not dead.usable
    said = dead.describe()
    assert said.startswith("node2 (") and "gpuaccept: hbm_bandwidth below limit" in said, said
    assert "not responding" in said.lower(), said


@pytest.mark.parametrize("version", VERSIONS)
def test_busy_node_is_usable(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    replay(monkeypatch, version, {"sinfo": "sinfo-nodes-busy.txt"})
    rows = {row.name: row for row in preflight.read_nodes("main")}
    assert rows["node1"].usable and not rows["node1"].idle
    assert rows["node2"].idle


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("recording", ["scontrol-show-node-drained.txt", "scontrol-show-node.txt"])
def test_scontrol_show_node(monkeypatch: pytest.MonkeyPatch, version: str, recording: str) -> None:
    """``node_info``: the drained node (then dead) is unusable, with gpuaccept's reason first."""
    replay(monkeypatch, version, {"show node": recording})
    info = slurm_cli.node_info("node2")
    assert (info.name, info.cpus, info.gpus, info.partitions) == ("node2", 4, 0, ("main",))
    assert not info.usable, info.state
    assert "DRAIN" in info.state
    # 23.02 on: a reason Slurm sets itself is appended after ':'; gpuaccept-undrain matches the prefix
    assert info.reason.startswith("gpuaccept: hbm_bandwidth below limit"), info.reason
    assert "Reason=gpuaccept:" in recorded(version, recording)


@pytest.mark.parametrize("version", VERSIONS)
def test_step_listing(version: str) -> None:
    """``squeue -s -o %i|%j`` (how a timed-out step is found to be scancel'ed): JOB.STEP|NAME."""
    rows = recorded(version, "squeue-steps.txt").split()
    assert len(rows) == 1 and rows[0].endswith(".0|gpuaccept-sleep"), rows


@pytest.mark.parametrize("version", VERSIONS)
def test_removed_options_match_what_srun_did(version: str) -> None:
    """The table agrees with each version's recorded srun: listed exactly where srun ignored or refused it."""
    found = parse_version(recorded(version, "version.txt"))
    rank_said = recorded(version, "srun-cpu-bind-rank.txt.stderr")
    ignored = "Ignoring --cpu-bind=rank" in rank_said
    assert bool(removed_srun_options(["--cpu-bind=rank"], found)) == ignored, (version, rank_said)
    uid_refused = (FIXTURES / version / "srun-uid.txt.rc").is_file()
    assert bool(removed_srun_options(["--uid=0"], found)) == uid_refused, version
    if ignored:
        message = removed_srun_options(["--cpu-bind=rank"], found)[0]
        assert "from Slurm 24.11 on srun ignores it" in message and "--cpu-bind=cores" in message, message


def test_removed_options_by_version() -> None:
    old, new = SlurmVersion(23, 2, 7), SlurmVersion(24, 11, 5)
    args = ["--cpu-bind=verbose,rank", "--uid=alice", "--cpu-bind=cores", "--exclusive"]
    assert [m.split(":")[0] for m in removed_srun_options(args, old)] == []
    said = removed_srun_options(args, new)
    assert [m.split(":")[0] for m in said] == ["--srun-arg --cpu-bind=verbose,rank", "--srun-arg --uid=alice"]
    assert removed_srun_options(["--uid=alice"], SlurmVersion(23, 11)) != []


@pytest.mark.parametrize("version", VERSIONS)
def test_preflight_refuses_a_removed_srun_arg(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    calls = replay(monkeypatch, version, {"--version": "version.txt"})
    preflight.check_srun_args(())
    assert calls == []  # no extra argument: the version is not even asked for
    if version >= "24.11":
        with pytest.raises(
            preflight.SlurmUnusable, match=rf"Slurm {version}\.\d+, and from Slurm 24.11 on srun ignores"
        ):
            preflight.check_srun_args(("--cpu-bind=rank",))
    else:
        preflight.check_srun_args(("--cpu-bind=rank",))


@pytest.mark.parametrize("version", VERSIONS)
def test_json_forms_are_why_the_dispatcher_reads_text(version: str) -> None:
    """The recorded ``--json``: a data_parser per release, and 22.05 ignoring ``sinfo -n``."""
    meta = json.loads(recorded(version, "sinfo.json"))["meta"]
    parser = meta["plugin"].get("data_parser") or meta["plugin"]["type"]
    expected = {"22.05": "v0.0.38", "24.11": "v0.0.42", "26.05": "v0.0.45"}[version]
    assert parser.endswith(expected), parser
    filtered = json.loads(recorded(version, "sinfo-filtered.json"))
    names = {n["name"] for n in filtered["nodes"]} if "nodes" in filtered else _sinfo_names(filtered)
    assert names == ({"node1", "node2"} if version == "22.05" else {"node1"}), names


def _sinfo_names(doc: dict[str, object]) -> set[str]:
    rows = doc["sinfo"]
    assert isinstance(rows, list)
    return {name for row in rows for name in row["nodes"]["nodes"]}


@pytest.mark.parametrize("version", VERSIONS)
def test_gpus_per_task_gives_each_task_its_own_gpu(version: str) -> None:
    """``srun -n2 --gpus-per-task=1`` on a 2-GPU node: one GPU per task, a different one each, on every
    version, so ``SlurmLauncher`` asks for ``--gpus-per-task`` alone (22.05 binds through an implied
    ``--gpu-bind=per_task``, 24.11 on through an implied ``--tres-bind=gres/gpu:per_task``)."""
    seen: dict[str, str] = {}
    for line in recorded(version, "srun-gpus-per-task.txt").splitlines():
        task, _, assignment = line.partition(": ")
        if assignment.startswith("CUDA_VISIBLE_DEVICES="):
            seen[task.strip()] = assignment.split("=", 1)[1]
    assert sorted(seen) == ["0", "1"], seen
    assert all("," not in gpus for gpus in seen.values()), seen
    assert len(set(seen.values())) == 2, seen


DEV_CLUSTER = Path(__file__).resolve().parents[2] / "slurm" / "dev-cluster"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["up.sh", "--nodes", "1", "--slurm", "23.02"],
            "--slurm must be 22.05 (the host's), 24.11 or 26.05, not '23.02'",
        ),
        (["chroot.sh", "25.05"], "usage: chroot.sh 24.11|26.05"),
    ],
)
def test_dev_cluster_names_the_versions_it_starts(argv: list[str], said: str) -> None:
    done = subprocess.run(["bash", str(DEV_CLUSTER / argv[0]), *argv[1:]], capture_output=True, text=True)
    assert done.returncode != 0 and said in done.stderr, done.stderr


@pytest.mark.parametrize("version", VERSIONS)
def test_fanout_step_is_split_by_node(version: str) -> None:
    """A fan-out step (``--label -v --kill-on-bad-exit=0``, 2 nodes x 2 tasks, task 3 exiting 3) read by
    ``parse_fanout`` from each version's srun: tasks placed by node, lines by node, node2's exit code."""
    out = parse_fanout(recorded(version, "srun-fanout.txt"), recorded(version, "srun-fanout.txt.stderr"))
    assert out.tasks_of == {"node1": [0, 1], "node2": [2, 3]}
    for node, tasks in out.tasks_of.items():
        assert sorted(out.stdout_of[node]) == [f"out of task {t} on {node}" for t in tasks]
    assert out.exit_code == {"node2": 3} and out.task_errors["node2"] == "task(s) 3: Exited with exit code 3"
    assert out.launch_failed == {}
