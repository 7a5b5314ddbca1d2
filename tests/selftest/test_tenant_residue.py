"""The residue scanner (SEC21) on CPU tensors: the same torch ops the probe runs on each GPU, so a planted
pattern is found at any address, fresh zeros and foreign bytes are not taken for it, and the judge fails a GPU
naming the bytes found."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpuaccept.contracts.tenant import ResidueGpu, ResidueRecord
from gpuaccept.dispatch.result import parse_records
from gpuaccept.probes import residue, specs
from gpuaccept.verdicts.tenant import judge_residue, judge_scanner_proof, residue_absent

from ._tenant_judge import RecordingJudge

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

pytestmark = pytest.mark.selftest

MIB = 2**20


def _chunks(n: int = 3, mib: int = 2) -> list[torch.Tensor]:
    return [torch.zeros(mib * MIB // 8, dtype=torch.int64) for _ in range(n)]


def test_pattern_words_carry_the_tag_and_are_never_zero() -> None:
    page = residue.page_pattern(7)
    assert page.numel() == residue.PAGE_WORDS and bool((page != 0).all())
    assert {(int(w) >> 32) & 0xFFFFFFFF for w in page.tolist()} == {residue.tag_of(7)}
    assert len(set(page.tolist())) == residue.PAGE_WORDS  # every in-page offset its own word
    assert residue.tag_of(7) != residue.tag_of(8)


def test_filled_memory_is_found_whole() -> None:
    chunks = _chunks()
    assert residue.fill(chunks, seed=7) == 6 * MIB
    found = residue.scan(chunks, seed=7)
    assert found["bytes"] == found["pattern_bytes"] == found["tag_bytes"] == 6 * MIB
    assert found["nonzero_bytes"] > 0


def test_pattern_is_found_at_any_page_offset() -> None:
    """The scanner's position is the word's offset inside its 4 KiB page: memory the next process maps at
    another address but the same page offset still matches."""
    backing = torch.zeros((2 * MIB + 4096) // 8, dtype=torch.int64)
    residue.fill([backing[:-512]], seed=3)
    shifted = backing[64 : 64 + 2 * MIB // 8]  # 512 bytes further on: same physical words, other start
    assert residue.scan([shifted], seed=3)["pattern_bytes"] == 2 * MIB - 512


def test_zeros_and_another_runs_pattern_are_not_residue() -> None:
    zeros = _chunks(1)
    assert residue.scan(zeros, seed=7) | {"top_values": [], "sampled_words": 0} == {
        "bytes": 2 * MIB,
        "pattern_bytes": 0,
        "tag_bytes": 0,
        "nonzero_bytes": 0,
        "sampled_words": 0,
        "top_values": [],
    }
    other = _chunks(1)
    residue.fill(other, seed=8)
    assert residue.scan(other, seed=7)["pattern_bytes"] == 0


def test_foreign_bytes_are_counted_and_named() -> None:
    chunk = torch.full((2 * MIB // 8,), 0x0101010101010101, dtype=torch.int64)
    found = residue.scan([chunk], seed=7)
    assert found["pattern_bytes"] == 0 and found["nonzero_bytes"] == 2 * MIB
    assert found["top_values"][0].value == "0x0101010101010101"


def test_partly_overwritten_fill_counts_what_is_left() -> None:
    chunk = _chunks(1)[0]
    residue.fill([chunk], seed=11)
    chunk[: MIB // 8].zero_()
    assert residue.scan([chunk], seed=11)["pattern_bytes"] == MIB


def test_no_cuda_reports_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    record = residue.collect("scan", 7)
    assert not record.cuda and record.why == "no CUDA device visible" and record.gpus == []
    assert residue_absent(record, "n1") == "n1: no GPU to scan (no CUDA device visible)"


#: one H200's scan step as the probe wrote it (fixtures/tenant/README.md): the GPUs below are it, renumbered
SCANNED = specs.RESIDUE.read(
    parse_records("residue", (FIXTURES / "tenant" / "h200-1gpu.residue-scan.out").read_text(), 1, ())[0]
).gpus[0]


def _gpu(index: int, pattern: int, nonzero: int = 0) -> ResidueGpu:
    return SCANNED.model_copy(
        update={
            "index": index,
            "uuid": f"GPU-{index}",
            "pci_bus_id": f"00000000:{index:02X}:00.0",
            "pattern_bytes": pattern,
            "nonzero_bytes": nonzero,
        }
    )


def test_judge_fails_the_gpu_with_residue_and_shows_what_the_driver_left() -> None:
    scan = ResidueRecord(mode="scan", seed=7, tag="0x1", cuda=True, why=None, gpus=[_gpu(0, 0), _gpu(1, 4096, 4096)])
    fill = ResidueRecord(mode="fill", seed=7, tag="0x1", cuda=True, why=None, gpus=[_gpu(0, 0), _gpu(1, 0)])
    judge = RecordingJudge()
    judge_residue(scan, judge, "n1", fill)
    checks = {c.extra["gpu"]: c.value for c in judge.of("gpu_residue_pattern_bytes")}
    assert checks == {"0 (00000000:00:00.0)": 0, "1 (00000000:01:00.0)": 4096}
    left = {c.extra["gpu"]: c.extra["driver_left"] for c in judge.of("gpu_residue_nonzero_bytes")}
    assert left["0 (00000000:00:00.0)"] == "zeros"
    assert judge.of("gpu_residue_pattern_bytes")[1].extra["filled_bytes"] == SCANNED.bytes


def test_scanner_proof_fails_where_the_planted_pattern_is_not_found() -> None:
    plant = ResidueRecord(mode="plant", seed=7, tag="0x1", cuda=True, why=None, gpus=[_gpu(0, 2**30), _gpu(1, 0)])
    judge = RecordingJudge()
    judge_scanner_proof(plant, judge, "n1")
    assert [c.passed for c in judge.of("gpu_residue_scanner_proof")] == [True, False]
