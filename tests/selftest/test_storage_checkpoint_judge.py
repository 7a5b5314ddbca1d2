"""The storage section's checkpoint is judged by the rule the fine-tune's own checkpoint and merged weights follow
(``gpuaccept.verdicts.storage.judge_speed``): its save and restore GB/s are held to the declared filesystem's
per-node figures from ``JUDGED_BYTES`` on; a site's smaller checkpoint (its ``sizes.checkpoint_mib``) is shown
beside the contract, saying why, and its bytes are still judged."""

from __future__ import annotations

from gpuaccept.contracts.storage import CheckpointFile, CheckpointPayload
from gpuaccept.thresholds.storage_site import Filesystem
from gpuaccept.verdicts.storage import JUDGED_BYTES, judge_checkpoint
from tests.selftest._tenant_judge import RecordingJudge

FS = Filesystem.model_validate(
    {
        "path": "/mnt/chkpt",
        "scope": "shared",
        "role": "checkpoints",
        "contract": {"read_gbps": 4, "write_gbps": 2, "source": "the site's purchase contract"},
    }
)


def _pair(nbytes: int) -> tuple[CheckpointPayload, CheckpointPayload]:
    files = [CheckpointFile(name="model-00001.safetensors", bytes=nbytes, sha256="ab" * 32)]
    saved = CheckpointPayload(
        mode="save",
        path="/mnt/chkpt/x",
        bytes=nbytes,
        seconds=1.0,
        gbps=1.0,
        files=files,
        mismatched={},
        cache=None,
        device=None,
        load_s=None,
        problem=None,
    )
    return saved, saved.model_copy(update={"mode": "restore", "cache": "written by node1"})


def test_a_checkpoint_of_judged_size_is_held_to_the_contract() -> None:
    saved, restored = _pair(JUDGED_BYTES)
    judge = RecordingJudge()
    judge_checkpoint(saved, {"node2": restored}, "chkpt", FS, judge, "node1")
    checks = {c.metric: c for c in judge.calls if c.kind == "check"}
    assert set(checks) == {"checkpoint_save_gbps", "checkpoint_restore_gbps"}
    # 1 GB/s against the contract's 2 (write) and 4 (read): both fail, each on its own node
    assert [(checks[m].node, checks[m].extra["limit"].min, checks[m].passed) for m in sorted(checks)] == [
        ("node2", 4, False),
        ("node1", 2, False),
    ]


def test_a_smaller_checkpoint_shows_its_speed_and_judges_its_bytes() -> None:
    saved, restored = _pair(JUDGED_BYTES - 1)
    judge = RecordingJudge()
    judge_checkpoint(saved, {"node2": restored}, "chkpt", FS, judge, "node1")
    kinds = {c.metric: c.kind for c in judge.calls}
    assert kinds["checkpoint_save_gbps"] == kinds["checkpoint_restore_gbps"] == "info"
    assert all("not its throughput" in c.extra["not_judged"] for c in judge.calls if c.kind == "info")
    (bytes_check,) = [c for c in judge.calls if c.metric == "checkpoint_bytes"]
    assert bytes_check.kind == "expect" and bytes_check.passed and bytes_check.node == "node2"
