"""Pipeline subcommands: each Snakemake rule runs exactly one of these.

Every command reads the config section(s) Snakemake wrote for it (``results/<name>/config/*.json``;
several ``--config`` files are merged), reads and writes exactly the files its arguments name
(no directory plus a naming convention), writes its outputs atomically and exits 2 with one
clear message on bad input.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from rag import runtime
from rag.config import read_sections
from rag.errors import ConfigError
from rag.io import atomic_dir, read_jsonl, write_json, write_jsonl

log = logging.getLogger("rag")


# ---------------------------------------------------------------------------------- corpus
def cmd_corpus(args) -> None:
    from rag.data import miniworld
    from rag.data.corpus import write_passages

    cfg = read_sections(args.config)
    corpus = cfg["corpus"]
    if corpus["source"] == "miniworld":
        world = miniworld.build_world(cfg["miniworld"], cfg["seed"])[args.snapshot]
        n = write_passages(args.out, miniworld.passages(world, corpus["passage_words"]))
        if args.restatements:
            write_jsonl(args.restatements, miniworld.restatements(world, corpus["passage_words"]))
    else:
        from rag.data.formats import prepare_corpus

        if not args.input:
            raise ConfigError(f"corpus source {corpus['source']!r} needs --input (the downloaded or local file)")
        n = prepare_corpus(corpus["format"], Path(args.input), Path(args.out), words=corpus["passage_words"])
    log.info("wrote %d passages to %s", n, args.out)


SPLITS = ("train", "dev", "test")


def cmd_tasks(args) -> None:
    from rag.data import miniworld

    cfg = read_sections(args.config)
    name, task = cfg["task_name"], cfg["task"]
    outs = {split: getattr(args, f"out_{split}") for split in SPLITS}
    if task["source"] == "miniworld":
        world = miniworld.build_world(cfg["miniworld"], cfg["seed"])["a"]
        for split in SPLITS:
            try:
                rows = miniworld.make_task(world, name, split, task[split], cfg["seed"], cfg["miniworld"]["passage_words"])
            except ValueError as exc:
                raise ConfigError(f"config key 'tasks.{name}.{split}': {exc}") from None
            write_jsonl(outs[split], rows)
    else:
        from rag.data.formats import prepare_task

        for split in SPLITS:
            src = getattr(args, f"in_{split}")
            if not src:
                raise ConfigError(f"task {name} (source {task['source']}) needs --in-{split} (the downloaded or local file)")
            fmt = task.get("formats", {}).get(split, task.get("format", name))
            wf = task.get("well_formed_only", False)
            wf = split in wf if isinstance(wf, list) else bool(wf)
            extra = {"well_formed_only": True} if wf and fmt == "msmarco" else {}
            prepare_task(fmt, Path(src), Path(outs[split]), task=name, split=split, **extra)


def cmd_hotswap_data(args) -> None:
    from rag.data import miniworld

    cfg = read_sections(args.config)
    worlds = miniworld.build_world(cfg["miniworld"], cfg["seed"])
    write_jsonl(args.out, miniworld.hotswap_questions(worlds))


# ---------------------------------------------------------------------------------- retrieval
def cmd_encode(args) -> None:
    import numpy as np

    from rag.data.corpus import read_passages
    from rag.io import atomic_path
    from rag.retrieval.encoders import Encoder, encode_passages, shard_range

    cfg = read_sections(args.config)
    device = runtime.setup(cfg, seed=False, check_precision=False)  # CPU encodes in fp32 whatever the precision
    r = cfg["retriever"]
    p = read_passages(args.passages)
    lo, hi = shard_range(len(p), args.shard, args.num_shards)
    enc = Encoder.load(r["context_encoder"], r["pooling"], r["normalize"], r["max_length"])
    import torch

    # precision on GPUs: the context encoder's weights in fp16/bf16 (inference only, no autocast needed); CPU: fp32
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(cfg["precision"]) if device == "cuda" else None
    t = time.time()
    emb = encode_passages(enc, p.titles[lo:hi], p.texts[lo:hi], r["batch_size"], device, dtype=dtype)
    log.info("encoded passages %d..%d in %.1fs (%.1f passages/s)", lo, hi, time.time() - t, (hi - lo) / max(1e-9, time.time() - t))
    with atomic_path(args.out) as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, emb)


def cmd_index(args) -> None:
    import numpy as np

    from rag.retrieval.index import build_index, load_embeddings, recall_against_flat, save_index

    cfg = read_sections(args.config)
    runtime.threads(cfg)
    r = cfg["retriever"]
    emb = load_embeddings(args.embeddings)
    t = time.time()
    # the section holds the parameters of the configured index type only (rag.config.INDEX_KEYS)
    params = {k: r[k] for k in ("hnsw_m", "ivf_lists", "pq_m") if k in r}
    if "hnsw_ef_search" in r:
        params["ef_search"] = r["hnsw_ef_search"]
    index = build_index(emb, r["index"], use_gpu=cfg["device"] == "cuda", **params)
    stats = {"kind": r["index"], "n": int(emb.shape[0]), "dim": int(emb.shape[1]), "build_seconds": time.time() - t}
    rng = np.random.default_rng(0)
    queries = emb[rng.choice(len(emb), size=min(200, len(emb)), replace=False)]
    for k in (1, 10):
        stats[f"recall@{k}_vs_flat"] = recall_against_flat(index, emb, queries, min(k, len(emb)))
    save_index(index, args.out)
    write_json(args.stats, stats)
    log.info("index %s: %s", args.out, stats)


def cmd_bm25(args) -> None:
    from rag.data.corpus import read_passages
    from rag.retrieval.bm25 import build_bm25

    p = read_passages(args.passages)
    build_bm25(p.titles, p.texts, args.out)


# ---------------------------------------------------------------------------------- generator
def cmd_pretrain(args) -> None:
    import torch

    from rag.data.corpus import read_passages
    from rag.models import generator as G
    from rag.tasks import FEVER3_LABELS

    cfg = read_sections(args.config)
    runtime.threads(cfg)
    g = cfg["generator"]
    torch.manual_seed(cfg["seed"])
    if g["init"] == "pretrained":
        model, tok = G.load_generator(g["name_or_path"])
        with atomic_dir(args.out) as tmp:
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            write_json(tmp / "pretrain.json", {"init": "pretrained", "name_or_path": g["name_or_path"]})
        return
    device = runtime.setup(cfg, seed=False)  # pretraining from scratch runs on the configured device and precision
    texts: list[str] = []
    titles: list[str] = []
    ids: list[str] = []
    for path in args.passages:
        p = read_passages(path)
        titles += p.titles
        texts += p.texts
        ids += p.ids
    records = read_jsonl(args.restatements) if args.restatements else None
    restated = G.Restatements(records, ids) if records is not None else None
    ckpt_path = identity = None
    if args.checkpoint_dir:  # resumable: the checkpoint is the configuration's and these inputs' only
        from rag.config import config_hash

        ckpt_path = Path(args.checkpoint_dir) / "checkpoint.pt"
        identity = {"config_hash": config_hash({"config": cfg, "passages": [ids, titles, texts], "restatements": records})}
    with atomic_dir(args.out) as tmp:
        tok = G.train_tokenizer([f"{a} {b}" for a, b in zip(titles, texts)], g.get("vocab_size", 8000),
                                [G.label_token(lb) for lb in FEVER3_LABELS], tmp)
        model = G.build_bart(tok, g).to(device)
        t = time.time()
        losses = G.pretrain(model, tok, titles, texts, g["pretrain_steps"], g["pretrain_batch_size"], g["pretrain_lr"],
                            g["max_source_len"], cfg["seed"], precision=cfg["precision"],
                            chunk_overhead=g["chunk_overhead"], restatements=restated,
                            restatement_share=g["pretrain_restatements"], claim_share=g["pretrain_claims"],
                            ckpt_path=ckpt_path, identity=identity)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        write_json(tmp / "pretrain.json", {"init": "scratch", "steps": g["pretrain_steps"], "seconds": time.time() - t,
                                           "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])),
                                           "curve": G.loss_curve(losses)})


def cmd_init_store(args) -> None:
    from rag.tracking import init_store

    init_store(args.uri, Path(args.marker))


def register(sub) -> None:
    def add(name, func, help_):
        p = sub.add_parser(name, help=help_)
        p.set_defaults(func=func)
        return p

    p = add("corpus", cmd_corpus, "generate (miniworld) or convert a corpus into 100-word passages.tsv")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--snapshot", default="a", choices=["a", "b"])
    p.add_argument("--input", help="downloaded/local corpus file (non-miniworld sources)")
    p.add_argument("--out", required=True)
    p.add_argument("--restatements", help="miniworld: also write the pretraining restatements (jsonl) here")

    p = add("tasks", cmd_tasks, "generate (miniworld) or convert one task's train/dev/test jsonl")
    p.add_argument("--config", required=True, nargs="+")
    for split in SPLITS:
        p.add_argument(f"--in-{split}", help=f"download/local sources: the {split} file (or folder) to convert")
    for split in SPLITS:
        p.add_argument(f"--out-{split}", required=True, help=f"the {split} jsonl to write")

    p = add("hotswap-data", cmd_hotswap_data, "world-leader questions with answers of both snapshots")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--out", required=True)

    p = add("encode", cmd_encode, "encode one shard of the passages with the context encoder")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--passages", required=True)
    p.add_argument("--shard", type=int, required=True)
    p.add_argument("--num-shards", type=int, required=True)
    p.add_argument("--out", required=True)

    p = add("index", cmd_index, "merge embedding shards into a FAISS index")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--embeddings", nargs="+", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--stats", required=True)

    p = add("bm25", cmd_bm25, "build the BM25 index (Table 6 ablation)")
    p.add_argument("--passages", required=True)
    p.add_argument("--out", required=True)

    p = add("pretrain", cmd_pretrain, "build the generator (tokenizer + BART) and pretrain it on the corpus")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--passages", nargs="+", required=True)
    p.add_argument("--restatements", help="miniworld: restated facts (rag corpus --restatements) for the reading objective")
    p.add_argument("--checkpoint-dir", help="resumable: keep a checkpoint here and resume from it (from scratch only)")
    p.add_argument("--out", required=True)

    p = add("init-store", cmd_init_store, "create the MLflow tracking store once, before parallel jobs")
    p.add_argument("--uri", required=True)
    p.add_argument("--marker", required=True)
