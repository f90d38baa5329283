"""Evaluation metrics matching the official scripts used by Lewis et al. (2020), in percent.

=================  ===========================================================================
name               definition
=================  ===========================================================================
``em``             SQuAD v1.1 exact match (``normalize_answer``), max over golds
``em_regex``       CuratedTrec: DrQA's ``regex_match_score`` (IGNORECASE|UNICODE|MULTILINE,
                   ``re.match``), on the raw and on the SQuAD-normalized prediction
``bleu1``          MS MARCO: pycocoevalcap ``Bleu(4)`` corpus score, index 0 (BLEU-1)
``rougeL``         MS MARCO: pycocoevalcap ``Rouge`` (ROUGE-L, beta=1.2), mean over examples
``qbleu1``         Jeopardy QG: Q-BLEU-1 of Nema & Khapra (2018), the authors' head script
                   (weights: config ``metrics.qbleu1``; default ``QBLEU_DEFAULT_WEIGHTS``)
``accuracy``       FEVER: prediction == first gold label (exact string)
``trigram_distinct`` Table 5: distinct / total word tri-grams over all predictions
=================  ===========================================================================

Tokenization for the coco-caption scorers (``bleu1``, ``rougeL``, ``qbleu1``): see
:mod:`rag.scoring.ptb_tokenizer` (``tokenizer="python"``, the default, or ``"ptb"``, Java's).
The scorers live in :mod:`rag.scoring`; this module names the metrics and scores with them.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Callable, Sequence

from rag.errors import ConfigError, DataError
from rag.scoring.coco import _check_pairs, _cooked_bleu, _tokenize_pairs, bleu1, rouge_l, rouge_l_scores
from rag.scoring.answer_match import exact_match, regex_match
from rag.scoring.qbleu import qbleu1, qbleu1_scores

# the scorers' names callers read from here (rag.metrics is the one import of scoring)
from rag.scoring.answer_match import answer_in_text, compile_regex, normalize_answer  # noqa: F401,E402
from rag.scoring.ptb_tokenizer import TOKENIZERS, ptb_tokenize, tokenize_batch  # noqa: F401,E402
from rag.scoring.qbleu import (QBLEU_DEFAULT_WEIGHTS, QBLEU_WEIGHT_KEYS, QBLEU_WEIGHT_SETS,  # noqa: F401,E402
                               check_qbleu_weights, qbleu_components)

# ---------------------------------------------------------------------------------------------
# Accuracy and tri-gram diversity
# ---------------------------------------------------------------------------------------------


def accuracy(predictions: Sequence[str], golds: Sequence[Sequence[str]]) -> float:
    """Label accuracy in percent: prediction equals the first gold label (exact string)."""
    _check_pairs(predictions, golds, "gold labels")
    return 100.0 * sum(p == g[0] for p, g in zip(predictions, golds)) / len(predictions)


def trigram_distinct(texts: Sequence[str]) -> float:
    """Distinct / total word tri-grams over all texts, in percent (whitespace tokens, case kept;
    tri-grams never span two texts). 0.0 when there is no tri-gram."""
    grams: Counter = Counter()
    for t in texts:
        w = t.split()
        grams.update(tuple(w[i: i + 3]) for i in range(len(w) - 2))
    total = sum(grams.values())
    return 100.0 * len(grams) / total if total else 0.0



# ---------------------------------------------------------------------------------------------
# Dispatch and CLI
# ---------------------------------------------------------------------------------------------


def _mean_bool(fn: Callable[[str, Sequence[str]], bool], predictions, targets) -> float:
    _check_pairs(predictions, targets, "gold answers")
    return 100.0 * sum(bool(fn(p, t)) for p, t in zip(predictions, targets)) / len(predictions)


# metric name -> scorer(predictions, targets, tokenizer, qbleu_weights) -> score in [0, 100]
SCORERS: dict[str, Callable[..., float]] = {
    "em": lambda p, t, tokenizer, qbleu_weights: _mean_bool(exact_match, p, t),
    "em_regex": lambda p, t, tokenizer, qbleu_weights: _mean_bool(regex_match, p, t),
    "bleu1": lambda p, t, tokenizer, qbleu_weights: bleu1(p, t, tokenizer),
    "rougeL": lambda p, t, tokenizer, qbleu_weights: rouge_l(p, t, tokenizer),
    "qbleu1": lambda p, t, tokenizer, qbleu_weights: qbleu1(p, t, tokenizer=tokenizer, **(qbleu_weights or {})),
    "accuracy": lambda p, t, tokenizer, qbleu_weights: accuracy(p, t),
    "trigram_distinct": lambda p, t, tokenizer, qbleu_weights: trigram_distinct(p),
}
METRICS = tuple(SCORERS)


def compute(metric: str, predictions: Sequence[str], targets: Sequence[Sequence[str]],
            tokenizer: str = "python", qbleu_weights: dict | None = None) -> float:
    """Score ``predictions`` against ``targets`` (one list of golds per example) with ``metric``.

    ``tokenizer`` (python|ptb) is used by bleu1, rougeL and qbleu1; ``qbleu_weights`` (keys of
    ``QBLEU_WEIGHT_KEYS``) by qbleu1 only (default ``QBLEU_DEFAULT_WEIGHTS``)."""
    if metric not in SCORERS:
        raise ConfigError(f"unknown metric {metric!r}; valid metrics: {', '.join(METRICS)}")
    if len(predictions) == 0:
        raise DataError(f"metric {metric}: no predictions to score (empty list)")
    return SCORERS[metric](predictions, targets, tokenizer, qbleu_weights)


def subset_scorer(metric: str, predictions: Sequence[str], targets: Sequence[Sequence[str]],
                  tokenizer: str = "python", qbleu_weights: dict | None = None) -> Callable[[Sequence[int]], float]:
    """``fn(indices)``: :func:`compute` of the examples at ``indices`` (repeats allowed), equal to
    it to the last bit, with what each example costs on its own done once, here: tokenizing,
    BLEU's n-gram counts, the per-example scores that ROUGE-L, Q-BLEU-1 and EM average. A
    bootstrap scores hundreds of resamples of the same predictions (the report's ± cells)."""
    if metric not in SCORERS:
        raise ConfigError(f"unknown metric {metric!r}; valid metrics: {', '.join(METRICS)}")
    if len(predictions) == 0:
        raise DataError(f"metric {metric}: no predictions to score (empty list)")
    if metric != "trigram_distinct":
        _check_pairs(predictions, targets)
    if metric == "bleu1":
        hyps, refs = _tokenize_pairs(predictions, targets, tokenizer)
        cooked = _cooked_bleu(hyps, refs, 4)

        def score(ix: Sequence[int]) -> float:
            part = cooked.copy()  # a scorer of the resample's pairs, counted once above
            part.ctest = [cooked.ctest[i] for i in ix]
            part.crefs = [cooked.crefs[i] for i in ix]
            return 100.0 * float(part.compute_score(option="closest", verbose=0)[0][0])
    elif metric == "rougeL":  # means of per-example scores, summed in order as rouge_l and qbleu1 sum them
        each = rouge_l_scores(predictions, targets, tokenizer)

        def score(ix: Sequence[int]) -> float:
            picked = [each[i] for i in ix]
            return 100.0 * float(sum(picked) / len(picked))
    elif metric == "qbleu1":
        each = qbleu1_scores(predictions, targets, tokenizer=tokenizer, **(qbleu_weights or {}))

        def score(ix: Sequence[int]) -> float:
            picked = [each[i] for i in ix]
            return 100.0 * sum(picked) / len(picked)
    elif metric in ("em", "em_regex", "accuracy"):
        hit = [SCORERS[metric]([p], [t], tokenizer, qbleu_weights) > 0 for p, t in zip(predictions, targets)]

        def score(ix: Sequence[int]) -> float:
            return 100.0 * sum(hit[i] for i in ix) / len(ix)
    else:  # trigram_distinct: counted over the resample as a whole

        def score(ix: Sequence[int]) -> float:
            return compute(metric, [predictions[i] for i in ix], [targets[i] for i in ix], tokenizer, qbleu_weights)

    def checked(ix: Sequence[int]) -> float:
        if len(ix) == 0:
            raise DataError(f"metric {metric}: no predictions to score (empty list)")
        return score(ix)

    return checked


def _index_by_id(rows: list[dict], path, field: str) -> dict:
    out = {}
    for row in rows:
        key = row["id"]
        if not isinstance(key, (str, int)) or isinstance(key, bool):
            raise DataError(f"{path}: id {key!r} is not a string or integer")
        if key in out:
            raise DataError(f"{path}: duplicate id {key!r}")
        out[key] = row[field]
    return out


def score_files(metric: str, predictions_path, references_path) -> tuple[float, int]:
    from rag.io import read_jsonl

    if metric not in METRICS:
        raise ConfigError(f"unknown metric {metric!r}; valid metrics: {', '.join(METRICS)}")
    preds = _index_by_id(read_jsonl(predictions_path, required=("id", "prediction")), predictions_path, "prediction")
    refs = _index_by_id(read_jsonl(references_path, required=("id", "targets")), references_path, "targets")
    for key in preds:
        if key not in refs:
            raise DataError(f"{references_path}: no reference for id {key!r} (present in {predictions_path})")
    for key in refs:
        if key not in preds:
            raise DataError(f"{predictions_path}: no prediction for id {key!r} (present in {references_path})")
    ids = list(preds)
    for key in ids:
        if not isinstance(preds[key], str):
            raise DataError(f"{predictions_path}: id {key!r}: prediction is not a string")
        t = refs[key]
        if not isinstance(t, list) or not all(isinstance(x, str) for x in t):
            raise DataError(f"{references_path}: id {key!r}: targets must be a list of strings")
        if not t and metric != "trigram_distinct":
            raise DataError(f"{references_path}: id {key!r}: empty targets")
    score = compute(metric, [preds[k] for k in ids], [refs[k] for k in ids])
    return score, len(ids)


def _cmd_score(args) -> int:
    score, n = score_files(args.metric, args.predictions, args.references)
    print(json.dumps({"metric": args.metric, "score": float(score), "n": n}))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("score", help="score predictions against references with one metric")
    p.add_argument("--metric", required=True, metavar="NAME", help=f"one of: {', '.join(METRICS)}")
    p.add_argument("--predictions", required=True, metavar="P.jsonl", help='lines {"id": ..., "prediction": "..."}')
    p.add_argument("--references", required=True, metavar="R.jsonl", help='lines {"id": ..., "targets": [...]}')
    p.set_defaults(func=_cmd_score)
