# Configuration: validated against workflow/schemas/config.schema.yaml (defaults filled in) before
# any job runs, then split into per-stage sections. Each section is written to
# results/config/<section>.json by rule `config_section` with the section as a param, so editing
# one task re-runs only the jobs of that task.
import sys

from rag.config import encoder_slug, load_config, sections
from rag.errors import ConfigError
from rag.tasks import TASKS, VARIANTS, variant_spec

# load_config validates against workflow/schemas/config.schema.yaml (the same file) and stops
# with one line naming the key; snakemake.utils.validate would print a whole jsonschema dump.
# It also stops, naming key and path, when a local input file of the config does not exist:
# Snakemake alone says "Nothing to be done" for it when the outputs exist from an earlier run.
try:
    CFG = load_config(config)
except ConfigError as exc:
    sys.exit(f"error: {exc}")

SECTIONS = sections(CFG)
NAME = CFG["corpus"]["name"]
TASK_NAMES = sorted(CFG["tasks"])
VARIANT_NAMES = list(CFG["variants"])
ENCODER = encoder_slug(CFG["retriever"]["context_encoder"])
INDEX = CFG["retriever"]["index"]
SHARDS = range(CFG["retriever"]["shards"])
DENSE = [v for v in VARIANT_NAMES if variant_spec(v).retriever == "dense"]
HOTSWAP = CFG["experiments"]["hotswap"] and CFG["corpus"]["source"] == "miniworld" and "nq" in CFG["tasks"]
TOPK_TASK = CFG["experiments"]["topk_task"]
# the oracle (gold passage as the only document) needs questions that name their gold passage: miniworld's do
ORACLE = CFG["experiments"]["oracle"] and CFG["corpus"]["source"] == "miniworld" and TOPK_TASK in CFG["tasks"]
CONDA = "../../envs/rag.yaml"
RES = CFG.get("resources", {})
# evaluate_in_train_job: the train rule also writes the dev/test predictions and metrics (no evaluate rule)
FUSED_EVAL = CFG["evaluate_in_train_job"]
EVAL_OUTPUTS = {
    f"{split}_{kind}": f"results/runs/{{task}}/{{variant}}/{split}/{name}"
    for split in ("dev", "test")
    for kind, name in (("metrics", "metrics.json"), ("predictions", "predictions.jsonl"))
}


wildcard_constraints:
    task="|".join(TASKS),
    variant="|".join(VARIANTS),
    section="[a-z0-9_]+",
    corpus="[a-z0-9_]+",
    shard="[0-9]+",
    split="dev|test",


def res(rule_name, key, default):
    """Cluster resources of a rule from config `resources` (workflow/profiles/* may override)."""
    return RES.get(rule_name, {}).get(key, RES.get("default", {}).get(key, default))


def section(name):
    return f"results/config/{name}.json"


def corpus_passages(corpus):
    return f"results/corpus/{corpus}/passages.tsv"


def shard_files(corpus):
    return expand(f"results/index/{corpus}/{ENCODER}/emb-{{shard}}.npy", shard=SHARDS)


def index_file(corpus):
    return f"results/index/{corpus}/{ENCODER}/{INDEX}.faiss"


def retrieval_inputs(wildcards):
    """The passages and the retriever files a variant reads (none for bart)."""
    spec = variant_spec(wildcards.variant)
    if spec.retriever is None:
        return {}
    if spec.retriever == "bm25":
        return {"passages": corpus_passages(NAME), "bm25": f"results/index/{NAME}/bm25"}
    return {"passages": corpus_passages(NAME), "embeddings": shard_files(NAME), "index": index_file(NAME)}


def retrieval_args(wildcards, input):
    """Command-line flags naming the retrieval inputs (paths only: no config value reaches a shell)."""
    args = []
    if "passages" in input.keys():
        args += ["--passages", input.passages]
    if "bm25" in input.keys():
        args += ["--bm25", input.bm25]
    if "embeddings" in input.keys():
        args += ["--embeddings", *input.embeddings, "--index", input.index]
    return " ".join(args)


def init_from(wildcards):
    src = CFG["tasks"][wildcards.task].get("init_from")
    return {"init": f"results/runs/{src}/{wildcards.variant}/model"} if src else {}


def all_targets():
    out = ["reports/report.html"]
    out += expand("results/runs/{task}/{variant}/{split}/metrics.json", task=TASK_NAMES, variant=VARIANT_NAMES, split=["dev", "test"])
    return out


def report_inputs(wildcards):
    """Every metrics file, and the Figure 3 and hot-swap results where configured."""
    ins = expand("results/runs/{task}/{variant}/{split}/metrics.json", task=TASK_NAMES, variant=VARIANT_NAMES, split=["dev", "test"])
    rag_variants = [v for v in ("rag_sequence", "rag_token") if v in VARIANT_NAMES]
    if TOPK_TASK in TASK_NAMES:
        ins += expand("results/experiments/topk/{task}/{variant}.json", task=[TOPK_TASK], variant=rag_variants)
    if HOTSWAP:
        ins += expand("results/experiments/hotswap/{variant}.json", variant=rag_variants)
    if ORACLE:
        ins += expand("results/experiments/oracle/{task}/{variant}.json", task=[TOPK_TASK], variant=rag_variants)
    return ins
