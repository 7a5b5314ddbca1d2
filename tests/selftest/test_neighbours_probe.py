"""The neighbours probe's parts that run without a GPU: the halves, the barrier both halves meet at, the merge of
their figures, and the names it gives when there is nothing to split or a half does not come back."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from gpuaccept.contracts.neighbours import ratio_pct
from gpuaccept.probes import neighbours
from gpuaccept.verdicts.neighbours import neighbours_absent

pytestmark = pytest.mark.selftest


@pytest.mark.parametrize(
    ("devices", "a", "b"),
    [
        (["0", "1"], ["0"], ["1"]),
        (["0", "1", "2"], ["0"], ["1", "2"]),
        ([str(i) for i in range(8)], list("0123"), list("4567")),
    ],
)
def test_halves_are_disjoint_and_cover_the_node(devices: list[str], a: list[str], b: list[str]) -> None:
    assert neighbours.split(devices) == {"A": a, "B": b}


def test_barrier_waits_for_every_half(tmp_path: Path) -> None:
    arrived: list[float] = []

    def late() -> None:
        time.sleep(0.3)
        neighbours.barrier(tmp_path, "matmul", "B", 2, timeout_s=5)

    thread = threading.Thread(target=late)
    started = time.monotonic()
    thread.start()
    neighbours.barrier(tmp_path, "matmul", "A", 2, timeout_s=5)
    arrived.append(time.monotonic() - started)
    thread.join()
    assert arrived[0] >= 0.25


def test_barrier_names_who_arrived_when_a_half_never_does(tmp_path: Path) -> None:
    with pytest.raises(TimeoutError, match=r"barrier hbm: 2 halves expected within 0.2 s, arrived: \['A'\]"):
        neighbours.barrier(tmp_path, "hbm", "A", 2, timeout_s=0.2)


def test_ratio_is_together_over_alone() -> None:
    assert ratio_pct(700.0, 385.0) == 55.0
    assert ratio_pct(None, 1.0) is None and ratio_pct(0.0, 1.0) is None


def test_fewer_than_two_gpus_is_said_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    record = neighbours.collect(seconds=1)
    assert record.gpus == [] and record.why == "1 GPU(s) visible: two halves need at least 2"
    assert neighbours_absent(1, "node1") == (
        "node1 declares 1 GPU: two tenants side by side need at least 2 GPUs (two halves)"
    )
    assert neighbours_absent(2, "node1") is None


def test_a_half_that_fails_is_named_with_its_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real children started on a machine without CUDA: each exits naming itself, and the probe names the
    half and its CUDA_VISIBLE_DEVICES (the probe exits non-zero; the test is an ERROR)."""
    monkeypatch.setattr(neighbours, "START_S", 30.0)
    with pytest.raises(
        RuntimeError, match=r"half A \(CUDA_VISIBLE_DEVICES=0\): exit status 1; half B \(CUDA_VISIBLE_DEVICES=1\)"
    ):
        neighbours._run({"A": ["0"], "B": ["1"]}, tmp_path / "together", seconds=0.1)
