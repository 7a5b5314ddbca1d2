"""The shared filesystem, its one home: every read of a file one node wrote (and a third renamed) must give
the bytes written. ``tests/acceptance/test_storage.py`` writes, renames and reads on the nodes and hands
every read here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuaccept.contracts.judge import JudgeLike

__all__ = ["SharedRead", "judge_shared_reads"]

#: one read of the shared file: the node, which read it was, what the ``sharedfs`` probe read, and the
#: path when the read names it ("" for none)
SharedRead = tuple[str, str, Mapping[str, Any], str]


def judge_shared_reads(reads: Iterable[SharedRead], expected: str, judge: JudgeLike) -> None:
    """Each read's sha256 equals that of the bytes written (``expected``); a file a node cannot see is
    ``missing``."""
    for node, step, data, path in reads:
        where = {"path": path} if path else {}
        observed = data["sha256"] if data["exists"] else "missing"
        judge.expect("sharedfs_sha256", observed, expected, node=node, step=step, **where)
