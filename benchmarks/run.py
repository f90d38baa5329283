"""Run the speed benchmarks and write results/benchmarks/<section>.json and summary.md.

    python -m benchmarks.run --out results/benchmarks                # everything, full sizes
    python -m benchmarks.run --quick --out /tmp/bench                 # smoke test, tiny sizes, ~1-2 min
    python -m benchmarks.run --only encoding,train --out results/benchmarks
    python -m benchmarks.run --device cuda --paper-size --out results/benchmarks/gpu   # on a GPU
    python -m benchmarks.run --paper-size --quick --out /tmp/bench_paper               # CPU smoke of that section
    python -m benchmarks.run --only sweep --sweep-baseline HEAD~1 --out results/benchmarks  # after the default DAG

Sections: encoding, index, index_build, retrieval_job, train, train_causal (a causal-LM generator), decode, dag, scaling;
sweep (the default run's NQ RAG-Sequence K sweep jobs again, against --sweep-baseline REV's; only with --only sweep);
worlds (the dense-over-BM25 claims row in the top-level seeds --worlds-seeds: each world's corpus, NQ test set and
indexes, no fine-tune; only with --only worlds); and paper (bart-large-sized generator,
bert-base-sized DPR encoders, random weights; only with --paper-size or --only paper). Each writes
its own JSON; summary.md is rebuilt from every <section>.json present in --out, so sections can be
run one at a time. --device cuda runs encoding, train, decode and paper on the GPU; index,
index_build, retrieval_job, dag, scaling and sweep are CPU measurements and refuse it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import platform
import sys
import time
import traceback
import warnings
from pathlib import Path

SECTIONS = ["encoding", "index", "index_build", "retrieval_job", "train", "train_causal", "decode", "dag", "scaling",
            "sweep", "worlds", "paper"]
DEFAULT_SECTIONS = ["encoding", "index", "index_build", "retrieval_job", "train", "train_causal", "decode", "dag",
                    "scaling"]  # paper: --paper-size
DEVICE_SECTIONS = {"encoding", "train", "train_causal", "decode", "paper"}  # the sections that honour --device


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="results/benchmarks")
    p.add_argument("--only", default=None, help="comma-separated sections: " + ",".join(SECTIONS)
                   + " (default: all but paper)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (seconds per section) for smoke tests")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where encoding, train, decode and paper run (default cpu)")
    p.add_argument("--paper-size", action="store_true",
                   help="run the paper section: bart-large-sized generator, bert-base-sized DPR encoders, random "
                        "weights, B=8, K=5 and 10, sources of 100-300 tokens (alone, or with the sections --only names)")
    p.add_argument("--paper-parts", default="train,decode,encoding", help="parts of the paper section")
    p.add_argument("--paper-ks", default="5,10", help="paper section: K of the train step")
    p.add_argument("--paper-batch", type=int, default=8, help="paper section: questions per train step")
    p.add_argument("--paper-precisions", default="fp32,bf16", help="paper section: train/decode precisions")
    p.add_argument("--paper-steps", type=int, default=5, help="paper section: train steps per timed block")
    p.add_argument("--paper-rounds", type=int, default=3, help="paper section: interleaved timed blocks")
    p.add_argument("--paper-decode-n", type=int, default=16, help="paper section: questions decoded")
    p.add_argument("--paper-decode-k", type=int, default=10)
    p.add_argument("--paper-new-tokens", type=int, default=20)
    p.add_argument("--paper-enc-n", type=int, default=8192, help="paper section: passages encoded")
    p.add_argument("--paper-enc-batch", type=int, default=512)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch/FAISS threads (default: all cores)")
    p.add_argument("--enc-n", type=int, default=500, help="passages for the encoding comparison")
    p.add_argument("--enc-batch", type=int, default=32, help="encoding batch size (the project's default)")
    p.add_argument("--index-n", type=int, default=1_000_000, help="vectors for the index comparison")
    p.add_argument("--hnsw-ms", default="32", help="HNSW M values on --index-n vectors")
    p.add_argument("--m128-n", type=int, default=100_000, help="vectors for the HNSW M=128 build-time probe (0: skip)")
    p.add_argument("--ef-construction", type=int, default=120)
    p.add_argument("--index-build-n", type=int, default=2_000_000, help="index_build: vectors (384-d float32) in the shards")
    p.add_argument("--index-build-shards", type=int, default=4, help="index_build: embedding shards they are written as")
    p.add_argument("--index-build-kinds", default="flat,ivfpq", help="index_build: index types to build (flat,hnsw,ivfpq)")
    p.add_argument("--index-build-dir", default=None, help="index_build: where the shards are written (default: a "
                   "temporary folder; n x 1,536 bytes), removed afterwards")
    p.add_argument("--index-build-no-identity", action="store_true",
                   help="index_build: skip the flat file's comparison with a one-shot build (which needs 2x the embeddings in RAM)")
    p.add_argument("--index-build-baseline", default=None, metavar="REV",
                   help="index_build: also run git revision REV's rag index (flat) on the same shards")
    p.add_argument("--retrieval-job-n", type=int, default=2_000_000,
                   help="retrieval_job: synthetic passages (100 words; 384-d float32 embeddings)")
    p.add_argument("--retrieval-job-shards", type=int, default=4, help="retrieval_job: embedding shards")
    p.add_argument("--retrieval-job-kinds", default="flat,ivfpq", help="retrieval_job: index types (flat,hnsw,ivfpq)")
    p.add_argument("--retrieval-job-dir", default=None, help="retrieval_job: where its files are written (default: a "
                   "temporary folder; about n x 2.3 KB), removed afterwards")
    p.add_argument("--k", type=int, default=3, help="retrieved documents (config.yaml train.k)")
    p.add_argument("--train-batch", type=int, default=16, help="config.yaml train.batch_size")
    p.add_argument("--train-steps", type=int, default=10)
    p.add_argument("--decode-n", type=int, default=32)
    p.add_argument("--beams", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--dag-dir", default=None, help="the jobs' resource records (default results/miniworld/resources: "
                   "the default's experiment: the jobs' records)")
    p.add_argument("--sweep-models", type=int, default=2, help="sweep: NQ RAG-Sequence models of the default run, by seed")
    p.add_argument("--sweep-rounds", type=int, default=2, help="sweep: rounds (each runs every model with every code)")
    p.add_argument("--worlds-seeds", default="16,17,18,19,20,21", help="worlds: the top-level seeds (worlds) measured")
    p.add_argument("--worlds-dir", default=None, help="worlds: the workdir of their runs (default: <out>/worlds; kept, "
                   "so a second call reuses the worlds built)")
    p.add_argument("--sweep-baseline", default=None, metavar="REV",
                   help="sweep: also run git revision REV's rag experiments (the K sweep) on the same jobs, alternating")
    p.add_argument("--scale-enc-sizes", default="1000,10000")
    p.add_argument("--scale-index-sizes", default="10000,100000",
                   help="built here; the 1M point comes from the index section (index.json in --out) when present")
    a = p.parse_args(argv)
    a.hnsw_ms = [int(x) for x in a.hnsw_ms.split(",") if x]
    a.scale_enc_sizes = [int(x) for x in a.scale_enc_sizes.split(",")]
    a.scale_index_sizes = [int(x) for x in a.scale_index_sizes.split(",")]
    if a.only is None:
        a.only = ["paper"] if a.paper_size else list(DEFAULT_SECTIONS)
    else:
        a.only = [s.strip() for s in a.only.split(",") if s.strip()] + (["paper"] if a.paper_size else [])
        a.only = list(dict.fromkeys(a.only))
    bad = [s for s in a.only if s not in SECTIONS]
    if bad:
        p.error(f"unknown section(s) {bad}; choose from {SECTIONS}")
    cpu_only = [s for s in a.only if s not in DEVICE_SECTIONS]
    if a.device == "cuda" and cpu_only:
        p.error(f"--device cuda: section(s) {cpu_only} measure the CPU only; pick from {sorted(DEVICE_SECTIONS)} "
                "with --only (or --paper-size)")
    a.paper_parts = [s.strip() for s in a.paper_parts.split(",") if s.strip()]
    bad = [s for s in a.paper_parts if s not in ("train", "decode", "encoding")]
    if bad:
        p.error(f"--paper-parts: unknown part(s) {bad}; choose from train, decode, encoding")
    a.paper_ks = [int(x) for x in a.paper_ks.split(",") if x]
    a.paper_precisions = [s.strip() for s in a.paper_precisions.split(",") if s.strip()]
    bad = [s for s in a.paper_precisions if s not in ("fp32", "bf16", "fp16")]
    if bad:
        p.error(f"--paper-precisions: unknown precision(s) {bad}; choose from fp32, bf16, fp16")
    if a.device == "cpu" and "fp16" in a.paper_precisions:
        p.error("--paper-precisions: fp16 needs --device cuda (as the config key precision)")
    if a.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            p.error("--device cuda: torch sees no GPU")
    return a


def env_info(args) -> dict:
    import torch
    import transformers

    from benchmarks.common import device_name

    try:  # not installed on the GPU machines the paper section runs on
        import faiss

        faiss_version = faiss.__version__
    except ImportError:
        faiss_version = None
    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "faiss": faiss_version, "cpu_count": os.cpu_count(), "threads": args.threads, "quick": args.quick,
            "device": args.device, "device_name": device_name(args.device),
            "machine": platform.machine(), "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def write_summary(out: Path) -> Path:
    from benchmarks.common import fmt, md_table

    parts = ["# Benchmark summary", ""]
    results = {}
    for s in SECTIONS:
        f = out / f"{s}.json"
        if f.is_file():
            results[s] = json.loads(f.read_text())
    rows = []
    for s, r in results.items():
        for row in r.get("summary", []):
            met = row.get("met")
            rows.append([s, row["metric"], row.get("value"), row.get("baseline"), row.get("ratio"), row.get("target"),
                         "-" if met is None else ("**met**" if met else "**missed**")])
    parts += [md_table(["section", "metric", "project", "baseline", "ratio", "target", "status"], rows), ""]
    for s, r in results.items():
        env = r.get("env", {})
        parts += [f"## {s}", "", f"_{'QUICK (smoke) sizes; ' if env.get('quick') else ''}{env.get('time', '')}, "
                                  f"{env.get('device_name', 'CPU')}, "
                                  f"torch {env.get('torch')}, transformers {env.get('transformers')}, faiss {env.get('faiss')}, "
                                  f"{env.get('threads')} threads, section took {fmt(r.get('elapsed_s'))} s_", ""]
        for t in r.get("tables", []):
            parts += [f"**{t['title']}**", "", md_table(t["headers"], t["rows"]), ""]
        for n in r.get("notes", []):
            parts += [f"- {n}"]
        parts.append("")
    path = out / "summary.md"
    path.write_text("\n".join(parts))
    return path


def main(argv=None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except Exception:
        pass
    from benchmarks.common import set_threads, write_json

    set_threads(args.threads)
    out = Path(args.out)
    failed = []
    for s in args.only:
        print(f"== {s}", flush=True)
        t = time.perf_counter()
        try:
            mod = importlib.import_module(f"benchmarks.bench_{s}")
            set_threads(args.threads)
            res = mod.run(args)
        except Exception:
            traceback.print_exc()
            failed.append(s)
            continue
        res["elapsed_s"] = time.perf_counter() - t
        res["env"] = env_info(args)
        print(f"   {s}: {res['elapsed_s']:.1f} s -> {write_json(out, s, res)}", flush=True)
        for row in res.get("summary", []):
            print("   ", {k: row[k] for k in ("metric", "value", "baseline", "ratio", "met")}, flush=True)
    print(f"summary: {write_summary(out)}")
    if failed:
        print(f"FAILED sections: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
