"""Shared filesystem: bytes written on one node are the bytes every other node reads, after rename too."""

from __future__ import annotations

import hashlib
import random
import uuid

import pytest

from gpuaccept.errors import MeasurementError
from gpuaccept.probes.specs import SHAREDFS
from gpuaccept.settings import reports_root
from gpuaccept.verdicts.storage import judge_shared_reads

pytestmark = [pytest.mark.acceptance, pytest.mark.storage, pytest.mark.multinode]

SIZE = 4 << 20


def _read_everywhere(cluster, nodes, path):
    seen = {}
    for node, result in cluster.run_each(SHAREDFS, nodes, args=["--mode", "read", "--path", path]).items():
        if isinstance(result, MeasurementError):
            raise result  # one lost during the step: across_nodes measures the survivors again
        seen[node] = result.one().data
    return seen


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
