"""The config sections as typed, frozen objects: what each stage function takes.

Snakemake writes each section of the resolved config (:func:`rag.config.sections`) to
``results/<name>/config/<section>.json``; a command reads its file(s) into the section's class
here (:func:`read_section`, :func:`read_task_sections`) and calls its stage function. Parsing
raises :class:`~rag.errors.ConfigError` with one line naming the file and the dotted key of a
missing key, an unknown key or a value of the wrong type. ``to_dict`` gives back the section's
mapping exactly as it was read (a key absent stays absent, an explicit ``null`` stays ``null``).

The fields of these classes are the keys each consumer reads: :func:`rag.config.sections` takes
them from here (``keys()``, :data:`INDEX_PARAMS`) when it builds the sections.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from rag.errors import ConfigError

S = TypeVar("S", bound="Section")

# a field that is no key of the section's file (attached by a reader that merges several files)
_ATTACHED = {"key": False}


@dataclass(frozen=True)
class Section:
    """Base of the typed sections: a field without default is a required key, one with a default
    may be absent (absent: the default)."""

    _given: frozenset = field(default=frozenset(), kw_only=True, repr=False, compare=False, metadata=_ATTACHED)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The keys of the section's mapping, in field order."""
        return tuple(f.name for f in fields(cls) if f.metadata.get("key", True))

    @classmethod
    def from_dict(cls: type[S], data: Any, where: str, prefix: str = "") -> S:
        """Parse the mapping ``data`` read from ``where`` (``prefix``: its dotted key in there)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: config key {prefix or '<top level>'!r}: expected an object, "
                              f"got {type(data).__name__} {data!r:.80}")
        known = cls.keys()
        unknown = [k for k in data if k not in known]
        if unknown:
            raise ConfigError(f"{where}: unknown config key {_dotted(prefix, unknown[0])!r}")
        hints = _hints(cls)
        values = {}
        for f in fields(cls):
            if f.name not in known:
                continue
            key = _dotted(prefix, f.name)
            if f.name in data:
                values[f.name] = _parse(hints[f.name], data[f.name], where, key)
            elif _required(f):
                raise ConfigError(f"{where}: config key {key!r} is missing")
        obj = cls(**values, _given=frozenset(values))
        obj._check(where, prefix)
        return obj

    def _check(self, where: str, prefix: str) -> None:
        """Checks between keys (a subclass' own)."""

    def to_dict(self) -> dict:
        """The section's mapping (sorted keys): the keys it was read with, or (built directly)
        the required ones and those set."""
        out = {}
        for f in fields(self):
            if f.metadata.get("key", True):
                value = getattr(self, f.name)
                if f.name in self._given or value is not None or _required(f):
                    out[f.name] = _dump(value)
        return {k: out[k] for k in sorted(out)}


def _dotted(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _required(f) -> bool:
    from dataclasses import MISSING

    return f.default is MISSING and f.default_factory is MISSING


@lru_cache(maxsize=None)
def _hints(cls) -> dict:
    return get_type_hints(cls)


_TYPE_NAMES = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}


def _type_name(tp) -> str:
    if tp in _TYPE_NAMES:
        return _TYPE_NAMES[tp]
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin is tuple:
        return f"a list of {_type_name(get_args(tp)[0])}"
    return "an object"


def _parse(tp, value: Any, where: str, key: str) -> Any:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        for alt in get_args(tp):
            try:
                return _parse(alt, value, where, key)
            except ConfigError:
                if len(get_args(tp)) == 2 and type(None) in get_args(tp) and value is not None:
                    raise  # X | None and a value: X's own message names what is wrong inside it
        raise _type_error(tp, value, where, key)
    if isinstance(tp, type) and issubclass(tp, Section):
        return tp.from_dict(value, where, key)
    if origin is tuple:
        if not isinstance(value, list):
            raise _type_error(tp, value, where, key)
        return tuple(_parse(get_args(tp)[0], v, where, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is Mapping:
        if not isinstance(value, Mapping):
            raise _type_error(tp, value, where, key)
        return MappingProxyType({k: _parse(get_args(tp)[1], v, where, _dotted(key, k)) for k, v in value.items()})
    ok = {
        bool: lambda v: isinstance(v, bool),
        int: lambda v: isinstance(v, int) and not isinstance(v, bool),
        float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        str: lambda v: isinstance(v, str),
        type(None): lambda v: v is None,
    }[tp](value)
    if not ok:
        raise _type_error(tp, value, where, key)
    return value


def _type_error(tp, value: Any, where: str, key: str) -> ConfigError:
    return ConfigError(f"{where}: config key {key!r}: expected {_type_name(tp)}, got {type(value).__name__} {value!r:.80}")


def _dump(value: Any) -> Any:
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_dump(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _dump(v) for k, v in value.items()}
    return value


# ------------------------------------------------------------------------------------ parts
@dataclass(frozen=True)
class Miniworld(Section):
    """miniworld: the generated world (rag.data.miniworld.build_world)."""

    countries: int
    people: int
    cities: int
    changed_fraction: float
    test_fraction: float


@dataclass(frozen=True)
class MiniworldCut(Miniworld):
    """The world and how its corpus is cut: a miniworld task's gold passages depend on both."""

    passage_words: int


@dataclass(frozen=True)
class CorpusOptions(Section):
    source: str
    passage_words: int
    format: str | None = None  # converted corpora only


@dataclass(frozen=True)
class EncoderOptions(Section):
    """What the context and the question encoder share."""

    pooling: str
    normalize: bool
    max_length: int


@dataclass(frozen=True)
class ContextEncoder(EncoderOptions):
    """Passage encoding (rag.stages.index.encode_shard)."""

    context_encoder: str
    batch_size: int


@dataclass(frozen=True)
class QuestionEncoder(EncoderOptions):
    """The dense retriever's question side (rag.retrieval.dense)."""

    question_encoder: str
    score_scale: float


# the parameters each index type reads (the index section holds those of its type only)
INDEX_PARAMS = {"flat": (), "hnsw": ("hnsw_m", "hnsw_ef_search"), "ivfpq": ("ivf_lists", "pq_m")}


@dataclass(frozen=True)
class IndexOptions(Section):
    index: str
    hnsw_m: int | None = None
    hnsw_ef_search: int | None = None
    ivf_lists: int | None = None
    pq_m: int | None = None  # given and null: the embedding size / 8

    def _check(self, where: str, prefix: str) -> None:
        if self.index not in INDEX_PARAMS:
            raise ConfigError(f"{where}: config key {_dotted(prefix, 'index')!r}: {self.index!r} is not one of "
                              f"{list(INDEX_PARAMS)}")
        for name in INDEX_PARAMS[self.index]:
            if name not in self._given:
                raise ConfigError(f"{where}: config key {_dotted(prefix, name)!r} is missing")

    def build_params(self) -> dict:
        """The keyword arguments of rag.retrieval.index.build_index for the set parameters."""
        named = {"hnsw_m": self.hnsw_m, "ef_search": self.hnsw_ef_search, "ivf_lists": self.ivf_lists, "pq_m": self.pq_m}
        return {k: v for k, v in named.items() if v is not None}


@dataclass(frozen=True)
class GeneratorLengths(Section):
    """What building a RAG system reads of the generator configuration."""

    max_source_len: int
    max_target_len: int
    chunk_overhead: int | None  # null: the device's default


@dataclass(frozen=True)
class GeneratorOptions(GeneratorLengths):
    """The whole generator configuration (construction and pretraining)."""

    init: str
    d_model: int
    layers: int
    heads: int
    ffn: int
    vocab_size: int
    dropout: float
    copy: bool
    local_context: int
    exact_match: bool
    pretrain_steps: int
    pretrain_restatements: float
    pretrain_claims: float
    pretrain_sentences: float
    pretrain_batch_size: int
    pretrain_lr: float
    name_or_path: str | None = None  # init: pretrained


@dataclass(frozen=True)
class TaskData(Section):
    """What a task's data files depend on."""

    source: str
    well_formed_only: bool | tuple[str, ...]  # msmarco: every split, or the splits named
    train: int | None = None  # miniworld: examples per split
    dev: int | None = None
    test: int | None = None
    format: str | None = None
    formats: Mapping[str, str] | None = None  # split -> parser

    def keeps_well_formed_only(self, split: str) -> bool:
        wf = self.well_formed_only
        return split in wf if isinstance(wf, tuple) else wf


@dataclass(frozen=True)
class TaskOptions(TaskData):
    """A task's configuration but its test-time decoding."""

    init_from: str | None = None
    steps: int | None = None
    files: Mapping[str, str] | None = None
    sha256: Mapping[str, str] | None = None


@dataclass(frozen=True)
class TrainOptions(Section):
    k: int
    batch_size: int
    steps: int
    lr: float
    question_encoder_lr: float
    question_encoder_layers: int | None  # null: all layers
    warmup_steps: int
    label_smoothing: float
    checkpoint_every: int
    log_every: int
    ddp_processes: int


@dataclass(frozen=True)
class Tracking(Section):
    uri: str


@dataclass(frozen=True)
class DecodeOptions(Section):
    k: int
    method: str
    beams: int
    max_new_tokens: int


@dataclass(frozen=True)
class Decode(Section):
    """Test-time decoding per model kind (rag.tasks VariantSpec.model)."""

    sequence: DecodeOptions
    token: DecodeOptions
    bart: DecodeOptions

    def of(self, model: str) -> DecodeOptions:
        return {"sequence": self.sequence, "token": self.token, "bart": self.bart}[model]


@dataclass(frozen=True)
class QBleuWeights(Section):
    w_ner: float
    w_qt: float
    w_re: float
    delta: float


@dataclass(frozen=True)
class MetricOptions(Section):
    tokenizer: str
    qbleu1: QBleuWeights


@dataclass(frozen=True)
class ExperimentOptions(Section):
    topk_sweep: tuple[int, ...]


# ------------------------------------------------------------------------------------ sections
@dataclass(frozen=True)
class CorpusSection(Section):
    """``corpus``: the corpus and the hot-swap questions."""

    seed: int
    corpus: CorpusOptions
    miniworld: Miniworld | None = None  # corpus.source: miniworld

    def world(self) -> Miniworld:
        if self.miniworld is None:
            raise ConfigError(f"corpus source {self.corpus.source!r}: the miniworld world and its questions "
                              "need corpus.source: miniworld")
        return self.miniworld


@dataclass(frozen=True)
class EncodeSection(Section):
    """``encode``: passage encoding."""

    device: str
    precision: str
    retriever: ContextEncoder


@dataclass(frozen=True)
class IndexSection(Section):
    """``index``: the FAISS index."""

    device: str
    retriever: IndexOptions


@dataclass(frozen=True)
class GeneratorSection(Section):
    """``generator``: generator construction and pretraining."""

    seed: int
    device: str
    precision: str
    generator: GeneratorOptions


@dataclass(frozen=True)
class DataSection(Section):
    """``data_<task>``: one task's train/dev/test files."""

    task_name: str
    task: TaskData
    seed: int | None = None  # miniworld tasks
    miniworld: MiniworldCut | None = None


@dataclass(frozen=True)
class EvalSection(Section):
    """``eval_<task>``: test-time decoding and the metric options (only for tasks whose metrics read them)."""

    task_name: str
    decode: Decode
    metrics: MetricOptions | None = None


@dataclass(frozen=True)
class TrainSection(Section):
    """``train_<task>``: fine-tuning; ``evaluation``: the task's ``eval_<task>`` section when a
    command that decodes read it too (:func:`read_task_sections`)."""

    name: str
    seed: int
    device: str
    precision: str
    tracking: Tracking
    task_name: str
    task: TaskOptions
    train: TrainOptions
    generator: GeneratorLengths
    retriever: QuestionEncoder
    evaluation: EvalSection | None = field(default=None, metadata=_ATTACHED)

    def decoding(self) -> EvalSection:
        """The eval_<task> section; ConfigError when it was not given."""
        if self.evaluation is None:
            raise ConfigError(f"task {self.task_name}: decoding needs its eval_{self.task_name} section "
                              f"(--config train_{self.task_name}.json eval_{self.task_name}.json)")
        return self.evaluation


@dataclass(frozen=True)
class ExperimentsSection(Section):
    """``experiments``: Figure 3's K sweep."""

    experiments: ExperimentOptions


# ------------------------------------------------------------------------------------ reading
def _read_object(path: str) -> dict:
    from rag.io import read_json

    data = read_json(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config section must be a JSON object")
    return data


def _paths(paths: str | Path | list) -> list[str]:
    return [str(paths)] if isinstance(paths, (str, Path)) else [str(p) for p in paths]


def read_section(cls: type[S], paths: str | Path | list) -> S:
    """The section ``cls`` from one file, or several merged (a key two give different values is an error)."""
    paths = _paths(paths)
    merged: dict = {}
    for path in paths:
        for key, value in _read_object(path).items():
            if key in merged and merged[key] != value:
                raise ConfigError(f"{path}: key {key!r} differs from an earlier --config file")
            merged[key] = value
    return cls.from_dict(merged, " + ".join(paths))


def read_task_sections(paths: str | Path | list) -> TrainSection:
    """A task's ``train_<task>`` section, with its ``eval_<task>`` section when one of ``paths``
    is one (``rag train --config train_nq.json eval_nq.json``)."""
    paths = _paths(paths)
    train = evaluation = None
    for path in paths:
        data = _read_object(path)
        kind = "eval" if "decode" in data else "train"
        if (train if kind == "train" else evaluation) is not None:
            raise ConfigError(f"{path}: a second {kind}_<task> section among the --config files")
        if kind == "train":
            train = TrainSection.from_dict(data, path)
        else:
            evaluation, eval_path = EvalSection.from_dict(data, path), path
    if train is None:
        raise ConfigError(f"{' + '.join(paths)}: no train_<task> section among the --config files")
    if evaluation is not None and evaluation.task_name != train.task_name:
        raise ConfigError(f"{eval_path}: task_name {evaluation.task_name!r} differs from the train section's "
                          f"{train.task_name!r}")
    return replace(train, evaluation=evaluation)
