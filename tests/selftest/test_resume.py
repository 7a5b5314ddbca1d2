"""The fine-tune's own checkpoint (``gpuaccept.training.resume``), run for real on CPU: rank 0's run saves it
half-way, a new step of the same process restores it with the page cache dropped and trains on; the resumed
losses equal the uninterrupted run's bit for bit. A byte changed on disk is named by its file, and the judge
(``gpuaccept.verdicts.resume``) fails a resume that departs."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.thresholds.storage_site import Filesystem
from gpuaccept.training.checkpoint import MANIFEST, RESUME_STEPS, restore, resume_step
from gpuaccept.verdicts.resume import judge_resume
from tests.selftest._tenant_judge import RecordingJudge

ROOT = Path(__file__).resolve().parents[2]


def _payload(stdout: str) -> dict[str, Any]:
    """The probe's one result, whole or in numbered parts (``gpuaccept.probes._protocol``)."""
    parts = [line.split(" ", 3)[3].strip() for line in stdout.splitlines() if line.startswith("GPUACCEPT_PART ")]
    text = base64.b64decode("".join(parts)).decode() if parts else stdout[stdout.index("GPUACCEPT_RESULT") :]
    return json.loads(text[text.index("{") :].splitlines()[0] if not parts else text[text.index("{") :])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """One small CPU fine-tune of 12 steps: its checkpoint lies in the run folder's resume/ (kept there)."""
    out = tmp_path_factory.mktemp("finetune")
    args = ["--strategy", "solo", "--out", str(out), "--steps", "12", "--ckpt-every", "12", "--device", "cpu"]
    done = subprocess.run(
        [sys.executable, "-m", "gpuaccept.probes.finetune", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return _payload(done.stdout)["data"], out / "resume"


def test_resumed_losses_equal_the_run(run: tuple[dict[str, Any], Path]) -> None:
    data, folder = run
    saved, resumed = data["checkpoint"]["saved"], data["checkpoint"]["resumed"]
    assert saved["step"] == resume_step(12) == 6
    assert {f["name"] for f in saved["files"]} == {"adapter.safetensors", "optimizer.pt", "trainer_state.json"}
    assert resumed["restore"]["mismatched"] == {} and resumed["restore"]["bytes"] == saved["bytes"]
    assert len(resumed["losses"]) == RESUME_STEPS
    assert resumed["losses"] == data["losses"][6 : 6 + RESUME_STEPS] == resumed["expected_losses"]
    assert resumed["max_abs_delta"] == 0.0
    judge = RecordingJudge()
    judge_resume(data["checkpoint"], None, judge, "node1")
    assert [(c.kind, c.metric) for c in judge.calls] == [
        ("expect", "train_checkpoint_bytes"),
        ("check", "train_resume_loss_delta"),
    ]
    assert judge.calls[0].passed and judge.calls[1].value == 0.0
    assert (folder / MANIFEST).is_file()


def test_a_changed_byte_is_named(run: tuple[dict[str, Any], Path], tmp_path: Path) -> None:
    _, folder = run
    copy = tmp_path / "resume"
    copy.mkdir()
    for path in folder.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    adapter = copy / "adapter.safetensors"
    raw = bytearray(adapter.read_bytes())
    raw[-1] ^= 0x01
    adapter.write_bytes(bytes(raw))
    (copy / "trainer_state.json").unlink()
    _, restored = restore(copy)
    assert restored["mismatched"] == {"adapter.safetensors": "changed", "trainer_state.json": "missing"}
    judge = RecordingJudge()
    checkpoint = {"saved": {"path": str(copy), "step": 6, "bytes": 1, "seconds": 1.0, "gbps": 1.0, "files": []}}
    checkpoint["resumed"] = {"restore": restored, "resume_error": "differs"}
    judge_resume(checkpoint, None, judge, "node2")
    assert [(c.kind, c.metric, c.node) for c in judge.calls] == [("expect", "train_checkpoint_bytes", "node2")]
    assert judge.calls[0].value == "adapter.safetensors: changed; trainer_state.json: missing"


def test_the_contract_judges_both_speeds(run: tuple[dict[str, Any], Path]) -> None:
    data, _ = run
    fs = Filesystem.model_validate(
        {
            "path": "/mnt/chkpt",
            "scope": "shared",
            "role": "checkpoints",
            "contract": {"read_gbps": 4, "write_gbps": 2, "source": "the site's purchase contract"},
        }
    )
    judge = RecordingJudge()
    judge_resume(data["checkpoint"], ("chkpt", fs), judge, "node1")
    checks = {c.metric: c for c in judge.calls if c.kind == "check"}
    assert set(checks) == {"train_checkpoint_save_gbps", "train_checkpoint_restore_gbps", "train_resume_loss_delta"}
    assert checks["train_checkpoint_save_gbps"].extra["limit"].min == 2
    assert checks["train_checkpoint_restore_gbps"].extra["limit"].min == 4
    assert checks["train_checkpoint_restore_gbps"].extra["filesystem"] == "chkpt"


def test_no_checkpoint_is_unmeasured_never_passed() -> None:
    judge = RecordingJudge()
    judge_resume(None, None, judge, "node1")
    assert [(c.kind, c.metric) for c in judge.calls] == [("unreadable", "train_resume_loss_delta")]
