"""Matching an answer: SQuAD exact match, CuratedTrec's regular expressions (DrQA) and DPR's
``has_answer`` (is an answer in a retrieved passage). The metrics (``em``, ``em_regex``), answer
recall, the hot-swap and the training targets all match answers here."""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from typing import Sequence

from rag.errors import DataError

_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (SQuAD v1.1 script)."""

    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        return "".join(ch for ch in text if ch not in _PUNCT)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def exact_match(prediction: str, golds: Sequence[str]) -> bool:
    """SQuAD exact match: max over golds of normalized string equality."""
    norm = normalize_answer(prediction)
    return any(norm == normalize_answer(g) for g in golds)


# a gold pattern is matched by the regex package (re's syntax and results, its VERSION0), which bounds
# the time one match may take: a pattern that backtracks without end is an error naming it, not a hang
REGEX_TIMEOUT_S = 2.0


def compile_regex(pattern: str):
    """Compile a gold answer pattern (IGNORECASE|UNICODE|MULTILINE); DataError naming it if invalid
    (everywhere: parsers, training targets, em_regex, answer recall)."""
    import regex

    try:
        return regex.compile(pattern, flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE | regex.VERSION0)
    except (regex.error, TypeError) as exc:
        raise DataError(f"invalid gold regular expression {pattern!r}: {exc}") from None


def bounded(compiled, how: str, text: str):
    """``compiled.match``, ``.search`` or ``.finditer`` (``how``; its matches as a list) of ``text``, in at
    most REGEX_TIMEOUT_S seconds; past it, a DataError naming the pattern (catastrophic backtracking)."""
    try:
        out = getattr(compiled, how)(text, timeout=REGEX_TIMEOUT_S)
        return list(out) if how == "finditer" else out
    except TimeoutError:
        raise DataError(f"gold regular expression {compiled.pattern!r}: matching {text[:40]!r} took over "
                        f"{REGEX_TIMEOUT_S:g} s (catastrophic backtracking: rewrite the pattern)") from None


def regex_match(prediction: str, patterns: Sequence[str]) -> bool:
    """CuratedTrec match, after DrQA's ``regex_match_score`` (``re.match``, anchored at the start, max
    over the golds), tried on the raw and on the ``normalize_answer``-ed prediction (a superset of
    DrQA's rule, equal to it where normalization changes nothing); an invalid pattern: DataError."""
    compiled = [compile_regex(p) for p in patterns]
    candidates = (prediction, normalize_answer(prediction))
    return any(bounded(c, "match", text) is not None for c in compiled for text in candidates)


@functools.cache
def _dpr_token_re():
    import regex

    return regex.compile(r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])", regex.IGNORECASE | regex.UNICODE | regex.MULTILINE)


def _dpr_tokens(text: str) -> list[str]:
    """DPR's SimpleTokenizer (alphanumeric runs or single non-space characters), uncased, after
    unicode NFD normalization (dpr/data/qa_validation.py: has_answer / _normalize)."""
    return [m.group().lower() for m in _dpr_token_re().finditer(unicodedata.normalize("NFD", text))]


def answer_in_text(text: str, answers: Sequence[str], regex: bool = False) -> bool:
    """DPR ``has_answer``: does any answer occur in ``text``?

    String mode: some answer's token sequence is a contiguous subsequence of the text's tokens
    (DPR SimpleTokenizer, uncased, NFD). Regex mode: ``re.search`` of any pattern in the NFD text
    (IGNORECASE|UNICODE|MULTILINE); an invalid pattern raises DataError.
    """
    if regex:
        norm = unicodedata.normalize("NFD", text)
        return any(bounded(compile_regex(unicodedata.normalize("NFD", a)), "search", norm) is not None for a in answers)
    tokens = _dpr_tokens(text)
    for a in answers:
        at = _dpr_tokens(a)
        if not at:
            continue
        k = len(at)
        for i in range(len(tokens) - k + 1):
            if tokens[i: i + k] == at:
                return True
    return False
