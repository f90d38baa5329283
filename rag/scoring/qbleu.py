"""Q-BLEU-1 (Nema & Khapra 2018), the Jeopardy question-generation metric, as the authors' script
computes it: weights, stop words, the four word classes and the per-example scores."""

from __future__ import annotations

from typing import Sequence

from pydantic import model_validator
from pydantic_core import PydanticCustomError

from rag.keyspec import Key, Num, validate
from rag.scoring.coco import check_pairs, sentence_bleu_scorer
from rag.scoring.ptb_tokenizer import tokenize_batch


# Weights (w_sw = 1 - w_ner - w_qt - w_re; the BLEU-1 share is 1 - delta). The RAG paper says only
# "SQuAD-tuned Q-BLEU-1". Known sets (docs/metrics.md gives the sources and the reason for the default):
QBLEU_WEIGHT_SETS = {
    # the first author's later SQuAD evaluation scripts: the default (see docs/metrics.md)
    "squad": {"w_ner": 0.41, "w_qt": 0.20, "w_re": 0.20, "delta": 0.66},
    # github.com/PrekshaNema25/Answerability-Metric README.md example command line and its tests
    "readme": {"w_ner": 0.6, "w_qt": 0.2, "w_re": 0.1, "delta": 0.7},
    # a public RAG-on-Jeopardy reproduction
    "rag_jeopardy_repro": {"w_ner": 0.41, "w_qt": 0.20, "w_re": 0.36, "delta": 0.66},
}
QBLEU_DEFAULT_WEIGHTS = dict(QBLEU_WEIGHT_SETS["squad"])
QBLEU_WEIGHT_KEYS = ("w_ner", "w_qt", "w_re", "delta")


class QBleuWeights(Key):
    """The Q-BLEU-1 weights; stop-word weight = 1 - w_ner - w_qt - w_re, BLEU-1 weight = 1 - delta."""

    w_ner: Num(ge=0, le=1) = QBLEU_DEFAULT_WEIGHTS["w_ner"]
    w_qt: Num(ge=0, le=1) = QBLEU_DEFAULT_WEIGHTS["w_qt"]
    w_re: Num(ge=0, le=1) = QBLEU_DEFAULT_WEIGHTS["w_re"]
    delta: Num(ge=0, le=1) = QBLEU_DEFAULT_WEIGHTS["delta"]

    @model_validator(mode="after")
    def _stop_word_weight(self) -> "QBleuWeights":
        total = self.w_ner + self.w_qt + self.w_re
        if total > 1.0 + 1e-9:
            line = f"w_ner + w_qt + w_re = {total:g} > 1 (the stop-word weight is 1 minus their sum)"
            raise PydanticCustomError("config", "{line}", {"line": line, "path": ()})
        return self

    @property
    def w_sw(self) -> float:
        """The stop-word weight."""
        return 1.0 - self.w_ner - self.w_qt - self.w_re

    def weights(self) -> dict:
        """The four weights by name, in QBLEU_WEIGHT_KEYS' order."""
        return {k: getattr(self, k) for k in QBLEU_WEIGHT_KEYS}


# The authors' stop-word list (answerability_score.py; nltk's English list of that time, as used
# there; embedded so that nothing is downloaded at run time).
QBLEU_STOP_WORDS = frozenset(
    """did have ourselves hers between yourself but again there about once during out very having
    with they own an be some for do its yours such into of most itself other off is s am or as from
    him each the themselves until below are we these your his through don nor me were her more
    himself this down should our their while above both up to ours had she all no at any before
    them same and been in will on does yourselves then that because over so can not now under he
    you herself has just too only myself those i after few t being if theirs my against a by doing
    it further was here than""".split()
)
_QT = ("What", "Which", "Why", "Who", "Whom", "Whose", "Where", "When", "How")
QUESTION_WORDS = frozenset(_QT) | frozenset(w.lower() for w in _QT)


def _qt_words(words: list[str]) -> list[str]:
    """Question-type words, plus the word after what/which (the answer type)."""
    out = []
    for i, w in enumerate(words):
        if w in QUESTION_WORDS:
            out.append(w)
            if i + 1 < len(words) and w.lower() in ("what", "which"):
                out.append(words[i + 1])
    return out


def qbleu_components(question: str) -> dict[str, str]:
    """Split a question into the four Q-BLEU word classes, as the authors' script (its SQuAD question
    type): named entities are
    the tokens with an upper-case first character after a leading question word (no NER model),
    numbers are relevant words. The order of the qt words may differ from theirs; BLEU-1 counts
    unigrams, so scores are the same."""
    words = question.split()
    qt = _qt_words(words)
    removed = set(qt)
    imp = [w for w in words if w not in removed and not w[0].isupper() and w not in QBLEU_STOP_WORDS]
    ner_words = words[1:] if words and words[0].lower() in QUESTION_WORDS else words
    ner = [w for w in ner_words if w[0].isupper()]
    sw = [w.lower() for w in words if w.lower() in QBLEU_STOP_WORDS]
    return {"imp": " ".join(imp), "ner": " ".join(ner), "qt": " ".join(qt), "sw": " ".join(sw)}


def qbleu1_scores(predictions: Sequence[str], references: Sequence[Sequence[str]], tokenizer: str = "python",
                  **weights: float) -> list[float]:
    """Per-example Q-BLEU-1 in [0, 1]: ``delta * Answerability + (1 - delta) * BLEU-1``, the best of each
    example's references (``weights``: w_ner, w_qt, w_re, delta; the defaults where absent). Each
    Answerability component is the harmonic mean of the sentence BLEU-1 of the predicted component against
    the reference one and vice versa (1 when both are empty), as the authors' head script
    (github.com/PrekshaNema25/Answerability-Metric at ec5cf5e) computes it (tests/data/qbleu_head_vectors.json).
    An empty prediction scores 0."""
    check_pairs(predictions, references)
    W = validate(QBleuWeights, weights, "qbleu1 weights")
    w_ner, w_qt, w_re, w_sw, delta = W.w_ner, W.w_qt, W.w_re, W.w_sw, W.delta

    pairs = [(p, r) for p, refs in zip(predictions, references) for r in refs]
    keys = ("imp", "ner", "qt", "sw")
    hyp_c = [qbleu_components(p) for p, _ in pairs]
    ref_c = [qbleu_components(r) for _, r in pairs]
    n = len(pairs)
    texts = [p for p, _ in pairs] + [r for _, r in pairs]
    for k in keys:
        texts += [c[k] for c in hyp_c] + [c[k] for c in ref_c]
    tok = tokenize_batch(texts, tokenizer)

    def block(i):
        return tok[i * n: (i + 1) * n]

    # Fluency: sentence-level BLEU-1 of the whole question (per-line "Bleu_1" in their script).
    _, fl = sentence_bleu_scorer(block(0), [[r] for r in block(1)], 1)
    fluent = fl[0]
    comp = {}
    for j, k in enumerate(keys):
        h, r = block(2 + 2 * j), block(3 + 2 * j)
        _, p = sentence_bleu_scorer(h, [[x] for x in r], 1)  # precision direction
        _, rc = sentence_bleu_scorer(r, [[x] for x in h], 1)  # recall direction (swapped)
        # 1 when the hypothesis and reference parts are both empty strings (before tokenization)
        comp[k] = [1.0 if not hyp_c[i][k] and not ref_c[i][k]
                   else 0.0 if a + b == 0 else 2 * a * b / (a + b)
                   for i, (a, b) in enumerate(zip(p[0], rc[0]))]
    per_pair = []
    for i in range(n):
        answerability = (w_re * comp["imp"][i] + w_ner * comp["ner"][i] + w_qt * comp["qt"][i]
                         + w_sw * comp["sw"][i])
        per_pair.append(0.0 if not pairs[i][0].strip() else delta * answerability + (1 - delta) * fluent[i])
    out, pos = [], 0
    for refs in references:
        out.append(max(per_pair[pos: pos + len(refs)]))
        pos += len(refs)
    return out

