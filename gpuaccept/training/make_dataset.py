"""Generate the built-in fine-tuning fixture: bank customer Q&A, its train/test split and tokenizer.

Why synthetic: the acceptance suite must fine-tune offline and reproducibly, and the scenario it stands in for
(a bank fine-tuning an assistant on customer questions) needs a domain corpus whose loss can fall far
in a hundred steps. Every answer here is a deterministic function of (product, topic) or of the
procedure asked about; questions vary in phrasing and in customer preamble. The test split holds
phrasings/preambles never seen in training but facts that were, so a model that learnt the facts
(not the strings) scores a low eval loss, and a model that learnt nothing does not.

Run ``python -m gpuaccept.training.make_dataset`` to rewrite ``fixtures/training/{train,test}.jsonl``
and ``tokenizer.json``; the output is byte-identical on every run (fixed seed, sorted iteration).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

__all__ = ["FIXTURES", "SPECIAL_TOKENS", "SYSTEM_PROMPT", "build_examples", "main", "train_tokenizer"]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "training"
SYSTEM_PROMPT = "You are the customer assistant of Northwind Bank. Answer briefly and exactly."
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SEED = 20261122

PRODUCTS: dict[str, dict[str, str]] = {
    "Everyday Checking": {"fee": "$5", "waiver": "$500", "deposit": "$25", "rate": "0.01%", "overdraft": "$35"},
    "Premier Checking": {"fee": "$25", "waiver": "$5,000", "deposit": "$100", "rate": "0.05%", "overdraft": "$0"},
    "Student Checking": {"fee": "$0", "waiver": "no balance", "deposit": "$10", "rate": "0.00%", "overdraft": "$15"},
    "High-Yield Savings": {"fee": "$0", "waiver": "no balance", "deposit": "$1", "rate": "4.10%", "overdraft": "$0"},
    "Money Market": {"fee": "$12", "waiver": "$2,500", "deposit": "$1,000", "rate": "3.25%", "overdraft": "$35"},
    "12-Month CD": {"fee": "$0", "waiver": "no balance", "deposit": "$500", "rate": "4.50%", "overdraft": "$0"},
    "Business Checking": {"fee": "$15", "waiver": "$2,000", "deposit": "$50", "rate": "0.02%", "overdraft": "$35"},
    "Retirement IRA": {"fee": "$0", "waiver": "no balance", "deposit": "$250", "rate": "3.90%", "overdraft": "$0"},
}

#: topic -> (question phrasings with {p} for the product, answer template over the product's facts)
TOPICS: dict[str, tuple[list[str], str]] = {
    "fee": (
        [
            "What is the monthly fee on the {p} account?",
            "How much does {p} cost per month?",
            "Is there a maintenance fee for {p}?",
            "What will I pay every month for a {p} account?",
            "Does the {p} account charge a monthly service fee?",
            "monthly charge for {p}?",
        ],
        "The {p} account has a monthly fee of {fee}. It is waived with a daily balance of {waiver}.",
    ),
    "deposit": (
        [
            "What is the minimum deposit to open {p}?",
            "How much money do I need to open a {p} account?",
            "Minimum opening deposit for {p}?",
            "Can you tell me the smallest amount to start a {p}?",
            "What do I have to deposit when I open {p}?",
            "opening deposit {p}",
        ],
        "You can open {p} with a minimum deposit of {deposit}.",
    ),
    "rate": (
        [
            "What interest rate does {p} pay?",
            "What is the APY on {p}?",
            "How much interest will my {p} earn?",
            "Tell me the current rate for {p}.",
            "Does {p} pay interest, and how much?",
            "rate on {p}?",
        ],
        "{p} currently earns {rate} APY. Rates are variable and may change.",
    ),
    "overdraft": (
        [
            "What is the overdraft fee on {p}?",
            "How much do you charge if I overdraw my {p}?",
            "If my {p} goes negative, what is the fee?",
            "Overdraft charge for {p}?",
            "What happens fee-wise when I overdraft {p}?",
            "overdraft {p} cost",
        ],
        "The overdraft fee on {p} is {overdraft} per item, at most three items per day.",
    ),
}

#: procedures -> (phrasings, fixed answer): the same for every product.
PROCEDURES: dict[str, tuple[list[str], str]] = {
    "lost_card": (
        [
            "I lost my debit card, what should I do?",
            "My card was stolen. How do I block it?",
            "How do I report a lost card?",
            "Someone took my wallet with my card in it.",
        ],
        "Lock the card in the app under Cards > Lock, then call 1-800-555-0199 to order a replacement.",
    ),
    "dispute": (
        [
            "How do I dispute a charge?",
            "There is a payment on my statement I did not make.",
            "I want to contest a transaction.",
            "A merchant charged me twice, how do I get it back?",
        ],
        "Open the transaction in the app and choose Dispute. We answer within 10 business days.",
    ),
    "wire": (
        [
            "How much is an international wire transfer?",
            "What does it cost to send money abroad by wire?",
            "Fee for an outgoing international wire?",
            "I need to wire money overseas, what is the charge?",
        ],
        "An outgoing international wire costs $45. Incoming wires are free.",
    ),
    "hours": (
        [
            "When are your branches open?",
            "What are the branch opening hours?",
            "Are you open on Saturday?",
            "What time does the branch close?",
        ],
        "Branches are open 9am to 5pm on weekdays and 9am to 1pm on Saturday.",
    ),
}

PREAMBLES = [
    "",
    "Hello. ",
    "Hi, I am a new customer. ",
    "Good morning! ",
    "Quick question: ",
    "I have been with the bank for years. ",
    "Sorry to bother you. ",
    "Hey there, ",
]


def _message(question: str, answer: str) -> dict[str, list[dict[str, str]]]:
    return {
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
        ]
    }


def build_examples(seed: int = SEED) -> tuple[list[dict], list[dict]]:
    """(train, test): every fact appears in train; test uses held-out (phrasing, preamble) pairs."""
    rng = random.Random(seed)
    train: list[dict] = []
    test: list[dict] = []
    for phrasings, answer in TOPICS.values():
        for product, facts in PRODUCTS.items():
            pairs = [(q, pre) for q in phrasings for pre in PREAMBLES]
            rng.shuffle(pairs)
            text = answer.format(p=product, **facts)
            for i, (q, pre) in enumerate(pairs[:14]):
                (test if i < 2 else train).append(_message(pre + q.format(p=product), text))
    for phrasings, answer in PROCEDURES.values():
        pairs = [(q, pre) for q in phrasings for pre in PREAMBLES]
        rng.shuffle(pairs)
        for i, (q, pre) in enumerate(pairs[:16]):
            (test if i < 2 else train).append(_message(pre + q, answer))
    rng.shuffle(train)
    rng.shuffle(test)
    return train, test


def train_tokenizer(texts: list[str], vocab_size: int = 1024) -> object:
    """A byte-level BPE tokenizer fitted on the training text (no download, no OOV)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def _texts(examples: list[dict]) -> list[str]:
    return [m["content"] for ex in examples for m in ex["messages"]]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=FIXTURES, help="folder for train.jsonl, test.jsonl, tokenizer.json")
    parser.add_argument("--vocab-size", type=int, default=1024)
    args = parser.parse_args(argv)
    train, test = build_examples()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        with open(args.out / f"{name}.jsonl", "w") as fh:
            for row in rows:
                fh.write(json.dumps(row, sort_keys=True) + "\n")
    tokenizer = train_tokenizer(_texts(train), args.vocab_size)
    tokenizer.save(str(args.out / "tokenizer.json"))  # type: ignore[attr-defined]
    print(f"wrote {len(train)} train / {len(test)} test examples and tokenizer.json to {args.out}")


if __name__ == "__main__":
    main()
