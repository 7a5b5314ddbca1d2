"""GPU-to-GPU copy bandwidth for every ordered pair of GPUs on the node (GB/s, one direction).

One process drives all GPUs of the node (simplest way to reach every pair without a rendezvous). For
each pair src->dst: ``dst.copy_(src)`` of ``--size`` bytes (default 1 GiB), which torch runs as a
peer-to-peer copy on the source GPU's stream when peer access is possible (NVLink on HGX boards); a
pair without peer access is copied through the host and shows as very slow, which is the point.
Warm-up, then ``--repeats`` batches timed with CUDA events on the source GPU; median reported.

The copies are also the NVLink load test: each GPU's NVLink CRC, replay and recovery counters are read
before and after, and the differences go out with the elapsed time. A count since the driver loaded
says little without a time base (a healthy link collects CRC errors that replays correct); errors
*while the links carry traffic* are what DCGM's health check judges, and so does the test.

The result carries every pair and the node's matrix (rows = source, columns = destination) so the
report can draw it. Before touching CUDA the probe lists processes already on each GPU; if any GPU is
busy nothing is measured (``--measure-busy`` overrides) and the busy GPUs are named.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from gpuaccept.probes._bench import Preflight, median, preflight, time_batches, visible_count
from gpuaccept.probes._gpu import active_nvlinks, nvlink_error_counters
from gpuaccept.probes._protocol import emit
from gpuaccept.probes.membw import parse_size

__all__ = ["main"]


def measure(torch: Any, gpus: list[dict[str, Any]], size: int, repeats: int, warmup_s: float) -> dict[str, Any]:
    count = len(gpus)
    src = [torch.empty(size, dtype=torch.uint8, device=f"cuda:{i}").random_(0, 255) for i in range(count)]
    dst = [torch.empty(size, dtype=torch.uint8, device=f"cuda:{i}") for i in range(count)]
    batch = max(1, round(5 * (1 << 30) / size))
    pairs: list[dict[str, Any]] = []
    matrix: list[list[float | None]] = [[None] * count for _ in range(count)]
    for i in range(count):
        for j in range(count):
            if i == j:
                continue

            def sync(i: int = i, j: int = j) -> None:
                torch.cuda.synchronize(i)
                torch.cuda.synchronize(j)

            with torch.cuda.device(i):
                times = time_batches(
                    torch,
                    lambda i=i, j=j: dst[j].copy_(src[i], non_blocking=True),
                    batch=batch,
                    repeats=repeats,
                    warmup_s=warmup_s,
                    sync=sync,
                )
            samples = [size / t / 1e9 for t in times]
            gbps = round(median(samples), 1)
            matrix[i][j] = gbps
            pairs.append(
                {
                    "src": gpus[i]["index"],
                    "dst": gpus[j]["index"],
                    "src_bus": gpus[i]["pci_bus_id"],
                    "dst_bus": gpus[j]["pci_bus_id"],
                    "gbps": gbps,
                    "gbps_min": round(min(samples), 1),
                    "peer_access": bool(torch.cuda.can_device_access_peer(i, j)),
                }
            )
    return {"pairs": pairs, "matrix": {"gpus": [g["index"] for g in gpus], "gbps": matrix}}


def _counters(pre: Preflight) -> list[dict[str, Any]]:
    if pre.lib is None:
        return [{} for _ in pre.handles]
    return [nvlink_error_counters(pre.lib, h, active_nvlinks(pre.lib, h)) for h in pre.handles]


def nvlink_deltas(
    before: list[dict[str, Any]], after: list[dict[str, Any]], gpus: list[dict[str, Any]], seconds: float
) -> list[dict[str, Any]]:
    """Per GPU: how much each NVLink error counter grew while the copies ran (None where unreadable)."""
    out = []
    for gpu, old, new in zip(gpus, before, after, strict=True):
        entry: dict[str, Any] = {"gpu": gpu["index"], "seconds": round(seconds, 3)}
        for name in ("crc_flit", "crc_data", "replay", "recovery"):
            a, b = old.get(name), new.get(name)
            entry[name] = None if a is None or b is None else b - a
        links_before, links_after = old.get("per_link") or {}, new.get("per_link") or {}
        entry["per_link"] = {
            name: {
                str(link): count - links_before[name][link]
                for link, count in (links_after.get(name) or {}).items()
                if link in (links_before.get(name) or {}) and count - links_before[name][link]
            }
            for name in ("crc_flit", "crc_data")
        }
        entry["links"] = len((new.get("per_link") or {}).get("crc_data") or {})
        out.append(entry)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=1 << 30, help="bytes per copy (e.g. 256M, 1G)")
    parser.add_argument("--repeats", type=int, default=10, help="timed batches per pair (median reported)")
    parser.add_argument("--warmup", type=float, default=0.2, help="seconds of warm-up per pair")
    parser.add_argument("--measure-busy", action="store_true", help="measure even if other processes use a GPU")
    args = parser.parse_args(argv)

    pre = preflight(visible_count())
    data: dict[str, Any] = {"busy": pre.busy, "gpus": pre.gpus, "size": args.size}
    if pre.busy and not args.measure_busy:
        data["skipped"] = "GPU busy: other processes were running on some GPUs before the benchmark"
        emit(data, probe="p2p")
        return
    if len(pre.gpus) < 2:
        data.update(pairs=[], matrix={"gpus": [g["index"] for g in pre.gpus], "gbps": []})
        emit(data, probe="p2p")
        return
    import torch

    before, started = _counters(pre), time.monotonic()
    data.update(measure(torch, pre.gpus, args.size, args.repeats, args.warmup))
    data["nvlink_errors"] = nvlink_deltas(before, _counters(pre), pre.gpus, time.monotonic() - started)
    emit(data, probe="p2p")


if __name__ == "__main__":
    main()
