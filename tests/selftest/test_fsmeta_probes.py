"""The storage probes beyond the shared-file read, on this machine's own tmp folders, no cluster: mdtest
shapes and the large directory (fsmeta), the two-rank coherency ping-pong and locks as two local processes,
the declared paths' mounts on the recorded proc/sys tree in fixtures/storage/, and the stall limit firing on
a call that blocks (a FIFO opened with no writer) within its limit. Every payload is validated against its
model, as ``Cluster`` validates a probe's ``data``."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from gpuaccept.contracts.fsmeta import CoherencyPayload, FsmetaPayload, MountsPayload
from gpuaccept.probes import _stall, coherency, fsmeta, mounts

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[2]
NODE = REPO / "fixtures" / "storage" / "nfs-node"


def _rank_env(rank: int, world: int, node: str | None = None) -> dict[str, str]:
    """A local rank's environment: no Slurm variables from the outer run, the given rank."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GPUACCEPT_NODE"))}
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), PYTHONPATH=str(REPO))
    if node is not None:
        env["GPUACCEPT_NODE"] = node
    return env


def _one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")


def _result(stdout: str) -> dict[str, Any]:
    """The one framed result a probe printed (whole line or base64 parts), its ``data``."""
    lines = stdout.splitlines()
    parts = [line.split(" ", 3)[3] for line in lines if line.startswith("GPUACCEPT_PART ")]
    if parts:
        framed = base64.b64decode("".join(parts)).decode()
    else:
        framed = next(line for line in lines if line.startswith("GPUACCEPT_RESULT ")).split(" ", 1)[1]
    data: dict[str, Any] = json.loads(framed.split(" ", 2)[2])["data"]
    return data


def _roundtrip(model: BaseModel) -> None:
    """What the probe emits (``model_dump(mode="json")``) validates back to the same model."""
    assert type(model).model_validate(json.loads(json.dumps(model.model_dump(mode="json")))) == model


# ---------------------------------------------------------------------------------------------- the stall limit


def test_stall_limit_fires_on_a_blocked_open(tmp_path: Path) -> None:
    """Opening a FIFO for reading blocks until a writer comes: the limit reports it, naming call and path,
    within the limit (not the probe's step limit); the blocked child is killed (nothing left to name)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(_stall.Stalled) as stalled:
        _stall.call(lambda: os.open(fifo, os.O_RDONLY), step="open the FIFO", operation="open", path=fifo, limit_s=0.3)
    waited = time.monotonic() - start
    assert 0.3 <= waited < 2.0
    record = stalled.value.record
    assert (record.step, record.operation, record.path, record.limit_s) == ("open the FIFO", "open", str(fifo), 0.3)
    assert record.waited_s >= 0.3 and record.stuck is None


def test_stall_limit_is_per_call_not_per_loop() -> None:
    """A loop of calls each well inside the limit runs past the limit in all; one slow call stops it."""

    def loop(progress: _stall.Progress) -> int:
        for i in range(6):
            progress.at("sleep", f"/x/{i}")
            time.sleep(0.05)
        progress.idle()
        return 6

    assert _stall.run(loop, step="loop", limit_s=0.2) == 6

    def slow(progress: _stall.Progress) -> None:
        progress.step = "the slow one"
        progress.at("stat", "/x/slow")
        time.sleep(1.0)

    with pytest.raises(_stall.Stalled) as stalled:
        _stall.run(slow, step="loop", limit_s=0.2)
    assert stalled.value.record.step == "the slow one" and stalled.value.record.path == "/x/slow"


def test_stall_limit_passes_errors_and_values() -> None:
    assert _stall.call(lambda: 7, step="s", operation="op", path="/p", limit_s=1) == 7
    with pytest.raises(FileNotFoundError):
        _stall.call(lambda: os.stat("/nonexistent/gpuaccept"), step="s", operation="stat", path="/p", limit_s=1)


def test_stalled_probe_reports_and_leaves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fsmeta with a listing that hangs: the payload names the large listing's scandir and keeps the shapes
    measured before it."""
    _one_rank(monkeypatch)
    release = threading.Event()
    real = os.scandir

    def hung(path: Any) -> Any:
        release.wait(10)
        return real(path)

    monkeypatch.setattr(fsmeta.os, "scandir", hung)
    try:
        payload = fsmeta.measure(tmp_path, files=20, large=50, token="stall", limit_s=0.3)
    finally:
        release.set()
    assert payload.stalled is not None
    assert (payload.stalled.step, payload.stalled.operation) == ("large list", "scandir")
    assert payload.easy is not None and len(payload.easy.phases) == 3 and not payload.cleaned
    _roundtrip(payload)


# ---------------------------------------------------------------------------------------------- fsmeta


def test_fsmeta_one_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _one_rank(monkeypatch)
    payload = fsmeta.measure(tmp_path, files=100, large=1000, token="one")
    assert payload.error is None and payload.stalled is None and payload.timed_out is None
    for shape in (payload.easy, payload.hard):
        assert shape is not None
        assert [p.phase for p in shape.phases] == ["create", "stat", "delete"]
        assert all(p.ops == 100 and p.seconds > 0 and (p.ops_per_s or 0) > 0 for p in shape.phases)
    assert payload.large is not None
    assert (payload.large.created, payload.large.listed, payload.large.matched) == (1000, 1000, 1000)
    assert payload.cleaned and list(tmp_path.iterdir()) == []
    _roundtrip(payload)


def test_fsmeta_reports_a_failed_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A path that is not there: the error names the step, nothing is measured, nothing is left."""
    _one_rank(monkeypatch)
    payload = fsmeta.measure(tmp_path / "missing", files=10, large=0, token="gone")
    assert payload.error is not None and payload.error.startswith("set up:")
    assert payload.easy is None and payload.hard is None and payload.large is None
    _roundtrip(payload)


def test_fsmeta_three_ranks_share_the_hard_directory(tmp_path: Path) -> None:
    """Three local ranks of one step: every rank's phases done in step, one large directory (local rank 0),
    and the shared directories removed by the last rank out."""
    argv = [sys.executable, "-m", "gpuaccept.probes.fsmeta", "--path", str(tmp_path), "--files", "100"]
    argv += ["--large", "300", "--token", "three", "--stall-limit", "30"]
    procs = [
        subprocess.Popen(argv, env=_rank_env(rank, 3), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in range(3)
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], [err for _, err in outputs]
    payloads = [FsmetaPayload.model_validate(_result(out)) for out, _ in outputs]
    for rank, payload in enumerate(payloads):
        assert payload.error is None and payload.timed_out is None and payload.cleaned, (rank, payload)
        assert payload.hard is not None and payload.hard.directory.endswith("gpuaccept-fsmeta-three/hard")
        assert [p.phase for p in payload.hard.phases] == ["create", "stat", "delete"]
        assert (payload.large is not None) == (rank == 0)
    assert list(tmp_path.iterdir()) == []


def test_fsmeta_barrier_times_out_naming_the_missing_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 of two with rank 1 never started: the first barrier runs out, naming rank 1."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    payload = fsmeta.measure(tmp_path, files=5, large=0, token="late", limit_s=0.5)
    assert payload.timed_out is not None
    assert payload.timed_out.step == "barrier before easy create"
    assert payload.timed_out.last_seen == "ranks not arrived: 1"
    _roundtrip(payload)


# ---------------------------------------------------------------------------------------------- coherency


def _coherency(tmp_path: Path, token: str, nodes: tuple[str, str], *extra: str) -> list[CoherencyPayload]:
    argv = [sys.executable, "-m", "gpuaccept.probes.coherency", "--path", str(tmp_path), "--token", token, *extra]
    procs = [
        subprocess.Popen(
            argv, env=_rank_env(rank, 2, nodes[rank]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for rank in range(2)
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err for _, err in outputs]
    return [CoherencyPayload.model_validate(_result(out)) for out, _ in outputs]


def test_coherency_two_ranks(tmp_path: Path) -> None:
    """Two local ranks named as two nodes: every round seen whole, each lock refused while held and granted
    after, the directory removed."""
    initiator, responder = _coherency(tmp_path, "pair", ("node-a", "node-b"), "--rounds", "3")
    assert (initiator.role, responder.role) == ("initiator", "responder")
    assert initiator.cross_node and responder.cross_node and initiator.peer_node == "node-b"
    for payload in (initiator, responder):
        assert payload.error is None and payload.timed_out is None and payload.stalled is None
        assert [r.round for r in payload.rounds] == [0, 1, 2]
        assert all(r.seen and r.attributes_ok for r in payload.rounds)
    assert all(
        r.round_trip_s is not None and r.one_way_bound_s == pytest.approx(r.round_trip_s / 2, abs=1e-5)
        for r in initiator.rounds
    )
    assert all(r.round_trip_s is None for r in responder.rounds)
    assert [(t.kind, t.held) for t in initiator.locks] == [("flock", True), ("lockf", True)]
    assert [(t.kind, t.refused_while_held, t.granted_after_release, t.honoured) for t in responder.locks] == [
        ("flock", True, True, True),
        ("lockf", True, True, True),
    ]
    assert initiator.cleaned and list(tmp_path.iterdir()) == []
    _roundtrip(initiator)
    _roundtrip(responder)


def test_coherency_one_node_is_not_cross_node(tmp_path: Path) -> None:
    initiator, responder = _coherency(tmp_path, "same", ("node-a", "node-a"), "--rounds", "1")
    assert not initiator.cross_node and initiator.reason == "both ranks ran on node-a"
    assert not responder.cross_node


def test_coherency_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _one_rank(monkeypatch)
    payload = coherency.measure(tmp_path, token="alone")
    assert payload.role == "alone" and not payload.cross_node and payload.reason is not None
    assert "two ranks" in payload.reason and payload.rounds == [] and payload.locks == []
    _roundtrip(payload)


def test_coherency_wait_runs_out_naming_the_step(tmp_path: Path) -> None:
    """Rank 0 with no rank 1: the hello wait runs out after --wait, named; the probe still reports and ends 0."""
    argv = [sys.executable, "-m", "gpuaccept.probes.coherency", "--path", str(tmp_path), "--token", "lonely"]
    start = time.monotonic()
    done = subprocess.run(
        [*argv, "--wait", "0.5"], env=_rank_env(0, 2, "node-a"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - start < 30
    payload = CoherencyPayload.model_validate(_result(done.stdout))
    assert payload.timed_out is not None and payload.timed_out.step == "hello: rank 0 waits for rank 1's"
    assert payload.timed_out.last_seen == "missing" and payload.peer_node is None
    assert payload.reason == "the other rank was never seen" and not payload.cross_node


def test_coherency_stall_while_waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A look at the other rank's file that hangs (a FIFO in its place): reported as stalled, naming the step."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    directory = tmp_path / f"{coherency.PREFIX}fifo"
    directory.mkdir()
    os.mkfifo(directory / "hello.0")
    payload = coherency.measure(tmp_path, token="fifo", limit_s=0.3)
    assert payload.stalled is not None and payload.stalled.stuck is None  # the blocked child was killed
    assert payload.stalled.step == "hello: rank 1 waits for rank 0's"
    assert (payload.stalled.operation, payload.stalled.path) == ("open", str(directory / "hello.0"))
    _roundtrip(payload)


# ---------------------------------------------------------------------------------------------- mounts


def test_mountinfo_fixture() -> None:
    entries = mounts.parse_mountinfo((NODE / "proc" / "self" / "mountinfo").read_text())
    assert len(entries) == 12
    shared = mounts.find_mount(entries, "/mnt/shared/data/x")
    assert shared is not None and shared.mount_point == "/mnt/shared" and shared.fs_type == "nfs4"
    nfs = mounts.nfs_options(shared)
    assert nfs is not None
    assert (nfs.vers, nfs.nconnect, nfs.proto, nfs.rsize, nfs.hard, nfs.local_lock) == (
        "4.1",
        16,
        "tcp",
        1048576,
        True,
        "none",
    )
    home = mounts.find_mount(entries, "/mnt/home")
    assert home is not None and (nfs_home := mounts.nfs_options(home)) is not None
    assert (nfs_home.vers, nfs_home.nconnect, nfs_home.hard, nfs_home.local_lock) == ("3", None, False, "all")
    assert nfs_home.actimeo == {"acregmin": 1, "acregmax": 1, "acdirmin": 1, "acdirmax": 1}
    assert mounts.find_mount(entries, "/mnt/sharedother") is not None
    assert mounts.find_mount(entries, "/mnt/sharedother").mount_point == "/"  # type: ignore[union-attr]
    over = mounts.find_mount(entries, "/mnt/shared/over/f")
    assert over is not None and over.source == "second"  # the mount on top
    spaced = mounts.find_mount(entries, "/mnt/with space/f")
    assert spaced is not None and spaced.mount_point == "/mnt/with space"
    lustre = mounts.find_mount(entries, "/lustre/project")
    assert lustre is not None and lustre.fs_type == "lustre" and mounts.nfs_options(lustre) is None
    assert mounts.read_modules(NODE) == ["lnet", "lustre", "nfs", "nfsv4", "nvidia", "nvidia_fs"]


def test_mounts_on_the_fixture_tree(tmp_path: Path) -> None:
    """The fixture's paths do not exist here: each is reported missing, with the mount it would be on, its
    NFS options, its read-ahead and the read-only flag."""
    payload = mounts.measure(["/mnt/shared", "/mnt/scratch/run"], root=NODE)
    shared, scratch = payload.paths
    assert shared.exists is False and shared.is_mount_point is True and shared.read_ahead_kb == 16384
    assert shared.nfs is not None and shared.nfs.nconnect == 16 and shared.nfs.vers == "4.1"
    assert shared.read_only_flag is False and shared.write_checked is False and shared.writable is None
    assert scratch.read_only_flag is True and scratch.is_mount_point is False and scratch.nfs is None
    assert payload.modules is not None and "lustre" in payload.modules
    _roundtrip(payload)


def test_mounts_on_real_folders(tmp_path: Path) -> None:
    """A writable directory, a read-only one, a file and a missing path, with a mountinfo naming the tmp
    folder a mount point."""
    proc = tmp_path / "root" / "proc" / "self"
    proc.mkdir(parents=True)
    data = tmp_path / "data"
    data.mkdir()
    (proc / "mountinfo").write_text(
        f"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 0:99 / {tmp_path} rw,relatime - tmpfs tmpfs rw,size=1024k\n"
    )
    (tmp_path / "file").write_text("x")
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    readonly.chmod(0o555)
    try:
        payload = mounts.measure(
            [str(data), str(tmp_path / "file"), str(tmp_path / "missing"), str(readonly), str(tmp_path)],
            root=tmp_path / "root",
        )
    finally:
        readonly.chmod(0o755)
    ok, file, missing, ro, point = payload.paths
    assert ok.exists and ok.is_dir and ok.writable and ok.write_error is None
    assert ok.mount is not None and ok.mount.mount_point == str(tmp_path) and not ok.is_mount_point
    assert ok.total_bytes is not None and ok.free_bytes is not None and 0 <= ok.free_bytes <= ok.total_bytes
    assert file.exists and file.is_dir is False and not file.write_checked
    assert missing.exists is False and missing.is_dir is None and missing.error is None
    if os.geteuid() != 0:  # root writes through a mode of 555
        assert ro.writable is False and ro.write_error is not None and "create" in ro.write_error
    assert point.is_mount_point is True
    assert payload.modules is None  # no proc/modules in this tree
    assert list(data.iterdir()) == []  # the write check left nothing
    _roundtrip(payload)


def test_mounts_stall_stops_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def hung(path: Any) -> Any:
        release.wait(10)
        raise OSError("released")

    monkeypatch.setattr(mounts.os, "statvfs", hung)
    try:
        payload = mounts.measure([str(tmp_path), "/"], limit_s=0.3)
    finally:
        release.set()
    first, second = payload.paths
    assert first.stalled is not None and first.stalled.operation == "statvfs"
    assert second.stalled is None and second.error is not None and second.error.startswith("not looked at")
    _roundtrip(payload)


def test_payload_models_refuse_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        MountsPayload.model_validate({"paths": [], "modules": None, "stall_limit_s": 60, "extra": 1})
