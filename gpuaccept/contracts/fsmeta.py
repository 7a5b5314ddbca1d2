"""What the storage probes beyond the shared-file read emit: metadata rates (``probes/fsmeta.py``), cross-node
visibility and locking (``probes/coherency.py``) and the declared paths' mounts (``probes/mounts.py``).

Pydantic models, frozen and strict about unknown fields: a probe and its judges (``verdicts/storage.py``)
agree on one shape, and a field a probe renamed is a ``PayloadError`` naming the field where the result
arrives, never a silent None in a judge. Figures are raw (seconds, counts, bytes); every verdict, the
aggregate over ranks included, is the judges'. A reading that could not be taken is None and says why in
``error`` or ``stalled``, never a default that reads as a measurement.

Every filesystem call of these probes runs under a stall limit (``probes/_stall.py``): NVIDIA's 2026 cloud
requirements count an I/O request stalled beyond 60 s as unavailability, and a probe stuck on a hung mount
would otherwise hang its step until the step's own limit, saying nothing of what hung. A stalled call is
``StallRecord``: what the probe was doing, the call, the path.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "CoherencyPayload",
    "FsmetaPayload",
    "LargeDir",
    "LockTrial",
    "MdtestPhase",
    "MdtestShape",
    "MountEntry",
    "MountsPayload",
    "NfsOptions",
    "PathMount",
    "StallRecord",
    "VisibilityRound",
    "WaitTimeout",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StallRecord(_Frozen):
    """One filesystem call that did not return within the stall limit; the probe reported it and left."""

    step: str  # what the probe was doing ("easy create", "round 3: rank 1 waits for a.3")
    operation: str  # the call ("open", "stat", "scandir", "flock")
    path: str
    limit_s: float
    waited_s: float  # how long it had been running when the probe gave up on it
    #: what a kill could not end (a thread or process in state D, named with its pid), None when nothing
    stuck: str | None


class WaitTimeout(_Frozen):
    """A wait for the other rank (a file it should create, a barrier) that ran out while every filesystem call
    returned: the other rank is late, gone, or its file never became visible here."""

    step: str
    path: str
    limit_s: float
    waited_s: float
    last_seen: str | None  # what the last look found ("missing", "size 0 of 64", "mtime differs")


# ---------------------------------------------------------------------------------------------- fsmeta


class MdtestPhase(_Frozen):
    """One timed phase of one rank: ``ops`` calls done in ``seconds`` of this rank's wall time."""

    phase: Literal["create", "stat", "delete"]
    ops: int
    seconds: float
    ops_per_s: float | None  # None when seconds is 0 (a clock too coarse to time the phase)


class MdtestShape(_Frozen):
    """IO500's mdtest shapes: ``easy``, each rank in a directory of its own; ``hard``, every rank of the step in
    one shared directory (the files named by rank). The phases done, in order; one missing stopped the shape."""

    shape: Literal["easy", "hard"]
    directory: str
    files: int  # asked per rank
    phases: list[MdtestPhase]


class LargeDir(_Frozen):
    """One directory of ``entries`` files, listed whole with ``os.scandir``: a listing that returns fewer
    (``listed`` below ``created``) or repeats names (``matched`` below ``listed``) truncates what a job sees."""

    directory: str
    entries: int  # asked
    created: int
    create_seconds: float
    listed: int | None  # entries the listing returned; None when the listing did not finish
    matched: int | None  # distinct names of those created among them
    list_seconds: float | None


class FsmetaPayload(_Frozen):
    """One rank's metadata figures in ``path``. ``large`` only on each node's first rank (``--large 0``: none)."""

    path: str
    token: str
    files: int
    easy: MdtestShape | None
    hard: MdtestShape | None
    large: LargeDir | None
    cleaned: bool  # every file and directory this rank created is gone (the shared ones by the last rank out)
    stall_limit_s: float
    stalled: StallRecord | None
    timed_out: WaitTimeout | None  # a barrier the other ranks did not reach in time
    error: str | None  # a call that failed ("hard create: open /x/f.3.17: [Errno 28] No space left ...")


# ---------------------------------------------------------------------------------------------- coherency


class VisibilityRound(_Frozen):
    """One ping-pong round as one rank saw it. Rank 0 ("initiator") creates ``a.<n>`` and waits for ``b.<n>``;
    rank 1 ("responder") waits for ``a.<n>`` and then creates ``b.<n>``.

    ``round_trip_s`` (initiator only) runs on one clock from before ``a.<n>`` was created to ``b.<n>`` seen whole
    (size, content and mtime as the other node set them): both one-way visibilities fit in it, so each is at most
    the round trip and their mean at most ``one_way_bound_s`` (half of it), without trusting either node's clock.
    ``clock_one_way_s`` is the other's wall time written in the file against this node's wall clock at the
    moment it saw the file whole: informative only, it carries the clocks' offset."""

    round: int
    role: Literal["initiator", "responder"]
    seen: bool  # the other's file was seen whole before the wait ran out
    content_s: float | None  # from the start of this rank's wait to the first look with the right content
    whole_s: float | None  # ... to the first look with content, size and mtime all right
    attributes_ok: bool | None  # size and mtime as the other node set them (None: the file was never seen)
    size_seen: int | None
    mtime_ns_seen: int | None
    looks: int
    clock_one_way_s: float | None
    round_trip_s: float | None
    one_way_bound_s: float | None


class LockTrial(_Frozen):
    """One lock kind across the two nodes. Rank 0 holds an exclusive lock; rank 1's non-blocking try must be
    refused while it is held and granted once rank 0 released it. ``flock`` is BSD flock(2); ``lockf`` is POSIX
    fcntl(2) record locking, which NFS carries to the server (NLM for v3, the protocol's own locks for v4): a
    mount with ``local_lock=all`` or ``nolock`` keeps both on the node, and two nodes then hold one lock."""

    kind: Literal["flock", "lockf"]
    role: Literal["holder", "contender"]
    held: bool | None  # holder: it got the lock
    refused_while_held: bool | None  # contender
    granted_after_release: bool | None  # contender
    grant_s: float | None  # contender: from the release seen to the lock granted
    honoured: bool | None  # contender: refused while held and granted after
    error: str | None  # a lock call that failed other than by conflict (ENOLCK: no lock service)


class CoherencyPayload(_Frozen):
    """One rank of the pair's view. ``cross_node`` is False (and nothing below measured) with one rank, or when
    both ranks found themselves on one node: the judge then says cross-node was not possible, never "passed"."""

    path: str
    token: str
    role: Literal["initiator", "responder", "alone", "idle"]
    node: str
    peer_node: str | None
    cross_node: bool
    rounds: list[VisibilityRound]
    locks: list[LockTrial]
    stall_limit_s: float
    reason: str | None  # why nothing cross-node was measured
    stalled: StallRecord | None
    timed_out: WaitTimeout | None
    error: str | None
    cleaned: bool | None  # initiator: the shared directory removed


# ---------------------------------------------------------------------------------------------- mounts


class MountEntry(_Frozen):
    """One line of ``/proc/self/mountinfo`` (proc(5)), the mount a path lives on."""

    mount_id: int
    parent_id: int
    major_minor: str  # "0:53": also the name of the mount's backing device in /sys/class/bdi
    root: str
    mount_point: str
    fs_type: str
    source: str
    mount_options: list[str]  # per-mount ("rw", "nosuid", "relatime")
    super_options: list[str]  # the filesystem's ("vers=4.1", "nconnect=16", "proto=tcp")


class NfsOptions(_Frozen):
    """What an NFS mount's options say about its performance and semantics (nfs(5)); None: not in the options."""

    vers: str | None
    nconnect: int | None  # absent: one connection
    proto: str | None  # tcp, rdma
    rsize: int | None
    wsize: int | None
    hard: bool | None  # "hard" (retry forever) or "soft" (fail after retrans)
    local_lock: str | None  # none, flock, posix, all: which locks never leave the node
    actimeo: dict[str, int]  # ac* attribute-cache times asked for (acregmin, acdirmax, actimeo ...)


class PathMount(_Frozen):
    """One declared path: there, a directory, on the mount it should be, writable, with room."""

    path: str
    resolved: str | None  # symlinks followed
    exists: bool | None
    is_dir: bool | None
    mount: MountEntry | None
    is_mount_point: bool | None
    read_only_flag: bool | None  # "ro" in the mount's or the filesystem's options
    write_checked: bool  # False with --no-write, or when the path is not a directory
    writable: bool | None  # a 4 KiB file created, fsynced and removed
    write_error: str | None
    total_bytes: int | None
    free_bytes: int | None  # available to an unprivileged user (f_bavail)
    total_inodes: int | None
    free_inodes: int | None
    nfs: NfsOptions | None
    read_ahead_kb: int | None  # /sys/class/bdi/<major:minor>/read_ahead_kb
    stalled: StallRecord | None
    error: str | None


class MountsPayload(_Frozen):
    """Every declared path on this node, and the kernel modules loaded (vendor clients: lustre, mmfs26, wekafs)."""

    paths: list[PathMount]
    modules: list[str] | None  # None: /proc/modules unreadable
    stall_limit_s: float
    mountinfo_error: str | None
