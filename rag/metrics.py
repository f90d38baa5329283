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

Each is a :class:`Metric` class in :data:`METRICS` (``@register_metric``), found by name
(:func:`metric_spec`); :class:`Scorer` holds them with a run's options. The scorers live in
:mod:`rag.scoring` (the coco-caption tokenization: :mod:`rag.scoring.ptb_tokenizer`).
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Callable, ClassVar, Sequence

import pydantic

from rag import keyspec
from rag.errors import ConfigError, DataError
from rag.scoring.answer_match import exact_match, regex_match
from rag.scoring.coco import bleu1, check_pairs, cooked_bleu, rouge_l_scores, tokenize_pairs
from rag.scoring.qbleu import qbleu1_scores


def trigram_distinct(texts: Sequence[str]) -> float:
    """Distinct / total word tri-grams over all texts, in percent (whitespace tokens, case kept;
    tri-grams never span two texts). 0.0 when there is no tri-gram."""
    grams: Counter = Counter()
    for t in texts:
        w = t.split()
        grams.update(tuple(w[i: i + 3]) for i in range(len(w) - 2))
    total = sum(grams.values())
    return 100.0 * len(grams) / total if total else 0.0


class Metric:
    """A metric: the score of predictions against their golds (one list per example), in percent.

    What the harness asks of a metric it reads here, never from the metric's name: ``display``
    (its name for readers); ``reads_tokenizer`` / ``reads_weights`` (it reads config key
    ``metrics.tokenizer`` / ``metrics.qbleu1``); ``bootstrap`` (a report cell's interval scores
    resamples, :meth:`subset`; False: a mean of 0/100 scores, whose interval is a mean's);
    ``needs_targets`` (False: it reads the predictions alone); ``options`` (its own options and their
    defaults, config key ``metrics.options.<name>``; an instance holds the run's values).
    """

    name: ClassVar[str] = ""
    display: ClassVar[str] = ""
    reads_tokenizer: ClassVar[bool] = False
    reads_weights: ClassVar[bool] = False
    bootstrap: ClassVar[bool] = True
    needs_targets: ClassVar[bool] = True
    options: ClassVar[dict] = {}

    def __init__(self, tokenizer: str = "python", qbleu_weights: dict | None = None, options: dict | None = None):
        self.tokenizer = tokenizer
        self.qbleu_weights = qbleu_weights
        self.options = self.checked_options(options or {})

    @classmethod
    def checked_options(cls, given: dict) -> dict:
        """The metric's options: its defaults (``options``) with ``given`` over them, validated by
        :func:`options_model`; a ConfigError naming config key ``metrics.options.<name>.<option>``."""
        return keyspec.plain(keyspec.validate(options_model(cls), given, f"metrics.options.{cls.name}"))

    def score(self, predictions: Sequence[str], targets: Sequence[Sequence[str]]) -> float:
        """The corpus-level score in percent."""
        raise NotImplementedError

    def subset(self, predictions: Sequence[str], targets: Sequence[Sequence[str]]) -> Callable[[Sequence[int]], float]:
        """``fn(indices)``: :meth:`score` of the examples at ``indices`` (repeats allowed), to the last bit."""
        return lambda ix: self.score([predictions[i] for i in ix], [targets[i] for i in ix])


class MeanMetric(Metric):
    """The mean of per-example scores (:meth:`each`, scored once; a subset averages its examples')."""

    def each(self, predictions: Sequence[str], targets: Sequence[Sequence[str]]) -> list:
        raise NotImplementedError

    def mean(self, values: list) -> float:
        return 100.0 * sum(values) / len(values)

    def score(self, predictions, targets) -> float:
        return self.mean(self.each(predictions, targets))

    def subset(self, predictions, targets) -> Callable[[Sequence[int]], float]:
        each = self.each(predictions, targets)
        return lambda ix: self.mean([each[i] for i in ix])


class HitMetric(MeanMetric):
    """The share of examples whose prediction is right (:meth:`hit`), in percent."""

    bootstrap = False
    golds = "gold answers"  # what the golds are, for the error on mismatched lists

    def hit(self, prediction: str, golds: Sequence[str]) -> bool:
        raise NotImplementedError

    def each(self, predictions, targets) -> list[bool]:
        check_pairs(predictions, targets, self.golds)
        return [bool(self.hit(p, t)) for p, t in zip(predictions, targets)]


def _option_type(default):
    """The value type of an option, that of its default (an int default: an integer; a float: a number)."""
    for kind, of in ((bool, keyspec.Bool), (int, keyspec.Int), (float, keyspec.Num), (str, keyspec.Str)):
        if isinstance(default, kind):
            return of()
    kind = type(default)

    def check(v):
        if not isinstance(v, kind):
            lf.wrong(v)
        return v
    lf = keyspec.Leaf(kind.__name__, {}, check)
    return Annotated[kind, lf]


@functools.cache
def options_model(metric: type[Metric]) -> type[keyspec.Key]:
    """The options of ``metric`` as a model of keys (config key ``metrics.options.<name>``): one key per option,
    its default the option's, its type that of the default."""
    fields = {opt: (_option_type(default), default) for opt, default in metric.options.items()}
    return pydantic.create_model(f"{metric.__name__}Options", __base__=keyspec.Key, **fields)


# metric name -> its class, in the order of the module docstring
METRICS: dict[str, type[Metric]] = {}


def register_metric(cls: type[Metric]) -> type[Metric]:
    """Class decorator: ``cls`` is the metric named ``cls.name``."""
    METRICS[cls.name] = cls
    return cls


def metric_spec(name: str) -> type[Metric]:
    """The class of metric ``name``; ConfigError naming the valid ones when there is none."""
    try:
        return METRICS[name]
    except KeyError:
        raise ConfigError(f"unknown metric {name!r}; valid metrics: {', '.join(METRICS)}") from None


@register_metric
class ExactMatch(HitMetric):
    name, display = "em", "exact match"

    def hit(self, prediction, golds):
        return exact_match(prediction, golds)


@register_metric
class RegexMatch(HitMetric):
    name, display = "em_regex", "regex match"

    def hit(self, prediction, golds):
        return regex_match(prediction, golds)


@register_metric
class Bleu1(Metric):
    name, display = "bleu1", "BLEU-1"
    reads_tokenizer = True

    def score(self, predictions, targets):
        return bleu1(predictions, targets, self.tokenizer)

    def subset(self, predictions, targets):
        hyps, refs = tokenize_pairs(predictions, targets, self.tokenizer)
        cooked = cooked_bleu(hyps, refs, 4)

        def score(ix: Sequence[int]) -> float:
            part = cooked.copy()  # a scorer of the resample's pairs, counted once above
            part.ctest = [cooked.ctest[i] for i in ix]
            part.crefs = [cooked.crefs[i] for i in ix]
            return 100.0 * float(part.compute_score(option="closest", verbose=0)[0][0])

        return score


@register_metric
class RougeL(MeanMetric):
    name, display = "rougeL", "ROUGE-L"
    reads_tokenizer = True

    def each(self, predictions, targets):
        return rouge_l_scores(predictions, targets, self.tokenizer)

    def mean(self, values):
        return 100.0 * float(sum(values) / len(values))


@register_metric
class QBleu1(MeanMetric):
    name, display = "qbleu1", "Q-BLEU-1"
    reads_tokenizer = reads_weights = True

    def each(self, predictions, targets):
        return qbleu1_scores(predictions, targets, tokenizer=self.tokenizer, **(self.qbleu_weights or {}))


@register_metric
class Accuracy(HitMetric):
    name, display = "accuracy", "accuracy"
    golds = "gold labels"

    def hit(self, prediction, golds):
        return prediction == golds[0]


@register_metric
class TrigramDistinct(Metric):
    name, display = "trigram_distinct", "distinct tri-grams"
    needs_targets = False

    def score(self, predictions, targets):
        return trigram_distinct(predictions)


@dataclass(frozen=True)
class Scorer:
    """The metrics with a run's options: ``tokenizer`` (python|ptb), ``qbleu1`` (Q-BLEU weights; None:
    the defaults) and each metric's own options. A run builds one from its config
    (``rag.predictions.scorer``), a report from its metrics.json (:meth:`of`)."""

    tokenizer: str = "python"
    qbleu1: dict | None = None
    own: dict = field(default_factory=dict)  # metric name -> its own options (Metric.options)

    @classmethod
    def of(cls, options: dict | None) -> "Scorer":
        """The scorer of a metrics.json's ``metric_options`` (a key it lacks: the default)."""
        options = options or {}
        own = {k: v for k, v in options.items() if k not in ("tokenizer", "qbleu1")}
        return cls(options.get("tokenizer", "python"), options.get("qbleu1"), own)

    def metric(self, name: str, n: int | None = None) -> Metric:
        """Metric ``name`` with these options; DataError when it is to score ``n`` = 0 predictions."""
        if n == 0:
            raise DataError(f"metric {name}: no predictions to score (empty list)")
        return metric_spec(name)(self.tokenizer, self.qbleu1, self.own.get(name))

    def compute(self, metric: str, predictions: Sequence[str], targets: Sequence[Sequence[str]]) -> float:
        """Score ``predictions`` against ``targets`` (one list of golds per example) with ``metric``."""
        return self.metric(metric, len(predictions)).score(predictions, targets)

    def subset(self, metric: str, predictions: Sequence[str], targets: Sequence[Sequence[str]]) -> Callable[[Sequence[int]], float]:
        """``fn(indices)``: :meth:`compute` of the examples at ``indices`` (repeats allowed), to the last
        bit, with each example's own cost paid once (:meth:`Metric.subset`): for the report's bootstrap."""
        m = self.metric(metric, len(predictions))
        if m.needs_targets:
            check_pairs(predictions, targets)
        score = m.subset(predictions, targets)

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

    spec = metric_spec(metric)
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
        if not t and spec.needs_targets:
            raise DataError(f"{references_path}: id {key!r}: empty targets")
    score = Scorer().compute(metric, [preds[k] for k in ids], [refs[k] for k in ids])
    return score, len(ids)
