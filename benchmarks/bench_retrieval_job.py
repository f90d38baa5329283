"""retrieval_job: what a job that retrieves (train, evaluate, the K sweep) holds, and how soon it steps.

Writes ``--retrieval-job-n`` synthetic passages of 100 words (with the row table `rag corpus` writes
beside them), their embeddings as 384-d float32 ``.npy`` shards (``--retrieval-job-shards``, what
`rag encode` jobs write) and an index over them of each of ``--retrieval-job-kinds`` (flat: the index
as large as the embeddings, searched exhaustively; ivfpq: 256 lists, 48-byte codes, nprobe 16). Then, each in a process of its own under
``/usr/bin/time -v``, it does what a fine-tune does before its first step: build the dense retriever,
retrieve a batch of questions (the project's MiniLM question encoder), read the retrieved passages'
titles and texts and their doc scores. Three ways:

- ``in place``: this tree's ``DenseRetriever.from_files`` (the passages and the embeddings read in
  place, the index's bulk mapped from its file: ``load_index(mapped=True)``);
- ``everything loaded`` (the reference): every passage parsed into lists (``read_passages``), every
  embedding in one array (``EmbeddingShards.load``) and the index read whole;
- ``in place, index read whole``: as ``in place``, with the index read into memory (what mapping it
  costs and saves).

Reported: each process' peak RSS against the index's bytes, the time from the process' start to its
first step's inputs and the part of it spent on the retrieval files, and the search time of the
first and the later batches.

    python -m benchmarks.run --only retrieval_job --out results/benchmarks
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT

D = 384
BATCH = 8  # questions a step retrieves for
K = 10
HEADROOM = 1.5e9  # the bar: peak RSS <= the index's bytes + 1.5 GB
MODES = ("everything loaded", "in place, index read whole", "in place")


def write_corpus(folder: Path, n: int, shards: int, kinds: list[str]) -> tuple[Path, list[Path], dict[str, Path]]:
    """passages.tsv (+ row table), the embedding shards and an index of each kind over them."""
    from benchmarks.bench_index_build import write_shards
    from rag.data.corpus import write_passages
    from rag.retrieval.index import EmbeddingShards, build_index_from_shards, save_index, write_shard_record

    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(20_000)]
    pool = [" ".join(vocab[j] for j in rng.integers(0, len(vocab), 100)) for _ in range(5_000)]
    passages = folder / "passages.tsv"
    write_passages(passages, ((str(i + 1), f"Article {i // 3}", pool[i % len(pool)]) for i in range(n)))
    paths = write_shards(folder, n, shards, clusters=1000)
    indexes = {}
    for kind in kinds:
        index = build_index_from_shards(EmbeddingShards(paths), kind, **({"ivf_lists": 256} if kind == "ivfpq" else {}))
        indexes[kind] = folder / f"{kind}.faiss"
        save_index(index, indexes[kind])
        write_shard_record(indexes[kind], EmbeddingShards(paths))  # as rag index does: the jobs check it
        del index
    return passages, paths, indexes


def _options():
    from rag.config import load_config, sections
    from rag.sections import TrainSection

    cfg = load_config(ROOT / "config.yaml", check_files=False)
    name, section = next((k, v) for k, v in sections(cfg).items() if k.startswith("train_"))
    return TrainSection.from_dict(section, f"{name}.json").retriever  # every task's retriever options are the same


def probe(argv: list[str]) -> None:
    """One job's start, in this process: prints a JSON line of its timings."""
    start = time.perf_counter()
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--passages", required=True)
    p.add_argument("--embeddings", nargs="+", required=True)
    p.add_argument("--index", required=True)
    p.add_argument("--batches", type=int, default=5)
    a = p.parse_args(argv)
    import faiss  # noqa: F401 (imported here to time it with the other imports)
    import torch

    from rag.retrieval import RetrievalFiles
    from rag.retrieval.dense import DenseRetriever

    from rag.retrieval import encoders

    torch.set_num_threads(int(os.environ.get("RAG_THREADS", "1")))
    options = _options()
    load, encoder_s = encoders.Encoder.load, []

    def timed_load(*args, **kw):  # the question encoder's load, the same in every mode, timed apart
        t = time.perf_counter()
        try:
            return load(*args, **kw)
        finally:
            encoder_s.append(time.perf_counter() - t)

    encoders.Encoder.load = timed_load
    imported = time.perf_counter()
    files = RetrievalFiles(passages=a.passages, embeddings=a.embeddings, index=a.index)
    if a.mode == "everything loaded":
        from rag.data.corpus import read_passages
        from rag.retrieval.index import EmbeddingShards, load_index

        passages = read_passages(a.passages)
        emb = EmbeddingShards(a.embeddings).load()
        index = load_index(a.index)
        qenc = encoders.Encoder.load(options.question_encoder, options.encoder_text())
        retriever = DenseRetriever(passages, qenc, emb, index, options.score_scale)
    else:
        if a.mode == "in place, index read whole":
            from rag.retrieval import index as index_module

            load_index = index_module.load_index
            index_module.load_index = lambda *args, **kw: load_index(*args, **{**kw, "mapped": False})
        retriever = DenseRetriever.from_files(files, options, "cpu")
    built = time.perf_counter()
    searches = []
    for b in range(a.batches):
        questions = [f"who leads the country of article {b * BATCH + i}?" for i in range(BATCH)]
        t = time.perf_counter()
        got = retriever.retrieve(questions, K)
        texts = [(retriever.passages.titles[j], retriever.passages.texts[j]) for j in got.ids.ravel().tolist()]
        got.scores.sum().backward() if got.scores.requires_grad else None
        searches.append(time.perf_counter() - t)
        assert len(texts) == BATCH * K
        if b == 0:
            first = time.perf_counter()
    print(json.dumps({"mode": a.mode, "imports_s": imported - start, "retriever_s": built - imported,
                      "question_encoder_load_s": sum(encoder_s), "files_s": built - imported - sum(encoder_s),
                      "first_step_inputs_s": first - start,
                      "first_search_s": searches[0], "later_search_s": float(np.median(searches[1:])) if len(searches) > 1 else None}))


def run(args) -> dict:
    from benchmarks.bench_index_build import measure, scratch
    from rag.retrieval.index import index_bytes

    n = 20_000 if args.quick else args.retrieval_job_n
    shards = args.retrieval_job_shards
    kinds = [k for k in args.retrieval_job_kinds.split(",") if k]
    work, env = scratch("rag-retrieval-job-", args.retrieval_job_dir, args.threads)
    rows = []
    try:
        t = time.perf_counter()
        passages, paths, indexes = write_corpus(work, n, shards, kinds)
        written = time.perf_counter() - t
        for kind, index in indexes.items():
            sizes = {"index": kind, "passages_file_bytes": passages.stat().st_size, "embedding_bytes": n * D * 4,
                     "index_bytes": index_bytes(kind, n, D, ivf_lists=256)["memory"], "index_file_bytes": index.stat().st_size}
            for mode in MODES:
                cmd = [sys.executable, "-m", "benchmarks.bench_retrieval_job", "--mode", mode, "--passages", str(passages),
                       "--embeddings", *map(str, paths), "--index", str(index)]
                m = measure(cmd, env, stdout=True)
                timings = json.loads(m.pop("stdout_last_line"))
                rows.append({"mode": mode, "n": n, **sizes, **m, **timings})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table, summary = [], []
    for r in rows:
        table.append([r["index"], r["mode"], r["index_bytes"] / 1e9, r["peak_rss_time_v"] / 1e9,
                      (r["peak_rss_time_v"] - r["index_bytes"]) / 1e9, r["first_step_inputs_s"], r["files_s"],
                      r["question_encoder_load_s"], r["first_search_s"], r["later_search_s"]])
        if r["mode"] == "everything loaded":
            continue
        ref = next(x for x in rows if x["index"] == r["index"] and x["mode"] == "everything loaded")
        what = f"{r['index']} index, {r['mode']}"
        summary.append({"section": "retrieval_job", "metric": f"peak RSS of a retrieving job ({what}), GB, "
                        f"{n:,} passages x {D}", "value": r["peak_rss_time_v"] / 1e9,
                        "baseline": ref["peak_rss_time_v"] / 1e9, "ratio": r["peak_rss_time_v"] / ref["peak_rss_time_v"],
                        "target": f"<= index + 1.5 GB = {(r['index_bytes'] + HEADROOM) / 1e9:.2f}",
                        "met": r["peak_rss_time_v"] <= r["index_bytes"] + HEADROOM})
        for key, name in (("first_step_inputs_s", "process start to the first step's inputs"),
                          ("files_s", "of which reading the passages, embeddings and index")):
            summary.append({"section": "retrieval_job", "metric": f"{name} ({what}), s", "value": r[key],
                            "baseline": ref[key], "ratio": r[key] / ref[key], "target": "ratio <= 0.2",
                            "met": r[key] <= 0.2 * ref[key]})
    return {"rows": rows, "written_s": written, "summary": summary,
            "tables": [{"title": f"A retrieving job's start on {n:,} passages x {D}, each in a process of its own",
                        "headers": ["index", "mode", "index GB (in memory)", "peak RSS GB", "peak RSS - index GB",
                                    "to first step s", "of which passages, embeddings, index s",
                                    "of which the question encoder's load s", "first search s",
                                    "later search s (median)"],
                        "rows": table}],
            "notes": [f"Passages of 100 words ({rows[0]['passages_file_bytes'] / 1e9:.2f} GB of passages.tsv), "
                      f"embeddings {rows[0]['embedding_bytes'] / 1e9:.2f} GB in {shards} shards. Peak RSS: /usr/bin/time -v. "
                      "A step's inputs: the retriever built, a batch of 8 questions encoded and searched at K=10, the "
                      "80 passages' titles and texts read and the doc scores' backward run. 'To first step' counts "
                      "from the process' start (imports of torch, transformers and faiss included: the same in every "
                      "mode); of it, reading the passages, embeddings and index (building the retriever less the MiniLM "
                      "question encoder's load, timed apart)."]}


if __name__ == "__main__":
    probe(sys.argv[1:])
