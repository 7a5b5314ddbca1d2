"""How well a model answers the test split: exact match and token F1 against the reference answers.

Computed here, on token ids, rather than through a metrics library: the libraries that provide SQuAD-style
scores fetch their metric code at run time, which fails on an offline node. Token F1 is SQuAD's definition
(the harmonic mean of precision and recall over the multiset of tokens two answers share), on the tokenizer's
ids instead of whitespace words: the same for every model that shares the tokenizer, which base and tuned do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

__all__ = ["exact_match", "score", "token_f1"]


def exact_match(produced: Sequence[int], reference: Sequence[int]) -> bool:
    return list(produced) == list(reference)


def token_f1(produced: Sequence[int], reference: Sequence[int]) -> float:
    """SQuAD's F1 over token ids: 1.0 for the same multiset, 0.0 for nothing in common (or one side empty)."""
    common = sum((Counter(produced) & Counter(reference)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(produced), common / len(reference)
    return 2 * precision * recall / (precision + recall)


def score(answers: Sequence[Sequence[int]], references: Sequence[Sequence[int]]) -> dict[str, float]:
    """Exact match and mean token F1 over the test split, in %."""
    if len(answers) != len(references) or not references:
        raise ValueError(f"{len(answers)} answers for {len(references)} references")
    exact = sum(exact_match(a, r) for a, r in zip(answers, references, strict=True))
    f1 = sum(token_f1(a, r) for a, r in zip(answers, references, strict=True))
    return {
        "exact_match_pct": round(100 * exact / len(references), 2),
        "token_f1_pct": round(100 * f1 / len(references), 2),
        "answers": len(references),
    }
