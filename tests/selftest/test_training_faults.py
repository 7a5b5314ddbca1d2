"""A rank that dies mid-training must end the whole fine-tune step at once, naming rank and node.

Without that, the surviving ranks sit in an all-reduce until the NCCL/gloo timeout (minutes) and the
operator learns nothing about which rank broke. The fault knob (GPUACCEPT_FAULT_RANK_EXIT) is honoured
only under GPUACCEPT_SELFTEST=1, so it cannot fire in an acceptance run.
"""

from __future__ import annotations

import time

import pytest

from gpuaccept.dispatch.local import LocalLauncher
from gpuaccept.dispatch.step import Step
from gpuaccept.errors import ProbeError, ProbeTimeout
from gpuaccept.probes import specs
from gpuaccept.training.loop import FAULT_ENV, fault_point

pytestmark = pytest.mark.selftest

TIMEOUT_S = 240.0


def test_fault_knob_needs_selftest_mode(monkeypatch, capsys):
    monkeypatch.setenv(FAULT_ENV, "1:3")
    monkeypatch.delenv("GPUACCEPT_SELFTEST", raising=False)
    assert fault_point(1) is None
    assert "only honoured with GPUACCEPT_SELFTEST=1" in capsys.readouterr().err
    monkeypatch.setenv("GPUACCEPT_SELFTEST", "1")
    assert fault_point(1) == 3
    assert fault_point(0) is None


def test_dead_rank_ends_step_quickly(tmp_path):
    """Rank 0 exits with status 17 at step 3 of a 2-rank gloo DDP run; the step must end at once."""
    launcher = LocalLauncher(gpus_per_node=0)
    step = Step(
        spec=specs.FINETUNE,
        nodes=(launcher.node,),
        tasks_per_node=2,
        args=("--strategy", "ddp", "--device", "cpu", "--out", str(tmp_path), "--steps", "40", "--ckpt-every", "20"),
        env={"GPUACCEPT_SELFTEST": "1", FAULT_ENV: "0:3", "OMP_NUM_THREADS": "1"},
        timeout_s=TIMEOUT_S,
    )
    started = time.monotonic()
    with pytest.raises(ProbeError) as info:
        launcher.run(step)
    elapsed = time.monotonic() - started
    assert not isinstance(info.value, ProbeTimeout), f"the step ran into its timeout: {info.value}"
    message = str(info.value)
    # Rank 0 is the hard case for the local launcher: its stderr comes first and the survivors' after it.
    assert "rank 0" in message, message
    assert launcher.node in message, message
    assert "exit status 17" in message, f"the step's status is not the dead rank's own (17): {message}"
    # Start-up (two ranks importing torch + transformers on CI's 2 cores) takes most of this; a hang
    # would last until TIMEOUT_S.
    assert elapsed < TIMEOUT_S / 4, f"the step took {elapsed:.0f} s to end after rank 1 died"
