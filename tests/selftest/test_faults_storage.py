"""Storage faults made for real on one loopback node, and named by the real storage tests through srun.

Five filesystems are declared (fixtures of this test, not a site's), each faulty on node2 alone while node1 sees
it healthy: the loopback cluster's slurmds each run in a mount namespace of their own (``up.sh --own-mounts``), so
a mount made in node2's (``slurm/dev-cluster/node-exec.sh``) is node2's alone, as on a real node whose client broke.

- ``slow``: a loop-mounted ext4, node2's slurmd (and so its steps) in a cgroup v1 blkio group that throttles that
  loop device to 5 MB/s each way: node2 FAILED by its own GB/s, and against the median of the nodes;
- ``full``: node2 sees a 64 KiB tmpfs there; ``ro``: a read-only bind mount; ``gone``: the path's parent is an
  empty tmpfs, so the path is missing; ``hung``: a FUSE mount (bindfs) whose daemon is stopped (SIGSTOP), so every
  call on it blocks: each named on node2 with the path, the hung one within the stall limit (5 s here).

Every failed check names node2; node1's checks pass, and a shared step node1 waited on node2 in is an unmeasured
check of node1's (never a failed one). A second run hides fio on node2 (``/dev/null`` bound over it there): the
throughput test ends "not run" naming node2 and fio, never a pass. The checkpoint fault (a byte changed between
save and restore) runs the real checkpoint probe twice with the file edited between, judged by the real judge.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaccept.judging.judge import Judge
from gpuaccept.probes.specs import CHECKPOINT
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.verdicts.storage import judge_checkpoint

from .conftest import REPO, InnerRun, run_inner, start_cluster, stop_cluster

NODE_EXEC = REPO / "slurm" / "dev-cluster" / "node-exec.sh"
STALL_S = 5.0
#: the loop device throttle: 5 MB/s, a tenth of the contract's write floor below
THROTTLE_BPS = 5 * 1000 * 1000
CONTRACT = {
    "read_gbps": 0.1,
    "write_gbps": 0.05,
    "coherency_s": 1,
    "straggler_pct": 75,
    "source": "docs/measurements.md 'Loopback dev VM, 2026-11-28: the virtual disk under fio'",
}
SIZES = {
    "jobs": 1,
    "file_mib": 8,
    "meta_files": 50,
    "large_dir": 100,
    "checkpoint_mib": 8,
    "free_gib": 0.01,
    "phase_max_s": 5,
}
NAMES = ("slow", "full", "ro", "gone", "hung")


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is not installed in CI: .ci/run must install it")
        pytest.skip(f"{tool} is not installed here")


def _sh(*argv: str | Path) -> str:
    return subprocess.run([str(a) for a in argv], check=True, capture_output=True, text=True, timeout=60).stdout


def _site(root: Path, filesystems: dict[str, str]) -> Path:
    site = root / "site.yaml"
    declared = {
        name: {"path": path, "scope": "shared", "role": "checkpoints", "contract": CONTRACT, "sizes": SIZES}
        for name, path in filesystems.items()
    }
    site.write_text(yaml.safe_dump({"schema_version": 1, "storage": {"stall_s": STALL_S, "filesystems": declared}}))
    return site


class Faults:
    """The host side of the faults: the loop device, the blkio group, node2's mounts and the stopped daemon."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = ""
        self.group = Path(f"/sys/fs/cgroup/blkio/gpuaccept-fault-{os.getpid()}")
        self.daemon: int | None = None

    def before_cluster(self) -> None:
        """The loop-mounted filesystem, mounted before the nodes start so each namespace holds it."""
        image = self.root / "slow.img"
        _sh("truncate", "-s", "300M", image)
        _sh("mkfs.ext4", "-q", "-F", image)
        self.loop = _sh("losetup", "-f", "--show", image).strip()
        for name in NAMES:
            (self.root / name).mkdir()
        (self.root / "gone" / "data").mkdir()
        (self.root / "hung-source").mkdir()
        _sh("mount", self.loop, self.root / "slow")

    def on_node2(self, cluster: Any) -> None:
        node2 = [NODE_EXEC, "node2", str(cluster.directory), "--"]
        _sh(*node2, "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", self.root / "full")
        _sh(*node2, "mount", "--bind", self.root / "ro", self.root / "ro")
        _sh(*node2, "mount", "-o", "remount,bind,ro", self.root / "ro")
        _sh(*node2, "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", self.root / "gone")
        _sh(*node2, "bindfs", self.root / "hung-source", self.root / "hung")
        found = _sh("pgrep", "-f", f"bindfs {self.root / 'hung-source'}").split()
        self.daemon = int(found[0])
        os.kill(self.daemon, signal.SIGSTOP)
        major, minor = (int(x, 16) for x in _sh("stat", "-c", "%t %T", self.loop).split())
        self.group.mkdir()
        for way in ("read", "write"):
            (self.group / f"blkio.throttle.{way}_bps_device").write_text(f"{major}:{minor} {THROTTLE_BPS}\n")
        pid = next(
            line.split()[1]
            for line in (cluster.directory / "pids").read_text().splitlines()
            if line.split()[0] == "node2"
        )
        (self.group / "cgroup.procs").write_text(pid)

    def undo(self) -> None:
        if self.daemon is not None:
            os.kill(self.daemon, signal.SIGCONT)
            os.kill(self.daemon, signal.SIGTERM)
        if self.group.exists():
            root_procs = Path("/sys/fs/cgroup/blkio/cgroup.procs")
            for pid in (self.group / "cgroup.procs").read_text().split():
                try:
                    root_procs.write_text(pid)
                except OSError:
                    pass  # gone already
            self.group.rmdir()
        subprocess.run(["umount", "-l", str(self.root / "slow")], capture_output=True, timeout=60)
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InnerRun]:
    if os.geteuid() != 0 or not Path("/sys/fs/cgroup/blkio").is_dir():
        pytest.skip("root and cgroup v1's blkio controller are needed to throttle one node's disk")
    for tool in ("bindfs", "fio", "losetup", "nsenter"):
        _need(tool)
    root = tmp_path_factory.mktemp("storage-faults")
    faults = Faults(root)
    faults.before_cluster()
    cluster = None
    try:
        cluster = start_cluster(2, own_mounts=True)
        faults.on_node2(cluster)
        site = _site(root, {name: str(root / name) + ("/data" if name == "gone" else "") for name in NAMES})
        inner = root / "inner"
        inner.mkdir()
        yield run_inner(
            inner,
            "-m",
            "acceptance",
            "--launcher",
            "slurm",
            "--nodes",
            "2",
            "--thresholds",
            str(site),
            "--rootdir",
            str(REPO),
            "-k",
            "throughput or mounts",
            str(REPO / "tests" / "acceptance" / "test_storage.py"),
            env=cluster.env,
            timeout=400,
        )
    finally:
        faults.undo()
        if cluster is not None:
            stop_cluster(cluster)


def _checks(run: InnerRun, test: str) -> list[dict[str, Any]]:
    return [m for m in run.record["metrics"] if m["test"].endswith("::" + test)]


@pytest.mark.parametrize(
    ("name", "metric", "says"),
    [
        ("slow", "storage_write_gbps", ""),
        ("slow", "storage_read_gbps", ""),
        ("slow", "storage_median_share_pct", ""),
        ("full", "storage_path_usable", "full"),
        ("ro", "storage_path_usable", "read-only"),
        ("gone", "storage_path_usable", "missing"),
        ("hung", "storage_path_usable", "stalled"),
    ],
)
def test_the_faulty_node_is_named_with_the_path(faulty_run: InnerRun, name: str, metric: str, says: str) -> None:
    failed = [m for m in _checks(faulty_run, "test_storage_throughput") if m["verdict"] == "fail"]
    suffix = "/gone/data" if name == "gone" else f"/{name}"
    named = [m for m in failed if m["metric"] == metric and m["subject"].endswith(suffix)]
    assert named, f"{name}: no failed {metric}: {[(m['node'], m['metric'], m['subject']) for m in failed]}"
    assert {m["node"] for m in named} == {"node2"}
    assert all(str(m["value"]).startswith(says) for m in named), [m["value"] for m in named]


def test_only_node2_fails_and_node1_is_judged(faulty_run: InnerRun) -> None:
    for test in ("test_storage_throughput", "test_storage_mounts"):
        checks = _checks(faulty_run, test)
        assert {m["node"] for m in checks if m["verdict"] == "fail"} == {"node2"}, test
        node1 = [m for m in checks if m["node"] == "node1"]
        assert node1 and all(m["verdict"] in ("pass", "info") for m in node1), [
            (m["metric"], m["verdict"], m["value"]) for m in node1 if m["verdict"] not in ("pass", "info")
        ]
    assert faulty_run.verdicts() == {"test_storage_throughput": "failed", "test_storage_mounts": "failed"}


def test_the_hung_mount_is_named_within_the_stall_limit(faulty_run: InnerRun) -> None:
    """Stalled in the throughput test (FAILED there), the hung path is not looked at again on node2: the mounts
    test's check of it could not measure, naming that first stall (issue 57 item 2)."""
    hung = [m for m in _checks(faulty_run, "test_storage_mounts") if m["subject"].endswith("/hung")]
    node2 = [m for m in hung if m["node"] == "node2"]
    assert [m["verdict"] for m in node2] == ["unmeasured"], node2
    assert node2[0]["reason"].startswith(f"not run: {hung[0]['subject']} on node2 stalled at "), node2[0]["reason"]
    assert "in test_storage_throughput (FAILED there)" in node2[0]["reason"]
    assert faulty_run.duration_s < 300, faulty_run.duration_s


def test_fio_missing_on_a_node_is_not_run_naming_it(tmp_path: Path) -> None:
    _need("fio")
    (tmp_path / "fs").mkdir()
    cluster = start_cluster(2, own_mounts=True)
    try:
        fio = shutil.which("fio")
        _sh(NODE_EXEC, "node2", str(cluster.directory), "--", "mount", "--bind", "/dev/null", fio)
        site = _site(tmp_path, {"fs": str(tmp_path / "fs")})
        run = run_inner(
            tmp_path,
            "-m",
            "acceptance",
            "--launcher",
            "slurm",
            "--nodes",
            "2",
            "--thresholds",
            str(site),
            "--rootdir",
            str(REPO),
            "-k",
            "throughput",
            str(REPO / "tests" / "acceptance" / "test_storage.py"),
            env=cluster.env,
            timeout=300,
        )
    finally:
        stop_cluster(cluster)
    assert run.verdicts() == {"test_storage_throughput": "not run"}, run.output[-2000:]
    test = next(t for t in run.record["tests"] if t["nodeid"].endswith("test_storage_throughput"))
    assert "fio" in test["message"] and "node2" in test["message"], test["message"]


def _checkpoint(root: Path, mode: str) -> Any:
    done = subprocess.run(
        [
            "python3",
            "-m",
            "gpuaccept.probes.checkpoint",
            "--path",
            str(root),
            "--token",
            "t",
            "--mode",
            mode,
            "--mib",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=REPO,
    )
    from gpuaccept.dispatch.result import parse_records

    return CHECKPOINT.read(parse_records("checkpoint", done.stdout, 1, ("node1",))[0])


def test_a_checkpoint_changed_between_save_and_restore_names_the_file_and_node(tmp_path: Path) -> None:
    saved = _checkpoint(tmp_path, "save")
    shard = next((tmp_path / "gpuaccept-t" / "checkpoint").glob("*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    time.sleep(0.01)
    restored = _checkpoint(tmp_path, "restore")
    site = _site(tmp_path, {"fs": str(tmp_path)})
    thresholds = load_thresholds(site)
    checks: list[Any] = []
    judge = Judge(thresholds, lambda node: "cpu", checks.append, "test_checkpoint")
    fs = thresholds.storage.filesystems["fs"]
    judge_checkpoint(saved, {"node2": restored}, "fs", fs, judge, "node1")
    # the bytes, not the speed: a 4 MiB restore's GB/s is a few ms of latency, below the contract when the CI
    # machine's two cores are busy (CI 2026-11-28: checkpoint_restore_gbps failed beside the byte check)
    failed = [c for c in checks if c.verdict == "fail" and not c.metric.endswith("_gbps")]
    assert [(c.metric, c.node) for c in failed] == [("checkpoint_bytes", "node2")]
    assert failed[0].value.startswith(f"{shard.name}: sha256 ")
