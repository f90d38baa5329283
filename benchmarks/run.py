"""Run the speed benchmarks (issue 7) and write results/benchmarks/<section>.json and summary.md.

    python -m benchmarks.run --out results/benchmarks                # everything, full sizes
    python -m benchmarks.run --quick --out /tmp/bench                 # smoke test, tiny sizes, ~1-2 min
    python -m benchmarks.run --only encoding,train --out results/benchmarks

Sections: encoding, index, train, decode, dag, scaling. Each writes its own JSON; summary.md is
rebuilt from every <section>.json present in --out, so sections can be run one at a time.
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

SECTIONS = ["encoding", "index", "train", "decode", "dag", "scaling"]


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="results/benchmarks")
    p.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections: " + ",".join(SECTIONS))
    p.add_argument("--quick", action="store_true", help="tiny sizes (seconds per section) for smoke tests")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch/FAISS threads (default: all cores)")
    p.add_argument("--enc-n", type=int, default=500, help="passages for the encoding comparison")
    p.add_argument("--enc-batch", type=int, default=32, help="encoding batch size (the project's default)")
    p.add_argument("--index-n", type=int, default=1_000_000, help="vectors for the index comparison")
    p.add_argument("--hnsw-ms", default="32", help="HNSW M values on --index-n vectors")
    p.add_argument("--m128-n", type=int, default=100_000, help="vectors for the HNSW M=128 build-time probe (0: skip)")
    p.add_argument("--ef-construction", type=int, default=120)
    p.add_argument("--k", type=int, default=3, help="retrieved documents (config.yaml train.k)")
    p.add_argument("--train-batch", type=int, default=16, help="config.yaml train.batch_size")
    p.add_argument("--train-steps", type=int, default=10)
    p.add_argument("--decode-n", type=int, default=32)
    p.add_argument("--beams", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--dag-dir", default=None, help="Snakemake benchmark folder (default results/benchmarks)")
    p.add_argument("--scale-enc-sizes", default="1000,10000")
    p.add_argument("--scale-index-sizes", default="10000,100000",
                   help="built here; the 1M point comes from the index section (index.json in --out) when present")
    a = p.parse_args(argv)
    a.hnsw_ms = [int(x) for x in a.hnsw_ms.split(",") if x]
    a.scale_enc_sizes = [int(x) for x in a.scale_enc_sizes.split(",")]
    a.scale_index_sizes = [int(x) for x in a.scale_index_sizes.split(",")]
    a.only = [s.strip() for s in a.only.split(",") if s.strip()]
    bad = [s for s in a.only if s not in SECTIONS]
    if bad:
        p.error(f"unknown section(s) {bad}; choose from {SECTIONS}")
    return a


def env_info(args) -> dict:
    import faiss
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "faiss": faiss.__version__, "cpu_count": os.cpu_count(), "threads": args.threads, "quick": args.quick,
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
