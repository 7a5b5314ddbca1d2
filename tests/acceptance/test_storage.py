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
from gpuaccept.thresholds.storage_site import Filesystem
from gpuaccept.verdicts.storage import (
    CHECKPOINT_METRICS,
    THROUGHPUT_METRICS,
    filesystems_absent,
    judge_checkpoint,
    judge_shared_reads,
    judge_throughput_alone,
    judge_throughput_together,
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


def _write_then_read(cluster, fs, stall_s: float, token: str, nodes: list[str], together: bool) -> dict:
    """fio writes on ``nodes`` (one after another, each alone, or all at once), then reads on the nodes whose
    write ran, each the next one's files: a node that could not write is named by its write, not blamed again
    on the node that would have read its files. Returns {"write": ..., "read": ...}, each node -> payload."""

    def phase(rw: str, on: list[str]) -> dict:
        peers = ["--peers", ",".join(on)] if rw == "read" and fs.scope == "shared" else []
        args = [*_fio_args(fs, stall_s, token), "--rw", rw, *peers]
        if together:
            return _each(cluster, FIO, on, args)
        return {node: _each(cluster, FIO, [node], args)[node] for node in on}

    wrote = phase("write", nodes)
    writers = [node for node, payload in wrote.items() if not isinstance(payload, Exception) and payload.run]
    return {"write": wrote, "read": phase("read", writers) if writers else {}}


@pytest.mark.judges(*THROUGHPUT_METRICS, absent="storage")
def test_storage_throughput(cluster, thresholds, judge):
    """Each declared filesystem with fio: every node alone (write, then read of the next node's files), then all
    nodes at once; judged per node against the contract, the aggregate against the contract for this many
    nodes, and each node against the run's median."""
    storage = _declared(thresholds)
    nodes = cluster.nodes
    for name, fs in storage.filesystems.items():
        tokens = [uuid.uuid4().hex[:12] for _ in range(2)]
        try:
            for rw, payloads in _write_then_read(cluster, fs, storage.stall_s, tokens[0], nodes, False).items():
                judge_throughput_alone(payloads, name, fs, rw, judge)
            if len(nodes) > 1:
                for rw, payloads in _write_then_read(cluster, fs, storage.stall_s, tokens[1], nodes, True).items():
                    judge_throughput_together(payloads, name, fs, rw, judge)
        finally:
            cleaners = nodes[:1] if fs.scope == "shared" else nodes
            for token in tokens:
                cluster.run_each(FIO, cleaners, args=[*_fio_args(fs, storage.stall_s, token), "--rw", "clean"])


@pytest.mark.judges(*MOUNT_METRICS, absent="storage")
def test_storage_mounts(cluster, thresholds, judge):
    """Every declared path on every node (one step): there, a folder, writable, with the room the site declares,
    mounted as declared (type, NFS version, nconnect, transport, read-ahead, vendor modules) and as on the other
    nodes."""
    storage = _declared(thresholds)
    args = [arg for fs in storage.filesystems.values() for arg in ("--path", fs.path)]
    judge_mounts(_each(cluster, MOUNTS, cluster.nodes, [*args, "--stall-limit", storage.stall_s]), storage, judge)


@pytest.mark.judges(*METADATA_METRICS, absent="storage")
def test_storage_metadata(cluster, thresholds, judge):
    """Each declared filesystem, every node at once: creates, stats and deletes in a folder per node and in one
    shared folder (IO500 mdtest easy and hard), and a large folder listed whole."""
    storage = _declared(thresholds)
    for name, fs in storage.filesystems.items():
        sizes = fs.sizes
        args = ["--path", fs.path, "--files", sizes.meta_files, "--large", sizes.large_dir]
        args += ["--token", uuid.uuid4().hex[:12], "--stall-limit", storage.stall_s]
        result = cluster.run(FSMETA, nodes=cluster.nodes, args=args)  # one step: its ranks meet in the shared folder
        judge_metadata({r.node: FSMETA.read(r) for r in result.records}, name, fs, judge)


@pytest.mark.multinode
@pytest.mark.judges(*COHERENCY_METRICS, nodes=2, absent="storage")
def test_storage_coherency(cluster, thresholds, judge):
    """Each shared filesystem between two nodes in one step: a file one creates is seen whole on the other within
    the contract's window (a round trip on one clock), with the size and mtime it was given, and a lock one
    holds (flock, lockf) is refused to the other until released."""
    storage = _declared(thresholds, scope="shared")

    def measure(nodes: list[str]) -> list:
        out = []
        for name, fs in storage.filesystems.items():
            if fs.scope == "shared":
                args = ["--path", fs.path, "--token", uuid.uuid4().hex[:12], "--stall-limit", storage.stall_s]
                result = cluster.run(COHERENCY, nodes=nodes[:2], args=args)
                out.append((name, fs, [COHERENCY.read(record) for record in result.records]))
        return out

    for name, fs, payloads in cluster.across_nodes(measure, what="a cross-node coherency check"):
        judge_coherency(payloads, name, fs, judge)


@pytest.mark.judges(*CHECKPOINT_METRICS, absent="storage")
def test_checkpoint(cluster, thresholds, judge):
    """A checkpoint saved as a fine-tune saves one (safetensors shards, adapter and optimizer state, fsynced) on
    one node and restored by another (on one node, its page cache dropped), every byte checked and the weights
    loaded into a GPU's memory: save and restore GB/s against the contract, and the cold start's time."""
    storage = _declared(thresholds)
    nodes = cluster.nodes
    for name, fs in storage.filesystems.items():
        token = uuid.uuid4().hex[:12]
        args = ["--path", fs.path, "--token", token, "--stall-limit", storage.stall_s]
        saver = nodes[0]
        restorer = nodes[1] if len(nodes) > 1 and fs.scope == "shared" else saver
        gpus = {"gpus_per_task": 1} if cluster.gpus_on(restorer) else {}
        try:
            saved = CHECKPOINT.read(
                cluster.run(
                    CHECKPOINT, nodes=[saver], args=[*args, "--mode", "save", "--mib", fs.sizes.checkpoint_mib], **gpus
                ).one()
            )
            restored = CHECKPOINT.read(
                cluster.run(CHECKPOINT, nodes=[restorer], args=[*args, "--mode", "restore"], **gpus).one()
            )
        finally:
            cluster.run(CHECKPOINT, nodes=[saver], args=[*args, "--mode", "clean"])
        judge_checkpoint(saved, {restorer: restored}, name, fs, judge, saver)
