"""benchmarks/fio_fidelity.py's verdict: the probe's median against the hand median, and a miss fails.

The benchmark runs fio for minutes; what decides its exit is pure arithmetic on the runs, checked here
without fio: a share outside 100 +/- the tolerance must fail (a check that cannot fail is a defect)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fio_fidelity.py"


@pytest.fixture(scope="module")
def fidelity() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fio_fidelity", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_medians_decide_not_the_means(fidelity):
    # one outlier each side moves a mean by far more than 5%, a median not at all
    phase = fidelity.Phase("read", probe=[1.0, 1.02, 2.5, 0.99, 1.01], hand=[1.0, 0.3, 1.0, 1.01, 0.99])
    assert phase.share_pct == pytest.approx(101.0)
    assert phase.within(5.0)


@pytest.mark.parametrize(("probe", "within"), [(1.05, True), (0.95, True), (1.051, False), (0.949, False)])
def test_a_share_outside_the_tolerance_fails(fidelity, probe, within):
    phase = fidelity.Phase("write", probe=[probe] * 3, hand=[1.0] * 3)
    assert phase.within(5.0) is within


def test_the_table_shows_every_run_the_medians_the_spread_and_the_verdict(fidelity):
    phases = [
        fidelity.Phase("write", probe=[0.4, 0.5, 0.6], hand=[0.5, 0.5, 0.5]),
        fidelity.Phase("read", probe=[2.0, 0.5, 0.5], hand=[0.5, 0.6, 0.7]),
    ]
    rows = fidelity.table(phases, 5.0)
    assert rows[0] == "| phase | by | run 1 | run 2 | run 3 | median | spread | probe / hand |"
    assert rows[2] == "| write | probe | 0.400 | 0.500 | 0.600 | 0.500 | 50% | 100.0% (within +/-5%) |"
    assert rows[3] == "| write | hand | 0.500 | 0.500 | 0.500 | 0.500 | 0% |  |"
    assert rows[4] == "| read | probe | 2.000 | 0.500 | 0.500 | 0.500 | 300% | 83.3% (outside +/-5%) |"
