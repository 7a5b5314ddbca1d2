"""The fine-tune's own checkpoint (``gpuaccept.training.resume``) and its merged weights
(``gpuaccept.training.served_weights``), run for real on CPU: rank 0's run saves the checkpoint half-way, a new step
of the same process restores it with the page cache dropped and trains on; the resumed losses equal the uninterrupted
run's bit for bit. Once training is over the adapter is merged, saved as shards and loaded cold to the same first
token, from the run folder and from a scratch folder. A byte changed on disk is named by its file, and the judges
(``gpuaccept.verdicts.resume``, ``gpuaccept.verdicts.served_weights``) fail a resume that departs and weights that
changed."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from gpuaccept.contracts.finetune_storage import ServedWeights
from gpuaccept.dispatch.result import parse_records
from gpuaccept.probes._protocol import node_name
from gpuaccept.probes.specs import FINETUNE
from gpuaccept.thresholds.storage_site import Filesystem
from gpuaccept.training.checkpoint import MANIFEST, RESUME_STEPS, restore, resume_step
from gpuaccept.training.resume import departure
from gpuaccept.training.served_weights import cold_start, first_logits, host_shards, same_answer, save_shards
from gpuaccept.verdicts.resume import judge_resume
from gpuaccept.verdicts.served_weights import judge_served_weights
from gpuaccept.verdicts.storage import JUDGED_BYTES
from tests.selftest._tenant_judge import RecordingJudge

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """One small CPU fine-tune of 12 steps: its checkpoint lies in the run folder's resume/ (kept there); its merged
    weights went to served/ (as a declared models filesystem) and a scratch folder, removed once started from."""
    out = tmp_path_factory.mktemp("finetune")
    args = ["--strategy", "solo", "--out", str(out), "--steps", "12", "--ckpt-every", "12", "--device", "cpu"]
    args += ["--models-dir", str(out / "served"), "--scratch-dir", str(out / "scratch" / "{node}")]
    done = subprocess.run(
        [sys.executable, "-m", "gpuaccept.probes.finetune", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = parse_records("finetune", done.stdout, 1, (node_name(),))
    FINETUNE.validate(record)  # the probe's own output is its contract
    return record.data, out / "resume"


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
    saved = {"outcome": "saved", "path": str(copy), "step": 6, "bytes": 1, "seconds": 1.0, "gbps": 1.0, "files": []}
    resumed = {"outcome": "stopped", "restore": restored, "step": 6, "expected_losses": [], "resume_error": "differs"}
    checkpoint = {"saved": saved, "resumed": {**resumed, "seconds": 0.1}}
    judge_resume(checkpoint, None, judge, "node2")
    assert [(c.kind, c.metric, c.node) for c in judge.calls] == [("expect", "train_checkpoint_bytes", "node2")]
    assert judge.calls[0].value == "adapter.safetensors: changed; trainer_state.json: missing"


def test_the_contract_judges_both_speeds(run: tuple[dict[str, Any], Path]) -> None:
    """A checkpoint of JUDGED_BYTES or more is held to the contract's per-node write and read figures; the small
    CPU model's (about 1 MB: four fsyncs' latency) is shown beside it, not judged."""
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
    kinds = {c.metric: c.kind for c in judge.calls}
    assert kinds["train_checkpoint_save_gbps"] == kinds["train_checkpoint_restore_gbps"] == "info"
    assert "not its throughput" in next(c for c in judge.calls if c.kind == "info").extra["not_judged"]
    big = json.loads(json.dumps(data["checkpoint"]))
    big["saved"]["bytes"] = big["resumed"]["restore"]["bytes"] = JUDGED_BYTES
    judge = RecordingJudge()
    judge_resume(big, ("chkpt", fs), judge, "node1")
    checks = {c.metric: c for c in judge.calls if c.kind == "check"}
    assert set(checks) == {"train_checkpoint_save_gbps", "train_checkpoint_restore_gbps", "train_resume_loss_delta"}
    assert checks["train_checkpoint_save_gbps"].extra["limit"].min == 2
    assert checks["train_checkpoint_restore_gbps"].extra["limit"].min == 4
    assert checks["train_checkpoint_restore_gbps"].extra["filesystem"] == "chkpt"


def test_no_checkpoint_is_unmeasured_never_passed() -> None:
    judge = RecordingJudge()
    judge_resume(None, None, judge, "node1")
    assert [(c.kind, c.metric) for c in judge.calls] == [("unreadable", "train_resume_loss_delta")]


def test_a_save_the_filesystem_refused_fails_naming_why() -> None:
    """A checkpoint filesystem that is full or read-only: the run trains on, and the byte check fails with the
    error, naming the path (nothing was restored, so no loss is compared)."""
    refused = {
        "outcome": "error",
        "path": "/mnt/chkpt/run/1r-node2",
        "step": 6,
        "error": "OSError: [Errno 28] No space",
    }
    checkpoint = {"saved": refused, "resumed": None}
    judge = RecordingJudge()
    judge_resume(checkpoint, None, judge, "node2")
    assert [(c.kind, c.metric, c.node) for c in judge.calls] == [("expect", "train_checkpoint_bytes", "node2")]
    assert judge.calls[0].value == "not saved: OSError: [Errno 28] No space" and not judge.calls[0].passed
    assert judge.calls[0].extra["fspath"] == "/mnt/chkpt/run/1r-node2"


def test_a_nan_after_a_matching_step_is_no_match() -> None:
    """max() over [0.0, nan] is 0.0: the resume takes any non-finite difference as infinitely far."""
    assert max([abs(1.0 - 1.0), abs(float("nan") - 0.9)]) == 0.0  # the trap
    assert departure([1.0, float("nan")], [1.0, 0.9]) == math.inf
    assert departure([1.0, 0.5], [1.0, float("inf")]) == math.inf
    assert departure([1.0, 0.5], [1.0, 0.25]) == 0.25
    assert departure([], []) is None


def test_merged_weights_start_cold_to_the_same_first_token(run: tuple[dict[str, Any], Path]) -> None:
    data, _ = run
    served = data["served_weights"]
    saved, cold, scratch = served["saved"], served["cold"], served["scratch_cold"]
    assert saved["bytes"] == cold["bytes"] == scratch["bytes"] > 0
    for start in (cold, scratch):
        assert start["mismatched"] == {} and start["first_token"] == "same" and start["logits_equal"]
        assert 0 < start["read_s"] <= start["placed_s"] <= start["ttft_s"]
    assert (cold["loaded_from"], scratch["loaded_from"]) == ("models", "scratch")
    assert not Path(saved["path"]).exists() and not Path(scratch["path"]).exists()  # removed once started from
    judge = RecordingJudge()
    judge_served_weights(served, None, None, judge, "node1")
    assert [(c.kind, c.metric) for c in judge.calls] == [
        ("info", "model_weights_save_gbps"),
        ("expect", "model_weights_bytes"),
        ("expect", "model_cold_start_token"),
        ("info", "model_cold_start_gbps"),
    ]
    assert all(c.passed for c in judge.calls if c.kind == "expect")


def test_the_contract_judges_the_weights_and_both_cold_starts(run: tuple[dict[str, Any], Path]) -> None:
    """Above ``JUDGED_BYTES`` the save and each cold start are held to their filesystem's contract; the small
    model's (under 1 MB) is shown beside it."""
    served = json.loads(json.dumps(run[0]["served_weights"]))
    for part in (served["saved"], served["cold"], served["scratch_cold"]):
        part["bytes"] = JUDGED_BYTES
    contract = {"read_gbps": 4, "write_gbps": 2, "source": "the site's purchase contract"}
    models = Filesystem.model_validate(
        {"path": "/mnt/models", "scope": "shared", "role": "models", "contract": contract}
    )
    scratch = Filesystem.model_validate(
        {"path": "/mnt/nvme", "scope": "local", "role": "scratch", "contract": contract}
    )
    judge = RecordingJudge()
    judge_served_weights(served, ("models", models), ("nvme", scratch), judge, "node1")
    checks = [(c.metric, c.extra["filesystem"], c.extra["limit"].min) for c in judge.calls if c.kind == "check"]
    assert checks == [
        ("model_weights_save_gbps", "models", 2.0),
        ("model_cold_start_gbps", "models", 4.0),
        ("model_cold_start_gbps", "nvme", 4.0),
    ]
    assert [c.metric for c in judge.calls if c.kind == "info"] == ["model_scratch_copy_gbps"]


def test_a_changed_shard_is_named_and_a_tied_model_starts_whole(tmp_path: Path) -> None:
    """Shards of a model with tied embeddings (saved once, tied again by the model built from the config) start
    cold to the same token; a byte changed in one shard is named by that file, and the judge fails it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(ROOT / "fixtures" / "training" / "qwen2-tiny.json")
    config.tie_word_embeddings = True
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    prompt = [5, 17, 99, 3]
    reference = first_logits(model, prompt)
    saved = save_shards(host_shards(model, shards=3), tmp_path / "served")
    assert saved["files"] == 3
    figures, logits = cold_start(tmp_path / "served", config, torch.float32, torch.device("cpu"), prompt)
    assert figures["mismatched"] == {} and figures["error"] is None
    assert same_answer(logits, reference)["logits_equal"]
    shard = sorted((tmp_path / "served").glob("*.safetensors"))[-1]
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 0xFF
    shard.write_bytes(bytes(raw))
    figures, _ = cold_start(tmp_path / "served", config, torch.float32, torch.device("cpu"), prompt)
    assert figures["mismatched"] == {shard.name: "changed"}
    judge = RecordingJudge()
    cold = {**figures, **same_answer(logits, reference), "loaded_from": "models"}
    judge_served_weights(_served(saved=saved, cold=cold), None, None, judge, "node2")
    bytes_check = judge.of("model_weights_bytes")[0]
    assert bytes_check.value == f"{shard.name}: changed" and not bytes_check.passed and bytes_check.node == "node2"


def _served(**parts: Any) -> Any:
    """A ``served_weights`` section of the contract: these parts, every other step not reached."""
    steps = dict.fromkeys(("saved", "cold", "scratch_copy", "scratch_cold"))
    served = {"outcome": "served", "adapter": "solo's final adapter, merged", "prompt_tokens": 4, "error": None}
    return TypeAdapter(ServedWeights).validate_python({**served, "phases_s": None, **steps, **parts})


def test_no_merged_weights_are_unmeasured_never_passed() -> None:
    """Declared, the weights are owed: none, or an error, is unmeasured, a refused save fails. Not declared, nothing
    was asked of the launch and nothing is recorded."""
    contract = {"read_gbps": 4, "write_gbps": 2, "source": "the site's purchase contract"}
    models = (
        "models",
        Filesystem.model_validate({"path": "/mnt/m", "scope": "shared", "role": "models", "contract": contract}),
    )
    judge = RecordingJudge()
    judge_served_weights(None, None, None, judge, "node0")
    assert judge.calls == []
    judge_served_weights(None, models, None, judge, "node1")
    judge_served_weights({"outcome": "error", "error": "RuntimeError: out of memory"}, models, None, judge, "node2")
    refused = _served(
        saved={"outcome": "error", "path": "/mnt/models/x", "error": "OSError: [Errno 30] Read-only file system"}
    )
    judge_served_weights(refused, models, None, judge, "node3")
    assert [(c.kind, c.metric, c.node) for c in judge.calls] == [
        ("unreadable", "model_cold_start_gbps", "node1"),
        ("unreadable", "model_cold_start_gbps", "node2"),
        ("expect", "model_weights_bytes", "node3"),
    ]
    assert judge.calls[1].value == "RuntimeError: out of memory" and not judge.calls[2].passed
