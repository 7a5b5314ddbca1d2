"""Storage, its one home: the shared filesystem's bytes, and each declared filesystem against its contract.

``tests/acceptance/test_storage.py`` measures (fio on each node alone, then on all at once; the metadata,
coherency and mount probes; the checkpoint) and hands every payload here. The limits are the site's: a
filesystem's contract (``storage:`` in the site file, ``thresholds/storage_site.py``), not the GPU's SKU, so
each check is made with the contract's figure and source (``Judge.check(limit=...)``). A node whose declared
path is missing, read-only, full or stalled is named with the path, and every other node is still judged.

Rules:
* each node alone: its write and read GB/s against the contract's per-node figures;
* all nodes at once: the aggregate is the bytes all nodes moved over the slowest node's time (MLPerf Storage's
  "throughput = the slowest rank"), against the contract's aggregate pro rata for the nodes measured (the
  SuperPOD table gives it per 32-node unit: 2 nodes are held to 2/32 of it);
* each node alone against the run's median (``straggler_pct``): a slow client is named as a slow GPU is
  (elbencho's "first vs last finished"), even above the contract.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from gpuaccept.contracts.fsmeta import CoherencyPayload, FsmetaPayload, PathMount
from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.contracts.storage import CheckpointPayload, FioPayload, FioRun
from gpuaccept.errors import MeasurementError
from gpuaccept.thresholds.schema import Limit
from gpuaccept.thresholds.storage_site import Contract, Filesystem, StorageSection

__all__ = [
    "CHECKPOINT_METRICS",
    "JUDGED_BYTES",
    "THROUGHPUT_METRICS",
    "USABLE",
    "SharedRead",
    "aggregate_limit",
    "contract_of",
    "contract_source",
    "described",
    "filesystems_absent",
    "judge_answered_again",
    "judge_checkpoint",
    "judge_not_run",
    "judge_path",
    "judge_shared_reads",
    "judge_speed",
    "judge_throughput_alone",
    "judge_throughput_together",
    "metric_for",
    "per_node_figure",
    "per_node_limit",
    "stall_in",
]

#: one read of the shared file: the node, which read it was, what the ``sharedfs`` probe read, and the
#: path when the read names it ("" for none)
SharedRead = tuple[str, str, Mapping[str, Any], str]

#: the expected value of ``storage_path_usable``: the path exists, is a folder, takes a file, has room
USABLE = "usable"

#: what the storage tests judge against a limit (their ``judges`` marks; the expectations are not listed)
THROUGHPUT_METRICS = (
    "storage_write_gbps",
    "storage_read_gbps",
    "storage_aggregate_write_gbps",
    "storage_aggregate_read_gbps",
    "storage_median_share_pct",
    "scratch_write_gbps",
    "scratch_read_gbps",
)
CHECKPOINT_METRICS = ("checkpoint_save_gbps", "checkpoint_restore_gbps")


#: the smallest checkpoint whose GB/s is held to the contract: below it a save's time is the filesystem's
#: latency (four fsyncs, a few ms each on a virtual disk), not its throughput (the small model's 1-93 MB; the
#: 7B's is 969 MB). At the SuperPOD preset's 2 GB/s, 256 MiB take 134 ms, of which a few ms of fsync are
#: within the run-to-run spread; the figure of a smaller one is shown beside the contract, not judged.
JUDGED_BYTES = 256 << 20


def judge_shared_reads(reads: Iterable[SharedRead], expected: str, judge: JudgeLike) -> None:
    """Each read's sha256 equals that of the bytes written (``expected``); a file a node cannot see is
    ``missing``."""
    for node, step, data, path in reads:
        where = {"path": path} if path else {}
        observed = data["sha256"] if data["exists"] else "missing"
        judge.expect("sharedfs_sha256", observed, expected, node=node, step=step, **where)


def filesystems_absent(storage: StorageSection, *, scope: str | None = None) -> str | None:
    """Why the storage tests do not apply: no filesystem declared (of ``scope``); None when one is."""
    if not storage.filesystems:
        return "no filesystem declared: storage.filesystems in a site file (--thresholds site.yaml) names them"
    if scope is not None and not any(fs.scope == scope for fs in storage.filesystems.values()):
        return f"no {scope} filesystem declared (storage.filesystems.*.scope: {scope} in a site file)"
    return None


def contract_of(fs: Filesystem) -> Contract:
    """The filesystem's contract figures (the loader resolves every preset's name: a name left is a bug)."""
    if not isinstance(fs.contract, Contract):
        raise TypeError(f"filesystem {fs.path}: contract {fs.contract!r} was not resolved to its figures")
    return fs.contract


def contract_source(fs: Filesystem, what: str) -> str:
    """A check's source: the preset or the site's own contract, the figure (``what``), and where it comes from."""
    named = f"preset {fs.preset}" if fs.preset else "site contract"
    return f"{named}: {what}; {contract_of(fs).source}"


def metric_for(fs: Filesystem, rw: str) -> str:
    """A node-local scratch disk (BOOT04) has metrics of its own; a shared filesystem's are ``storage_*``."""
    return f"{'scratch' if fs.scope == 'local' else 'storage'}_{rw}_gbps"


def judge_path(payload: FioPayload | CheckpointPayload, name: str, judge: JudgeLike, node: str) -> bool:
    """The declared path took the run on ``node`` (``usable``), else its problem named with the path; True when
    its figures can be judged."""
    problem = payload.problem
    observed = USABLE if problem is None else f"{problem.kind}: {problem.detail}"
    judge.expect("storage_path_usable", observed, USABLE, node=node, fspath=payload.path, filesystem=name)
    return problem is None


def stall_in(payload: FioPayload | CheckpointPayload | FsmetaPayload | CoherencyPayload | PathMount) -> str | None:
    """What stalled on the node's declared path in ``payload`` (the probe's words), None when nothing did: what
    the test notes so that nothing later is sent to that path on that node (``gpuaccept/stalls.py``)."""
    if isinstance(payload, FioPayload | CheckpointPayload):
        problem = payload.problem
        return problem.detail if problem is not None and problem.kind == "stalled" else None
    s = payload.stalled
    return None if s is None else f"{s.step}: {s.operation} {s.path} did not return in {s.limit_s:g} s"


def judge_not_run(held: Mapping[str, str], metric: str, name: str, fs: Filesystem, judge: JudgeLike) -> None:
    """The nodes whose path stalled earlier in the run, not sent there again: ``metric`` could not be measured
    on each ("not run: <path> on <node> stalled at <time> in <test>"), never a pass; the stall itself was
    FAILED where it happened."""
    for node, why in held.items():
        judge.unreadable(metric, why, node=node, fspath=fs.path, filesystem=name)


def judge_answered_again(said: str, node: str, name: str, fs: Filesystem, judge: JudgeLike) -> None:
    """A path that answered after it had stalled on ``node``: its figures now are not trusted, and the run says
    so (an unmeasured ``storage_path_usable``), never silently a healthy path again."""
    judge.unreadable("storage_path_usable", said, node=node, fspath=fs.path, filesystem=name)


def per_node_figure(fs: Filesystem, rw: str) -> float:
    """The contract's per-node GB/s for ``rw`` (read or write): every contract gives both."""
    figure: float = getattr(contract_of(fs), f"{rw}_gbps")
    return figure


def per_node_limit(fs: Filesystem, rw: str) -> Limit:
    """The contract's per-node figure for ``rw`` (read or write) as the limit of one node's check."""
    figure = per_node_figure(fs, rw)
    return Limit(min=figure, source=contract_source(fs, f"one node {rw}s at {figure:g} GB/s or more"))


class Moved(TypedDict):
    """What ``judge_speed`` reads of a save, restore or cold start (each payload type that has the two keys)."""

    gbps: float | None
    bytes: int


def judge_speed(
    judge: JudgeLike,
    metric: str,
    moved: Moved,
    declared: tuple[str, Filesystem] | None,
    rw: str,
    *,
    node: str,
    **extra: Any,
) -> None:
    """A save's, restore's or cold start's GB/s (``moved``'s ``gbps`` over its ``bytes``): held to the declared
    filesystem's per-node ``rw`` figure from ``JUDGED_BYTES`` on, else shown beside it, saying why it is not judged."""
    extra["bytes"] = nbytes = moved["bytes"]
    if declared is not None:
        extra["filesystem"] = declared[0]
    if declared is not None and nbytes >= JUDGED_BYTES:
        judge.check(metric, moved["gbps"], node=node, limit=per_node_limit(declared[1], rw), **extra)
        return
    why = (
        "no filesystem of role models or checkpoints declared (storage.filesystems.*.role): a folder's speed"
        if declared is None
        else f"{nbytes:,} bytes, below {JUDGED_BYTES:,}: the filesystem's latency, not its throughput"
    )
    judge.info(metric, moved["gbps"], node=node, not_judged=why, **extra)


def described(mismatched: Mapping[str, str]) -> str:
    """``identical``, else each file that differs and how."""
    return "identical" if not mismatched else "; ".join(f"{n}: {why}" for n, why in sorted(mismatched.items()))


def aggregate_limit(fs: Filesystem, rw: str, nodes: int) -> Limit | None:
    """The contract's aggregate for ``nodes`` nodes: its per-unit figure pro rata, never above what the nodes
    would move at the per-node figure each; None where the contract gives no aggregate."""
    contract = contract_of(fs)
    unit = contract.aggregate
    figure = getattr(unit, f"{rw}_gbps") if unit is not None else None
    if unit is None or figure is None:
        return None
    share = figure * nodes / unit.nodes
    floor = min(share, nodes * getattr(contract, f"{rw}_gbps"))
    what = f"{figure:g} GB/s per {unit.nodes} nodes, {nodes} of them: {floor:.4g} GB/s"
    return Limit(min=round(floor, 4), source=contract_source(fs, what))


def _run_extra(run: FioRun, name: str) -> dict[str, Any]:
    """What the check carries of the run: the filesystem, fio's version and command, how the cache was kept out."""
    return {
        "filesystem": name,
        "fio": run.fio,
        "bytes": run.bytes,
        "runtime_s": run.runtime_s,
        "jobs": run.jobs,
        "direct": run.direct,
        "fsync": run.fsync,
        "cache": f"{run.cache}, {run.written_by}" if run.rw == "read" else run.cache,
        "fio_command": " ".join(run.command),
    }


#: what a phase hands over per node: its payload, or the error its step ended with on that node
Measured = Mapping[str, "FioPayload | MeasurementError"]


def _usable(payloads: Measured, name: str, fs: Filesystem, rw: str, judge: JudgeLike) -> dict[str, FioRun]:
    """The nodes whose run can be judged; the others named: a broken step, fio missing, or the path's problem."""
    runs: dict[str, FioRun] = {}
    for node, payload in payloads.items():
        if isinstance(payload, MeasurementError):
            judge.unreadable(metric_for(fs, rw), str(payload), node=node, fspath=fs.path)
            continue
        if payload.fio is None:
            judge.tool_missing("storage throughput", "fio", node=node, detail=f"{payload.path}: fio is not installed")
        if judge_path(payload, name, judge, node) and payload.run is not None:
            runs[node] = payload.run
    return runs


def judge_throughput_alone(payloads: Measured, name: str, fs: Filesystem, rw: str, judge: JudgeLike) -> None:
    """Each node measured alone: its GB/s against the contract's per-node figure, and against the run's median."""
    runs = _usable(payloads, name, fs, rw, judge)
    straggler_pct = contract_of(fs).straggler_pct or judge.setting("straggler_pct")
    limit = per_node_limit(fs, rw)
    metric = metric_for(fs, rw)
    for node, run in runs.items():
        judge.check(metric, run.gbps, node=node, limit=limit, fspath=fs.path, phase="alone", **_run_extra(run, name))
    if len(runs) < 2:
        return
    median = statistics.median(run.gbps for run in runs.values())
    whence = contract_source(fs, "its straggler_pct") if contract_of(fs).straggler_pct else "thresholds.yaml settings"
    source = (
        f"straggler_pct {straggler_pct:g} ({whence}): a node this far below the median of the nodes measured alone "
        "is a slow client, as a GPU below its node's median is a slow GPU (elbencho's first vs last finished thread)"
    )
    share_limit = Limit(min=100 - straggler_pct, source=source)
    for node, run in runs.items():
        share = round(100 * run.gbps / median, 2) if median > 0 else 0.0
        judge.check(
            "storage_median_share_pct",
            share,
            node=node,
            limit=share_limit,
            fspath=fs.path,
            rw=rw,
            gbps=run.gbps,
            median_gbps=round(median, 4),
            filesystem=name,
        )


def judge_throughput_together(payloads: Measured, name: str, fs: Filesystem, rw: str, judge: JudgeLike) -> None:
    """All nodes at once: each node's own figure shown, and the aggregate (bytes of all over the slowest node's
    time) against the contract's aggregate for this many nodes, recorded on the first node."""
    runs = _usable(payloads, name, fs, rw, judge)
    for node, run in runs.items():
        judge.info(f"storage_{rw}_gbps_together", run.gbps, node=node, fspath=fs.path, **_run_extra(run, name))
    if not runs or len(runs) < len(payloads):
        return  # a node that could not take part leaves no aggregate to judge: its own check names it
    slowest = max(run.runtime_s for run in runs.values())
    total = sum(run.bytes for run in runs.values())
    aggregate = round(total / slowest / 1e9, 4) if slowest > 0 else 0.0
    first = next(iter(runs))
    judge.check(
        f"storage_aggregate_{rw}_gbps",
        aggregate,
        node=first,
        limit=aggregate_limit(fs, rw, len(runs)),
        fspath=fs.path,
        nodes=sorted(runs),
        slowest_s=slowest,
        bytes=total,
        filesystem=name,
    )


def judge_checkpoint(
    saved: CheckpointPayload,
    restored: Mapping[str, CheckpointPayload],
    name: str,
    fs: Filesystem,
    judge: JudgeLike,
    saver: str,
) -> None:
    """The save's GB/s against the contract's write figure, each restore's against its read figure (the slowest
    rank's is the checkpoint's), each from ``JUDGED_BYTES`` on as the fine-tune's own are (``judge_speed``: a
    site's smaller checkpoint is shown, saying why), and every byte each restorer read against what the saver
    wrote."""
    declared = (name, fs)
    if judge_path(saved, name, judge, saver):
        moved: Moved = {"gbps": saved.gbps, "bytes": saved.bytes}
        where = {"fspath": saved.path, "seconds": saved.seconds, "files": len(saved.files)}
        judge_speed(judge, "checkpoint_save_gbps", moved, declared, "write", node=saver, **where)
    expected = {f.name: f.sha256 for f in saved.files}
    for node, payload in restored.items():
        if not judge_path(payload, name, judge, node):
            continue
        moved = {"gbps": payload.gbps, "bytes": payload.bytes}
        where = {"fspath": payload.path, "seconds": payload.seconds, "cache": payload.cache}
        judge_speed(judge, "checkpoint_restore_gbps", moved, declared, "read", node=node, **where)
        differs = dict(payload.mismatched)
        seen = {f.name: f.sha256 for f in payload.files}
        differs.update({n: "missing" for n in expected if n not in seen and n not in differs})
        differs.update(
            {n: "changed" for n, digest in seen.items() if expected.get(n, digest) != digest and n not in differs}
        )
        judge.expect(
            "checkpoint_bytes",
            described(differs),
            "identical",
            node=node,
            fspath=payload.path,
            files=len(expected),
            filesystem=name,
        )
        if payload.load_s is not None:
            judge.info(
                "checkpoint_cold_start_s",
                payload.load_s,
                node=node,
                fspath=payload.path,
                device=payload.device,
                filesystem=name,
            )
