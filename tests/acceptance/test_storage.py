"""Shared filesystem: bytes written on one node are the bytes every other node reads, after rename too."""

from __future__ import annotations

import hashlib
import random
import uuid

import pytest

from gpuaccept.errors import MeasurementError

pytestmark = [pytest.mark.acceptance, pytest.mark.storage, pytest.mark.multinode]

SIZE = 4 << 20


def _read_everywhere(cluster, nodes, path):
    seen = {}
    for node, result in cluster.run_each("sharedfs", nodes, args=["--mode", "read", "--path", path]).items():
        if isinstance(result, MeasurementError):
            raise result
        seen[node] = result.one().data
    return seen


def test_shared_filesystem(cluster, settings, request):
    nodes = cluster.nodes
    if len(nodes) < 2:
        pytest.skip("single-node allocation: a shared filesystem needs a second node to read it")
    root = settings.sharedfs_path or request.config.rootpath / "reports" / ".sharedfs"
    seed = random.randrange(2**31)
    first = root / f"gpuaccept-{uuid.uuid4().hex[:12]}.bin"
    renamed = first.with_suffix(".renamed")
    expected = hashlib.sha256(random.Random(seed).randbytes(SIZE)).hexdigest()
    writer, renamer = nodes[0], nodes[1]
    try:
        wrote = (
            cluster.run(
                "sharedfs", nodes=[writer], args=["--mode", "write", "--path", first, "--size", SIZE, "--seed", seed]
            )
            .one()
            .data
        )
        assert wrote["sha256"] == expected, f"{writer}: wrote {wrote['sha256']}, expected {expected}"
        bad = {n: d for n, d in _read_everywhere(cluster, nodes[1:], first).items() if d["sha256"] != expected}
        assert not bad, f"file written on {writer} at {first} reads differently on: " + ", ".join(
            f"{n} ({'missing' if not d['exists'] else d['sha256'][:12]})" for n, d in bad.items()
        )
        cluster.run("sharedfs", nodes=[renamer], args=["--mode", "rename", "--path", first, "--to", renamed])
        bad = {n: d for n, d in _read_everywhere(cluster, nodes, renamed).items() if d["sha256"] != expected}
        assert not bad, f"after {renamer} renamed it to {renamed}, it reads differently on: " + ", ".join(
            f"{n} ({'missing' if not d['exists'] else d['sha256'][:12]})" for n, d in bad.items()
        )
    finally:
        for path in (first, renamed):
            path.unlink(missing_ok=True)
