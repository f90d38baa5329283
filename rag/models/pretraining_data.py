"""The generator's pretraining examples, laid out like a RAG generator input (``title / text //
query``) with the span as the target: salient-span cloze with the passage in context
(:func:`cloze_example`, REALM's salient span masking, Guu et al. 2020) and restated-fact cloze
(:class:`Restatements`, miniworld). :func:`curriculum_window` grows the context over the steps;
:func:`rag.training.pretrain` trains on them.
"""

from __future__ import annotations

import random
import re

from rag.errors import ConfigError
from rag.models.tokenizer import label_token

_SENT = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\S+")


def salient_spans(sentence: str) -> list[tuple[int, int]]:
    """Character spans of salient words: runs of capitalised words or numbers (not the first word), and the last word."""
    words = [(m.start(), m.end(), m.group().rstrip(".,;:!?")) for m in _WORD.finditer(sentence)]
    spans, run = [], None
    for i, (s, e, w) in enumerate(words):
        salient = i > 0 and w and (w[0].isupper() or w.isdigit())
        if salient:
            run = (run[0], s + len(w)) if run else (s, s + len(w))
        elif run:
            spans.append(run)
            run = None
    if run:
        spans.append(run)
    if words:
        s, _, w = words[-1]
        if w and not any(a <= s < b for a, b in spans):
            spans.append((s, s + len(w)))
    return spans


def _window(text: str, sentences: list[str], i: int, rng: random.Random, max_context: int | None) -> str:
    """The passage, or a window of 1..``max_context`` of its sentences holding sentence ``i``."""
    if max_context is None or max_context >= len(sentences):
        return text
    w = rng.randint(1, max_context)
    lo = rng.randint(max(0, i - w + 1), min(i, len(sentences) - w))
    return " ".join(sentences[lo : lo + w])


def cloze_example(title: str, text: str, rng: random.Random, mask_token: str = "<mask>", max_context: int | None = None):
    """(generator input, target span): a sentence of the passage with a salient span masked is the
    query; the context, the passage or a window of at most ``max_context`` sentences around it."""
    from rag.models.seq2seq import format_input

    sentences = [s for s in _SENT.split(text) if s.strip()]
    order = list(range(len(sentences)))
    rng.shuffle(order)
    for i in order:
        sent = sentences[i]
        spans = salient_spans(sent)
        if spans:
            s, e = rng.choice(spans)
            query = sent[:s] + mask_token + sent[e:]
            return format_input(title, _window(text, sentences, i, rng, max_context), query), sent[s:e]
    return None


class Restatements:
    """Restated-fact cloze (miniworld): a training entity's passage re-rendered (every fact a random
    value of its attribute in a random phrasing, the sentences shuffled) and one of its facts asked
    in another phrasing with ``<mask>`` for the value, the value the re-rendered passage states as
    the target. ``questions`` (record key, optional): the relation asked as the tasks ask it.

    An attribute's counterfactual values are its training facts' values or, with ``pools`` (kind ->
    names, :func:`rag.data.miniworld.kind_pools`) and record key ``value_kind``, every name of that kind."""

    def __init__(self, records: list[dict], passage_ids: list[str], pools: dict[str, list[str]] | None = None):
        row = {pid: i for i, pid in enumerate(passage_ids)}
        missing = [r["passage"] for r in records if r["passage"] not in row]
        if missing:
            raise ConfigError(f"restatements name passages the corpus lacks, e.g. {missing[0]!r}")
        self.records = [r for r in records if r["queries"]]
        if not self.records:
            raise ConfigError("restatements: no fact has a second phrasing to ask it with")
        self.row = [row[r["passage"]] for r in self.records]
        self.siblings: dict[int, list[int]] = {}  # passage row -> its records
        for i, j in enumerate(self.row):
            self.siblings.setdefault(j, []).append(i)
        values: dict[str, set] = {}
        for r in self.records:
            values.setdefault(r["attribute"], set()).add(r["value"])
        self.values = {a: sorted(v) for a, v in values.items()}
        if pools is not None:
            self._pool_values(pools)
        self.claimable = [i for i, r in enumerate(self.records) if r.get("claims")]
        self.sentence_records = [i for i, r in enumerate(self.records) if r.get("sentences")]
        self._absent_for, self._absent = None, []  # the corpus texts _absent_rows was computed for, and its rows

    def _pool_values(self, pools: dict[str, list[str]]) -> None:
        """Each entity-valued attribute's counterfactual values: every name of its value's kind."""
        kinds: dict[str, set] = {}
        for r in self.records:
            kinds.setdefault(r["attribute"], set()).add(r.get("value_kind"))
        if not any(k for ks in kinds.values() for k in ks):
            raise ConfigError("restatements: no record names the kind of its value (value_kind), which "
                              "generator.pretrain_counterfactuals: kind needs (records of an older corpus rule?)")
        for attribute, ks in sorted(kinds.items()):
            if ks == {None}:
                continue
            if len(ks) != 1:
                raise ConfigError(f"restatements: the values of {attribute!r} are of several kinds ({sorted(map(str, ks))})")
            kind = next(iter(ks))
            if not pools.get(kind):
                raise ConfigError(f"restatements: {attribute!r} values are {kind} names and the corpus has no {kind}")
            self.values[attribute] = sorted(set(pools[kind]) | set(self.values[attribute]))

    def _render_row(self, row: int, texts: list[str], rng: random.Random, i: int | None = None):
        """Passage ``row`` re-rendered: (shuffled sentences, and for record ``i`` the value it now has,
        its sentence and the phrasing it is stated in; None without ``i``)."""
        text = texts[row]
        value = swapped = used = None
        for j in self.siblings.get(row, ()):  # every fact of the passage, so no re-rendered one stands out
            r = self.records[j]
            stated = r["sentence"].format(v=r["value"])
            if stated not in text:
                raise ConfigError(f"restatements: passage {r['passage']!r} does not state {stated!r} (a corpus of another world?)")
            phrasing = rng.choice([r["sentence"]] + r["queries"])
            v = self._other_value(r["attribute"], r["value"], rng)
            text = text.replace(stated, phrasing.format(v=v), 1)
            if j == i:
                value, swapped, used = v, phrasing.format(v=v), phrasing
        sentences = [x for x in _SENT.split(text) if x.strip()]
        rng.shuffle(sentences)
        return sentences, value, swapped, used

    def _absent_rows(self, titles: list[str], texts: list[str]) -> list[tuple[int, list[int]]]:
        """(record, the other passages of its entity (same title) that neither state its attribute nor
        hold its value), for the records that have some; computed once per corpus."""
        if self._absent_for is not texts:
            rows: dict[str, list[int]] = {}
            for row, title in enumerate(titles):
                rows.setdefault(title, []).append(row)
            stated = {(self.row[i], r["attribute"]) for i, r in enumerate(self.records)}
            self._absent = [(i, others) for i, r in enumerate(self.records)
                            if (others := [o for o in rows.get(titles[self.row[i]], ()) if o != self.row[i]
                                           and (o, r["attribute"]) not in stated and r["value"] not in texts[o]])]
            self._absent_for = texts
        return self._absent

    def absent(self, titles: list[str], texts: list[str], rng: random.Random, mask_token: str = "<mask>",
               max_context: int | None = None):
        """(generator input, target): a fact asked of another passage of its entity's article, one
        that does not state it (re-rendered like the others), a random value of the attribute the target."""
        candidates = self._absent_rows(titles, texts)
        if not candidates:
            raise ConfigError("restatements: no fact can be asked of a passage that does not state it "
                              "(generator.pretrain_absent needs articles of two or more passages)")
        i, others = rng.choice(candidates)
        row = rng.choice(others)
        sentences = self._render_row(row, texts, rng)[0]
        r = self.records[i]
        query = rng.choice([r["sentence"]] + r["queries"] + list(r.get("questions", ()))).format(v=mask_token)
        return self._input(titles[row], sentences, None, query, rng, max_context), rng.choice(self.values[r["attribute"]])

    def _other_value(self, attribute: str, value: str, rng: random.Random) -> str:
        return rng.choice([v for v in self.values[attribute] if v != value] or [value])

    @staticmethod
    def _input(title: str, sentences: list[str], swapped: str | None, query: str, rng: random.Random,
               max_context: int | None):
        """The generator input: ``query`` after a window of ``sentences`` around the one holding
        ``swapped`` (a random sentence when None)."""
        from rag.models.seq2seq import format_input

        at = rng.randrange(len(sentences)) if swapped is None else next(j for j, x in enumerate(sentences) if swapped in x)
        return format_input(title, _window(" ".join(sentences), sentences, at, rng, max_context), query)

    def example(self, titles: list[str], texts: list[str], rng: random.Random, mask_token: str = "<mask>",
                max_context: int | None = None):
        """(generator input, target); ``max_context``: the curriculum's window of sentences, as cloze_example."""
        i = rng.randrange(len(self.records))
        sentences, value, swapped, used = self._render_row(self.row[i], texts, rng, i)
        r = self.records[i]
        asks = [q for q in [r["sentence"]] + r["queries"] if q != used] + list(r.get("questions", ()))
        return self._input(titles[self.row[i]], sentences, swapped, rng.choice(asks).format(v=mask_token), rng, max_context), value

    def sentence(self, titles: list[str], texts: list[str], rng: random.Random, max_context: int | None = None):
        """(generator input, target): a fact of a re-rendered passage restated as a whole sentence
        (record key ``sentences``: an MS-MARCO answer, a Jeopardy clue)."""
        if not self.sentence_records:
            raise ConfigError("restatements: no record has sentences to write (records of an older corpus rule?)")
        i = rng.choice(self.sentence_records)
        sentences, value, swapped, _ = self._render_row(self.row[i], texts, rng, i)
        query, target = rng.choice(self.records[i]["sentences"])
        return self._input(titles[self.row[i]], sentences, swapped, query, rng, max_context), target.format(v=value)

    def claim(self, titles: list[str], texts: list[str], rng: random.Random, labels: tuple[str, ...],
              max_context: int | None = None):
        """(generator input, label token): a FEVER-style claim (record key ``claims``) about a re-rendered
        passage's entity: its value (SUPPORTS), another (REFUTES) or an unstated attribute (NOT ENOUGH INFO)."""
        if not self.claimable:
            raise ConfigError("restatements: no record has FEVER-style claims (records of an older corpus rule?)")
        i = rng.choice(self.claimable)
        sentences, value, swapped, _ = self._render_row(self.row[i], texts, rng, i)
        r = self.records[i]
        label = rng.choice([lb for lb in labels if lb != "NOT ENOUGH INFO" or r.get("unstated")])
        if label == "NOT ENOUGH INFO":
            attribute, template = rng.choice(r["unstated"])
            claim = template.format(v=rng.choice(self.values[attribute]))
        else:
            v = value if label == "SUPPORTS" else self._other_value(r["attribute"], value, rng)
            claim = rng.choice(r["claims"]).format(v=v)
        return self._input(titles[self.row[i]], sentences, swapped, claim, rng, max_context), label_token(label)


def curriculum_window(step: int, steps: int, sentences: int = 12) -> int | None:
    """Context size (sentences) of pretraining step ``step``: from one sentence up to the whole
    passage (None) by half of the steps."""
    half = max(1, steps // 2)
    if step >= half:
        return None
    return 1 + (sentences * step) // half

