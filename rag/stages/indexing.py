"""The retrieval stages: encode one shard of the passages, the FAISS index over the shards, the
BM25 index (rules ``encode_shard``, ``index``, ``bm25``)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from rag.io import write_json
from rag.sections import EncodeSection, IndexSection

log = logging.getLogger("rag")


def encode_shard(cfg: EncodeSection, device: str, passages: str | Path, shard: int, num_shards: int,
                 out: str | Path) -> None:
    """Encode shard ``shard`` of ``num_shards`` of the passages with the context encoder
    (``cfg``: the encode section) into the ``.npy`` file ``out``."""
    import numpy as np
    import torch

    from rag.data.corpus import PassageStore
    from rag.io import atomic_path
    from rag.retrieval.encoders import Encoder, encode_passages, shard_range

    r = cfg.retriever
    p = PassageStore(passages)  # the shard's rows only, read in place
    lo, hi = shard_range(len(p), shard, num_shards)
    enc = Encoder.load(r.context_encoder, r.encoder_text(), side="passage")
    # precision on GPUs: the context encoder's weights in fp16/bf16 (inference only, no autocast needed); CPU: fp32
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(cfg.precision) if device == "cuda" else None
    t = time.time()
    emb = encode_passages(enc, p.titles[lo:hi], p.texts[lo:hi], r.batch_size, device, dtype=dtype)
    log.info("encoded passages %d..%d in %.1fs (%.1f passages/s)", lo, hi, time.time() - t, (hi - lo) / max(1e-9, time.time() - t))
    with atomic_path(out) as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, emb)


def build_faiss_index(cfg: IndexSection, embeddings: list[str | Path], out: str | Path, stats_out: str | Path) -> None:
    """The configured FAISS index over the embedding shards, the record of those shards beside it
    (:func:`rag.retrieval.index.write_shard_record`) and its build statistics (an approximate index:
    recall@1 and @10 against exact search on up to 200 passages as queries)."""
    import numpy as np

    from rag.retrieval.index import (EmbeddingShards, build_index_from_shards, recall_against_exact, save_index,
                                     write_shard_record)

    r = cfg.retriever
    shards = EmbeddingShards(embeddings)
    t = time.time()
    index = build_index_from_shards(shards, r.index, use_gpu=cfg.device == "cuda", **r.build_params())
    stats = {"kind": r.index, "n": shards.n, "dim": shards.d, "build_seconds": time.time() - t}
    save_index(index, out)
    write_shard_record(out, shards)  # the jobs reading the index check the shards they are given against it
    if r.index == "flat":
        stats["exact"] = True
    else:
        rng = np.random.default_rng(0)
        queries = shards.rows(rng.choice(shards.n, size=min(200, shards.n), replace=False))
        stats["recall_queries"] = len(queries)
        for k in (1, 10):
            stats[f"recall@{k}_vs_flat"] = recall_against_exact(index, shards, queries, min(k, shards.n))
    write_json(stats_out, stats)
    log.info("index %s: %s", out, stats)


def build_bm25_index(passages: str | Path, out: str | Path) -> None:
    """The BM25 index of the passages (Table 6's ablation) in the folder ``out``."""
    from rag.data.corpus import read_passages
    from rag.retrieval.bm25_index import build_bm25

    p = read_passages(passages)
    build_bm25(p.titles, p.texts, out)
