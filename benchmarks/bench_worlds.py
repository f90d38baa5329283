"""12. Dense over BM25 across worlds: the claims row "Dense retrieval beats BM25 on QA" in top-level seeds
no one tuned the default to, and the rows of the further retrievers (config key retrievers) that read no
file of their own (a hybrid of dense and BM25; a reranker needs its trained cross-encoder).

The row compares the frozen dense retriever's answer recall@1 on the test questions of the QA role's task
(``rag.tasks.ROLES.qa``, NQ) with BM25's (Table 6's ablation; :mod:`rag.report.claims`). Neither depends on a fine-tune: the frozen twin retrieves with the configured
question encoder as it is, BM25 with its index. So a world's row needs only its corpus, its NQ test
questions, the passage embeddings, the FAISS index and the BM25 index: for each ``--worlds-seeds`` seed
this section runs those targets of ``config.yaml`` with ``--config seed=S`` (a workdir of its own),
retrieves each test question's top passage with the project's retrievers and scores the row as the
report does (the difference of the two recall@1, its 95 % interval over the test questions, the bar). A
further retriever's row is scored as the retrievers report scores it (:func:`rag.report.claims.retriever_claim`)
from the passages it retrieves for each test question at the RAG-Token test K.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import ROOT


def world_targets(name: str, encoder: str, index: str) -> list[str]:
    r = f"results/{name}"
    from rag.tasks import ROLES

    return [f"{r}/index/miniworld/{encoder}/{index}.faiss", f"{r}/index/miniworld/bm25", f"{r}/data/{ROLES.qa}/test.jsonl"]


def build_world(workdir: Path, seed: int, cores: int) -> tuple[str, float]:
    """Run the world's retrieval targets of config.yaml under ``seed`` in ``workdir``: (results folder, seconds)."""
    import yaml

    from rag.config_files import encoder_slug

    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    name = f"world{seed}"
    targets = world_targets(name, encoder_slug(cfg["retriever"]["context_encoder"]), cfg["retriever"]["index"])
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "snakemake", *targets, "--snakefile", str(ROOT / "Snakefile"),
                           "--directory", str(workdir), "--configfile", str(ROOT / "config.yaml"), "--cores", str(cores),
                           "--config", f"seed={seed}", f"name={name}"],
                          capture_output=True, text=True, cwd=workdir)
    if proc.returncode != 0:
        raise RuntimeError(f"world {seed}: snakemake failed:\n{proc.stderr[-3000:]}")
    return str(workdir / "results" / name), time.monotonic() - t


def world_row(results: str) -> dict:
    """The row of one world: the two recall@1 over the NQ test questions, their difference, its interval
    and whether the bar (rag.report.claims: >= +5 points, the interval above 0) is met."""
    import torch

    from rag.config import load_config
    from rag.config_files import encoder_slug
    from rag.io import read_jsonl
    from rag.report.claims import dense_over_bm25 as row
    from rag.retrieval import RetrievalFiles
    from rag.retrieval.bm25 import BM25Retriever
    from rag.retrieval.dense import DenseRetriever
    from rag.scoring.answer_match import answer_in_text
    from rag.config_keys import QuestionEncoder
    from rag.sections import pick
    from rag.tasks import ROLES, TASKS

    cfg = load_config(ROOT / "config.yaml", check_files=False)  # resolved: every retriever key
    r, enc = cfg["retriever"], encoder_slug(cfg["retriever"]["context_encoder"])
    folder = Path(results) / "index" / "miniworld"
    files = RetrievalFiles(passages=str(Path(results) / "corpus" / "miniworld" / "passages.tsv"),
                           embeddings=[str(folder / enc / f"emb-{i}.npy") for i in range(r["shards"])],
                           index=str(folder / enc / f"{r['index']}.faiss"), bm25=str(folder / "bm25"))
    options = QuestionEncoder(**pick(QuestionEncoder, cfg["retriever"]))
    rows = read_jsonl(Path(results) / "data" / ROLES.qa / "test.jsonl", required=("id", "input", "targets"))
    questions = [x["input"] for x in rows]
    hits = {}
    for name, retriever in (("dense", DenseRetriever.from_files(files, options, "cpu")),
                            ("bm25", BM25Retriever.from_files(files, None, "cpu"))):
        with torch.inference_mode():
            top = retriever.retrieve(questions, 1).ids[:, 0]
        texts = retriever.passages.texts
        hits[name] = [100.0 * answer_in_text(texts[int(j)], x["targets"]) for j, x in zip(top, rows)]
    claim = row(hits["dense"], hits["bm25"], TASKS[ROLES.qa].short)
    out = {"n": len(rows), "dense_recall@1": sum(hits["dense"]) / len(rows), "bm25_recall@1": sum(hits["bm25"]) / len(rows),
           "diff": claim.diff, "lo": claim.lo, "hi": claim.hi, "bar_met": claim.bar_met}
    return {**out, "retrievers": retriever_rows(cfg, files, options, rows)}


def retriever_rows(cfg: dict, files, options, rows: list[dict]) -> dict:
    """name -> the claims row of each further retriever whose files the world has (no reranker), scored from
    its passages at the RAG-Token test K and those of the retrievers it names."""
    import torch

    from rag.config import sections
    from rag.report.claims import retriever_claim
    from rag.retrieval import build_retriever, retriever_files
    from rag.scoring.answer_match import answer_in_text
    from rag.tasks import ROLES, TASKS

    declared = cfg["retrievers"]
    k_test = sections(cfg)[f"eval_{ROLES.qa}"]["decode"]["token"]["k"]
    regex = TASKS[ROLES.qa].regex_targets
    questions, ranked = [x["input"] for x in rows], {}

    def hits(name: str, k: int):
        if name not in ranked:
            retriever = build_retriever(name, files, options, "cpu", None, declared)
            with torch.inference_mode():
                ranked[name] = (retriever.retrieve(questions, k_test).ids, retriever.passages.texts)
        ids, texts = ranked[name]
        return [100.0 * any(answer_in_text(texts[int(j)], x["targets"], regex=regex) for j in top[:k])
                for top, x in zip(ids, rows)]

    out = {}
    for name in sorted(declared):
        if not all(getattr(files, role) for role in retriever_files(name, declared)):
            continue
        claim = retriever_claim(name, declared, hits)
        if claim is not None:
            out[name] = {"claim": claim.claim, "measured": claim.measured, "diff": claim.diff, "lo": claim.lo, "hi": claim.hi, "bar": claim.bar,
                         "bar_met": claim.bar_met}
    return out


def run(args) -> dict:
    seeds = [int(s) for s in str(args.worlds_seeds).split(",") if s.strip()]
    base = Path(args.worlds_dir or (Path(args.out) / "worlds"))
    base.mkdir(parents=True, exist_ok=True)
    worlds = {}
    for seed in seeds:
        results, seconds = build_world(base, seed, args.threads)
        worlds[seed] = {**world_row(results), "build_seconds": round(seconds, 1)}
        print(f"world {seed}: {json.dumps(worlds[seed])}", flush=True)
    held = sum(w["bar_met"] for w in worlds.values())
    table = [[s, f"{w['dense_recall@1']:.1f}", f"{w['bm25_recall@1']:.1f}", f"{w['diff']:+.1f} [{w['lo']:+.1f}, {w['hi']:+.1f}]",
              "met" if w["bar_met"] else "missed"] for s, w in worlds.items()]
    tables = [{"title": "Dense over BM25, NQ test answer recall@1 (frozen dense vs BM25)",
               "headers": ["seed", "dense", "BM25", "difference [95 % interval]", "bar (≥ +5, CI above 0)"], "rows": table}]
    summary = [{"metric": f"worlds where dense beats BM25 (bar met), of {len(worlds)}", "value": held,
                "baseline": None, "ratio": None, "target": None, "met": None}]
    for name in sorted({n for w in worlds.values() for n in w["retrievers"]}):
        rows = [(s, w["retrievers"][name]) for s, w in worlds.items() if name in w["retrievers"]]
        tables.append({"title": f"{rows[0][1]['claim']}: {rows[0][1]['measured'].split(', ')[0]}, against the better part",
                       "headers": ["seed", "measured", "difference [95 % interval]", f"bar ({rows[0][1]['bar']})"],
                       "rows": [[s, r["measured"].split(", ", 1)[-1], f"{r['diff']:+.1f} [{r['lo']:+.1f}, {r['hi']:+.1f}]",
                                 "met" if r["bar_met"] else "missed"] for s, r in rows]})
        summary.append({"metric": f"worlds where {name}'s row is met, of {len(rows)}", "value": sum(r["bar_met"] for _, r in rows),
                        "baseline": None, "ratio": None, "target": None, "met": None})
    return {"worlds": worlds, "held": held, "of": len(worlds), "tables": tables, "summary": summary}
