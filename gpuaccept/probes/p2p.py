"""GPU-to-GPU copy bandwidth for every ordered pair of GPUs on the node (GB/s, one direction).

One process drives all GPUs of the node (simplest way to reach every pair without a rendezvous). For
each pair src->dst: ``dst.copy_(src)`` of ``--p2p-size`` bytes (default 1 GiB), which torch runs as a
peer-to-peer copy on the source GPU's stream when peer access is possible (NVLink on HGX boards); a
pair without peer access is copied through the host and shows as very slow, which is the point.
Pairs run in rounds of disjoint pairs (``pair_rounds``: no GPU in two pairs at once, so 2(n-1)
rounds instead of n(n-1) pairs one by one). Warm-up, then ``--p2p-repeats`` batches timed with CUDA
events on the source GPU; median reported with the batches' min, max and spread.

The copies are also the NVLink load test: each GPU's NVLink CRC, replay and recovery counters are read
before and after, and the differences go out with the elapsed time. A count since the driver loaded
says little without a time base (a healthy link collects CRC errors that replays correct); errors
*while the links carry traffic* are what DCGM's health check judges, and so does the test.

The result carries every pair and the node's matrix (rows = source, columns = destination) so the
report can draw it. Before touching CUDA the probe lists processes already on each GPU; if any GPU is
busy nothing is measured (``--measure-busy`` overrides) and the busy GPUs are named. The measurement
runs inside ``python -m gpuaccept.probes.gpubench`` (``--parts p2p`` to run it alone).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from gpuaccept.contracts.bench import NvlinkDelta, P2pMeasured, P2pPair
from gpuaccept.contracts.payloads import GpuIdentity
from gpuaccept.probes._bench import Lane, Preflight, spread, time_lanes
from gpuaccept.probes._gpu import active_nvlinks, nvlink_error_counters

__all__ = ["measure", "measure_with_errors", "nvlink_deltas", "pair_rounds"]


def pair_rounds(count: int) -> list[list[tuple[int, int]]]:
    """Every ordered GPU pair exactly once, in rounds in which no GPU appears twice.

    The round-robin ("circle") schedule pairs ``count`` GPUs into ``count - 1`` rounds of disjoint pairs
    (one GPU sits out each round when ``count`` is odd); each round is then run once in each direction.
    A GPU copies to one peer at a time and never sends and receives at once (both directions at once
    drop each to ~370 of ~395 GB/s on H200), so each pair's figure is its own, while an 8-GPU node
    measures 4 pairs at a time through the NVSwitches: 14 rounds instead of 56 pairs one by one.
    """
    if count < 2:
        return []
    slots: list[int | None] = list(range(count)) + ([None] if count % 2 else [])
    size = len(slots)
    rounds: list[list[tuple[int, int]]] = []
    for _ in range(size - 1):
        pairs = [(slots[i], slots[size - 1 - i]) for i in range(size // 2)]
        forward = [(a, b) for a, b in pairs if a is not None and b is not None]
        rounds.append(forward)
        rounds.append([(b, a) for a, b in forward])
        slots = [slots[0], slots[-1], *slots[1:-1]]
    return rounds


def _batch(size: int) -> int:
    """Copies per timed batch: 5 GiB, about 14 ms at NVLink 4 speed."""
    return max(1, round(5 * (1 << 30) / size))


def _copier(dst: Any, src: Any) -> Callable[[], Any]:
    return lambda: dst.copy_(src, non_blocking=True)


def measure(
    torch: Any,
    gpus: list[GpuIdentity],
    size: int,
    repeats: int,
    warmup_s: float,
    later_warmup_s: float = 0.05,
    serial: bool = False,
    timer: Any = None,
) -> tuple[list[P2pPair], list[list[float | None]]]:
    """Every ordered pair's copy GB/s, round by round (``pair_rounds``; ``serial``: one pair at a time);
    each pair's batches on its source GPU. The first round warms up for ``warmup_s``, the others for
    ``later_warmup_s`` (the links and clocks are awake by then)."""
    count = len(gpus)
    devices = [torch.device("cuda", i) for i in range(count)]
    src = [torch.empty(size, dtype=torch.uint8, device=d).random_(0, 255) for d in devices]
    dst = [torch.empty(size, dtype=torch.uint8, device=d) for d in devices]
    batch = _batch(size)
    pairs: list[P2pPair] = []
    matrix: list[list[float | None]] = [[None] * count for _ in range(count)]
    rounds = pair_rounds(count)
    if serial:
        rounds = [[pair] for pairs_of_round in rounds for pair in pairs_of_round]
    for index, round_pairs in enumerate(rounds):
        lanes = [Lane(devices[i], _copier(dst[j], src[i]), [devices[i], devices[j]]) for i, j in round_pairs]
        times = time_lanes(
            torch,
            lanes,
            batch=batch,
            repeats=repeats,
            warmup_s=warmup_s if index == 0 else later_warmup_s,
            timer=timer,
        )
        for (i, j), lane_times in zip(round_pairs, times, strict=True):
            figure = spread([size / t / 1e9 for t in lane_times], 1)
            matrix[i][j] = figure["median"]
            pairs.append(
                {
                    "src": gpus[i]["index"],
                    "dst": gpus[j]["index"],
                    "src_bus": gpus[i]["pci_bus_id"],
                    "dst_bus": gpus[j]["pci_bus_id"],
                    "gbps": figure["median"],
                    "gbps_min": figure["min"],
                    "gbps_max": figure["max"],
                    "spread_pct": figure["spread_pct"],
                    "round": index,
                    "peer_access": bool(torch.cuda.can_device_access_peer(i, j)),
                }
            )
    src.clear()
    dst.clear()
    torch.cuda.empty_cache()
    return pairs, matrix


def measure_with_errors(
    torch: Any, pre: Preflight, size: int, repeats: int, warmup_s: float, serial: bool = False, timer: Any = None
) -> P2pMeasured:
    """The pairs' copies with each GPU's NVLink error counters read before and after (the load test); on a node
    of one GPU there is no pair, and no load to read the counters around."""
    matrix_gpus = [g["index"] for g in pre.gpus]
    if len(pre.gpus) < 2:
        return {
            "outcome": "measured",
            "size": size,
            "pairs": [],
            "matrix": {"gpus": matrix_gpus, "gbps": []},
            "nvlink_errors": [],
        }
    before, started = _counters(pre), time.monotonic()
    pairs, matrix = measure(torch, pre.gpus, size, repeats, warmup_s, serial=serial, timer=timer)
    return {
        "outcome": "measured",
        "size": size,
        "pairs": pairs,
        "matrix": {"gpus": matrix_gpus, "gbps": matrix},
        "nvlink_errors": nvlink_deltas(before, _counters(pre), pre.gpus, time.monotonic() - started),
    }


def _counters(pre: Preflight) -> list[dict[str, Any]]:
    if pre.lib is None:
        return [{} for _ in pre.handles]
    return [nvlink_error_counters(pre.lib, h, active_nvlinks(pre.lib, h)) for h in pre.handles]


def nvlink_deltas(
    before: list[dict[str, Any]], after: list[dict[str, Any]], gpus: list[GpuIdentity], seconds: float
) -> list[NvlinkDelta]:
    """Per GPU: how much each NVLink error counter grew while the copies ran (None where unreadable)."""
    out: list[NvlinkDelta] = []
    for gpu, old, new in zip(gpus, before, after, strict=True):
        entry: dict[str, Any] = {"gpu": gpu["index"], "seconds": round(seconds, 3)}
        for name in ("crc_flit", "crc_data", "replay", "recovery"):
            a, b = old.get(name), new.get(name)
            entry[name] = None if a is None or b is None else b - a
        links_before, links_after = old.get("per_link") or {}, new.get("per_link") or {}
        entry["per_link"] = {  # both counters always, the links whose counter grew
            name: {
                str(link): count - links_before[name][link]
                for link, count in (links_after.get(name) or {}).items()
                if link in (links_before.get(name) or {}) and count - links_before[name][link]
            }
            for name in ("crc_flit", "crc_data")
        }
        entry["links"] = len((new.get("per_link") or {}).get("crc_data") or {})
        unread: dict[str, list[int]] = {}
        for reading in (old, new):
            for name, links in (reading.get("unread_links") or {}).items():
                unread[name] = sorted(set(unread.get(name, [])) | set(links))
        entry["unread_links"] = unread
        out.append(cast(NvlinkDelta, entry))
    return out
