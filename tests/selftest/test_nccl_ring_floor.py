"""Multi-node floors are judged on a Ring pass, the way their source (nccl-tests #290) measured them."""

from __future__ import annotations

import importlib
import types
from typing import Any

import pytest

from gpuaccept.contracts.nccl_sweep import algo_args
from gpuaccept.errors import MeasurementError
from tests.acceptance.nccl_passes import sweep_args

pytestmark = pytest.mark.selftest


def test_algo_args() -> None:
    assert algo_args(gpu=True, multinode=True, forced_ring=False) == ["--ring"]
    assert algo_args(gpu=True, multinode=False, forced_ring=False) == []  # intra-node: NCCL's choice
    assert algo_args(gpu=True, multinode=False, forced_ring=True) == ["--ring"]
    assert algo_args(gpu=False, multinode=True, forced_ring=False) == []  # gloo: no algorithm to pick


class _Cluster:
    def __init__(self, gpus: int) -> None:
        self.gpus = gpus
        self.args: list[str] = []

    def gpus_on(self, node: str) -> int:
        return self.gpus

    def run(self, probe: str, **kwargs: Any) -> Any:
        self.args = [str(a) for a in kwargs["args"]]
        raise MeasurementError("stop here: only the arguments matter")


SETTINGS = types.SimpleNamespace(nccl_min_bytes=1 << 20, nccl_max_bytes=1 << 30, nccl_ring=False, sources={})


@pytest.mark.parametrize(
    ("module", "call"), [("tests.acceptance.nccl_passes", "run_groups"), ("tests.acceptance.test_fabric", "_run_rails")]
)
def test_multinode_gpu_passes_run_ring(module: str, call: str) -> None:
    mod = importlib.import_module(module)
    cluster = _Cluster(gpus=8)
    with pytest.raises(MeasurementError):
        getattr(mod, call)(cluster, SETTINGS, [("a", "b")] if call == "run_groups" else ["a", "b"])
    assert "--ring" in cluster.args


def test_intra_node_sweep_keeps_nccls_choice() -> None:
    assert "--ring" not in sweep_args(SETTINGS, True)
    assert "--ring" in sweep_args(SETTINGS, True, True)
