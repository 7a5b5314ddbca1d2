"""Storage: bytes written on one node are the bytes every other node reads, and each filesystem the site declares
delivers its contract on every node alone and on all at once (fio), with its metadata, coherency and mounts."""

from __future__ import annotations

import hashlib
import random
import uuid

import pytest

from gpuaccept.dispatch.result import ProbeResult
from gpuaccept.errors import MeasurementError
from gpuaccept.probes.specs import CHECKPOINT, COHERENCY, FIO, FSMETA, MOUNTS, SHAREDFS
from gpuaccept.settings import reports_root
from gpuaccept.stalls import Stalls
from gpuaccept.thresholds.storage_site import Filesystem
from gpuaccept.verdicts.storage import (
    CHECKPOINT_METRICS,
    THROUGHPUT_METRICS,
    filesystems_absent,
    judge_answered_again,
    judge_checkpoint,
    judge_not_run,
    judge_shared_reads,
    judge_throughput_alone,
    judge_throughput_together,
    metric_for,
    stall_in,
)
from gpuaccept.verdicts.storage_meta import (
    COHERENCY_METRICS,
    METADATA_METRICS,
    MOUNT_METRICS,
    judge_coherency,
    judge_metadata,
    judge_mounts,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.storage]

SIZE = 4 << 20


def _read_everywhere(cluster, nodes, path):
    seen = {}
    for node, result in cluster.run_each(SHAREDFS, nodes, args=["--mode", "read", "--path", path]).items():
        if isinstance(result, MeasurementError):
            raise result  # one lost during the step: across_nodes measures the survivors again
        seen[node] = result.one().data
    return seen


@pytest.mark.multinode
@pytest.mark.judges(nodes=2)
def test_shared_filesystem(cluster, settings, request, judge):
    """A file written on one node reads back byte-identical on every other node, and again on every node
    after a third node renamed it."""
    root = settings.sharedfs_path or reports_root(request.config) / "reports" / ".sharedfs"

    def measure(nodes: list[str]) -> tuple[str, list[tuple[str, str, dict, str]]]:
        """Write, read everywhere, rename, read everywhere; judged afterwards, so a run measured again
        on the survivors (a node lost on the way) judges the survivors' reads only."""
        seed = random.randrange(2**31)
        first = root / f"gpuaccept-{uuid.uuid4().hex[:12]}.bin"
        renamed = first.with_suffix(".renamed")
        expected = hashlib.sha256(random.Random(seed).randbytes(SIZE)).hexdigest()
        writer, renamer = nodes[0], nodes[1]
        write = ["--mode", "write", "--path", first, "--size", SIZE, "--seed", seed]
        try:
            wrote = cluster.run(SHAREDFS, nodes=[writer], args=write).one().data
            reads = [(writer, "read back by the writer", wrote, str(first))]
            for node, data in _read_everywhere(cluster, nodes[1:], first).items():
                reads.append((node, f"read after {writer} wrote", data, ""))
            cluster.run(SHAREDFS, nodes=[renamer], args=["--mode", "rename", "--path", first, "--to", renamed])
            for node, data in _read_everywhere(cluster, nodes, renamed).items():
                reads.append((node, f"read after {renamer} renamed it", data, ""))
        finally:
            for path in (first, renamed):
                path.unlink(missing_ok=True)
        return expected, reads

    expected, reads = cluster.across_nodes(measure, what="a shared filesystem check")
    judge_shared_reads(reads, expected, judge)


class _Held:
    """This test's view of the run's stalled paths (``gpuaccept/stalls.py``): which nodes a filesystem may still
    be sent to (the others "not run", naming the first stall), and each payload's stall noted as it comes back."""

    def __init__(self, stalls: Stalls, test: str, judge) -> None:
        self.stalls, self.test, self.judge = stalls, test, judge

    def free(self, nodes: list[str], name: str, fs: Filesystem, metric: str) -> list[str]:
        free, held = self.stalls.split(nodes, fs.path)
        judge_not_run(held, metric, name, fs, self.judge)
        return free

    def saw(self, payloads: dict, name: str, fs: Filesystem) -> None:
        for node, payload in payloads.items():
            if isinstance(payload, Exception):
                continue
            stalled = stall_in(payload)
            if stalled is not None:
                self.stalls.note(node, fs.path, self.test, stalled)
            elif (said := self.stalls.answered(node, fs.path, self.test)) is not None:
                judge_answered_again(said, node, name, fs, self.judge)


@pytest.fixture()
def held(gpuaccept_state, request, judge) -> _Held:
    return _Held(gpuaccept_state.stalls, request.node.name, judge)


def _fio_args(fs: Filesystem, stall_s: float, token: str) -> list[object]:
    sizes = fs.sizes
    args: list[object] = ["--path", fs.path, "--token", token, "--jobs", sizes.jobs, "--file-mib", sizes.file_mib]
    return [*args, "--max-s", sizes.phase_max_s, "--stall-limit", stall_s, *([] if fs.direct else ["--buffered"])]


def _each(cluster, spec, nodes, args) -> dict:
    """``spec`` on ``nodes`` at once, each node's payload typed; a node whose step broke keeps its error (the
    judge names it)."""
    ran = cluster.run_each(spec, nodes, args=args)
    return {node: spec.read(r.one()) if isinstance(r, ProbeResult) else r for node, r in ran.items()}


def _declared(thresholds, scope=None):
    """The site's storage section; skips naming the key when it declares no filesystem (of ``scope``)."""
    absent = filesystems_absent(thresholds.storage, scope=scope)
    if absent:
        pytest.skip(absent)
    return thresholds.storage


def _write_then_read(cluster, held, name, fs, stall_s: float, token: str, nodes: list[str], together: bool) -> dict:
    """fio writes on ``nodes`` (one after another, each alone, or all at once), then reads on the nodes whose
    write ran, each the next one's files: a node that could not write is named by its write, not blamed again
    on the node that would have read its files; a node whose path stalled is sent nothing more (``held``).
    Returns {"write": ..., "read": ...}, each node -> payload."""

    def phase(rw: str, on: list[str]) -> dict:
        peers = ["--peers", ",".join(on)] if rw == "read" and fs.scope == "shared" else []
        args = [*_fio_args(fs, stall_s, token), "--rw", rw, *peers]
        got: dict = {}
        for group in [on] if together else [[node] for node in on]:
            free = held.free(group, name, fs, metric_for(fs, rw))
            if len(free) > (1 if together else 0):
                ran = _each(cluster, FIO, free, args)
                held.saw(ran, name, fs)
                got |= ran
        return got

    wrote = phase("write", nodes)
    writers = [node for node, payload in wrote.items() if not isinstance(payload, Exception) and payload.run]
    return {"write": wrote, "read": phase("read", writers) if writers else {}}


@pytest.mark.judges(*THROUGHPUT_METRICS, absent="storage")
def test_storage_throughput(cluster, thresholds, judge, held):
    """Each declared filesystem with fio: every node alone (write, then read of the next node's files), then all
    nodes at once; judged per node against the contract, the aggregate against the contract for this many
    nodes, and each node against the run's median."""
    storage = _declared(thresholds)
    nodes = cluster.nodes
    for name, fs in storage.filesystems.items():
        tokens = [uuid.uuid4().hex[:12] for _ in range(2)]
        try:
            measured = _write_then_read(cluster, held, name, fs, storage.stall_s, tokens[0], nodes, False)
            for rw, payloads in measured.items():
                judge_throughput_alone(payloads, name, fs, rw, judge)
            if len(nodes) > 1:
                measured = _write_then_read(cluster, held, name, fs, storage.stall_s, tokens[1], nodes, True)
                for rw, payloads in measured.items():
                    judge_throughput_together(payloads, name, fs, rw, judge)
        finally:
            free, _ = held.stalls.split(nodes, fs.path)
            cleaners = free[:1] if fs.scope == "shared" else free
            for token in tokens:
                cleaned = _each(cluster, FIO, cleaners, [*_fio_args(fs, storage.stall_s, token), "--rw", "clean"])
                held.saw(cleaned, name, fs)


@pytest.mark.judges(*MOUNT_METRICS, absent="storage")
def test_storage_mounts(cluster, thresholds, judge, held):
    """Every declared path on every node (one step per set of paths): there, a folder, writable, with the room the
    site declares, mounted as declared (type, NFS version, nconnect, transport, read-ahead, vendor modules) and as
    on the other nodes; a path that stalled on a node earlier is not looked at there again."""
    storage = _declared(thresholds)
    skipped = [
        (node, fs.path)
        for name, fs in storage.filesystems.items()
        for node in set(cluster.nodes) - set(held.free(cluster.nodes, name, fs, "storage_free_gib"))
    ]
    looked: dict[tuple[str, ...], list[str]] = {}  # the nodes that look at the same paths share a step
    for node in cluster.nodes:
        paths = tuple(fs.path for fs in storage.filesystems.values() if (node, fs.path) not in skipped)
        if paths:
            looked.setdefault(paths, []).append(node)
    payloads: dict = {}
    for paths, on in looked.items():
        args = [arg for path in paths for arg in ("--path", path)]
        payloads |= _each(cluster, MOUNTS, on, [*args, "--stall-limit", storage.stall_s])
    for name, fs in storage.filesystems.items():
        held.saw(
            {n: m for n, p in payloads.items() if not isinstance(p, Exception) for m in p.paths if m.path == fs.path},
            name,
            fs,
        )
    judge_mounts(payloads, storage, judge, skipped)


@pytest.mark.judges(*METADATA_METRICS, absent="storage")
def test_storage_metadata(cluster, thresholds, judge, held):
    """Each declared filesystem, every node at once: creates, stats and deletes in a folder per node and in one
    shared folder (IO500 mdtest easy and hard), and a large folder listed whole."""
    storage = _declared(thresholds)
    for name, fs in storage.filesystems.items():
        sizes = fs.sizes
        args = ["--path", fs.path, "--files", sizes.meta_files, "--large", sizes.large_dir]
        args += ["--token", uuid.uuid4().hex[:12], "--stall-limit", storage.stall_s]
        on = held.free(cluster.nodes, name, fs, "storage_metadata_ops")
        if not on:
            continue
        result = cluster.run(FSMETA, nodes=on, args=args)  # one step: its ranks meet in the shared folder
        payloads = {r.node: FSMETA.read(r) for r in result.records}
        held.saw(payloads, name, fs)
        judge_metadata(payloads, name, fs, judge)


@pytest.mark.multinode
@pytest.mark.judges(*COHERENCY_METRICS, nodes=2, absent="storage")
def test_storage_coherency(cluster, thresholds, judge, held):
    """Each shared filesystem between two nodes in one step: a file one creates is seen whole on the other within
    the contract's window (a round trip on one clock), with the size and mtime it was given, and a lock one
    holds (flock, lockf) is refused to the other until released."""
    storage = _declared(thresholds, scope="shared")

    def measure(nodes: list[str]) -> list:
        out = []
        for name, fs in storage.filesystems.items():
            if fs.scope != "shared":
                continue
            on = held.free(nodes, name, fs, "storage_visibility_s")
            if len(on) < 2:
                stalls = "; ".join(str(held.stalls.of(node, fs.path)) for node in nodes if node not in on)
                alone = f"not run: two nodes whose {fs.path} answers are needed; {stalls}"
                judge_not_run(dict.fromkeys(on, alone), "storage_visibility_s", name, fs, judge)
                continue
            args = ["--path", fs.path, "--token", uuid.uuid4().hex[:12], "--stall-limit", storage.stall_s]
            result = cluster.run(COHERENCY, nodes=on[:2], args=args)
            payloads = {record.node: COHERENCY.read(record) for record in result.records}
            held.saw(payloads, name, fs)
            out.append((name, fs, list(payloads.values())))
        return out

    for name, fs, payloads in cluster.across_nodes(measure, what="a cross-node coherency check"):
        judge_coherency(payloads, name, fs, judge)


@pytest.mark.judges(*CHECKPOINT_METRICS, absent="storage")
def test_checkpoint(cluster, thresholds, judge, held):
    """A checkpoint saved as a fine-tune saves one (safetensors shards, adapter and optimizer state, fsynced) on
    one node and restored by another (on one node, its page cache dropped), every byte checked and the weights
    loaded into a GPU's memory: save and restore GB/s against the contract, and the cold start's time. A node
    whose path stalled earlier is neither: the next node whose path answers takes its part."""
    storage = _declared(thresholds)
    nodes = cluster.nodes
    for name, fs in storage.filesystems.items():
        token = uuid.uuid4().hex[:12]
        args = ["--path", fs.path, "--token", token, "--stall-limit", storage.stall_s]
        savers = held.free(nodes[:1], name, fs, "checkpoint_save_gbps")
        want = nodes[1:2] if fs.scope == "shared" else nodes[:1]
        restorers = held.free(want, name, fs, "checkpoint_restore_gbps") if want != nodes[:1] else savers
        free, _ = held.stalls.split(nodes, fs.path)
        saver = (savers or free or [None])[0]
        if saver is None:
            continue
        restorer = (restorers or [n for n in free if n != saver] or [saver])[0] if fs.scope == "shared" else saver
        gpus = {"gpus_per_task": 1} if cluster.gpus_on(restorer) else {}
        restored = {}
        try:
            saved = CHECKPOINT.read(
                cluster.run(
                    CHECKPOINT, nodes=[saver], args=[*args, "--mode", "save", "--mib", fs.sizes.checkpoint_mib], **gpus
                ).one()
            )
            held.saw({saver: saved}, name, fs)
            if saved.problem is None:
                restored[restorer] = CHECKPOINT.read(
                    cluster.run(CHECKPOINT, nodes=[restorer], args=[*args, "--mode", "restore"], **gpus).one()
                )
                held.saw(restored, name, fs)
            else:
                gone = f"not run: the save on {saver} did not complete ({saved.problem.kind})"
                judge_not_run({restorer: gone}, "checkpoint_restore_gbps", name, fs, judge)
        finally:
            cleaner = [n for n in (saver, restorer) if held.stalls.of(n, fs.path) is None][:1]
            if cleaner:
                cleaned = CHECKPOINT.read(cluster.run(CHECKPOINT, nodes=cleaner, args=[*args, "--mode", "clean"]).one())
                held.saw({cleaner[0]: cleaned}, name, fs)
        judge_checkpoint(saved, restored, name, fs, judge, saver)
