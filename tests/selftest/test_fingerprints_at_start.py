"""No check launches a probe: the fingerprints are taken once, for every node, before any test; a judge only
looks its node's SKU up, and a node whose fingerprint could not be taken errors naming why."""

from __future__ import annotations

from typing import Any

import pytest

from gpuaccept.contracts.records import RankRecord
from gpuaccept.dispatch.result import ProbeResult
from gpuaccept.errors import MeasurementError, ProbeError
from gpuaccept.fingerprints import Fingerprints
from gpuaccept.judging.judge import Judge
from gpuaccept.probes import specs
from gpuaccept.thresholds.loader import CPU_SKU, load_thresholds

#: a CPU node's fingerprint as far as the SKU lookup reads it (typed already: the fake's result needs no probe)
CPU_NODE: dict[str, Any] = {"gpus": {"count": 0, "devices": []}}


class Launches:
    """A cluster that counts what is launched on it: the session's one fan-out step, and nothing else."""

    def __init__(self) -> None:
        self.fanouts: list[tuple[str, list[str]]] = []
        self.launcher = object()

    def run_each(self, spec: Any, nodes: list[str], **options: Any) -> dict[str, ProbeResult | MeasurementError]:
        self.fanouts.append((spec.name, list(nodes)))
        record = RankRecord("node1", 0, 1, 0, None, CPU_NODE, payload=CPU_NODE)
        taken = ProbeResult("fingerprint", [], ("node1",), 0, "", "", 1.0, records=[record])
        lost = ProbeError("probe fingerprint: node2 was lost during the run: its slurmd did not take a step")
        return {"node1": taken, "node2": lost}

    def run(self, *args: Any, **options: Any) -> ProbeResult:
        raise AssertionError(f"a check launched a probe: {args}")


def test_the_session_start_takes_every_node_in_one_step_and_a_check_never_launches() -> None:
    cluster = Launches()
    taken = Fingerprints(cluster, load_thresholds())  # type: ignore[arg-type]
    taken.prefetch(["node1", "node2"])
    assert cluster.fanouts == [(specs.FINGERPRINT.name, ["node1", "node2"])]
    judge = Judge(load_thresholds(), taken.sku_of, lambda result: None, "test_x")
    assert judge.check("dev_shm_gib", 100.0, node="node1").verdict in ("pass", "fail", "unjudged", "info")
    assert judge.sku("node1") == CPU_SKU
    with pytest.raises(MeasurementError) as dead:
        judge.check("dev_shm_gib", 100.0, node="node2")
    assert "fingerprint of node2 could not be taken at session start" in str(dead.value)
    assert "slurmd did not take a step" in str(dead.value) and dead.value.nodes == ("node2",)
    with pytest.raises(MeasurementError, match="node9: no fingerprint was taken at session start"):
        judge.check("dev_shm_gib", 100.0, node="node9")
    taken.prefetch(["node1", "node2"])  # asked again (a test that wants them all): nothing is launched
    assert len(cluster.fanouts) == 1
    assert taken.failure("node1") is None and taken.failure("node2") == str(dead.value)
