"""The config sections as typed, frozen models: what each stage function takes.

A section is made of parts of the config (rag.config_keys): top-level keys (``seed: Seed``) and parts of groups
(``retriever: ContextEncoder``, the part of the ``retriever`` group a passage encoder reads), each field named for the
key or group it reads (``task``: the task's ``tasks.<task>``). :meth:`Section.of_config` takes its mapping out of the
resolved config (Snakemake writes it to ``results/<name>/config/<section>.json``); a command reads the file back
(:func:`read_section`), validated as the config is, every key given (each problem one ConfigError naming the file and
the dotted key); ``to_dict`` gives back the mapping.
"""

from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, Field

from rag.config_keys import (ContextEncoder, CorpusOptions, DecodeOptions, Device, ExperimentOptions, Generator,
                             GeneratorLengths, IndexOptions, MetricOptions, Miniworld, MiniworldCut, Name, Precision,
                             QuestionEncoder, Seed, TaskData, TaskDeclaration, TaskName, TaskOptions, Train,
                             TrackingStore)
from rag.errors import ConfigError
from rag.keyspec import Key, absent, validate

S = TypeVar("S", bound="Section")
MODELS = ("sequence", "token", "closed_book")  # the model kinds of rag.tasks VariantSpec.model


def _model(tp: Any) -> type | None:
    """The model class of a field's annotation (``X`` or ``X | None``), else None."""
    args = [a for a in get_args(tp) if a is not type(None)] if get_origin(tp) in (Union, UnionType) else [tp]
    return args[0] if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], BaseModel) else None


def pick(model: type[BaseModel], data: Mapping) -> dict:
    """The keys of ``data`` that ``model`` has (a nested model's: its own)."""
    out = {}
    for k, f in model.model_fields.items():
        if k in data and not f.exclude:
            sub = _model(f.annotation)
            out[k] = pick(sub, data[k]) if sub is not None and isinstance(data[k], Mapping) else data[k]
    return out


class Section(Key):
    """A section: its fields top-level keys of the config (of the key's own type), parts of the groups they name
    (``task``: tasks.<task>), nested sections, and (``exclude``) what a reader attaches; never a type of its own (a key
    is declared once, in rag.config_keys: tests/test_config_keys.py)."""

    @classmethod
    def of_config(cls, cfg: Mapping, task: str | None = None) -> dict:
        """The section's mapping of the resolved config ``cfg``: each key it reads that ``cfg`` holds (``task``:
        ``tasks.<task>``'s; ``task_name``: ``task``) and each nested section's."""
        out = {}
        for k, f in cls.model_fields.items():
            sub = _model(f.annotation)
            if f.exclude:
                continue
            if k == "task_name":
                out[k] = task
            elif sub is not None and issubclass(sub, Section):
                out[k] = sub.of_config(cfg, task)
            elif sub is not None:
                out[k] = pick(sub, cfg["tasks"][task] if k == "task" else cfg[k])
            elif k in cfg:
                out[k] = cfg[k]
        return out

    @classmethod
    def from_dict(cls: type[S], data: Any, where: str, prefix: str = "") -> S:
        """Parse the mapping ``data`` read from ``where`` (``prefix``: its dotted key in there)."""
        return validate(cls, data, prefix, f"{where}: ", whole=True)


# ------------------------------------------------------------------------------------ sections
class CorpusSection(Section):
    """``corpus``: the corpus and the hot-swap questions."""

    seed: Seed
    corpus: CorpusOptions
    miniworld: Miniworld = absent()  # corpus.source: miniworld

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

    device: Device
    precision: Precision
    retriever: ContextEncoder


class IndexSection(Section):
    """``index``: the FAISS index (its type's parameters alone)."""

    device: Device
    retriever: IndexOptions

    @classmethod
    def of_config(cls, cfg: Mapping, task: str | None = None) -> dict:
        out = super().of_config(cfg, task)
        out["retriever"] = {k: v for k, v in out["retriever"].items()
                            if k == "index" or k not in IndexOptions.may_lack(out["retriever"])}
        return out


class GeneratorSection(Section):
    """``generator``: generator construction and pretraining."""

    seed: Seed
    device: Device
    precision: Precision
    generator: Generator


class TaskSection(Section):
    """A section of one task (``task_name``); parsing it declares a task the config declares (its ``task`` holds the
    declaration: whole in eval_<task>, without metrics elsewhere) in this process."""

    task_name: TaskName

    @classmethod
    def from_dict(cls: type[S], data: Any, where: str, prefix: str = "") -> S:
        task = data.get("task") if isinstance(data, Mapping) else None
        if isinstance(task, Mapping) and "kind" in task:
            from rag.declared_tasks import declare_task
            from rag.tasks import TASKS

            name, whole = data.get("task_name"), "metrics" in task
            if whole or not isinstance(name, str) or name not in TASKS:  # a part never replaces the whole
                declare_task(name, dict(task), where, without_metrics=not whole)
        return super().from_dict(data, where, prefix)


class DataSection(TaskSection):
    """``data_<task>``: one task's train/dev/test files."""

    task: TaskData
    seed: Seed = absent()  # miniworld tasks
    miniworld: MiniworldCut = absent()

    @classmethod
    def of_config(cls, cfg: Mapping, task: str | None = None) -> dict:
        out = super().of_config(cfg, task)
        out["miniworld"]["passage_words"] = cfg["corpus"]["passage_words"]
        if cfg["tasks"][task]["source"] != "miniworld":  # a miniworld task's gold passages depend on the cut
            del out["seed"], out["miniworld"]
        return out


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


class Decode(Section):
    """Test-time decoding per model kind: the task's decode_* keys over the registry's defaults (:func:`task_decode`)."""

    sequence: DecodeOptions
    token: DecodeOptions
    closed_book: DecodeOptions

    @classmethod
    def of_config(cls, cfg: Mapping, task: str | None = None) -> dict:
        return {model: task_decode(cfg, task, model) for model in MODELS}

    def of(self, model: str) -> DecodeOptions:
        return getattr(self, model)


class EvalSection(TaskSection):
    """``eval_<task>``: test-time decoding and the metric options (only for tasks whose metrics read them; ``options``
    those of the task's own metrics); ``task``: the declaration of a task the config declares."""

    decode: Decode
    metrics: MetricOptions = absent()
    task: TaskDeclaration = absent()

    @classmethod
    def of_config(cls, cfg: Mapping, task: str | None = None) -> dict:
        from rag.tasks import BUILTIN_TASKS, TASKS

        out = super().of_config(cfg, task)
        if task in BUILTIN_TASKS:  # only a task the config declares carries its declaration
            del out["task"]
        own = {m: v for m, v in out["metrics"].pop("options", {}).items() if m in TASKS[task].metrics}
        if own:
            out["metrics"]["options"] = own
        if not TASKS[task].reads_metric_options:
            del out["metrics"]
        return out


class TrainSection(TaskSection):
    """``train_<task>``: fine-tuning; ``evaluation``: the task's ``eval_<task>`` section when a command that decodes
    read it too (:func:`read_task_sections`); ``retrievers``: the ``retriever_<name>`` section's declarations of a
    run of a further retriever (name -> {family, options})."""

    name: Name
    seed: Seed
    device: Device
    precision: Precision
    tracking: TrackingStore
    task: TaskOptions
    train: Train
    generator: GeneratorLengths
    retriever: QuestionEncoder
    evaluation: EvalSection | None = Field(None, exclude=True)
    retrievers: dict | None = Field(None, exclude=True)

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
    """A task's ``train_<task>`` section, with its ``eval_<task>`` section when one of ``paths`` is one (``rag train
    --config train_nq.json eval_nq.json``) and a further retriever's ``retriever_<name>`` section when one is (a run
    ``<variant>+<name>``)."""
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
    return train.model_copy(update={"evaluation": evaluation, "retrievers": retrievers})


def _retriever_declarations(data: dict, path) -> dict:
    """A ``retriever_<name>`` section's declarations (name -> {family, options}), checked for their shape (the config
    validated their options); beside them, where one is built from a local file or folder, ``sha256``: {config key:
    sha256} of those (workflow/rules/common.smk), which only makes an edit re-run its jobs."""
    declared, shas = data["retrievers"], data.get("sha256", {})
    if not set(data) <= {"retrievers", "sha256"} or not isinstance(shas, dict) or not all(
            isinstance(v, str) for v in shas.values()) or not isinstance(declared, dict) or not declared or not all(
            isinstance(d, dict) and set(d) == {"family", "options"} and isinstance(d["family"], str)
            and isinstance(d["options"], dict) for d in declared.values()):
        raise ConfigError(f"{path}: not a retriever_<name> section (retrievers: name -> family and options)")
    return declared
