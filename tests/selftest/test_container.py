"""Steps inside an image (issue 37): the srun arguments of both ways, host-side probes, the rank starter for
Slurm's OCI support, the host-side query; on loopback clusters with runc, an image that cannot start and a
cluster without pyxis are refused before the first test, and a run's record proves every step ran inside.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaccept.dispatch.allocation import Allocation
from gpuaccept.dispatch.container import HOST_QUERY, Container, parse_host_lines
from gpuaccept.dispatch.result import parse_records
from gpuaccept.dispatch.slurm import SlurmLauncher
from gpuaccept.dispatch.step import Step
from gpuaccept.errors import ToolMissing
from gpuaccept.judging.verdict import EXIT_TEST_HOOKS
from gpuaccept.probes import specs
from gpuaccept.probes._tasks import rank_env

from .conftest import REPO, DevCluster, InnerRun, run_inner, start_cluster, stop_cluster, write_suite

IMAGE_SH = REPO / "slurm" / "dev-cluster" / "image.sh"


def _launcher(container: Container) -> SlurmLauncher:
    return SlurmLauncher(Allocation("42", ["n1", "n2"], owned=False), container=container)


def _after(argv: list[str], flag: str) -> list[str]:
    return argv[argv.index(flag) + 1 :]


def test_an_oci_step_of_eight_ranks_per_node_is_one_task_per_node_that_starts_them():
    """Slurm's OCI support starts one task per node in a container: the node's GPUs go to that task."""
    argv = _launcher(Container("oci", "/images/b")).command(Step(specs.MATMUL, ("n1", "n2"), 8, 1, ("--x",)))
    assert "--container=/images/b" in argv and "--ntasks=2" in argv and "--ntasks-per-node=1" in argv
    assert "--gpus-per-node=8" in argv and not any(a.startswith("--gpus-per-task") for a in argv)
    assert _after(argv, "--container=/images/b")[:2] == ["python3", "-m"]
    assert argv[argv.index("-m") + 1 :] == ["gpuaccept.probes._tasks", "8", "1", "gpuaccept.probes.matmul", "--x"]


def test_a_pyxis_step_keeps_srun_ranks_and_reuses_the_job_named_container():
    argv = _launcher(Container("pyxis", "docker://nvcr.io#nvidia/pytorch:24.05-py3", "/shared:/shared")).command(
        Step(specs.MATMUL, ("n1",), 8, 1)
    )
    assert "--container-image=docker://nvcr.io#nvidia/pytorch:24.05-py3" in argv
    assert "--container-name=gpuaccept_42" in argv and "--container-mounts=/shared:/shared" in argv
    assert "--ntasks-per-node=8" in argv and "--gpus-per-task=1" in argv
    assert argv[argv.index("-m") - 1 :] == ["python3", "-m", "gpuaccept.probes.matmul"]


def test_a_fanout_in_an_oci_image_starts_the_per_node_wrapper_in_each_rank():
    argv = _launcher(Container("oci", "/b")).command(Step(specs.NVLINK, ("n1", "n2"), 2), fanout=True)
    assert argv[argv.index("-m") + 1 :] == [
        "gpuaccept.probes._tasks",
        "2",
        "0",
        "gpuaccept.probes._pernode",
        "gpuaccept.probes.nvlink",
    ]


HOST_SIDE = sorted(name for name, spec in specs.SPECS.items() if spec.host_side)


def test_the_host_side_probes_are_those_an_image_cannot_see():
    assert HOST_SIDE == ["gdr", "perftest", "xid"]


@pytest.mark.parametrize("probe", HOST_SIDE)
def test_host_side_probes_run_outside_the_image(probe):
    argv = _launcher(Container("oci", "/b")).command(Step(specs.SPECS[probe], ("n1",)))
    assert not any(a.startswith("--container") for a in argv)
    assert argv[argv.index("-m") - 1 :] == [sys.executable, "-m", f"gpuaccept.probes.{probe}"]


def test_the_spec_says_where_its_probe_runs():
    """The spec's ``host_side`` alone decides: the same module under a spec without it runs in the image."""
    in_image = dataclasses.replace(specs.XID, host_side=None)
    argv = _launcher(Container("oci", "/b")).command(Step(in_image, ("n1",)))
    assert "--container=/b" in argv and argv[argv.index("-m") - 1] == "python3"


def test_a_host_side_probe_where_the_host_has_no_suite_is_declared_not_run():
    launcher = _launcher(Container("oci", "/b"))
    launcher.container_nodes = {"n1": {"host_python": "yes"}, "n2": {"host_python": "no"}}
    with pytest.raises(ToolMissing) as caught:
        launcher.run(Step(specs.XID, ("n1", "n2")))
    assert caught.value.nodes == ("n2",) and "/dev/kmsg" in caught.value.detail
    assert "--container-bundle" in caught.value.detail


def test_each_started_rank_gets_the_variables_and_gpus_slurm_would_have_given_it(monkeypatch):
    monkeypatch.setenv("SLURM_NODEID", "1")
    monkeypatch.setenv("SLURM_STEP_NUM_NODES", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    first, second = rank_env(0, 2, 2), rank_env(1, 2, 2)
    assert (first["SLURM_PROCID"], second["SLURM_PROCID"]) == ("2", "3")
    assert (first["SLURM_LOCALID"], first["SLURM_NTASKS"], first["SLURM_STEP_TASKS_PER_NODE"]) == ("0", "4", "2(x2)")
    assert (first["CUDA_VISIBLE_DEVICES"], second["CUDA_VISIBLE_DEVICES"]) == ("4,5", "6,7")


def test_a_task_holding_every_gpu_of_its_node_without_their_list_splits_them_by_rank(monkeypatch):
    """Slurm 22.05's OCI support leaves CUDA_VISIBLE_DEVICES out of the container (seen on 2 x H100 80GB HBM3)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(
        "gpuaccept.probes._tasks.os.listdir", lambda _: ["nvidiactl", "nvidia1", "nvidia0", "nvidia-uvm"]
    )
    assert [rank_env(t, 2, 1)["CUDA_VISIBLE_DEVICES"] for t in (0, 1)] == ["0", "1"]
    assert "CUDA_VISIBLE_DEVICES" not in rank_env(0, 1, 1), "a task holding one of two GPUs cannot know which"


def _tasks(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLURM_NODEID": "0", "SLURM_STEP_NUM_NODES": "1", "PYTHONPATH": str(REPO)}
    env.pop("RANK", None)
    command = [sys.executable, "-m", "gpuaccept.probes._tasks", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_the_rank_starter_runs_every_rank_and_passes_a_failure_on():
    done = _tasks("3", "0", specs.CONTAINER.module)
    assert done.returncode == 0, done.stderr
    records = parse_records(specs.CONTAINER.name, done.stdout, 3, ("node",))
    assert sorted(specs.CONTAINER.validate(r).rank for r in records) == [0, 1, 2]
    failed = _tasks("2", "0", "gpuaccept.probes.no_such_probe")
    assert failed.returncode == 1 and "No module named gpuaccept.probes.no_such_probe" in failed.stderr


def test_the_host_side_query_names_missing_paths_runtimes_and_the_host_python(tmp_path):
    env = {**os.environ, "SLURMD_NODENAME": "n7", "PYTHONPATH": str(REPO)}
    command = ["sh", "-c", HOST_QUERY, "sh", sys.executable, str(tmp_path), str(tmp_path / "gone")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    found = parse_host_lines(done.stdout)["n7"]
    assert found["missing"] == str(tmp_path / "gone") and found["host_python"] == "yes"
    if shutil.which("runc"):
        assert found["runc"].startswith("runc version")
    no_python = subprocess.run([*command[:4], "/no/python3"], env=env, capture_output=True, text=True, timeout=60)
    assert parse_host_lines(no_python.stdout)["n7"]["host_python"] == "no"


def test_a_bundle_is_named_in_the_record_by_path_time_and_config_digest(tmp_path):
    (tmp_path / "rootfs").mkdir()
    (tmp_path / "config.json").write_text('{"process": {}}')
    described = Container("oci", str(tmp_path)).describe()
    assert described["image"] == str(tmp_path) and len(described["config_sha256"]) == 64 and described["mtime"]


# --- on loopback clusters -----------------------------------------------------------------------------

SUITE = """
from gpuaccept.probes import specs
import pytest
pytestmark = pytest.mark.acceptance

def test_x(node, cluster, judge):
    cluster.run(specs.HYGIENE, nodes=[node])
    judge.check("nofile", 65536, node=node)
"""


@pytest.fixture(scope="module")
def oci_cluster() -> Iterator[DevCluster]:
    if shutil.which("runc") is None:
        if os.environ.get("CI"):
            pytest.fail("runc is not installed in CI: .ci/run must apt-get install runc")
        pytest.skip("runc is not installed")
    cluster = start_cluster(2, oci="runc")
    yield cluster
    stop_cluster(cluster)


def _site_packages() -> str:
    return sysconfig.get_paths()["purelib"]


@pytest.fixture(scope="module")
def dev_bundle() -> Path:
    """The dev image (slurm/dev-cluster/image.sh: cached after its first build) with this checkout and
    this Python's packages mounted at their own paths."""
    packages = _site_packages()
    command = ["bash", str(IMAGE_SH), "--mount", str(REPO), "--mount", f"{packages}:{packages}:ro"]
    done = subprocess.run([*command, "--env", f"PYTHONPATH={REPO}:{packages}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return Path(done.stdout.strip()) / "bundle"


def _on(cluster: DevCluster, suite: Path, *args: str, env: dict[str, str] | None = None) -> InnerRun:
    """The inner acceptance suite through srun on both nodes of ``cluster``, with ``args`` (the image)."""
    base = ("-m", "acceptance", "--launcher", "slurm", "--nodes", "2")
    return run_inner(suite, *base, *args, env=env or cluster.env)


def test_every_step_runs_in_the_image_and_the_record_proves_it(tmp_path, oci_cluster, dev_bundle):
    suite = write_suite(tmp_path, SUITE)
    env = {**oci_cluster.env, "PYTHONPATH": _site_packages()}
    run = _on(oci_cluster, suite, f"--container-bundle={dev_bundle}", env=env)
    assert run.returncode == EXIT_TEST_HOOKS, run.output[-3000:]  # accepted but for the selftest's hooks
    record = run.record
    ran_in = {n: where for t in record["tests"] for n, where in t["ran_in"].items()}
    assert set(ran_in) == {"node1", "node2"}
    assert all(w.startswith("gpuaccept-dev/bookworm-py3 (oci), Python 3.11.") for w in ran_in.values()), ran_in
    container = record["cluster"]["container"]
    assert container["kind"] == "oci" and container["image"] == str(dev_bundle.resolve())
    assert all(n["runtime_versions"].startswith("runc: runc version") for n in container["nodes"].values())
    assert oci_cluster.jobs() == []


def test_an_image_that_cannot_start_is_refused_before_the_first_test_naming_the_nodes(tmp_path, oci_cluster):
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)  # no python3 in it, nothing at all
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "process": {"cwd": "/", "args": ["sh"]}}))
    suite = write_suite(tmp_path / "suite", SUITE)
    run = _on(oci_cluster, suite, f"--container-bundle={bundle}")
    assert run.returncode == 4, run.output[-3000:]
    errors = [line for line in run.output.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "did not start" in errors[0] and "node1, node2" in errors[0], run.output[-3000:]
    assert "passed" not in run.output and oci_cluster.jobs() == [], "the allocation must be released"


def test_a_container_image_on_a_cluster_without_pyxis_is_refused_in_our_words(tmp_path, oci_cluster):
    suite = write_suite(tmp_path, SUITE)
    image = suite / "image.sqsh"
    image.write_bytes(b"hsqs")
    run = _on(oci_cluster, suite, f"--container-image={image}")
    assert run.returncode == 4, run.output[-3000:]
    assert "pyxis is not installed" in run.output and "unrecognized option" in run.output, run.output[-3000:]
    assert oci_cluster.jobs() == []
