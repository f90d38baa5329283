"""The config sections as typed, frozen objects: what each stage function takes.

A class names the declared keys its stage reads (``batch_size = read("retriever.batch_size")``, or
``every_key_of="train"``) and its nested sections (``corpus: CorpusOptions``). :meth:`Section.of_config`
takes its mapping out of the resolved config (Snakemake writes it to ``results/<name>/config/<section>.json``);
a command reads the file back into the class (:func:`read_section`), validated against the declarations
(each problem one ConfigError naming the file and the dotted key); ``to_dict`` gives back the mapping.
"""

import dataclasses
import types
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar, Union, get_args, get_origin

from rag import config_keys, keyspec
from rag.config_keys import DECODE_KEYS, INDEX_PARAMS, RUN_KEYS, TASK_NAME
from rag.errors import ConfigError

S = TypeVar("S", bound="Section")

# a field that is no key of the section's file (attached by a reader that merges several files)
_ATTACHED = {"key": False}


class Read(NamedTuple):
    """What a section field reads (:func:`read`, its field's ``metadata["read"]``)."""

    path: str | None  # the dotted config key; None: a key only sections have (task_name)
    node: dict  # its declaration


def read(key: str | dict, *, optional: bool | None = None) -> Any:
    """The section field holding the config key ``key`` (dotted, "train.k"; or the declaration of a
    key only sections have). ``optional``: whether the section may leave it out (default: a config
    key without default may be absent)."""
    r = Read(key, config_keys.key(key)) if isinstance(key, str) else Read(None, key)
    if optional is None:
        optional = r.path is not None and "default" not in r.node
    return field(default=None, metadata={"read": r}) if optional else field(metadata={"read": r})


@dataclass(frozen=True)
class Section:
    """Base of the typed sections: a subclass lists its keys (``name = read("dotted.key")``, or
    ``every_key_of="group"`` less ``exclude``) and its nested sections as annotations
    (``X | None = None``: may be absent); it becomes a frozen, keyword-only dataclass."""

    _given: frozenset = field(default=frozenset(), kw_only=True, repr=False, compare=False, metadata=_ATTACHED)

    def __init_subclass__(cls, every_key_of: str | None = None, exclude: tuple = (), **kw) -> None:
        super().__init_subclass__(**kw)
        own = dict(cls.__dict__.get("__annotations__", {}))
        keys = {n: v for n, v in cls.__dict__.items() if isinstance(v, dataclasses.Field) and "read" in v.metadata}
        if every_key_of is not None:
            group = keyspec.target(config_keys.key(every_key_of)).get("properties")
            if group is None or set(exclude) - set(group):
                raise TypeError(f"{cls.__name__}: {every_key_of} is no group of keys, or lacks one of {exclude}")
            known = {f.name for f in fields(cls)} | set(keys) | set(own)
            for name, node in group.items():
                if name in known or name in exclude:
                    continue
                if "properties" in keyspec.target(node):
                    raise TypeError(f"{cls.__name__}: {every_key_of}.{name} is a group of keys: "
                                    "annotate it with its own Section class")
                keys[name] = read(f"{every_key_of}.{name}")
        annotations = {}
        for name, f in keys.items():
            tp = keyspec.py_type(f.metadata["read"].node)
            annotations[name] = tp if f.default is MISSING else tp | None
            setattr(cls, name, f)
        for name, tp in own.items():
            annotations[name] = tp
            value = cls.__dict__.get(name, MISSING)
            if isinstance(value, dataclasses.Field) and value.metadata.get("key") is False:
                continue  # attached by a reader, not a key of the file
            part = _part(tp)
            if part is None:
                raise TypeError(f"{cls.__name__}.{name}: a section field is read(<config key>) or a nested "
                                "Section class, not a type of its own")
            meta = {"part": part}
            setattr(cls, name, field(metadata=meta) if value is MISSING else field(default=value, metadata=meta))
        cls.__annotations__ = annotations
        dataclass(frozen=True, kw_only=True)(cls)

    @classmethod
    def of_config(cls, cfg: Mapping, task: str | None = None) -> dict:
        """The section's mapping of the resolved config ``cfg``: each key it reads that ``cfg`` holds
        (``tasks.*``: of ``task``; ``task_name``: ``task``) and each nested section's."""
        out = {}
        for f in fields(cls):
            if "part" in f.metadata:
                out[f.name] = f.metadata["part"].of_config(cfg, task)
            elif "read" in f.metadata and f.metadata["read"].path is None:
                out[f.name] = task
            elif "read" in f.metadata:
                value = cfg
                for part in f.metadata["read"].path.split("."):
                    value = value.get(task if part == "*" else part, MISSING)
                    if value is MISSING:
                        break
                else:
                    out[f.name] = value
        return out

    @classmethod
    def json_schema(cls) -> dict:
        """The JSON schema of the section's mapping, from the declarations of its keys."""
        props, required = {}, []
        for f in fields(cls):
            if not f.metadata.get("key", True):
                continue
            props[f.name] = f.metadata["read"].node if "read" in f.metadata else f.metadata["part"].json_schema()
            if f.default is MISSING:
                required.append(f.name)
        return keyspec.Group(props, required=tuple(required), default=keyspec.NO_DEFAULT)

    @classmethod
    def from_dict(cls: type[S], data: Any, where: str, prefix: str = "") -> S:
        """Parse the mapping ``data`` read from ``where`` (``prefix``: its dotted key in there)."""
        from rag.tasks import TASKS, VARIANTS

        keyspec.validate(_validator(cls, (tuple(TASKS), tuple(VARIANTS))), data, prefix, f"{where}: ")
        return cls._build(data, where, prefix)

    @classmethod
    def _build(cls: type[S], data: Mapping, where: str, prefix: str) -> S:
        values = {}
        for f in fields(cls):
            if f.metadata.get("key", True) and f.name in data:
                part = f.metadata.get("part")
                value = data[f.name]
                values[f.name] = part._build(value, where, keyspec.dotted([f.name], prefix)) if part else _frozen(value)
        obj = cls(**values, _given=frozenset(values))
        obj._check(where, prefix)
        return obj

    def _check(self, where: str, prefix: str) -> None:
        """Checks between keys (a subclass' own)."""

    def to_dict(self) -> dict:
        """The section's mapping (sorted keys): the keys it was read with, or the required and set ones."""
        out = {}
        for f in fields(self):
            if f.metadata.get("key", True):
                value = getattr(self, f.name)
                if f.name in self._given or value is not None or f.default is MISSING:
                    out[f.name] = _dump(value)
        return {k: out[k] for k in sorted(out)}


def _part(tp) -> type | None:
    """The Section class of a nested section's annotation (``X`` or ``X | None``), else None."""
    args = [a for a in get_args(tp) if a is not type(None)] if get_origin(tp) in (Union, types.UnionType) else [tp]
    return args[0] if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], Section) else None


@lru_cache(maxsize=None)
def _validator(cls, names: tuple):
    """The section's validator, built again when the registry's names change (``names``: its enums
    read them)."""
    sch = {**keyspec.resolve(cls.json_schema()), "definitions": config_keys.json_schema()["definitions"]}
    return keyspec.validator_class(fill_defaults=False)(sch)


def _frozen(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    return value


def _dump(value: Any) -> Any:
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_dump(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _dump(v) for k, v in value.items()}
    return value


# ------------------------------------------------------------------------------------ parts
class Miniworld(Section, every_key_of="miniworld"):
    """miniworld: the generated world (rag.data.miniworld.build_world)."""


class MiniworldCut(Miniworld):
    """The world and how its corpus is cut: a miniworld task's gold passages depend on both."""

    passage_words = read("corpus.passage_words")


class CorpusOptions(Section):
    source = read("corpus.source")
    passage_words = read("corpus.passage_words")
    format = read("corpus.format", optional=True)  # converted corpora only


class EncoderOptions(Section):
    """What the context and the question encoder share."""

    pooling = read("retriever.pooling")
    normalize = read("retriever.normalize")
    max_length = read("retriever.max_length")


class ContextEncoder(EncoderOptions):
    """Passage encoding (rag.stages.indexing.encode_shard)."""

    context_encoder = read("retriever.context_encoder")
    passage_prefix = read("retriever.passage_prefix")
    batch_size = read("retriever.batch_size")

    def encoder_text(self) -> "EncoderText":
        return EncoderText(self.pooling, self.normalize, self.max_length, prefix=self.passage_prefix)


class QuestionEncoder(EncoderOptions):
    """The dense retriever's question side (rag.retrieval.dense)."""

    question_encoder = read("retriever.question_encoder")
    query_prefix = read("retriever.query_prefix")
    query_instruction = read("retriever.query_instruction")
    score_scale = read("retriever.score_scale")

    def encoder_text(self) -> "EncoderText":
        return EncoderText(self.pooling, self.normalize, self.max_length, prefix=self.query_prefix,
                           instruction=self.query_instruction)


@dataclass(frozen=True)
class EncoderText:
    """How one side of a dense retriever turns texts into vectors (rag.retrieval.encoders.Encoder): its
    pooling, normalisation and max length, and the text put before each input: ``prefix`` (None: the
    model folder's own prompt for that side, else none), after ``Instruct: <instruction>`` and a new line
    ``Query: `` where an instruction is given."""

    pooling: str = "mean"
    normalize: bool = True
    max_length: int = 128
    prefix: str | None = None
    instruction: str | None = None


class IndexOptions(Section):
    """The index type and that type's parameters (:data:`INDEX_PARAMS`), the others absent."""

    index = read("retriever.index")
    hnsw_m = read("retriever.hnsw_m", optional=True)
    hnsw_ef_search = read("retriever.hnsw_ef_search", optional=True)
    ivf_lists = read("retriever.ivf_lists", optional=True)
    pq_m = read("retriever.pq_m", optional=True)  # given and null: the embedding size / 8

    @classmethod
    def of_config(cls, cfg: Mapping, task: str | None = None) -> dict:
        out = super().of_config(cfg, task)
        return {k: v for k, v in out.items() if k == "index" or k in INDEX_PARAMS[out["index"]]}

    def _check(self, where: str, prefix: str) -> None:
        for name in INDEX_PARAMS[self.index]:
            if name not in self._given:
                raise ConfigError(f"{where}: config key {keyspec.dotted([name], prefix)!r} is missing")

    def build_params(self) -> dict:
        """The keyword arguments of rag.retrieval.index.build_index for the set parameters."""
        named = {"hnsw_m": self.hnsw_m, "ef_search": self.hnsw_ef_search, "ivf_lists": self.ivf_lists, "pq_m": self.pq_m}
        return {k: v for k, v in named.items() if v is not None}


class GeneratorLengths(Section):
    """What building a RAG system reads of the generator configuration."""

    max_source_len = read("generator.max_source_len")
    max_target_len = read("generator.max_target_len")
    chunk_overhead = read("generator.chunk_overhead")  # null: the device's default


class GeneratorOptions(GeneratorLengths, every_key_of="generator"):
    """The whole generator configuration (construction and pretraining)."""


class TaskKind(Section):
    """What the data and training of a task the config declares (``tasks.<task>.kind``) read of its declaration."""

    source = read("tasks.*.source")
    format = read("tasks.*.format")
    kind = read("tasks.*.kind")
    labels = read("tasks.*.labels")


class TaskDeclaration(TaskKind):
    """The whole declaration of a task the config declares: what scoring and the report read."""

    metrics = read("tasks.*.metrics")
    primary = read("tasks.*.primary")
    display = read("tasks.*.display")


class TaskData(TaskKind):
    """What a task's data files depend on."""

    well_formed_only = read("tasks.*.well_formed_only")  # msmarco: every split, or the splits named
    train = read("tasks.*.train")  # miniworld: examples per split
    dev = read("tasks.*.dev")
    test = read("tasks.*.test")
    formats = read("tasks.*.formats")  # split -> parser
    train_sampling = read("tasks.*.train_sampling", optional=True)  # miniworld: facts (unset) or attributes

    def keeps_well_formed_only(self, split: str) -> bool:
        wf = self.well_formed_only
        return split in wf if isinstance(wf, tuple) else wf


class TaskOptions(TaskData, every_key_of="tasks.*", exclude=DECODE_KEYS + RUN_KEYS + ("metrics", "primary", "display")):
    """A task's configuration but its test-time decoding, which runs it has and what only scoring
    and the report read of a declared task."""


class TrainOptions(Section, every_key_of="train"):
    """Fine-tuning (train.*; a task's ``steps`` replaces train.steps in its section)."""


class Tracking(Section):
    uri = read("tracking.uri")


class DecodeOptions(Section):
    """One model kind's test-time decoding: the task's decode_* keys over the registry's defaults
    (:func:`task_decode`), all four always given."""

    k = read("tasks.*.decode_sequence.k")
    method = read("tasks.*.decode_sequence.method", optional=False)
    beams = read("tasks.*.decode_sequence.beams", optional=False)
    max_new_tokens = read("tasks.*.decode_sequence.max_new_tokens", optional=False)


class Decode(Section):
    """Test-time decoding per model kind (rag.tasks VariantSpec.model)."""

    sequence: DecodeOptions
    token: DecodeOptions
    closed_book: DecodeOptions

    @classmethod
    def of_config(cls, cfg: Mapping, task: str | None = None) -> dict:
        return {model: task_decode(cfg, task, model) for model in ("sequence", "token", "closed_book")}

    def of(self, model: str) -> DecodeOptions:
        return {"sequence": self.sequence, "token": self.token, "closed_book": self.closed_book}[model]



def task_decode(cfg: Mapping, task: str, model: str) -> dict:
    """The test-time decoding settings of ``task`` for a model kind (sequence | token | closed_book)."""
    from rag.tasks import TASKS

    spec = TASKS[task]
    key = "decode_token" if model == "token" else "decode_sequence"
    base = dict(spec.decode_token if model == "token" else spec.decode_sequence)
    base.update(cfg["tasks"][task].get(key, {}))
    if model == "closed_book":
        base["method"] = "beam" if base["method"] in ("fast", "beam") else "greedy"
    return base

class QBleuWeights(Section, every_key_of="metrics.qbleu1"):
    """The Q-BLEU-1 weights."""


class MetricOptions(Section, every_key_of="metrics"):
    """The metric options; ``options``: those of the task's own metrics that the config sets."""

    qbleu1: QBleuWeights

    @classmethod
    def of_config(cls, cfg: Mapping, task: str | None = None) -> dict:
        from rag.tasks import TASKS

        out = super().of_config(cfg, task)
        own = {m: v for m, v in out.pop("options", {}).items() if m in TASKS[task].metrics}
        return {**out, "options": own} if own else out


class ExperimentOptions(Section):
    topk_sweep = read("experiments.topk_sweep")


# ------------------------------------------------------------------------------------ sections
class CorpusSection(Section):
    """``corpus``: the corpus and the hot-swap questions."""

    seed = read("seed")
    corpus: CorpusOptions
    miniworld: Miniworld | None = None  # corpus.source: miniworld

    @classmethod
    def of_config(cls, cfg: Mapping, task: str | None = None) -> dict:
        out = super().of_config(cfg, task)
        if cfg["corpus"]["source"] == "miniworld":
            del out["corpus"]["format"]  # no file to convert
        else:
            del out["miniworld"]
        return out

    def world(self) -> Miniworld:
        if self.miniworld is None:
            raise ConfigError(f"corpus source {self.corpus.source!r}: the miniworld world and its questions "
                              "need corpus.source: miniworld")
        return self.miniworld


class EncodeSection(Section):
    """``encode``: passage encoding."""

    device = read("device")
    precision = read("precision")
    retriever: ContextEncoder


class IndexSection(Section):
    """``index``: the FAISS index."""

    device = read("device")
    retriever: IndexOptions


class GeneratorSection(Section):
    """``generator``: generator construction and pretraining."""

    seed = read("seed")
    device = read("device")
    precision = read("precision")
    generator: GeneratorOptions


class TaskSection(Section):
    """A section of one task (``task_name``); parsing it declares a task the config declares (its
    ``task`` holds the declaration: whole in eval_<task>, without metrics elsewhere) in this process."""

    @classmethod
    def from_dict(cls: type[S], data: Any, where: str, prefix: str = "") -> S:
        task = data.get("task") if isinstance(data, Mapping) else None
        if isinstance(task, Mapping) and "kind" in task:
            from rag.tasks import TASKS, declare_task

            name, whole = data.get("task_name"), "metrics" in task
            if whole or not isinstance(name, str) or name not in TASKS:  # a part never replaces the whole
                declare_task(name, _dump(task), where, without_metrics=not whole)
        return super().from_dict(data, where, prefix)


class DataSection(TaskSection):
    """``data_<task>``: one task's train/dev/test files."""

    task_name = read(keyspec.ref(TASK_NAME))
    task: TaskData
    seed = read("seed", optional=True)  # miniworld tasks
    miniworld: MiniworldCut | None = None

    @classmethod
    def of_config(cls, cfg: Mapping, task: str | None = None) -> dict:
        out = super().of_config(cfg, task)
        if cfg["tasks"][task]["source"] != "miniworld":  # a miniworld task's gold passages depend on the cut
            del out["seed"], out["miniworld"]
        return out


class EvalSection(TaskSection):
    """``eval_<task>``: test-time decoding and the metric options (only for tasks whose metrics read
    them); ``task``: the declaration of a task the config declares."""

    task_name = read(keyspec.ref(TASK_NAME))
    decode: Decode
    metrics: MetricOptions | None = None
    task: TaskDeclaration | None = None

    @classmethod
    def of_config(cls, cfg: Mapping, task: str | None = None) -> dict:
        from rag.tasks import BUILTIN_TASKS, TASKS

        out = super().of_config(cfg, task)
        if task in BUILTIN_TASKS:  # only a task the config declares carries its declaration
            del out["task"]
        if not TASKS[task].reads_metric_options:
            del out["metrics"]
        return out


class TrainSection(TaskSection):
    """``train_<task>``: fine-tuning; ``evaluation``: the task's ``eval_<task>`` section when a
    command that decodes read it too (:func:`read_task_sections`)."""

    name = read("name")
    seed = read("seed")
    device = read("device")
    precision = read("precision")
    task_name = read(keyspec.ref(TASK_NAME))
    tracking: Tracking
    task: TaskOptions
    train: TrainOptions
    generator: GeneratorLengths
    retriever: QuestionEncoder
    evaluation: EvalSection | None = field(default=None, metadata=_ATTACHED)
    # the retriever_<name> section of a run of a further retriever (config key retrievers): name -> {family, options}
    retrievers: dict | None = field(default=None, metadata=_ATTACHED)

    @classmethod
    def of_config(cls, cfg: Mapping, task: str | None = None) -> dict:
        out = super().of_config(cfg, task)
        if "steps" in cfg["tasks"][task]:  # a task's steps replace train.steps
            out["train"]["steps"] = cfg["tasks"][task]["steps"]
        return out

    def decoding(self) -> EvalSection:
        """The eval_<task> section; ConfigError when it was not given."""
        if self.evaluation is None:
            raise ConfigError(f"task {self.task_name}: decoding needs its eval_{self.task_name} section "
                              f"(--config train_{self.task_name}.json eval_{self.task_name}.json)")
        return self.evaluation


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
    is one (``rag train --config train_nq.json eval_nq.json``) and a further retriever's
    ``retriever_<name>`` section when one is (a run ``<variant>+<name>``)."""
    paths = _paths(paths)
    train = evaluation = retrievers = None
    for path in paths:
        data = _read_object(path)
        kind = "eval" if "decode" in data else "retriever" if "retrievers" in data else "train"
        if {"train": train, "eval": evaluation, "retriever": retrievers}[kind] is not None:
            raise ConfigError(f"{path}: a second {kind}_<{'name' if kind == 'retriever' else 'task'}> section among the --config files")
        if kind == "train":
            train = TrainSection.from_dict(data, path)
        elif kind == "eval":
            evaluation, eval_path = EvalSection.from_dict(data, path), path
        else:
            retrievers = _retriever_declarations(data, path)
    if train is None:
        raise ConfigError(f"{' + '.join(paths)}: no train_<task> section among the --config files")
    if evaluation is not None and evaluation.task_name != train.task_name:
        raise ConfigError(f"{eval_path}: task_name {evaluation.task_name!r} differs from the train section's "
                          f"{train.task_name!r}")
    return replace(train, evaluation=evaluation, retrievers=retrievers)


def _retriever_declarations(data: dict, path) -> dict:
    """A ``retriever_<name>`` section's declarations (name -> {family, options}), checked for their shape (the
    config validated their options); beside them, where one is built from a local file or folder, ``sha256``:
    {config key: sha256} of those (workflow/rules/common.smk), which only makes an edit re-run its jobs."""
    declared, shas = data["retrievers"], data.get("sha256", {})
    if not set(data) <= {"retrievers", "sha256"} or not isinstance(shas, dict) or not all(
            isinstance(v, str) for v in shas.values()) or not isinstance(declared, dict) or not declared or not all(
            isinstance(d, dict) and set(d) == {"family", "options"} and isinstance(d["family"], str)
            and isinstance(d["options"], dict) for d in declared.values()):
        raise ConfigError(f"{path}: not a retriever_<name> section (retrievers: name -> family and options)")
    return declared
