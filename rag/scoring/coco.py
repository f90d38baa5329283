"""MS MARCO's BLEU-1 and ROUGE-L as pycocoevalcap computes them, on coco-caption's tokens
(:mod:`rag.scoring.ptb_tokenizer`), and the pair checks every scorer shares."""

from __future__ import annotations

from typing import Sequence

from rag.errors import DataError
from rag.scoring.ptb_tokenizer import tokenize_batch


def check_pairs(predictions, references, what="references"):
    if len(predictions) == 0:
        raise DataError("no predictions to score (empty list)")
    if len(predictions) != len(references):
        raise DataError(f"{len(predictions)} predictions but {len(references)} {what}")
    for i, refs in enumerate(references):
        if isinstance(refs, str) or len(refs) == 0:
            raise DataError(f"example {i}: expected a non-empty list of {what}, got {refs!r}")


def tokenize_pairs(predictions, references, tokenizer):
    flat = list(predictions) + [r for refs in references for r in refs]
    tok = tokenize_batch(flat, tokenizer)
    hyps, pos, refs_tok = tok[: len(predictions)], len(predictions), []
    for refs in references:
        refs_tok.append(tok[pos: pos + len(refs)])
        pos += len(refs)
    return hyps, refs_tok


def cooked_bleu(hyps: list[str], refs: list[list[str]], n: int):
    """pycocoevalcap's BleuScorer holding each (hypothesis, references) pair's n-gram counts."""
    from pycocoevalcap.bleu.bleu_scorer import BleuScorer

    scorer = BleuScorer(n=n)
    for h, r in zip(hyps, refs):
        scorer += (h, r)
    return scorer


def sentence_bleu_scorer(hyps: list[str], refs: list[list[str]], n: int):
    # pycocoevalcap's Bleu.compute_score always uses option='closest'.
    return cooked_bleu(hyps, refs, n).compute_score(option="closest", verbose=0)


def bleu1(predictions: Sequence[str], references: Sequence[Sequence[str]], tokenizer: str = "python") -> float:
    """MS MARCO BLEU-1: pycocoevalcap ``Bleu(4)`` corpus-level score, index 0, in percent."""
    check_pairs(predictions, references)
    hyps, refs = tokenize_pairs(predictions, references, tokenizer)
    score, _ = sentence_bleu_scorer(hyps, refs, 4)
    return 100.0 * float(score[0])


def rouge_l_scores(predictions: Sequence[str], references: Sequence[Sequence[str]], tokenizer: str = "python") -> list:
    """Per-example ROUGE-L in [0, 1]: pycocoevalcap ``Rouge`` (beta=1.2; max P and R over references)."""
    from pycocoevalcap.rouge.rouge import Rouge

    check_pairs(predictions, references)
    hyps, refs = tokenize_pairs(predictions, references, tokenizer)
    rouge = Rouge()
    return [rouge.calc_score([h], r) for h, r in zip(hyps, refs)]

