"""Retrieval commands: ``encode``, ``index``, ``bm25`` (rules ``encode_shard``, ``build_index``,
``build_bm25``; the work is :mod:`rag.stages.indexing`') and ``train-reranker`` (rule ``train_reranker``:
:mod:`rag.stages.reranking`)."""

from __future__ import annotations

from rag import runtime
from rag.cli import add_command
from rag.retrieval import RetrievalFiles, add_file_args
from rag.sections import EncodeSection, IndexSection, read_section


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


def cmd_train_reranker(args) -> None:

    from rag.errors import ConfigError
    from rag.sections import read_task_sections
    from rag.stages.reranking import train_reranker

    cfg = read_task_sections(args.config)
    if args.seed is not None:
        cfg = cfg.model_copy(update={"seed": args.seed})
    if not cfg.retrievers or args.retriever not in cfg.retrievers:
        raise ConfigError(f"{' + '.join(args.config)}: no reranker_<name> or retriever_<name> section declaring {args.retriever!r} among the --config files")
    device = runtime.setup(cfg.device, seed=cfg.seed)
    train_reranker(cfg, args.retriever, args.train_data, RetrievalFiles.from_args(args), args.out, device, args.score_data or [])


def register(sub) -> None:
    p = add_command(sub, "encode", cmd_encode, "encode one shard of the passages with the context encoder")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--passages", required=True)
    p.add_argument("--shard", type=int, required=True)
    p.add_argument("--num-shards", type=int, required=True)
    p.add_argument("--out", required=True)

    p = add_command(sub, "index", cmd_index, "merge embedding shards into a FAISS index")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--embeddings", nargs="+", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--stats", required=True)

    p = add_command(sub, "bm25", cmd_bm25, "build the BM25 index (Table 6 ablation)")
    p.add_argument("--passages", required=True)
    p.add_argument("--out", required=True)

    p = add_command(sub, "train-reranker", cmd_train_reranker, "the cross-encoder of a declared rerank retriever for one task "
                    "(config key retrievers): trained on the task's questions, or its model as it is")
    p.add_argument("--config", required=True, nargs="+", help="the task's train_<task> section and the reranker_<name> section (or retriever_<name>)")
    p.add_argument("--retriever", required=True, help="the rerank retriever's name (config key retrievers)")
    p.add_argument("--seed", type=int, help="the training seed (default: the section's seed)")
    p.add_argument("--train-data", required=True, help="the task's train jsonl")
    p.add_argument("--score-data", nargs="+", help="jsonl files whose questions' first-stage passages the saved "
                   "cross-encoder scores once, for the fine-tunes that read it (the task's splits)")
    add_file_args(p)
    p.add_argument("--out", required=True, help="the cross-encoder's model folder")
