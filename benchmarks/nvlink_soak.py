"""NVLink soak (investigation tool, not a test): error counters sampled per link while every GPU pair copies.

Why it exists: ``test_p2p`` judges the NVLink CRC error *rate* during its ~1.4 s copy window against
DCGM's 100 errors/s. A single window that short cannot tell a steady rate from a burst, nor one bad
link from errors spread evenly over all of them. This tool loads every ordered GPU pair at once for
``--seconds``, samples each GPU's per-link CRC flit/data, replay and recovery counters (and the
NVLink 4+ FEC/BER fields where NVML has them) every ``--interval`` seconds, and prints the idle
rate, the per-interval rate series, the per-link split and the bandwidth carried, as JSON.

    python benchmarks/nvlink_soak.py --seconds 30 --interval 1 --idle 5 > soak.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuaccept.probes._gpu import active_nvlinks, field_values, nvlink_error_counters

COUNTERS = ("crc_flit", "crc_data", "replay", "recovery")
EXTRA_FIELDS = (
    "NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS",
    "NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER",
    "NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS",
    "NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS",
    "NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS",
)


def _by_link(lib: Any, handle: Any, links: list[int]) -> dict[int, dict[str, int | None]]:
    """Per active link: the four DL error counters since the driver loaded (None where unsupported)."""
    per_link = nvlink_error_counters(lib, handle, links)["per_link"]
    return {link: {name: per_link[name].get(link) for name in COUNTERS} for link in links}


def extra_fields(lib: Any, handle: Any) -> dict[str, Any]:
    """NVLink 4+ FEC/BER fields for the whole GPU; None where this NVML and driver do not give them."""
    return field_values(lib, handle, {name: getattr(lib, name) for name in EXTRA_FIELDS if hasattr(lib, name)})


class Sampler(threading.Thread):
    """Reads every GPU's per-link counters every ``interval`` seconds until stopped."""

    def __init__(self, lib: Any, handles: list[Any], links: list[list[int]], interval: float) -> None:
        super().__init__(daemon=True)
        self.lib, self.handles, self.links, self.interval = lib, handles, links, interval
        self.samples: list[tuple[float, list[dict[int, dict[str, int | None]]]]] = []
        self.stop = threading.Event()

    def read(self) -> None:
        self.samples.append(
            (time.monotonic(), [_by_link(self.lib, h, ls) for h, ls in zip(self.handles, self.links, strict=True)])
        )

    def run(self) -> None:
        self.read()
        while not self.stop.wait(self.interval):
            self.read()
        self.read()


def summarise(samples: list[tuple[float, list[dict[int, dict[str, int | None]]]]]) -> list[dict[str, Any]]:
    """Per GPU: total and per-link deltas over the window, and the per-interval rate series."""
    out = []
    (t0, first), (t1, last) = samples[0], samples[-1]
    for gpu in range(len(first)):
        entry: dict[str, Any] = {"gpu": gpu, "seconds": round(t1 - t0, 3)}
        for name in COUNTERS:
            per_link = {
                link: (last[gpu][link][name] - first[gpu][link][name])  # type: ignore[operator]
                for link in first[gpu]
                if first[gpu][link][name] is not None and last[gpu][link][name] is not None
            }
            series = []
            for (ta, a), (tb, b) in itertools.pairwise(samples):
                delta = sum(
                    (b[gpu][link][name] or 0) - (a[gpu][link][name] or 0)
                    for link in a[gpu]
                    if a[gpu][link][name] is not None
                )
                series.append(round(delta / (tb - ta), 1) if tb > ta else None)
            total = sum(per_link.values())
            rates = [s for s in series if s is not None]
            entry[name] = {
                "total": total,
                "per_s_window": round(total / (t1 - t0), 2) if t1 > t0 else None,
                "per_s_max_interval": max(rates) if rates else None,
                "per_s_median_interval": statistics.median(rates) if rates else None,
                "intervals_over_100": sum(1 for r in rates if r >= 100),
                "per_link": {str(k): v for k, v in per_link.items() if v},
                "links_with_errors": sum(1 for v in per_link.values() if v),
                "series_per_s": series,
            }
        out.append(entry)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0, help="load duration")
    p.add_argument("--idle", type=float, default=5.0, help="seconds sampled with no traffic first")
    p.add_argument("--interval", type=float, default=1.0, help="sampling period (DCGM diag compares 1 s samples)")
    p.add_argument("--size", type=int, default=256 << 20, help="bytes per copy")
    args = p.parse_args()

    import pynvml
    import torch

    pynvml.nvmlInit()
    count = torch.cuda.device_count()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    links = [active_nvlinks(pynvml, h) for h in handles]
    result: dict[str, Any] = {"gpus": count, "active_links": [len(x) for x in links], "args": vars(args)}
    result["fields_before"] = [extra_fields(pynvml, h) for h in handles]

    idle = Sampler(pynvml, handles, links, args.interval)
    idle.start()
    time.sleep(args.idle)
    idle.stop.set()
    idle.join()
    result["idle"] = summarise(idle.samples)

    elems = args.size
    bufs = {i: torch.empty(elems, dtype=torch.uint8, device=f"cuda:{i}").random_(0, 255) for i in range(count)}
    outs = {
        (i, j): torch.empty(elems, dtype=torch.uint8, device=f"cuda:{j}")
        for i in range(count)
        for j in range(count)
        if i != j
    }
    streams = {(i, j): torch.cuda.Stream(device=i) for (i, j) in outs}
    load = Sampler(pynvml, handles, links, args.interval)
    copies = 0
    load.start()
    started = time.monotonic()
    while time.monotonic() - started < args.seconds:
        for (i, j), out in outs.items():
            with torch.cuda.stream(streams[(i, j)]):
                for _ in range(8):
                    out.copy_(bufs[i], non_blocking=True)
        copies += 8
        for i in range(count):
            torch.cuda.synchronize(i)
    elapsed = time.monotonic() - started
    load.stop.set()
    load.join()
    result["load"] = summarise(load.samples)
    result["load_gbps_per_direction"] = round(copies * elems / elapsed / 1e9, 1)
    result["fields_after"] = [extra_fields(pynvml, h) for h in handles]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
