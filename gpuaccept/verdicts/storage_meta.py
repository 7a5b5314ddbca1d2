"""Storage semantics, judged: each declared filesystem's mounts, metadata rates, large directories, cross-node
visibility and locks, against what the site declared (``storage:``, ``thresholds/storage_site.py``).

``verdicts/storage.py`` judges the bytes and the throughput; this module what a job sees of the filesystem
beside them. The same rule holds: a node whose path cannot be measured (missing, read-only, full, a call
stalled past the stall limit) is named with the path, and every other node is still judged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any

from gpuaccept.contracts.fsmeta import CoherencyPayload, FsmetaPayload, MountsPayload, PathMount
from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.errors import MeasurementError
from gpuaccept.thresholds.schema import Limit
from gpuaccept.thresholds.storage_site import Filesystem, StorageSection
from gpuaccept.verdicts.storage import USABLE, contract_of, contract_source

__all__ = [
    "COHERENCY_METRICS",
    "METADATA_METRICS",
    "MOUNT_METRICS",
    "judge_coherency",
    "judge_metadata",
    "judge_mounts",
    "mount_view",
]

MOUNT_METRICS = ("storage_free_gib",)
METADATA_METRICS = ("storage_metadata_ops",)
COHERENCY_METRICS = ("storage_visibility_s",)
#: mount options that name this client or this mount instance, not the filesystem: left out of the comparison
#: between nodes (nfs(5): clientaddr, addr; the kernel's own mount id)
_PER_CLIENT = ("clientaddr=", "addr=", "mountaddr=", "mountport=")


def _usable_text(found: PathMount, need_gib: float) -> str:
    """``usable``, else what is wrong with the path on this node (the first thing a job would trip on)."""
    if found.stalled is not None:
        s = found.stalled
        return f"stalled: {s.operation} {s.path} did not return in {s.limit_s:g} s" + (
            f"; {s.stuck}" if s.stuck else ""
        )
    if found.error:
        return f"unreadable: {found.error}"
    if not found.exists:
        return "missing"
    if not found.is_dir:
        return "not a directory"
    if found.read_only_flag or found.writable is False:
        return f"read-only: {found.write_error or 'mounted ro'}"
    if found.free_bytes is not None and found.free_bytes < need_gib * 2**30:
        return f"full: {found.free_bytes / 2**30:.2f} GiB free, the run needs {need_gib:g}"
    return USABLE


def mount_view(found: PathMount) -> str:
    """What two nodes' mounts of one filesystem must agree on: the type and the filesystem's options."""
    if found.mount is None:
        return "no mount"
    options = sorted(o for o in found.mount.super_options if not o.startswith(_PER_CLIENT) and o not in ("rw", "ro"))
    return f"{found.mount.fs_type} {','.join(options)}"


def _declared_mount(fs: Filesystem, found: PathMount, modules: list[str] | None) -> list[tuple[str, Any, Any]]:
    """(key, observed, declared) for each key of the site's ``mount:`` (N-014 to N-018). The modules are left
    out when the node's list could not be read (``modules`` None): ``_unread_modules`` says so instead."""
    want = fs.mount
    nfs = found.nfs
    pairs: list[tuple[str, Any, Any]] = []
    if want.type is not None:
        pairs.append(("type", found.mount.fs_type if found.mount else None, want.type))
    if want.nfs_version is not None:
        pairs.append(("nfs_version", nfs.vers if nfs else None, want.nfs_version))
    if want.nconnect is not None:
        # a mount without the option has one connection: nfs(5), "nconnect" (default 1)
        pairs.append(("nconnect", (nfs.nconnect or 1) if nfs else None, want.nconnect))
    if want.proto is not None:
        pairs.append(("proto", nfs.proto if nfs else None, want.proto))
    if want.read_ahead_kb is not None:
        pairs.append(("read_ahead_kb", found.read_ahead_kb, want.read_ahead_kb))
    if modules is not None:
        for module in want.modules:
            pairs.append((f"module {module}", "loaded" if module in modules else "not loaded", "loaded"))
    return pairs


def _unread_modules(name: str, fs: Filesystem, node: str, judge: JudgeLike) -> None:
    """The modules the site declares for ``fs``, on a node whose ``/proc/modules`` could not be read: could not
    measure, naming it (a list not read is no module missing, and no module loaded)."""
    for module in fs.mount.modules:
        why = f"{node}: /proc/modules could not be read: whether {module} (declared for {fs.path}) is loaded is unknown"
        judge.unreadable("storage_mount", why, node=node, fspath=fs.path, key=f"module {module}", filesystem=name)


def judge_mounts(
    payloads: Mapping[str, MountsPayload | MeasurementError],
    storage: StorageSection,
    judge: JudgeLike,
    held: Collection[tuple[str, str]] = (),
) -> None:
    """Every declared path on every node: usable, with its room; its mount as declared; the same on every node.
    ``held``: the (node, path) pairs not looked at because the path stalled there earlier in the run (their
    "not run" is the test's, ``verdicts.storage.judge_not_run``)."""
    views: dict[str, dict[str, str]] = {}
    for node, payload in payloads.items():
        if isinstance(payload, MeasurementError):
            judge.unreadable("storage_free_gib", str(payload), node=node)
            continue
        found_by_path = {p.path: p for p in payload.paths}
        for name, fs in storage.filesystems.items():
            found = found_by_path.get(fs.path)
            if found is None and (node, fs.path) in held:
                continue
            if found is None:
                judge.unreadable("storage_free_gib", f"the mounts probe did not look at {fs.path}", node=node)
                continue
            state = _usable_text(found, fs.sizes.free_gib)
            judge.expect("storage_path_usable", state, USABLE, node=node, fspath=fs.path, filesystem=name)
            if found.free_bytes is not None:
                room = Limit(
                    min=fs.sizes.free_gib,
                    source=f"storage.filesystems.{name}.sizes.free_gib: the room the site declares this path keeps",
                )
                judge.check(
                    "storage_free_gib",
                    round(found.free_bytes / 2**30, 3),
                    node=node,
                    limit=room,
                    fspath=fs.path,
                    filesystem=name,
                )
            for key, observed, declared in _declared_mount(fs, found, payload.modules):
                judge.expect("storage_mount", observed, declared, node=node, fspath=fs.path, key=key, filesystem=name)
            if payload.modules is None:
                _unread_modules(name, fs, node, judge)
            if fs.scope == "shared" and state == USABLE:
                views.setdefault(name, {})[node] = mount_view(found)
    for name, seen in views.items():
        if len(seen) < 2:
            continue
        common, _ = Counter(seen.values()).most_common(1)[0]
        path = storage.filesystems[name].path
        for node, view in seen.items():
            judge.expect("storage_mounts_agree", view, common, node=node, fspath=path, filesystem=name)


def _stopped(payload: FsmetaPayload | CoherencyPayload) -> str | None:
    """What stopped a storage probe on this rank by its own filesystem (a stalled call, a failed one), or None."""
    if payload.stalled is not None:
        s = payload.stalled
        left = f"; {s.stuck}" if s.stuck else ""
        return f"stalled: {s.step}: {s.operation} {s.path} did not return in {s.limit_s:g} s{left}"
    if payload.error:
        return f"failed: {payload.error}"
    return None


def _waited(payload: FsmetaPayload | CoherencyPayload) -> str | None:
    """A wait for the other ranks that ran out while this rank's own calls returned: the others (stalled,
    failed, or on a filesystem this node does not see) stopped the shared work, which this rank cannot judge."""
    t = payload.timed_out
    if t is None:
        return None
    seen = t.last_seen or "never seen"
    return f"waited on the other ranks: {t.step}: {t.path} not there after {t.waited_s:.1f} s ({seen})"


def _ran_through(
    payload: FsmetaPayload | CoherencyPayload, node: str, metric: str, name: str, fs: Filesystem, judge: JudgeLike
) -> bool:
    """Record what stopped this rank: its own filesystem's fault as a failed check, a wait on the others as a
    figure it could not measure; True when it ran through."""
    stopped = _stopped(payload)
    if stopped is not None:
        judge.expect("storage_path_usable", stopped, USABLE, node=node, fspath=fs.path, filesystem=name)
        return False
    waited = _waited(payload)
    if waited is not None:
        judge.unreadable(metric, waited, node=node, fspath=fs.path)
        return False
    return True


def judge_metadata(
    payloads: Mapping[str, FsmetaPayload | MeasurementError], name: str, fs: Filesystem, judge: JudgeLike
) -> None:
    """Each node's create, stat and delete rates in a folder of its own (mdtest easy) and all nodes in one
    (mdtest hard), against the contract's ``metadata_ops`` where it gives one; the large folder listed whole."""
    figure = contract_of(fs).metadata_ops
    limit = (
        Limit(min=figure, source=contract_source(fs, f"{figure:g} metadata operations/s per node")) if figure else None
    )
    for node, payload in payloads.items():
        if isinstance(payload, MeasurementError):
            judge.unreadable("storage_metadata_ops", str(payload), node=node, fspath=fs.path)
            continue
        if not _ran_through(payload, node, "storage_metadata_ops", name, fs, judge):
            continue
        judge.expect("storage_path_usable", USABLE, USABLE, node=node, fspath=fs.path, filesystem=name)
        for shape in (s for s in (payload.easy, payload.hard) if s is not None):
            for phase in shape.phases:
                if phase.ops_per_s is None:
                    judge.unreadable(
                        "storage_metadata_ops",
                        f"{shape.shape} {phase.phase}: too fast to time",
                        node=node,
                        fspath=fs.path,
                    )
                    continue
                judge.check(
                    "storage_metadata_ops",
                    round(phase.ops_per_s, 1),
                    node=node,
                    limit=limit,
                    fspath=fs.path,
                    shape=shape.shape,
                    phase=phase.phase,
                    ops=phase.ops,
                    filesystem=name,
                )
        large = payload.large
        if large is not None:
            listed = (
                "complete"
                if large.listed == large.created == large.matched == large.entries
                else (
                    f"{large.listed} listed, {large.matched} distinct, of {large.created} created "
                    f"({large.entries} asked)"
                )
            )
            judge.expect(
                "storage_large_dir_listing",
                listed,
                "complete",
                node=node,
                fspath=large.directory,
                entries=large.entries,
                list_seconds=large.list_seconds,
                filesystem=name,
            )


def judge_coherency(payloads: list[CoherencyPayload], name: str, fs: Filesystem, judge: JudgeLike) -> None:
    """The two ranks' views: each round's round trip (a bound on each one-way visibility, on one clock) within
    the contract's window, the attributes the other node set, and both lock kinds honoured across the nodes."""
    window = contract_of(fs).coherency_s
    limit = (
        Limit(max=window, source=contract_source(fs, f"a change on one node seen on another within {window:g} s"))
        if window
        else None
    )
    for payload in payloads:
        node = payload.node
        if not _ran_through(payload, node, "storage_visibility_s", name, fs, judge):
            continue
        if not payload.cross_node and payload.role in ("initiator", "alone"):
            why = payload.reason or "both ranks ran on one node"
            judge.unreadable("storage_visibility_s", f"cross-node not measured: {why}", node=node, fspath=fs.path)
            continue
        for trip in payload.rounds:
            if trip.role == "initiator":
                value = trip.round_trip_s if trip.seen else (payload.timed_out.waited_s if payload.timed_out else None)
                if value is None:
                    judge.unreadable(
                        "storage_visibility_s", f"round {trip.round}: not timed", node=node, fspath=fs.path
                    )
                    continue
                judge.check(
                    "storage_visibility_s",
                    round(value, 4),
                    node=node,
                    limit=limit,
                    fspath=fs.path,
                    peer=payload.peer_node,
                    round=trip.round,
                    one_way_bound_s=trip.one_way_bound_s,
                    filesystem=name,
                )
            if trip.seen:
                agree = "as set" if trip.attributes_ok else f"size {trip.size_seen}, mtime_ns {trip.mtime_ns_seen}"
                judge.expect(
                    "storage_attributes_agree",
                    agree,
                    "as set",
                    node=node,
                    fspath=fs.path,
                    peer=payload.peer_node,
                    round=trip.round,
                    filesystem=name,
                )
        for lock in payload.locks:
            if lock.role != "contender":
                continue
            if lock.honoured:
                seen = "honoured"
            else:
                seen = lock.error or (
                    "granted while the other node held it"
                    if not lock.refused_while_held
                    else "not granted after release"
                )
            judge.expect(
                "storage_lock_honoured",
                seen,
                "honoured",
                node=node,
                fspath=fs.path,
                peer=payload.peer_node,
                lock=lock.kind,
                filesystem=name,
            )
