"""Tokenization as coco-caption's scorers see it (BLEU-1, ROUGE-L, Q-BLEU-1): Stanford's ``PTBTokenizer``
(``-preserveLines -lowerCase``), then coco-caption's ``PUNCTUATIONS`` dropped. ``tokenize_batch(texts, "python")``
(the default) imitates it in Python (:func:`ptb_tokenize`); ``"ptb"`` runs pycocoevalcap's Java wrapper.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Sequence

from rag.errors import ConfigError

TOKENIZERS = ("python", "ptb")


# pycocoevalcap/tokenizer/ptbtokenizer.py. Note that the Java tokenizer runs with -lowerCase, so
# brackets come out as "-lrb-" etc. and are NOT removed by the upper-case entries of this list.
COCO_PUNCTUATIONS = frozenset(
    ["''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-", ".", "?", "!", ",", ":", "-", "--", "...", ";"]
)

_BRACKETS = {"(": "-lrb-", ")": "-rrb-", "[": "-lsb-", "]": "-rsb-", "{": "-lcb-", "}": "-rcb-"}
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
    ``-preserveLines -lowerCase``, then removal of coco-caption's ``PUNCTUATIONS``): clitics, split
    words, brackets, quotes, dashes, currency, numbers and abbreviations as the jar gives them
    (tests/test_metrics.py holds the cases, checked against the jar).

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
