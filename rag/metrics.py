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

Tokenization for the coco-caption scorers (``bleu1``, ``rougeL``, ``qbleu1``): the official
scripts run Stanford's Java ``PTBTokenizer`` (``-preserveLines -lowerCase``) and then drop the
tokens in coco-caption's ``PUNCTUATIONS`` list. The default here is ``ptb_tokenize``, a pure
Python re-implementation of that behaviour, so that scores do not depend on Java being installed.
``tokenizer="ptb"`` uses pycocoevalcap's Java wrapper instead (needs ``java`` on PATH). Known
differences of the fallback are listed in ``ptb_tokenize``'s docstring.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from functools import lru_cache
from typing import Callable, Sequence

from rag.errors import ConfigError, DataError

TOKENIZERS = ("python", "ptb")

# ---------------------------------------------------------------------------------------------
# SQuAD exact match
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# CuratedTrec regex match (DrQA)
# ---------------------------------------------------------------------------------------------

_REGEX_FLAGS = re.IGNORECASE | re.UNICODE | re.MULTILINE


def compile_regex(pattern: str) -> "re.Pattern":
    """Compile a gold answer pattern (IGNORECASE|UNICODE|MULTILINE); DataError naming it if invalid.

    The one behaviour for an uncompilable CuratedTrec pattern everywhere (parsers, training
    targets, em_regex, answer recall): stop with this error, never count it silently as no match.
    """
    try:
        return re.compile(pattern, flags=_REGEX_FLAGS)
    except (re.error, TypeError) as exc:
        raise DataError(f"invalid gold regular expression {pattern!r}: {exc}") from None


_compile = compile_regex


def regex_match(prediction: str, patterns: Sequence[str]) -> bool:
    """CuratedTrec match, after DrQA's ``regex_match_score``.

    DrQA compiles each gold pattern with IGNORECASE|UNICODE|MULTILINE and counts the prediction
    when ``compiled.match(prediction)`` succeeds (anchored at the start, not a full match), max
    over the golds. DrQA applies no normalization there; the project issue asks for "the same
    normalization" as EM, so the pattern is tried on the raw prediction and on
    ``normalize_answer(prediction)``; either match counts (a superset of DrQA's rule, equal to
    it whenever normalization does not change the string). DrQA logs and returns False for a
    pattern that does not compile; here that is a DataError naming the pattern, as in the
    parsers and the training path (``compile_regex``).
    """
    compiled = [_compile(p) for p in patterns]
    candidates = (prediction, normalize_answer(prediction))
    return any(c.match(text) is not None for c in compiled for text in candidates)


# ---------------------------------------------------------------------------------------------
# PTB tokenization as used by coco-caption
# ---------------------------------------------------------------------------------------------

# pycocoevalcap/tokenizer/ptbtokenizer.py. Note that the Java tokenizer runs with -lowerCase, so
# brackets come out as "-lrb-" etc. and are NOT removed by the upper-case entries of this list.
COCO_PUNCTUATIONS = frozenset(
    ["''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-", ".", "?", "!", ",", ":", "-", "--", "...", ";"]
)

_BRACKETS = {"(": "-lrb-", ")": "-rrb-", "[": "-lsb-", "]": "-rsb-", "{": "-lcb-", "}": "-rcb-"}
_OPEN = set("([{")
# Abbreviations that keep their final period in PTBTokenizer (a subset of Stanford's list).
_ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof st jr sr rev gen gov sen rep col lt sgt capt mt ft etc vs inc co corp ltd
    jan feb mar apr jun jul aug sep sept oct nov dec fig figs org dept univ est
    ala ariz calif colo conn fla ga ill ind kan ky md mass mich minn miss mo mont neb nev okla ore pa
    tenn tex va vt wash wis wyo""".split()
)
# Abbreviations that keep their period only before a number ("No. 5", "pp. 12").
_ABBREVIATIONS_BEFORE_NUMBER = frozenset(["no", "nos", "pp", "art"])
# PTBTokenizer's currency normalization (ptb3 escaping): pound -> "#", other currencies -> "$".
_CURRENCY = {"\u00a3": "#", "\u20ac": "$", "\u00a2": " cents "}
# Java 3.4.1 splits "12:30pm" -> 12:30 pm but keeps "7pm" whole.
_AMPM_RE = re.compile(r"^(\d+:\d+)([ap]m)$", re.IGNORECASE)
# "US$5" -> us$ 5, "HK$3" -> hk$ 3 (letters before "$" stay with it).
_PREFIXED_DOLLAR_RE = re.compile(r"^([^\W\d_]{1,3}\$)(\d.*)$")
# "1,000-mile" stays whole, "1,000km" -> 1,000 km.
_COMMA_NUMBER_PREFIX_RE = re.compile(r"^(\d{1,3}(?:,\d{3})+)(.+)$")
# feet and inches: 5'11" -> 5 ' 11 '', but 5'11 (no closing quote) -> 5 '11 as Java does.
_FEET_INCHES_RE = re.compile(r"^(\d+)'(\d+)$")
# "rock'n'roll" -> rock 'n' roll
_N_RE = re.compile(r"('n')", re.IGNORECASE)
# a clitic after an abbreviation's period: "D.C.'s" -> d.c. 's
_PERIOD_CLITIC_RE = re.compile(r"^(.*[^\W_]\.)('s|'m|'d|'re|'ve|'ll)$", re.IGNORECASE)
# Words PTBTokenizer splits in two.
_SPLIT_WORDS = {
    "gonna": ("gon", "na"), "gotta": ("got", "ta"), "wanna": ("wan", "na"), "lemme": ("lem", "me"),
    "gimme": ("gim", "me"), "cannot": ("can", "not"), "y'all": ("y'", "all"), "'tis": ("'t", "is"), "'twas": ("'t", "was"),
}
_CLITIC_RE = re.compile(r"^(.*[^\W_])('s|'m|'d|'re|'ve|'ll|n't)$", re.IGNORECASE)
_NUMBER_RE = re.compile(r"^[+-]?\d+(?:[.,:/]\d+)*$")
_URL_RE = re.compile(r"^(?:https?://|www\.)\S+$", re.IGNORECASE)
_DOTTED_RE = re.compile(r"^(?:[^\W\d_]\.)+$|^[^\W\d_]+(?:\.[^\W\d_]+)+\.$")
# Infix symbols that always become tokens of their own (except inside numbers/URLs).
_INFIX_RE = re.compile(r"(--+|[=*×·°,;])")


def _is_abbreviation(word: str) -> bool:
    """Does ``word`` (ending in ".") keep its period in PTBTokenizer (approximation)?"""
    body = word[:-1]
    return bool(_DOTTED_RE.match(word)) or body.lower() in _ABBREVIATIONS or (len(body) == 1 and body.isalpha())


def _split_core(core: str, before_quote: bool = False) -> list[str]:
    """Split a chunk without leading/trailing punctuation: infix symbols, clitics, split words."""
    if not core:
        return []
    if _NUMBER_RE.match(core) or _URL_RE.match(core):
        return [core]
    m = _PREFIXED_DOLLAR_RE.match(core)
    if m:
        return [m.group(1)] + _split_core(m.group(2), before_quote)
    m = _COMMA_NUMBER_PREFIX_RE.match(core)
    if m:
        return [core] if m.group(2).startswith("-") else [m.group(1)] + _split_core(m.group(2), before_quote)
    m = _FEET_INCHES_RE.match(core)
    if m:
        feet, inches = m.group(1), m.group(2)
        return [feet, "'", inches] if before_quote or len(inches) != 2 else [feet, "'" + inches]
    if core.lower() != "'n'" and _N_RE.search(core):
        out = []
        for p in _N_RE.split(core):
            out.extend([p] if _N_RE.fullmatch(p) else _split_core(p))
        return out
    m = _PERIOD_CLITIC_RE.match(core)
    if m:
        word, clitic = m.group(1), m.group(2)
        return ([word] if _is_abbreviation(word) else [word[:-1], "."]) + [clitic]
    parts = [p for p in _INFIX_RE.split(core) if p]
    if len(parts) > 1:
        out = []
        for p in parts:
            if _INFIX_RE.fullmatch(p):
                out.append("--" if p.startswith("--") else p)
            else:
                out.extend(_split_core(p))
        return out
    m = _AMPM_RE.match(core)
    if m:
        return [m.group(1), m.group(2)]
    low = core.lower()
    if low in _SPLIT_WORDS:
        a, b = _SPLIT_WORDS[low]
        return [core[: len(a)], core[len(a):]]
    tail: list[str] = []
    while True:  # "shouldn't've" -> should n't 've
        m = _CLITIC_RE.match(core)
        if not m:
            break
        core, clitic = m.group(1), m.group(2)
        if clitic.lower() == "n't" and not core:
            break
        tail.insert(0, clitic)
    return [core] + tail


def _tokenize_chunk(chunk: str, next_chunk: str) -> list[str]:
    if _URL_RE.match(chunk):
        return [chunk]
    lead: list[str] = []
    trail: list[str] = []
    # leading punctuation
    while chunk:
        c = chunk[0]
        if chunk.startswith("``"):
            lead.append("``"); chunk = chunk[2:]
        elif c == '"':
            lead.append("``"); chunk = chunk[1:]
        elif c in _BRACKETS:
            lead.append(_BRACKETS[c]); chunk = chunk[1:]
        elif c == "'" and len(chunk) > 1 and not (chunk[1].isdigit() or chunk.lower() in _SPLIT_WORDS
                                                    or chunk.lower().startswith("'n'")):
            lead.append("`"); chunk = chunk[1:]
        elif c in "$¿¡¥" or (c == "#" and len(chunk) > 1 and chunk[1].isdigit()) or (c == "-" and len(chunk) > 1 and not chunk[1].isdigit() and chunk[1] != "-"):
            lead.append(c); chunk = chunk[1:]
        else:
            break
    # trailing punctuation (collected right to left)
    while chunk:
        c = chunk[-1]
        if chunk.endswith("''") and len(chunk) > 2:
            trail.insert(0, "''"); chunk = chunk[:-2]
        elif c == '"':
            trail.insert(0, "''"); chunk = chunk[:-1]
        elif c in _BRACKETS:
            trail.insert(0, _BRACKETS[c]); chunk = chunk[:-1]
        elif c in ",;:%":
            trail.insert(0, c); chunk = chunk[:-1]
        elif c in "?!":
            m = re.search(r"[?!]+$", chunk)
            trail.insert(0, m.group(0)); chunk = chunk[: m.start()]
        elif c == "'" and chunk.lower() != "'n'":
            trail.insert(0, "'"); chunk = chunk[:-1]
        elif c == "-" and not chunk.endswith("--") and len(chunk) > 1:
            trail.insert(0, "-"); chunk = chunk[:-1]
        elif c == ".":
            m = re.search(r"\.+$", chunk)
            dots = m.group(0)
            if len(dots) >= 3:
                trail.insert(0, "..."); chunk = chunk[: m.start()]
            elif len(dots) == 2:
                trail[0:0] = [".", "."]; chunk = chunk[: m.start()]
            elif chunk == ".":
                trail.insert(0, "."); chunk = ""
            else:
                body = chunk[:-1]
                if (_DOTTED_RE.match(chunk) or body.lower() in _ABBREVIATIONS
                        or (body.lower() in _ABBREVIATIONS_BEFORE_NUMBER and next_chunk[:1].isdigit())):
                    break  # abbreviation keeps its period
                trail.insert(0, "."); chunk = body
        else:
            break
    if chunk and set(chunk) <= set("-"):
        core_tokens = ["--" if len(chunk) >= 2 else "-"]
    else:
        core_tokens = _split_core(chunk, before_quote=trail[:1] == ["''"])
    return lead + core_tokens + trail


def ptb_tokenize(text: str) -> list[str]:
    """Pure-Python imitation of coco-caption's tokenization (Stanford PTBTokenizer 3.4.1 with
    ``-preserveLines -lowerCase``, then removal of coco-caption's ``PUNCTUATIONS``).

    Reproduced: clitics split off ("don't" -> do n't, "it's" -> it 's, "can't" -> ca n't,
    "shouldn't've" -> should n't 've), gonna/gotta/wanna/cannot split, hyphenated words kept
    whole ("state-of-the-art"), numbers kept whole ("1,000", "3.14", "10:30"), "$5" -> $ 5,
    "5%" -> 5 %, brackets -> -lrb- -rrb- -lsb- -rsb- -lcb- -rcb- (kept: coco-caption's list holds
    the upper-case forms, which never match lower-cased output), curly quotes/apostrophes mapped
    to their ASCII forms, em/en dashes -> "--", "…" -> "...", runs of "!"/"?" of length >= 2 kept
    as one token ("?!", "!!!"), dotted abbreviations keep their period ("u.s.", "e.g.", "mr.").

    "£" -> "#", "€" -> "$", "¢" -> "cents" (PTB currency normalization), "12:30pm" -> 12:30 pm, "y'all" -> y' all.

    Also as Java 3.4.1 (checked against the jar): a clitic after an abbreviation's period
    ("D.C.'s" -> d.c. 's), feet and inches ("5'11\"" -> 5 11; without the closing quote
    "5'11" -> 5 '11), "7pm" kept whole but "12:30pm" -> 12:30 pm, "US$5" -> us$ 5,
    "rock'n'roll" -> rock 'n' roll, "1,000-mile" kept whole but "1,000km" -> 1,000 km.

    Known differences from Java (documented, tested): Stanford's abbreviation list and its
    sentence-final abbreviation rules are approximated by a short list (e.g. Java keeps
    "co." in "Acme Co. Ltd" but splits "Vol." — only affects whether a token keeps its final
    period; Java also keeps "s." in "1,000s." where this gives "s"); emoticons are not
    recognised (Java: "I <3 NLP :)" -> i < 3 nlp -rrb-; here i <3 nlp -rrb-); HTML-like tokens
    and e-mail addresses are not special-cased; "5'11\"-tall" (Java: 5 11 tall) and
    "7:30p.m." (Java: 7:30 p.m.) are not split.
    """
    text = text.replace("\n", " ").replace("\r", " ")
    text = unicodedata.normalize("NFC", text)
    text = (
        text.replace("\u2019", "'").replace("\u2018", "'")
        .replace("\u201c", " `` ").replace("\u201d", " '' ")
        .replace("\u00ab", " `` ").replace("\u00bb", " '' ")
        .replace("\u2026", " ... ").replace("\u2014", " -- ").replace("\u2013", " -- ")
    )
    for sym, rep in _CURRENCY.items():
        text = text.replace(sym, rep)
    tokens: list[str] = []
    chunks = text.split()
    for i, chunk in enumerate(chunks):
        tokens.extend(_tokenize_chunk(chunk, chunks[i + 1] if i + 1 < len(chunks) else ""))
    return [t.lower() for t in tokens if t and t.lower() not in COCO_PUNCTUATIONS]


@lru_cache(maxsize=1 << 16)
def _ptb_joined(text: str) -> str:
    """``ptb_tokenize``'s tokens, space-joined; remembered, since the report's bootstrap scores
    the same predictions and references hundreds of times (a pure function of ``text``)."""
    return " ".join(ptb_tokenize(text))


def _java_ptb(texts: list[str]) -> list[str]:
    import shutil

    if shutil.which("java") is None:
        raise ConfigError("tokenizer 'ptb' needs java on PATH; use tokenizer='python'")
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    # The wrapper joins all captions with newlines; keep the number of lines stable.
    data = {i: [{"caption": t if t.strip() else "."}] for i, t in enumerate(texts)}
    out = PTBTokenizer().tokenize(data)
    return [out[i][0] for i in range(len(texts))]


def tokenize_batch(texts: Sequence[str], tokenizer: str = "python") -> list[str]:
    """Tokenize texts into coco-caption's space-joined, lower-cased, punctuation-free form."""
    if tokenizer == "python":
        return [_ptb_joined(t) for t in texts]
    if tokenizer == "ptb":
        return _java_ptb(list(texts))
    raise ConfigError(f"unknown tokenizer {tokenizer!r}; valid: {', '.join(TOKENIZERS)}")


# ---------------------------------------------------------------------------------------------
# MS MARCO: BLEU-1 and ROUGE-L (pycocoevalcap)
# ---------------------------------------------------------------------------------------------


def _check_pairs(predictions, references, what="references"):
    if len(predictions) == 0:
        raise DataError("no predictions to score (empty list)")
    if len(predictions) != len(references):
        raise DataError(f"{len(predictions)} predictions but {len(references)} {what}")
    for i, refs in enumerate(references):
        if isinstance(refs, str) or len(refs) == 0:
            raise DataError(f"example {i}: expected a non-empty list of {what}, got {refs!r}")


def _tokenize_pairs(predictions, references, tokenizer):
    flat = list(predictions) + [r for refs in references for r in refs]
    tok = tokenize_batch(flat, tokenizer)
    hyps, pos, refs_tok = tok[: len(predictions)], len(predictions), []
    for refs in references:
        refs_tok.append(tok[pos: pos + len(refs)])
        pos += len(refs)
    return hyps, refs_tok


def _cooked_bleu(hyps: list[str], refs: list[list[str]], n: int):
    """pycocoevalcap's BleuScorer holding each (hypothesis, references) pair's n-gram counts."""
    from pycocoevalcap.bleu.bleu_scorer import BleuScorer

    scorer = BleuScorer(n=n)
    for h, r in zip(hyps, refs):
        scorer += (h, r)
    return scorer


def _sentence_bleu_scorer(hyps: list[str], refs: list[list[str]], n: int):
    # pycocoevalcap's Bleu.compute_score always uses option='closest'.
    return _cooked_bleu(hyps, refs, n).compute_score(option="closest", verbose=0)


def bleu1(predictions: Sequence[str], references: Sequence[Sequence[str]], tokenizer: str = "python") -> float:
    """MS MARCO BLEU-1: pycocoevalcap ``Bleu(4)`` corpus-level score, index 0, in percent."""
    _check_pairs(predictions, references)
    hyps, refs = _tokenize_pairs(predictions, references, tokenizer)
    score, _ = _sentence_bleu_scorer(hyps, refs, 4)
    return 100.0 * float(score[0])


def rouge_l_scores(predictions: Sequence[str], references: Sequence[Sequence[str]], tokenizer: str = "python") -> list:
    """Per-example ROUGE-L in [0, 1]: pycocoevalcap ``Rouge`` (beta=1.2; max P and R over references)."""
    from pycocoevalcap.rouge.rouge import Rouge

    _check_pairs(predictions, references)
    hyps, refs = _tokenize_pairs(predictions, references, tokenizer)
    rouge = Rouge()
    return [rouge.calc_score([h], r) for h, r in zip(hyps, refs)]


def rouge_l(predictions: Sequence[str], references: Sequence[Sequence[str]], tokenizer: str = "python") -> float:
    """MS MARCO ROUGE-L: the mean of :func:`rouge_l_scores`, in percent."""
    scores = rouge_l_scores(predictions, references, tokenizer)
    return 100.0 * float(sum(scores) / len(scores))


# ---------------------------------------------------------------------------------------------
# Q-BLEU-1 (Nema & Khapra 2018)
# ---------------------------------------------------------------------------------------------

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


def check_qbleu_weights(weights: dict, where: str = "metrics.qbleu1") -> dict:
    """Validate Q-BLEU weights (keys w_ner, w_qt, w_re, delta in [0, 1], w_ner + w_qt + w_re <= 1);
    return them complete (missing keys from ``QBLEU_DEFAULT_WEIGHTS``) with w_sw added."""
    unknown = sorted(set(weights) - set(QBLEU_WEIGHT_KEYS))
    if unknown:
        raise ConfigError(f"config key '{where}.{unknown[0]}': unknown; valid: {', '.join(QBLEU_WEIGHT_KEYS)}")
    out = {**QBLEU_DEFAULT_WEIGHTS, **weights}
    for k in QBLEU_WEIGHT_KEYS:
        v = out[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            raise ConfigError(f"config key '{where}.{k}': must be a number in [0, 1], got {v!r}")
    total = out["w_ner"] + out["w_qt"] + out["w_re"]
    if total > 1.0 + 1e-9:
        raise ConfigError(f"config key '{where}': w_ner + w_qt + w_re = {total:g} > 1 (the stop-word weight "
                          "is 1 minus their sum)")
    out["w_sw"] = max(0.0, 1.0 - total)
    return out


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
# answerability_score.py, data_type == 'wikimovies'
WIKIMOVIES_RELEVANT = ("act", "write", "direct", "describ", "appear", "star", "genre", "language",
                       "about", "appear", "cast")
QUESTION_TYPES = ("squad", "wikimovies")


def _qt_words(words: list[str]) -> list[str]:
    """Question-type words, plus the word after what/which (the answer type)."""
    out = []
    for i, w in enumerate(words):
        if w in QUESTION_WORDS:
            out.append(w)
            if i + 1 < len(words) and w.lower() in ("what", "which"):
                out.append(words[i + 1])
    return out


def qbleu_components(question: str, questions_type: str = "squad") -> dict[str, str]:
    """Split a question into the four Q-BLEU word classes, exactly as the authors' script.

    The authors' ``questiontype`` walks its question-word *set*, so the order of the qt words
    differs from ours; only unigram counts enter BLEU-1, so scores are the same.

    Named entities: the authors' ``NER_line`` runs no NER model either: it takes every token whose
    first character is upper-case, after dropping the first token when it is a question word
    (so a capitalized sentence-initial non-question word such as "Is" counts, as in their test).
    Numbers are *relevant words* there (lower-case, not stop words); we keep that, so the
    official scores are reproduced.
    """
    words = question.split()
    qt = _qt_words(words)
    if questions_type == "wikimovies":
        imp = [w for w in words for j in WIKIMOVIES_RELEVANT if j.lower() in w]
    else:
        removed = set(qt)
        imp = [w for w in words if w not in removed and not w[0].isupper() and w not in QBLEU_STOP_WORDS]
    ner_words = words[1:] if words and words[0].lower() in QUESTION_WORDS else words
    ner = [w for w in ner_words if w[0].isupper()]
    sw = [w.lower() for w in words if w.lower() in QBLEU_STOP_WORDS]
    return {"imp": " ".join(imp), "ner": " ".join(ner), "qt": " ".join(qt), "sw": " ".join(sw)}


def qbleu1_scores(
    predictions: Sequence[str],
    references: Sequence[Sequence[str]],
    questions_type: str = "squad",
    tokenizer: str = "python",
    w_ner: float | None = None,
    w_qt: float | None = None,
    w_re: float | None = None,
    delta: float | None = None,
) -> list[float]:
    """Per-example Q-BLEU-1 in [0, 1] (max over the references of each example)."""
    if questions_type not in QUESTION_TYPES:
        raise ConfigError(f"unknown questions_type {questions_type!r}; valid: {', '.join(QUESTION_TYPES)}")
    _check_pairs(predictions, references)
    given = {k: v for k, v in {"w_ner": w_ner, "w_qt": w_qt, "w_re": w_re, "delta": delta}.items() if v is not None}
    W = check_qbleu_weights(given, "qbleu1 weights")
    w_ner, w_qt, w_re, delta = W["w_ner"], W["w_qt"], W["w_re"], W["delta"]
    w_sw = 1.0 - w_ner - w_qt - w_re

    pairs = [(p, r) for p, refs in zip(predictions, references) for r in refs]
    keys = ("imp", "ner", "qt", "sw")
    hyp_c = [qbleu_components(p, questions_type) for p, _ in pairs]
    ref_c = [qbleu_components(r, questions_type) for _, r in pairs]
    n = len(pairs)
    texts = [p for p, _ in pairs] + [r for _, r in pairs]
    for k in keys:
        texts += [c[k] for c in hyp_c] + [c[k] for c in ref_c]
    tok = tokenize_batch(texts, tokenizer)

    def block(i):
        return tok[i * n: (i + 1) * n]

    # Fluency: sentence-level BLEU-1 of the whole question (per-line "Bleu_1" in their script).
    _, fl = _sentence_bleu_scorer(block(0), [[r] for r in block(1)], 1)
    fluent = fl[0]
    comp = {}
    for j, k in enumerate(keys):
        h, r = block(2 + 2 * j), block(3 + 2 * j)
        _, p = _sentence_bleu_scorer(h, [[x] for x in r], 1)  # precision direction
        _, rc = _sentence_bleu_scorer(r, [[x] for x in h], 1)  # recall direction (swapped)
        # The authors' head script (commit 61392b1, Nov 2019) scores a component 1 when its
        # hypothesis and reference parts are both empty strings (before tokenization).
        comp[k] = [1.0 if not hyp_c[i][k] and not ref_c[i][k]
                   else 0.0 if a + b == 0 else 2 * a * b / (a + b)
                   for i, (a, b) in enumerate(zip(p[0], rc[0]))]
    per_pair = []
    for i in range(n):
        answerability = (w_re * comp["imp"][i] + w_ner * comp["ner"][i] + w_qt * comp["qt"][i]
                         + w_sw * comp["sw"][i])
        # An empty prediction scores 0 (the authors' script crashes on it; see qbleu1).
        per_pair.append(0.0 if not pairs[i][0].strip() else delta * answerability + (1 - delta) * fluent[i])
    out, pos = [], 0
    for refs in references:
        out.append(max(per_pair[pos: pos + len(refs)]))
        pos += len(refs)
    return out


def qbleu1(predictions: Sequence[str], references: Sequence[Sequence[str]], questions_type: str = "squad",
           tokenizer: str = "python", **weights) -> float:
    """Q-BLEU-1 (Nema & Khapra 2018) in percent: mean over examples of
    ``delta * Answerability + (1 - delta) * BLEU-1``, weights ``QBLEU_DEFAULT_WEIGHTS`` unless
    given. Each Answerability component (relevant words, named entities, question type, stop
    words) is the harmonic mean of the sentence BLEU-1 of the predicted component against the
    reference one and vice versa, and 1 when both components are empty (the authors' head script,
    github.com/PrekshaNema25/Answerability-Metric at ec5cf5e, Nov 2019; the October 2018 version
    scored that case 0). Equal to that script run with Java's PTB tokenizer, within 1e-6, on the
    pairs of ``tests/data/qbleu_head_vectors.json`` with either tokenizer.

    With several references the best one is taken (the authors' script has one per line).
    An empty (or whitespace-only) prediction scores 0; the authors' script stops with an
    IndexError on it (``NER_line`` reads the first word), so 0 is this project's choice.
    """
    scores = qbleu1_scores(predictions, references, questions_type, tokenizer, **weights)
    return 100.0 * sum(scores) / len(scores)


# ---------------------------------------------------------------------------------------------
# Accuracy, tri-gram diversity, answer recall
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


_DPR_TOKEN_RE = None


def _dpr_tokens(text: str) -> list[str]:
    """DPR's SimpleTokenizer (alphanumeric runs or single non-space characters), uncased, after
    unicode NFD normalization (dpr/data/qa_validation.py: has_answer / _normalize)."""
    global _DPR_TOKEN_RE
    if _DPR_TOKEN_RE is None:
        import regex

        _DPR_TOKEN_RE = regex.compile(r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])", regex.IGNORECASE | regex.UNICODE | regex.MULTILINE)
    text = unicodedata.normalize("NFD", text)
    return [m.group().lower() for m in _DPR_TOKEN_RE.finditer(text)]


def answer_in_text(text: str, answers: Sequence[str], regex: bool = False) -> bool:
    """DPR ``has_answer``: does any answer occur in ``text``?

    String mode: some answer's token sequence is a contiguous subsequence of the text's tokens
    (DPR SimpleTokenizer, uncased, NFD). Regex mode: ``re.search`` of any pattern in the NFD text
    (IGNORECASE|UNICODE|MULTILINE); an invalid pattern raises DataError.
    """
    if regex:
        norm = unicodedata.normalize("NFD", text)
        return any(_compile(unicodedata.normalize("NFD", a)).search(norm) is not None for a in answers)
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
