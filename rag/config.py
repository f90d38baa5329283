"""Load, validate and resolve the configuration.

``load_config`` validates a mapping as the models of :mod:`rag.config_keys` declare it, fills in the defaults and
checks what a model cannot (references between keys; the input files, :mod:`rag.config_files`), each problem one
:class:`~rag.errors.ConfigError` naming the key. :func:`sections` splits the resolved config into the pieces each
stage reads (the typed sections of :mod:`rag.sections`); what runs it has is :mod:`rag.runs`'.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, Sequence

import yaml

from rag import config_keys, keyspec
from rag.config_files import (check_file_names, check_input_files, check_k, check_local_corpus_k, check_models,
                              check_parsers, check_tracking_uri)
from rag.config_keys import Config, ContextEncoder, Generator, TaskDeclaration
from rag.declared_tasks import declare_tasks
from rag.errors import ConfigError
from rag.io import MAX_CONFIG_VALUES, alias_bomb, not_a_file, read_yaml
from rag.precision import check as check_precision
from rag.runs import (experiment_runs, generator_summary, hotswap_runs, reranker_declarations, retrieval_ks,
                      retriever_declarations, run_seeds, scale_summary, task_variants)
from rag.sections import (CorpusSection, DataSection, EncodeSection, EvalSection, ExperimentsSection, GeneratorSection,
                          IndexSection, TrainSection, pick)
from rag.tasks import BUILTIN_TASKS, ROLES, TASKS, family_spec


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
    cfg = keyspec.plain(keyspec.validate(Config, copy.deepcopy(data)))
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
    read = keyspec.read_words(copy.deepcopy(dict(given)), Config)
    generators = read.get("generators")
    for spec in generators.values() if isinstance(generators, dict) else ():
        if isinstance(spec, dict) and isinstance(spec.get("generator"), dict):
            spec["generator"] = keyspec.read_words(spec["generator"], Generator)
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
    from rag.metrics import METRICS

    for metric, given in cfg["metrics"].get("options", {}).items():
        if metric not in {m for t in tasks for m in TASKS[t].metrics} or not METRICS[metric].options:
            raise ConfigError(f"config key 'metrics.options.{metric}': no metric of the configured tasks named {metric!r} "
                              f"has options of its own")
        METRICS[metric].checked_options(given)
    check_precision(cfg["precision"], cfg["device"])
    corpus = cfg["corpus"]
    check_file_names(cfg)
    check_tracking_uri(cfg["tracking"]["uri"])
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
    for name, spec in cfg["generators"].items():
        where = f"generators.{name}"
        own, merged = spec["generator"], {**cfg["generator"], **spec["generator"]}
        merged = keyspec.plain(keyspec.validate(Generator, merged, f"{where}.generator"))
        inherited = merged.get("name_or_path") if "name_or_path" not in own else None
        if merged["init"] == "pretrained" and inherited and merged["family"] != cfg["generator"]["family"]:
            raise ConfigError(f"config key '{where}.generator.name_or_path': {where} is of family {merged['family']} and "
                              f"would load generator.name_or_path {inherited!r:.200}, a {cfg['generator']['family']} model "
                              f"(generator.family); set its own name_or_path, or init: scratch")
        _check_generator(merged, f"{where}.generator")
        spec["generator"] = merged
        _check_further_tasks(cfg, spec["tasks"], where, "generator")


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
        if family.passage_encoding:  # the encoder that built the index its runs start from
            if "context_encoder" in (spec["options"] or {}):
                raise ConfigError(f"config key '{where}.options.context_encoder': the retriever group's passage encoding "
                                  "(retriever.context_encoder and its options) fills it in; set those")
            spec["options"] = {**(spec["options"] or {}), "context_encoder": keyspec.plain(pick(ContextEncoder, cfg["retriever"]))}
        spec["options"] = keyspec.plain(keyspec.validate(family.options, spec["options"], f"{where}.options"))
        if spec["options"].get("index_refresh") == "async" and cfg["train"]["ddp_processes"] > 1:
            raise ConfigError(f"config key '{where}.options.index_refresh': async runs one training process beside its "
                              f"encoder processes; train.ddp_processes is {cfg['train']['ddp_processes']} (set it to 1, or "
                              "refresh the index synchronously)")
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


MINIWORLD_MAX_ENTITIES = 20_000  # the default world has 500; 2,400 take about 25 s to write


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
    declared = {name: pick(TaskDeclaration, cfg["tasks"][name]) for name in cfg["tasks"] if name not in BUILTIN_TASKS}
    if declared:  # the report names and scores them as the runs did
        out["report"]["declared_tasks"] = declared
    for name in cfg["tasks"]:
        out.update({f"{kind}_{name}": cls.of_config(cfg, name)
                    for kind, cls in (("data", DataSection), ("train", TrainSection), ("eval", EvalSection))})
    return json.loads(json.dumps(out, sort_keys=True))


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
