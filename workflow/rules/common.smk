# Configuration: validated against workflow/schemas/config.schema.yaml (defaults filled in) before
# any job runs, then split into per-stage sections (rag.config.sections: each holds only the keys its
# consumer reads). Each section is written to results/<name>/config/<section>.json by rule
# `config_section` with the section as a param, so an edit re-runs only the jobs that read it.
# Every output of an experiment lives under results/<name>/ and reports/<name>/ (<name>: the
# config's top-level `name`), so two experiments never share or overwrite an output.
import re
import sys
from pathlib import Path

from snakemake.io import IOFile
from snakemake.utils import update_config

from rag.config import command_line_values, load_config, read_config_file, sections
from rag.config_files import check_section_files, encoder_slug, input_files, model_folders
from rag.runs import (generator_runs, hotswap_runs, retriever_declarations, retriever_runs, run_seeds, task_variants,
                      train_processes)
from rag.errors import ConfigError
from rag.io import lock_holder
from rag.manifest import canonical_hash, sha256_files, sha256_folder
from rag.models.sizing import check_lora
from rag.retrieval import FILE_ROLES, retriever_files, retrievers_reading
from rag.tasks import GENERATOR_SEP, RETRIEVER_SEP, TASKS, VARIANTS, split_variant, variant_retriever, variant_spec

# load_config validates against workflow/schemas/config.schema.yaml (the same file) and stops
# with one line naming the key; snakemake.utils.validate would print a whole jsonschema dump.
# It also stops, naming key and path, when a local input file of the config does not exist:
# Snakemake alone says "Nothing to be done" for it when the outputs exist from an earlier run.
# --config reads the values inside a list or a mapping as strings (seeds=[1,2]: '1', '2'): read as their keys
# declare them (rag.config.command_line_values), the numbers of number keys numbers. Snakemake's YAML reader
# keeps the last of a key given twice: each config file is read again by read_config_file, which refuses it,
# naming the key and both lines.
try:
    for _configfile in workflow.configfiles:
        read_config_file(_configfile)
    update_config(config, command_line_values(workflow.config_settings.config))
    CFG = load_config(config)
    # LoRA's target modules, checked on the model built on the meta device (torch, transformers and peft
    # imported: seconds) by the process that plans the DAG, not again by each job's
    if workflow.is_main_process:
        check_lora(CFG)
except ConfigError as exc:
    sys.exit(f"error: {exc}")

SECTIONS = sections(CFG)
EXP = CFG["name"]  # the experiment: results/<EXP>/..., reports/<EXP>/..., MLflow experiments <EXP>/<task>
R = f"results/{EXP}"
# Local inputs (corpus.path, tasks.<task>.files.* of source: local) are judged by content: the
# sha256 of each is a param of the rule that reads it (local_sha256), so a file replaced by other
# content re-runs that rule, and what follows it, even where the file's date is older than the
# outputs' (cp -p, tar, rsync -a and unzip keep dates). Hashed once per content (rag.manifest.sha256_files).
# A local model folder (retriever.question_encoder / context_encoder, a pretrained generator's
# name_or_path: rag.config_files.model_folders) counts as its files' content does (rag.manifest.sha256_folder).
try:
    _LOCAL = input_files(CFG)
    _SHA = sha256_files([path for _, path in _LOCAL], ".snakemake/rag/input-sha256.json")
    LOCAL_SHA256 = {key: _SHA[str(path)] for key, path in _LOCAL} | {
        key: sha256_folder(path, ".snakemake/rag/input-sha256.json") for key, path in model_folders(CFG)}
except OSError as exc:
    sys.exit(f"error: {exc.filename}: {exc.strerror} (reading a local input the config names, to hash its content)")
NAME = CFG["corpus"]["name"]  # the corpus (wildcard {corpus}; the hot-swap's second snapshot is <NAME>_b)
TASK_NAMES = sorted(CFG["tasks"])
# the variants each task runs: tasks.<task>.variants, else the top-level variants
TASK_VARIANTS = {task: task_variants(CFG, task) for task in TASK_NAMES}
# the runs of the further generators (config key generators): (task, <variant>@<generator>), run by target generators
GENERATOR_RUNS = generator_runs(CFG)
# the runs of the further retrievers (config key retrievers): (task, <variant>+<retriever>), run by target retrievers,
# and those of the retrievers whose key target is end2end, run by target end2end
RETRIEVER_RUNS = retriever_runs(CFG, "retrievers")
END2END_RUNS = retriever_runs(CFG, "end2end")
# the fine-tune seeds of each task x variant (seeds, one_seed_variants, tasks.<task>.seeds): wildcard {seed}
SEEDS = {(task, v): run_seeds(CFG, task, v)
         for task, v in [(t, v) for t in TASK_NAMES for v in TASK_VARIANTS[t]] + GENERATOR_RUNS + RETRIEVER_RUNS + END2END_RUNS}
# one fine-tune's folder: its model, checkpoint and dev/test outputs
RUN = f"{R}/runs/{{task}}/{{variant}}/seed{{seed}}"
ENCODER = encoder_slug(CFG["retriever"]["context_encoder"])
INDEX = CFG["retriever"]["index"]
SHARDS = range(CFG["retriever"]["shards"])
HOTSWAP = hotswap_runs(CFG)
TOPK_TASK = CFG["experiments"]["topk_task"]
# the oracle (gold passage as the only document) needs questions that name their gold passage: miniworld's do
ORACLE = CFG["experiments"]["oracle"] and CFG["corpus"]["source"] == "miniworld" and TOPK_TASK in CFG["tasks"]
# the result files of the experiments job of one of the topk task's models (rule experiments); the hot-swap
# asks the questions of rag.tasks.ROLES.hotswap's task, which the config requires to be the topk task where it runs
EXPERIMENT_OUTPUTS = {kind: f"{R}/experiments/{kind}/{{task}}/{{variant}}/seed{{seed}}.json"
                      for kind, runs in (("topk", True), ("oracle", ORACLE), ("hotswap", HOTSWAP)) if runs}
CONDA = "../../envs/rag.yaml"
# the score bands the report and `snakemake check` hold the experiment to (config key bands): a relative path is the
# repository's, where config/bands/ is versioned with the code, whatever directory the run works in
BANDS = CFG["bands"] and str(Path(workflow.basedir, CFG["bands"]))
RES = CFG.get("resources", {})
# evaluate_in_train_job: the train rule also writes the dev/test predictions and metrics (no evaluate rule)
FUSED_EVAL = CFG["evaluate_in_train_job"]
_SECTIONS_CHECKED = []


def check_sections(wildcards):
    """No input: the config_section rule's input function, run while Snakemake builds the DAG (its
    DAG settings and records known, unlike while it reads this file). An edited section re-runs by
    Snakemake's record of the params; with no record (results/ copied without .snakemake/) it would
    be ignored without a word: stop, naming the --forcerun that re-runs it. Once per run, where the
    DAG is planned (a cluster job builds its own DAG on sections written already)."""
    if workflow.is_main_process and not _SECTIONS_CHECKED:
        _SECTIONS_CHECKED.append(True)
        s = workflow.dag_settings
        forced = {Path(w).resolve() for w in s.forcerun}
        reruns = lambda path: (s.forceall or "config_section" in s.forcerun or path.resolve() in forced
                               or workflow.persistence.metadata(IOFile(str(path))) is not None)
        try:
            check_section_files(f"{R}/config", SECTIONS, reruns)
        except ConfigError as exc:
            sys.exit(f"error: {exc}")
    return []


def check_run_locks():
    """Stop before any job starts where a job this run would start writes a checkpoint folder
    (params.ckpt: train, pretrain_generator) whose run lock (rag.io.run_lock) a live process holds:
    Snakemake begins a job by deleting its outputs and log, those of the running one (another
    snakemake's after --unlock, whose finished model --rerun-incomplete would delete while it decodes)."""
    for job in workflow.dag.needrun_jobs():
        ckpt = job.params.get("ckpt")
        holder = lock_holder(ckpt) if ckpt else None
        if holder:
            sys.exit(f"error: {job.output[0]} ({job.rule.name} job) is being written by another process ({holder}): "
                     f"{ckpt}/run.lock is locked, and running the job now would delete that process' outputs and log; "
                     "wait for that process to end (or stop it), then run this again")


onstart:
    check_run_locks()


EVAL_OUTPUTS = {
    f"{split}_{kind}": f"{RUN}/{split}/{name}"
    for split in ("dev", "test")
    for kind, name in (("metrics", "metrics.json"), ("predictions", "predictions.jsonl"))
}


wildcard_constraints:
    task="|".join(TASKS),
    variant=f"(?:{'|'.join(VARIANTS)})(?:{re.escape(RETRIEVER_SEP)}[a-z0-9_]+)?(?:{GENERATOR_SEP}[a-z0-9_]+)?",
    generator="[a-z0-9_]+",
    retriever="[a-z0-9_]+",
    section="[a-z0-9_]+",
    corpus="[a-z0-9_]+",
    shard="[0-9]+",
    split="dev|test",
    seed="[0-9]+",


def res(rule_name, key, default):
    """Cluster resources of a rule from config `resources` (workflow/profiles/* may override)."""
    return RES.get(rule_name, {}).get(key, RES.get("default", {}).get(key, default))


def record_file(rule_name, *wildcards):
    """The job's resource record (params.record; the rule's command runs as the child of
    ``rag-record --out {params.record:q} --``, rag.resources): its wall time, the CPU time of its process tree and
    its peak memory, under results/<name>/resources/<rule>/<its wildcard values, joined by ->.json."""
    return f"{R}/resources/{rule_name}/{'-'.join(f'{{{w}}}' for w in wildcards) or rule_name}.json"


def local_sha256(key):
    """{config key: sha256} of the local inputs at or under config key ``key`` ({} for none)."""
    return {k: sha for k, sha in LOCAL_SHA256.items() if k == key or k.startswith(f"{key}.")}


def metric_files_sha256(wildcards):
    """{config key: sha256} of the metric files of the user's (tasks.<task>.metrics.<i>) that score the
    job's task (every task's, for a job without one): a param of the rules that score, so an edited
    metric scores again."""
    task = getattr(wildcards, "task", None)
    return {k: sha for k, sha in LOCAL_SHA256.items()
            if k.split(".")[2:3] == ["metrics"] and (task is None or k.split(".")[1] == task)}


# the scoring rules' param, where the config names a metric file (none: their params as without one)
METRIC_FILES = {"metric_sha256": metric_files_sha256} if metric_files_sha256(None) else {}


def model_sha256(key):
    """A rule's params where config key ``key`` names a local model folder: {"model_sha256": {key: the
    folder's sha256}}, so other weights re-run the rule and what follows it; {} otherwise (the params as
    without one)."""
    return {"model_sha256": local_sha256(key)} if local_sha256(key) else {}


def retriever_sha256(name):
    """{config key: sha256} of the local files of declared retriever ``name`` and of those it is built from (a
    family's file, a reranker's model folder)."""
    built = retriever_declarations(CFG, name)["retrievers"]
    return {k: sha for k, sha in LOCAL_SHA256.items() if k.startswith("retrievers.") and k.split(".")[1] in built}


# a further retriever built from a local file or folder: its sections hold their sha256, so an edit re-runs its
# jobs (the section is an input of each) and of no other run
for _name in CFG["retrievers"]:
    for _section in (f"retriever_{_name}", f"reranker_{_name}"):
        if retriever_sha256(_name) and _section in SECTIONS:
            SECTIONS[_section] = {**SECTIONS[_section], "sha256": retriever_sha256(_name)}


# the params of the jobs that load a task's model where the question encoder is a local folder: its
# sha256 for a retrieving variant's (the retriever is built with the configured question encoder)
QUESTION_ENCODER = {"model_sha256": lambda w: local_sha256("retriever.question_encoder") if variant_spec(w.variant).retriever
                    else {}} if local_sha256("retriever.question_encoder") else {}


def section(name):
    return f"{R}/config/{name}.json"


def train_config_hash(wildcards):
    """The hash of the train_<task> section: the MLflow run's config_hash tag."""
    return canonical_hash(SECTIONS[f"train_{wildcards.task}"], 12)


def task_sections(wildcards, evaluation=True):
    """The sections a job that loads a task's model reads: train_<task> and (``evaluation``) eval_<task>, and
    for a run of a further retriever (<variant>+<name>) its retriever_<name>."""
    retriever = variant_retriever(wildcards.variant)
    return ([section(f"train_{wildcards.task}")] + ([section(f"eval_{wildcards.task}")] if evaluation else [])
            + ([section(f"retriever_{retriever}")] if retriever else []))


def corpus_passages(corpus):
    return f"{R}/corpus/{corpus}/passages.tsv"


def passage_rows(corpus):
    """The row table beside passages.tsv (rag.data.corpus.rows_path): written with it, read with it
    by every job that reads passages in place."""
    return f"{corpus_passages(corpus)}.rows.npy"


def shard_files(corpus):
    return expand(f"{R}/index/{corpus}/{ENCODER}/emb-{{shard}}.npy", shard=SHARDS)


def index_file(corpus):
    return f"{R}/index/{corpus}/{ENCODER}/{INDEX}.faiss"


def index_shard_record(corpus):
    """The record beside the index of the shards it was built from (rag.retrieval.index.shard_record_path):
    written with it, read with it by every job that reads the index and the shards."""
    return f"{index_file(corpus)}.shards.json"


def retrieval_file(role, corpus, retriever=None, task=None):
    """The file (or files) of a retrieval file role (rag.retrieval.FILE_ROLES) for ``corpus``; a reranker's, that of
    the rerank retriever ``retriever`` is built from, for ``task`` (rule train_reranker)."""
    if role == "reranker":
        (rerank,) = retrievers_reading("reranker", retriever, CFG["retrievers"])
        return reranker_model(rerank, task)
    return {
        "passages": corpus_passages(corpus),
        "embeddings": shard_files(corpus),
        "index": index_file(corpus),
        "bm25": f"{R}/index/{corpus}/bm25",
    }[role]


def reranker_model(retriever, task):
    """The cross-encoder of rerank retriever ``retriever`` for ``task`` (rule train_reranker)."""
    return f"{R}/rerankers/{retriever}/{task}/model"


def retriever_inputs(name, task):
    """The retrieval files retriever ``name`` reads for ``task``'s runs (rag.retrieval.retriever_files: with those
    of the retrievers a declared one names; none for None)."""
    if name is None:
        return {}
    files = {role: retrieval_file(role, NAME, name, task) for role in retriever_files(name, CFG["retrievers"])}
    return (files | ({"passage_rows": passage_rows(NAME)} if "passages" in files else {})
            | ({"index_shards": index_shard_record(NAME)} if "index" in files else {}))


def retrieval_inputs(wildcards):
    """The retrieval files the variant's retriever reads (none for closed_book)."""
    return retriever_inputs(variant_spec(wildcards.variant).retriever, wildcards.task)


def retrieval_args(wildcards, input):
    """Command-line flags naming the retrieval inputs, one list item per argument (the shell gets
    each quoted: {params.retrieval:q})."""
    args = []
    for role, (flag, many) in FILE_ROLES.items():
        if role in input.keys():
            value = getattr(input, role)
            args += [flag, *(value if many else [value])]
    return args


def fused_eval_args(wildcards, input, output):
    """evaluate_in_train_job: the train job's flags naming the dev/test files it decodes and writes."""
    if not FUSED_EVAL:
        return []
    return ["--dev", input.dev, "--test", input.test, "--dev-predictions", output.dev_predictions,
            "--dev-metrics", output.dev_metrics, "--test-predictions", output.test_predictions,
            "--test-metrics", output.test_metrics]


def init_from(wildcards):
    """The source task's model of the same variant and seed (config key tasks.<task>.init_from)."""
    src = CFG["tasks"][wildcards.task].get("init_from")
    return {"init": f"{R}/runs/{src}/{wildcards.variant}/seed{wildcards.seed}/model"} if src else {}


def generator_model(wildcards):
    """The pretrained generator a run fine-tunes: generator's, or that of the further generator its
    variant names (<variant>@<generator>)."""
    name = split_variant(wildcards.variant)[1]
    return f"{R}/generator/model" if name is None else f"{R}/generators/{name}/model"


def run_files(kind, generators=False, retrievers=False, end2end=False):
    """Every run's dev and test <kind> file (metrics.json | predictions.jsonl), task by task, seed by
    seed; with ``generators``, the further generators' runs after them, with ``retrievers`` the further
    retrievers', with ``end2end`` those of target end2end."""
    runs = [(run["task"], run["variant"]) for run in SECTIONS["report"]["runs"]]  # as rag check --experiment reads them
    further = (GENERATOR_RUNS if generators else []) + (RETRIEVER_RUNS if retrievers else []) + (END2END_RUNS if end2end else [])
    return [f"{R}/runs/{task}/{variant}/seed{seed}/{split}/{kind}"
            for task, variant in runs + further for seed in SEEDS[(task, variant)]
            for split in ("dev", "test")]


def experiment_files(kind):
    """An experiment's result file per RAG variant and seed of the topk task (EXPERIMENT_OUTPUTS)."""
    if kind not in EXPERIMENT_OUTPUTS:
        return []
    return [EXPERIMENT_OUTPUTS[kind].format(task=TOPK_TASK, variant=v, seed=s)
            for v in rag_variants(TOPK_TASK) for s in SEEDS[(TOPK_TASK, v)]]


def hotswap_inputs(wildcards):
    """The hot-swap's questions and the second snapshot (passages, embeddings, index), where it runs
    (the first snapshot is the model's own retrieval files)."""
    if not HOTSWAP:
        return {}
    b = f"{NAME}_b"
    return {"questions": f"{R}/data/hotswap/questions.jsonl", "passages_b": corpus_passages(b), "rows_b": passage_rows(b),
            "emb_b": shard_files(b), "index_b": index_file(b), "index_b_shards": index_shard_record(b)}


def experiment_args(wildcards, input, output):
    """`rag experiments` flags: the result file of each experiment the job runs, and the hot-swap's inputs."""
    args = [a for kind in output.keys() for a in (f"--{kind}-out", getattr(output, kind))]
    if "questions" in input.keys():
        args += ["--questions", input.questions, "--passages-b", input.passages_b, "--embeddings-b", *input.emb_b,
                 "--index-b", input.index_b]
    return args


def rag_variants(task):
    """The retrieval-augmented main variants (Figure 3, hot-swap, oracle) ``task`` runs."""
    return [v for v in ("rag_sequence", "rag_token") if v in TASK_VARIANTS.get(task, ())]


def all_targets():
    return [f"reports/{EXP}/report.html"] + run_files("metrics.json")


def report_inputs(wildcards, generators=False, retrievers=False, end2end=False):
    """Exactly the files the report reads: every run's metrics and predictions (in the same order;
    with ``generators``, the further generators' runs too, with ``retrievers`` the further retrievers', with
    ``end2end`` those of target end2end), the Figure 3, hot-swap and oracle results where configured, and the band
    file (config key bands) where one is named."""
    return {
        "metrics": run_files("metrics.json", generators, retrievers, end2end),
        "predictions": run_files("predictions.jsonl", generators, retrievers, end2end),
        "topk": experiment_files("topk"),
        "hotswap": experiment_files("hotswap"),
        "oracle": experiment_files("oracle"),
        "train_data": [f"{R}/data/{task}/train.jsonl" for task in TASK_NAMES],
        **({"bands": BANDS} if BANDS else {}),
    }


def bands_args(wildcards, input):
    """`rag report --bands FILE --seed S`: the report's score-band section, where the config names a band file."""
    return ["--bands", input.bands, "--seed", str(CFG["seed"])] if "bands" in input.keys() else []


def train_data_args(wildcards, input):
    """`rag report --train-data task=path ...`: each task's train file (report_inputs lists them in TASK_NAMES order)."""
    return [f"{task}={path}" for task, path in zip(TASK_NAMES, input.train_data)]
