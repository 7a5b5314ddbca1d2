"""The probe side of the probe protocol: rank identity and the one framed result per rank.

A probe is a plain module (``python -m gpuaccept.probes.<name>``) that an operator can run by hand
on a node. It must not import pytest or anything from the plugin: only this module, the standard
library, ``gpuaccept.selftest_hooks`` and what the measurement itself needs (torch, pynvml).

Each rank prints its result once on stdout. The JSON text carries the rank's identity (node, rank,
world size, local rank, GPU index/UUID/PCI bus when it has one) and the measurements under ``"data"``.
It travels *framed* with its own length and checksum, so that the dispatcher can tell a result that
arrived whole from one that arrived changed (a byte lost at a cut, a trimmed space, an interleaved
write) instead of judging a changed figure:

* a result that fits one line is ``GPUACCEPT_RESULT <nbytes> <crc32> <json>``, ``nbytes`` and ``crc32``
  (8 lower-case hex digits, ``zlib.crc32``) taken over the JSON text's UTF-8 bytes. It stays readable
  for an operator running a probe by hand.
* a longer one travels as numbered parts ``GPUACCEPT_PART <rank> <i>/<n> <chunk>``, each line shorter
  than ``PART_BYTES``, whose chunks joined in order are the base64 of the framed text
  ``<nbytes> <crc32> <json>``. srun cuts longer lines and may put other ranks' output between them
  (see ``PART_BYTES``); base64 has no whitespace, so nothing at a part's edges can be significant
  (the parts used to carry the JSON text itself, and a space that ended a part was lost on the way).

The dispatcher (``gpuaccept.dispatch.result``) joins and verifies them and treats a missing,
duplicated, changed or malformed result as "could not measure".

A probe whose work comes in stages (the fine-tune: each GPU alone, then DDP, then FSDP) may also send a
stage's result as soon as that stage is done, so that a later stage's failure or the step's time limit
cannot take it away: the same framed lines behind ``GPUACCEPT_STAGE <stage> R`` (one line) or
``GPUACCEPT_STAGE <stage> P`` (a part), which the step's own result parse never reads
(``gpuaccept.dispatch.result.stage_records`` does).

Rank variables come from the launcher: Slurm's ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``
under srun, or ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` from the local launcher or torchrun. With
neither (a probe run by hand) the probe is rank 0 of 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import socket
import sys
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuaccept import selftest_hooks
from gpuaccept.probes._gpu import handle_for_rank, identity
from gpuaccept.probes._nvml import nvml
from gpuaccept.probes._where import ran_in

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "PART_SENTINEL",
    "RENDEZVOUS_PORTS",
    "RENDEZVOUS_SLICE",
    "SENTINEL",
    "STAGE_SENTINEL",
    "RankInfo",
    "emit",
    "frame",
    "gpu_identity",
    "node_name",
    "rank_info",
    "rendezvous_port",
    "result_lines",
]

#: One framed result on one line: ``GPUACCEPT_RESULT <nbytes> <crc32> <json>``.
SENTINEL = "GPUACCEPT_RESULT "
#: A result longer than srun passes whole travels as numbered parts of base64:
#: ``GPUACCEPT_PART <rank> <i>/<n> <chunk>``.
PART_SENTINEL = "GPUACCEPT_PART "
#: A stage's result, sent when the stage is done: ``GPUACCEPT_STAGE <stage> R|P <the result line's rest>``
STAGE_SENTINEL = "GPUACCEPT_STAGE "
#: srun (Slurm 22.05) cuts task output lines at about 1 KiB and may interleave other ranks' output
#: between the pieces (seen with a 4.7 KB line, 2026-11-22); every result line, whole or part, stays
#: below this many bytes.
PART_BYTES = 800
#: Base64 characters per part: room for the part's header (sentinel, a rank and ``i/n`` of up to
#: seven digits each) below ``PART_BYTES``, and a multiple of 4 so that every chunk is whole base64.
PART_CHUNK = PART_BYTES - 64


def node_name() -> str:
    """The node's name as Slurm knows it (``SLURMD_NODENAME``), else the short hostname.

    On a loopback dev cluster every slurmd runs on one host, so the hostname alone would not tell
    the nodes apart; Slurm's own name does, and it is what operators drain.
    """
    return os.environ.get("SLURMD_NODENAME") or os.environ.get("GPUACCEPT_NODE") or socket.gethostname().split(".")[0]


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits in the launch: global rank, world size, rank on the node."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def _env_int(*names: str, default: int) -> int:
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            return int(value)
    return default


def rank_info() -> RankInfo:
    """Rank identity from Slurm's step variables or the generic torch ones."""
    rank = _env_int("RANK", "SLURM_PROCID", default=0)
    world = _env_int("WORLD_SIZE", "SLURM_NTASKS", "SLURM_NPROCS", default=1)
    local = _env_int("LOCAL_RANK", "SLURM_LOCALID", default=0)
    local_world = _env_int("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", default=1)
    addr = os.environ.get("MASTER_ADDR") or _first_step_node() or "127.0.0.1"
    job, step = _env_int("SLURM_JOB_ID", default=0), _env_int("SLURM_STEP_ID", default=0)
    port = _env_int("MASTER_PORT", default=rendezvous_port(job, step))
    return RankInfo(rank, world, local, local_world, addr, port)


#: The rendezvous ports: above the dev cluster's Slurm daemons (10000-19999) and perftest's (18515 on),
#: below Linux's default ephemeral range (``net.ipv4.ip_local_port_range``, 32768-60999). Inside that range
#: a port can be the local end of any outgoing connection on the host, and a rank that dials its master
#: there before the master listens can be connected to itself (TCP simultaneous open): seen in CI on the
#: 2-core loopback cluster, 2026-11-26, job 16845's per-node NCCL step on a port in 32768-49999 died with
#: torch's "Failed to recv, got 0 bytes".
RENDEZVOUS_PORTS = range(20000, 32768)
#: A slice of ``RENDEZVOUS_PORTS`` (``FIRST-LAST``) for the steps started from one environment: the selftests
#: give each pytest-xdist worker its own, so the steps of two loopback clusters on one host never pick one port.
RENDEZVOUS_SLICE = "GPUACCEPT_RENDEZVOUS_PORTS"


def rendezvous_port(job: int, step: int, node: int = 0) -> int:
    """The step's rendezvous port, the same on every rank without talking to each other: distinct per job
    *and* step (two jobs' step 0 on one host must not meet: EADDRINUSE on 29500, 2026-11-22) and per node
    for node-local rendezvous (every loopback node is one host). The multipliers are primes, so
    neighbouring jobs, steps and nodes spread over the whole range rather than onto neighbouring ports."""
    ports = _rendezvous_slice()
    return ports.start + (job * 1009 + step * 131 + node) % len(ports)


def _rendezvous_slice() -> range:
    """``RENDEZVOUS_PORTS``, or the slice of it ``GPUACCEPT_RENDEZVOUS_PORTS`` names (every rank of a step gets
    the submitter's environment, so all of them read the same slice)."""
    text = os.environ.get(RENDEZVOUS_SLICE)
    if not text:
        return RENDEZVOUS_PORTS
    first, _, last = text.partition("-")
    ports = range(int(first), int(last) + 1) if first.isdigit() and last.isdigit() else range(0)
    if not ports or ports.start < RENDEZVOUS_PORTS.start or ports.stop > RENDEZVOUS_PORTS.stop:
        raise ValueError(
            f"{RENDEZVOUS_SLICE}={text}: not a slice of {RENDEZVOUS_PORTS.start}-{RENDEZVOUS_PORTS.stop - 1}"
        )
    return ports


def _first_step_node() -> str | None:
    """The rendezvous host under srun: the first node of the step.

    ``SLURM_STEP_NODELIST`` may be compressed (``node[1-2]``); the expansion below covers the
    forms Slurm prints for a single bracket group, which is what one step's list holds.
    """
    nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        return None
    first = nodelist.split(",")[0]
    if "[" in first:
        prefix, rest = first.split("[", 1)
        first = prefix + rest.split("-")[0].split(",")[0].rstrip("]")
    return os.environ.get("GPUACCEPT_MASTER_ADDR") or _resolve(first)


def _resolve(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


def gpu_identity(device_index: int | None = None) -> dict[str, Any] | None:
    """NVML identity of the GPU this rank uses (index, UUID, PCI bus id, name), or None without NVML.

    ``device_index`` is the CUDA ordinal within ``CUDA_VISIBLE_DEVICES``; the physical index and
    UUID come from NVML so a failure message can name the board an operator must pull. The one
    reading of a GPU's identity is ``_gpu.identity``; this finds the rank's handle for it.
    """
    lib = nvml()
    if lib is None:
        return None
    try:
        return identity(lib, handle_for_rank(lib, device_index or 0))
    except Exception:
        return None


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: turn them into strings so they reach the test as visible faults."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def emit(
    data: Mapping[str, Any],
    *,
    gpu: Mapping[str, Any] | None = None,
    probe: str | None = None,
    stage: str | None = None,
) -> None:
    """Print this rank's one result, framed (see the module docstring): identity plus ``data``, and
    ``test_hooks`` (name -> value) when a test hook of ``gpuaccept.selftest_hooks`` is set where the probe ran:
    the run is then not an acceptance. With ``stage`` (a word: ``solo``), the result of that stage alone,
    sent as it finishes (``STAGE_SENTINEL``); the rank still prints its one result at the end."""
    info = rank_info()
    line = {
        "probe": probe or os.path.basename(sys.argv[0]).removesuffix(".py"),
        "node": node_name(),
        "rank": info.rank,
        "world_size": info.world_size,
        "local_rank": info.local_rank,
        "gpu": gpu,
        "data": _clean(data),
        "ran_in": ran_in(),  # the image (its marker) and the Python that measured: the record's proof
    }
    hooks = selftest_hooks.active()
    if hooks:
        line["test_hooks"] = hooks
    # ASCII JSON (json's default): any text in the data travels as \u escapes, the same bytes whatever
    # locale the launcher and the dispatcher decode stdout with.
    text = json.dumps(line, sort_keys=True)
    lines = result_lines(text, info.rank)
    if stage is not None:
        lines = [_staged(line, stage) for line in lines]
    for out in lines:
        sys.stdout.write(out + "\n")
        sys.stdout.flush()  # a part at a time: a rank that dies mid-way leaves whole lines behind


def emit_read_under_root(
    collect: Callable[[str], BaseModel], *, probe: str, doc: str, root_help: str, argv: Sequence[str] | None
) -> None:
    """The ``main`` of a probe that reads files under one tree and emits the record it builds from them: ``/``
    on a node, a recorded tree (``--root``) when the selftests or an operator replay one by hand
    (``python -m gpuaccept.probes.<probe> --root DIR``)."""
    parser = argparse.ArgumentParser(prog=f"python -m gpuaccept.probes.{probe}", description=doc.split("\n")[0])
    parser.add_argument("--root", default="/", help=root_help)
    args = parser.parse_args(argv)
    emit(collect(args.root).model_dump(mode="json"), probe=probe)


def _staged(line: str, stage: str) -> str:
    """A result line as a stage's: behind ``GPUACCEPT_STAGE <stage> R`` or ``P``, without the words the
    step's own result parse looks for."""
    if line.startswith(SENTINEL):
        return f"{STAGE_SENTINEL}{stage} R {line[len(SENTINEL) :]}"
    return f"{STAGE_SENTINEL}{stage} P {line[len(PART_SENTINEL) :]}"


def frame(text: str) -> str:
    """``<nbytes> <crc32> <text>``: the text behind its UTF-8 length and CRC-32 (8 hex digits).

    The receiver recomputes both over what arrived; any byte lost, added or changed on the way
    (a cut line, a trimmed space, another rank's output written into it) shows as a mismatch
    instead of passing on as a different figure."""
    raw = text.encode("utf-8")
    return f"{len(raw)} {zlib.crc32(raw):08x} {text}"


def result_lines(text: str, rank: int) -> list[str]:
    """The stdout lines (without their newline) that carry one rank's JSON ``text``.

    One ``GPUACCEPT_RESULT`` line while it fits below ``PART_BYTES``, where an operator can still read
    it; else ``GPUACCEPT_PART`` lines of base64 of the framed text, numbered so the receiver can put
    them back in order between other ranks' lines and notice one missing or repeated."""
    framed = frame(text)
    single = SENTINEL + framed
    if len(single.encode("utf-8")) < PART_BYTES:
        return [single]
    encoded = base64.b64encode(framed.encode("utf-8")).decode("ascii")
    chunks = [encoded[i : i + PART_CHUNK] for i in range(0, len(encoded), PART_CHUNK)]
    return [f"{PART_SENTINEL}{rank} {number}/{len(chunks)} {chunk}" for number, chunk in enumerate(chunks, 1)]
