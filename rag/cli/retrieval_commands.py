"""Retrieval commands: ``encode``, ``index``, ``bm25`` (rules ``encode_shard``, ``build_index``,
``build_bm25``; the work is :mod:`rag.stages.indexing`')."""

from __future__ import annotations

from rag import runtime
from rag.cli import add_command
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
