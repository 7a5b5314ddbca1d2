"""The fine-tune's data path and judging aids, without launching a probe.

Covers what a wrong result would silently skew: the committed fixture being what the generator makes,
prompt masking (loss on answers only), every test example counted exactly once across ranks with the
same number of eval batches everywhere (FSDP forwards are collectives), full training batches per rank
even when the set is smaller than world x batch, and the loss-curve arithmetic the test judges with.
"""

from __future__ import annotations

import json
import math

import pytest

from gpuaccept.report.charts.loss import artifacts
from gpuaccept.training.config import FIXTURES, profile_for
from gpuaccept.training.data import batches, collate, encode, eval_shards, load_splits, load_tokenizer
from gpuaccept.training.make_dataset import PRODUCTS, build_examples
from gpuaccept.training.report import loss_rebound, rolling_mean, steps_to_target

pytestmark = pytest.mark.selftest


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(None, FIXTURES / "tokenizer.json")


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


def test_fixture_is_what_the_generator_makes():
    train, test = build_examples()
    assert _jsonl("train.jsonl") == train
    assert _jsonl("test.jsonl") == test
    assert build_examples() == (train, test), "generator is not deterministic"


def test_test_split_is_unseen_text_over_seen_facts():
    train, test = load_splits(None)[:2]
    train_questions = {row["messages"][1]["content"] for row in train}
    train_answers = {row["messages"][2]["content"] for row in train}
    for row in test:
        assert row["messages"][1]["content"] not in train_questions
        assert row["messages"][2]["content"] in train_answers
    assert len({row["messages"][2]["content"] for row in train}) >= len(PRODUCTS) * 4


def test_encode_masks_the_prompt(tokenizer):
    row = _jsonl("train.jsonl")[0]
    example = encode(tokenizer, row, 512)
    assert example is not None
    n_prompt = len(example["prompt_ids"])
    assert set(example["labels"][:n_prompt]) == {-100}
    assert example["labels"][n_prompt:] == example["input_ids"][n_prompt:] == example["answer_ids"]
    assert tokenizer.decode(example["answer_ids"], skip_special_tokens=True) == row["messages"][2]["content"]
    assert example["answer_ids"][-1] == tokenizer.eos_token_id, "the answer must teach the model to stop"
    assert encode(tokenizer, row, n_prompt) is None, "a prompt that fills seq_len leaves nothing to learn"


def test_collate_pads_right_to_a_multiple_of_8(tokenizer):
    rows = _jsonl("train.jsonl")[:3]
    examples = [encode(tokenizer, r, 512) for r in rows]
    batch = collate(examples, pad_id=0)
    assert batch["input_ids"].shape[1] % 8 == 0
    for i, example in enumerate(examples):
        n = len(example["input_ids"])
        assert int(batch["attention_mask"][i].sum()) == n
        assert set(batch["labels"][i, n:].tolist()) <= {-100}


@pytest.mark.parametrize("world", [1, 2, 3, 8, 100])
def test_eval_shards_cover_each_example_once(tokenizer, world):
    examples = [encode(tokenizer, r, 512) for r in _jsonl("test.jsonl")]
    shards = [eval_shards(examples, rank, world, 16, 0) for rank in range(world)]
    assert len({len(s) for s in shards}) == 1, "ranks would run different numbers of FSDP forwards"
    labelled = sum(int((b["labels"] != -100).sum()) for s in shards for b in s)
    assert labelled == sum(sum(1 for x in e["labels"] if x != -100) for e in examples)


def test_batches_are_full_even_when_the_set_is_small(tokenizer):
    examples = [encode(tokenizer, r, 512) for r in _jsonl("test.jsonl")]  # 72 examples
    stream = batches(examples, batch_size=64, rank=1, world=4, seed=0, pad_id=0)
    for _ in range(5):
        assert next(stream)["input_ids"].shape[0] == 64


def test_table_batches_equal_collated_batches(tokenizer):
    """The one-table fast path yields exactly what collating the sampled examples would."""
    from torch.utils.data import DistributedSampler

    examples = [encode(tokenizer, r, 512) for r in _jsonl("train.jsonl")]
    stream = batches(examples, batch_size=48, rank=1, world=3, seed=7, pad_id=0)
    sampler = DistributedSampler(range(len(examples)), num_replicas=3, rank=1, shuffle=True, seed=7)
    sampler.set_epoch(0)
    order = list(sampler)
    for step in range(3):
        expected = collate([examples[i] for i in order[step * 48 : (step + 1) * 48]], pad_id=0)
        got = next(stream)
        for key in expected:
            assert got[key].equal(expected[key]), key


def test_profiles_are_consistent():
    for device in ("cpu", "gpu"):
        cfg = profile_for(device)
        assert cfg.model_config.is_file()
        assert cfg.steps % cfg.ckpt_every == 0, "the last step must be a checkpoint (the final adapter)"
        assert cfg.timed_from_step < cfg.ckpt_every
    assert profile_for("cpu", steps=7, lr=None).steps == 7
    assert profile_for("cpu", lr=None).lr == profile_for("cpu").lr


def test_steps_to_target_needs_a_full_window():
    losses = [5.0, 0.1] + [1.0] * 20 + [0.2] * 20
    assert steps_to_target(losses, 0.5) == 22 + 7  # first full 10-step window averaging <= 0.5
    assert steps_to_target([5.0] * 30, 0.5) is None
    assert steps_to_target([math.nan] * 30, 0.5) is None


def test_loss_rebound():
    assert loss_rebound([3.0] * 10 + [1.0] * 10) == pytest.approx(1.0)
    assert loss_rebound([3.0] * 10 + [1.0] * 10 + [2.0] * 10) == pytest.approx(2.0)
    assert loss_rebound([1.0] * 5) is None
    assert rolling_mean([1.0, 3.0], 2) == [1.0, 2.0]


def test_artifacts_draw_the_curve(tmp_path):
    history = {"losses": [6.0 / (i + 1) for i in range(40)], "evals": [[20, 0.4], [40, 0.2]]}
    (tmp_path / "history.json").write_text(json.dumps(history))
    (tmp_path / "comparison.json").write_text("{}")
    paths = artifacts(tmp_path, title="ddp", target=0.5)
    assert [p.name for p in paths] == ["loss_curve.png", "history.json", "comparison.json"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert artifacts(tmp_path / "missing", title="x") == []
