"""Data, retrieval and generator subcommands (rules ``corpus``, ``tasks``, ``hotswap_data``,
``encode_shard``, ``index``, ``bm25``, ``pretrain_generator``, ``init_store``): argument parsing
only; the work is the stage functions' of :mod:`rag.stages` (``data``, ``index``, ``generator``).

Every command reads the config section Snakemake wrote for it (``results/<name>/config/*.json``;
several ``--config`` files are merged) into its typed section (:mod:`rag.sections`), reads and
writes exactly the files its arguments name (no directory plus a naming convention), writes its
outputs atomically and exits 2 with one clear message on bad input.
"""

from __future__ import annotations

from pathlib import Path

from rag import runtime
from rag.sections import CorpusSection, DataSection, EncodeSection, GeneratorSection, IndexSection, read_section

SPLITS = ("train", "dev", "test")


# ---------------------------------------------------------------------------------- data
def cmd_corpus(args) -> None:
    from rag.stages.datasets import build_corpus

    build_corpus(read_section(CorpusSection, args.config), args.out, snapshot=args.snapshot, source_file=args.input,
                 restatements=args.restatements)


def cmd_tasks(args) -> None:
    from rag.stages.datasets import build_task

    build_task(read_section(DataSection, args.config), {s: getattr(args, f"out_{s}") for s in SPLITS},
               {s: getattr(args, f"in_{s}") for s in SPLITS})


def cmd_hotswap_data(args) -> None:
    from rag.stages.datasets import hotswap_questions

    hotswap_questions(read_section(CorpusSection, args.config), args.out)


# ---------------------------------------------------------------------------------- retrieval
def cmd_encode(args) -> None:
    from rag.stages.indexing import encode_shard

    cfg = read_section(EncodeSection, args.config)
    device = runtime.setup(cfg.device)  # CPU encodes in fp32 whatever the precision
    encode_shard(cfg, device, args.passages, args.shard, args.num_shards, args.out)


def cmd_index(args) -> None:
    from rag.stages.indexing import build_faiss_index

    cfg = read_section(IndexSection, args.config)
    runtime.faiss_threads()  # FAISS alone: no torch in this process
    build_faiss_index(cfg, args.embeddings, args.out, args.stats)


def cmd_bm25(args) -> None:
    from rag.stages.indexing import build_bm25_index

    build_bm25_index(args.passages, args.out)


# ---------------------------------------------------------------------------------- generator
def cmd_pretrain(args) -> None:
    from rag.stages.pretraining import copy_pretrained_generator, pretrain_generator

    cfg = read_section(GeneratorSection, args.config)
    if cfg.generator.init == "pretrained":  # a copy of the named weights: no device or precision involved
        runtime.threads()
        copy_pretrained_generator(cfg, args.out)
        return
    # pretraining from scratch runs on the configured device and precision
    device = runtime.setup(cfg.device, seed=cfg.seed, precision=cfg.precision)
    pretrain_generator(cfg, device, args.passages, args.out, restatements=args.restatements,
                       checkpoint_dir=args.checkpoint_dir)


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
