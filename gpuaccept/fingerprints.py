"""Per-node fingerprints, taken for every allocated node in one fan-out step at session start, and the SKU
each node's limits come from.

The session's start (``plugin.pytest_runtestloop``, before any test) takes them all at once (``prefetch``);
from then on they are looked up. Judging never launches a probe: ``sku_of``, which every ``judge.check``
asks, only reads what was taken, so a node dead at that step cannot raise out of a judge half-way through a
test. Its failure is kept: each of that node's tests errors with it (``failure``, read by
``state._NodeLoss`` before the test runs), never FAILED, and the other nodes' tests run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuaccept.cluster import Cluster
from gpuaccept.errors import MeasurementError
from gpuaccept.probes.specs import FINGERPRINT
from gpuaccept.thresholds.loader import CPU_SKU, Thresholds

__all__ = ["Fingerprints", "unknown_gpu_message"]

#: the command that measures known-good nodes and writes a site file for a GPU the defaults do not list
CALIBRATE_COMMAND = "gpuaccept-calibrate"


def unknown_gpu_message(node: str, names: list[str], thresholds: Thresholds) -> str:
    """Why a node cannot be judged, and the two ways forward: a SKU in a site file, or calibration."""
    files = ", ".join(str(f) for f in thresholds.files)
    quoted = ", ".join(repr(n) for n in names)
    return (
        f"{node}: GPU model {quoted} (NVML name) matches no SKU in {files}; its limits would be guesses. "
        f"Either add a SKU for it in a site file (skus: <NAME>: {{match: [{names[0]!r}], inherits: gpu-node, "
        "limits: ... each with its source}) and pass it with --thresholds, or measure nodes you know are "
        f"good with `{CALIBRATE_COMMAND}`, which writes such a site file from the run"
    )


class Fingerprints:
    """Node name -> fingerprint dict (or the error that prevented it)."""

    def __init__(self, cluster: Cluster, thresholds: Thresholds, forced_sku: str | None = None) -> None:
        self._cluster = cluster
        self._thresholds = thresholds
        self._forced = forced_sku
        self._seen: dict[str, dict[str, Any] | MeasurementError] = {}

    def get(self, node: str) -> dict[str, Any]:
        """The node's fingerprint; one not taken at session start (a dry run, a session that did not start
        its tests) is taken now, by a test that asks for it, never by a judge (``sku_of``)."""
        if node not in self._seen:
            self.prefetch([node])
        return self._taken(node)

    def _taken(self, node: str) -> dict[str, Any]:
        value = self._seen.get(node)
        if value is None:
            raise MeasurementError(
                f"{node}: no fingerprint was taken at session start: its SKU is unknown", nodes=(node,)
            )
        if isinstance(value, MeasurementError):
            raise MeasurementError(self.failure(node) or str(value), nodes=(node,))
        return value

    def failure(self, node: str) -> str | None:
        """Why the node's fingerprint could not be taken (what each of its tests errors with), or None."""
        value = self._seen.get(node)
        if not isinstance(value, MeasurementError):
            return None
        return f"fingerprint of {node} could not be taken at session start: {value}"

    def prefetch(self, nodes: list[str]) -> None:
        """Take the fingerprints of ``nodes`` not seen yet, in one fan-out step: the session's start does it for
        every allocated node (one after another they would cost a step time per node)."""
        missing = [n for n in nodes if n not in self._seen]
        if not missing:  # taken at session start: a test that asks for them all launches nothing
            return
        for node, result in self._cluster.run_each(FINGERPRINT, missing).items():
            if isinstance(result, MeasurementError):
                self._seen[node] = result
                continue
            try:
                self._seen[node] = self._with_runtime(node, dict(FINGERPRINT.read(result.one())))
            except MeasurementError as exc:
                self._seen[node] = exc

    def _with_runtime(self, node: str, data: dict[str, Any]) -> dict[str, Any]:
        """The container runtimes' versions the launcher read on the node's host side (a probe in the image
        cannot see them), beside what the probe found inside: one differing node is drift."""
        host = getattr(self._cluster.launcher, "container_nodes", {}).get(node)
        if not host:
            return data
        return {**data, "container": {**(data.get("container") or {}), "runtime_versions": host["runtime_versions"]}}

    def collected(self, nodes: Iterable[str] | None = None) -> dict[str, Any]:
        """Everything gathered so far (or for ``nodes``), errors as strings (for the run record)."""
        picked = self._seen.items() if nodes is None else ((n, self._seen[n]) for n in nodes if n in self._seen)
        return {n: ({"error": str(v)} if isinstance(v, Exception) else v) for n, v in picked}

    def unknown_models(self, nodes: list[str]) -> list[str]:
        """One message per node whose GPUs no SKU matches (nodes whose fingerprint failed are left to
        their tests, which error naming the cause)."""
        if self._forced:
            return []
        self.prefetch(nodes)  # taken already at session start: nothing is launched again
        problems = []
        for node in nodes:
            value = self._seen.get(node)
            if not isinstance(value, dict):
                continue
            names = sorted({d["name"] for d in value["gpus"]["devices"]})
            unknown = [n for n in names if self._thresholds.sku_for_gpu(n) is None]
            if unknown:
                problems.append(unknown_gpu_message(node, unknown, self._thresholds))
        return problems

    def sku_of(self, node: str) -> str:
        """``--sku`` if forced; ``cpu`` for a node without GPUs; else the SKU matching its GPU name. A lookup of
        what the session's start took: it never launches a probe (every ``judge.check`` asks it)."""
        if self._forced:
            return self._forced
        gpus = self._taken(node)["gpus"]
        if not gpus["count"]:
            return CPU_SKU
        names = sorted({d["name"] for d in gpus["devices"]})
        skus = {self._thresholds.sku_for_gpu(name) for name in names}
        if None in skus:
            unknown = [n for n in names if self._thresholds.sku_for_gpu(n) is None]
            raise MeasurementError(unknown_gpu_message(node, unknown, self._thresholds), nodes=(node,))
        if len(skus) > 1:
            raise MeasurementError(f"{node}: mixed GPU models on one node: {', '.join(names)}", nodes=(node,))
        return skus.pop()  # type: ignore[return-value]
