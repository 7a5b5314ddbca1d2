"""Per-node fingerprints, gathered lazily once per node, and the SKU each node's limits come from.

A node's fingerprint is collected the first time a test needs it (a node that is never tested is
never probed), and a failure is remembered so every test of a dead node errors with the same cause
instead of retrying the launch.
"""

from __future__ import annotations

from typing import Any

from gpuaccept.cluster import Cluster
from gpuaccept.errors import MeasurementError
from gpuaccept.thresholds.loader import CPU_SKU, Thresholds

__all__ = ["Fingerprints"]


class Fingerprints:
    """Node name -> fingerprint dict (or the error that prevented it)."""

    def __init__(self, cluster: Cluster, thresholds: Thresholds, forced_sku: str | None = None) -> None:
        self._cluster = cluster
        self._thresholds = thresholds
        self._forced = forced_sku
        self._seen: dict[str, dict[str, Any] | MeasurementError] = {}

    def get(self, node: str) -> dict[str, Any]:
        if node not in self._seen:
            try:
                self._seen[node] = self._cluster.run("fingerprint", nodes=[node], timeout_s=120).one().data
            except MeasurementError as exc:
                self._seen[node] = exc
        value = self._seen[node]
        if isinstance(value, MeasurementError):
            raise MeasurementError(f"fingerprint of {node} could not be taken: {value}", nodes=(node,))
        return value

    def prefetch(self, nodes: list[str]) -> None:
        """Take the fingerprints of ``nodes`` not seen yet, all at once (a cross-node check needs every
        node's; one after another they would cost a step time per node)."""
        missing = [n for n in nodes if n not in self._seen]
        for node, result in self._cluster.run_each("fingerprint", missing, timeout_s=120).items():
            if isinstance(result, MeasurementError):
                self._seen[node] = result
                continue
            try:
                self._seen[node] = result.one().data
            except MeasurementError as exc:
                self._seen[node] = exc

    def collected(self) -> dict[str, Any]:
        """Everything gathered so far, errors as strings (for the run record)."""
        return {n: ({"error": str(v)} if isinstance(v, Exception) else v) for n, v in self._seen.items()}

    def sku_of(self, node: str) -> str:
        """``--sku`` if forced; ``cpu`` for a node without GPUs; else the SKU matching its GPU name."""
        if self._forced:
            return self._forced
        gpus = self.get(node)["gpus"]
        if not gpus["count"]:
            return CPU_SKU
        names = sorted({d["name"] for d in gpus["devices"]})
        skus = {self._thresholds.sku_for_gpu(name) for name in names}
        if None in skus:
            raise MeasurementError(
                f"{node}: GPU model {', '.join(names)} matches no SKU in "
                f"{', '.join(str(f) for f in self._thresholds.files)}; add one in a site file (--thresholds) "
                "or force one with --sku",
                nodes=(node,),
            )
        if len(skus) > 1:
            raise MeasurementError(f"{node}: mixed GPU models on one node: {', '.join(names)}", nodes=(node,))
        return skus.pop()  # type: ignore[return-value]
