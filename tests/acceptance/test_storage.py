"""Shared filesystem: bytes written on one node are the bytes every other node reads, after rename too."""

from __future__ import annotations

import hashlib
import random
import uuid

import pytest

from gpuaccept.errors import MeasurementError
from gpuaccept.settings import reports_root

pytestmark = [pytest.mark.acceptance, pytest.mark.storage, pytest.mark.multinode]

SIZE = 4 << 20


def _read_everywhere(cluster, nodes, path):
    seen = {}
    for node, result in cluster.run_each("sharedfs", nodes, args=["--mode", "read", "--path", path]).items():
        if isinstance(result, MeasurementError):
            raise result
        seen[node] = result.one().data
    return seen


def _as_read(data: dict) -> str:
    return data["sha256"] if data["exists"] else "missing"


@pytest.mark.judges(nodes=2)
def test_shared_filesystem(cluster, settings, request, judge):
    """A file written on one node reads back byte-identical on every other node, and again on every node
    after a third node renamed it."""
    nodes = cluster.nodes
    if len(nodes) < 2:
        pytest.skip("single-node allocation: a shared filesystem needs a second node to read it")
    root = settings.sharedfs_path or reports_root(request.config) / "reports" / ".sharedfs"
    seed = random.randrange(2**31)
    first = root / f"gpuaccept-{uuid.uuid4().hex[:12]}.bin"
    renamed = first.with_suffix(".renamed")
    expected = hashlib.sha256(random.Random(seed).randbytes(SIZE)).hexdigest()
    writer, renamer = nodes[0], nodes[1]
    try:
        wrote = cluster.run(
            "sharedfs", nodes=[writer], args=["--mode", "write", "--path", first, "--size", SIZE, "--seed", seed]
        ).one().data  # fmt: skip
        judge.expect(
            "sharedfs_sha256", _as_read(wrote), expected, node=writer, step="read back by the writer", path=str(first)
        )
        for node, data in _read_everywhere(cluster, nodes[1:], first).items():
            judge.expect("sharedfs_sha256", _as_read(data), expected, node=node, step=f"read after {writer} wrote")
        cluster.run("sharedfs", nodes=[renamer], args=["--mode", "rename", "--path", first, "--to", renamed])
        for node, data in _read_everywhere(cluster, nodes, renamed).items():
            judge.expect(
                "sharedfs_sha256", _as_read(data), expected, node=node, step=f"read after {renamer} renamed it"
            )
    finally:
        for path in (first, renamed):
            path.unlink(missing_ok=True)
