"""A stalled path is known for the rest of the run (issue 57 item 2): ``gpuaccept/stalls.py`` keeps the first stall
of each (node, path), later work there is "not run" naming it, and a path that answers again is said to."""

from __future__ import annotations

import re

from gpuaccept.contracts.fsmeta import FsmetaPayload, StallRecord
from gpuaccept.contracts.storage import FioPayload, PathProblem
from gpuaccept.stalls import Stalls
from gpuaccept.verdicts.storage import judge_not_run, stall_in


class _Judge:
    def __init__(self) -> None:
        self.unmeasured: list[tuple[str, str, str]] = []

    def unreadable(self, metric: str, why: str, *, node: str, **subject: object) -> None:
        self.unmeasured.append((metric, node, why))


class _Fs:
    path = "/mnt/chkpt"


def test_the_first_stall_holds_that_path_on_that_node_only() -> None:
    stalls = Stalls()
    first = stalls.note("node2", "/mnt/chkpt", "test_storage_throughput", "fio write ...")
    later = stalls.note("node2", "/mnt/chkpt", "test_storage_metadata", "again")
    assert later is first  # the first counts
    assert re.fullmatch(r"/mnt/chkpt on node2 stalled at \d\d:\d\d:\d\d UTC in test_storage_throughput", str(first))
    free, held = stalls.split(["node1", "node2"], "/mnt/chkpt")
    assert free == ["node1"]
    assert held == {"node2": f"not run: {first} (FAILED there)"}
    assert stalls.split(["node1", "node2"], "/mnt/scratch") == (["node1", "node2"], {})


def test_a_path_that_answers_again_is_not_trusted_silently() -> None:
    stalls = Stalls()
    assert stalls.answered("node2", "/mnt/chkpt", "test_checkpoint") is None  # never stalled: nothing to say
    stalls.note("node2", "/mnt/chkpt", "test_storage_throughput", "x")
    said = stalls.answered("node2", "/mnt/chkpt", "test_checkpoint")
    assert said is not None and "answered again" in said and "in test_checkpoint" in said
    assert "stalled at" in said and "in test_storage_throughput: not trusted again in this run" in said


def test_each_held_node_is_could_not_measure_naming_the_stall() -> None:
    judge = _Judge()
    judge_not_run({"node2": "not run: /mnt/chkpt on node2 stalled at ..."}, "storage_metadata_ops", "fs", _Fs(), judge)  # type: ignore[arg-type]
    assert judge.unmeasured == [("storage_metadata_ops", "node2", "not run: /mnt/chkpt on node2 stalled at ...")]


def test_the_stall_is_read_from_every_storage_payload() -> None:
    stalled = FioPayload(
        path="/p", fio="fio-3.33", run=None, problem=PathProblem(kind="stalled", detail="node2: fio write")
    )
    assert stall_in(stalled) == "node2: fio write"
    assert (
        stall_in(FioPayload(path="/p", fio="fio-3.33", run=None, problem=PathProblem(kind="full", detail="x"))) is None
    )
    record = StallRecord(step="easy create", operation="open", path="/p/f.1", limit_s=5, waited_s=5.1, stuck=None)
    meta = FsmetaPayload.model_construct(stalled=record)
    assert stall_in(meta) == "easy create: open /p/f.1 did not return in 5 s"
