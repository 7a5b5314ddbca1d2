"""GPU utilisation sampled through NVML while training runs, and peak memory per rank.

NVML's utilisation is "percent of the last sample period (1/6 s to 1 s, by product) in which a kernel
ran". A reading taken right after a checkpoint or an eval would include that pause, so the sampler
keeps only readings whose whole preceding ``settle_s`` lies inside one training phase (``active()``
... ``idle()``); checkpoints, evals and start-up are not held against the GPU.
"""

from __future__ import annotations

import resource
import statistics
import threading
import time
from typing import Any

import torch

__all__ = ["UtilSampler", "peak_memory_gib"]


class UtilSampler:
    """Background thread polling one GPU's utilisation; ``summary()`` gives mean/min/samples."""

    def __init__(self, uuid: str | None, period_s: float = 0.05, settle_s: float = 1.0) -> None:
        self.period_s = period_s
        self.settle_s = settle_s
        self.samples: list[int] = []
        self.watts: list[float] = []
        self.error: str | None = None
        self._active_since: float | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._handle: Any = None
        self._nvml: Any = None
        if uuid is None:
            self.error = "no GPU identity (NVML could not name this rank's GPU)"
            return
        try:
            import pynvml  # type: ignore[import-untyped]

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except Exception as exc:
            self.error = f"NVML unavailable: {type(exc).__name__}: {exc}"
            return
        self._thread = threading.Thread(target=self._run, name="gpuaccept-nvml", daemon=True)
        self._thread.start()

    def active(self) -> None:
        with self._lock:
            self._active_since = time.monotonic()

    def idle(self) -> None:
        with self._lock:
            self._active_since = None

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            with self._lock:
                since = self._active_since
            if since is None or time.monotonic() - since < self.settle_s:
                continue
            try:
                value = int(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
                milliwatts = float(self._nvml.nvmlDeviceGetPowerUsage(self._handle))
            except Exception as exc:
                self.error = f"NVML utilisation or power reading failed: {exc}"
                return
            with self._lock:
                if self._active_since is not None:
                    self.samples.append(value)
                    self.watts.append(milliwatts / 1000)

    def stop(self) -> None:
        self._stop.set()

    def summary(self) -> dict[str, Any]:
        self.stop()
        if not self.samples:
            return {
                "power_w": None,
                "util_pct": None,
                "util_min_pct": None,
                "util_samples": 0,
                "util_error": self.error,
            }
        return {
            "power_w": round(statistics.fmean(self.watts), 1) if self.watts else None,
            "util_pct": round(statistics.fmean(self.samples), 1),
            "util_min_pct": min(self.samples),
            "util_samples": len(self.samples),
            "util_error": self.error,
        }


def peak_memory_gib(device: torch.device) -> dict[str, float | None]:
    """Peak allocated/reserved on a GPU (torch's allocator), or the process's peak RSS on a CPU."""
    gib = float(1 << 30)
    if device.type == "cuda":
        return {
            "peak_mem_gib": round(torch.cuda.max_memory_allocated(device) / gib, 3),
            "peak_reserved_gib": round(torch.cuda.max_memory_reserved(device) / gib, 3),
        }
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_mem_gib": round(rss_kib * 1024 / gib, 3), "peak_reserved_gib": None}
