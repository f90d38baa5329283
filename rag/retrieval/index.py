"""Dense index over passage embeddings (FAISS: flat, HNSW or IVF-PQ, inner product)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from rag.errors import ConfigError, DataError
from rag.io import atomic_path

log = logging.getLogger(__name__)


def build_index(emb: np.ndarray, kind: str = "flat", hnsw_m: int = 128, ivf_lists: int = 256, pq_m: int | None = None,
                ef_search: int = 128, ef_construction: int = 200, use_gpu: bool = False):
    """Build a maximum-inner-product FAISS index over ``emb`` (float32 [N, d]).

    IVF-PQ: ``pq_m`` sub-quantizers of 8 bits (bytes per vector); None: d / 8, one byte per 8
    dimensions (48 for MiniLM's 384, 96 for DPR's 768; 16 loses most of the top-10 on 1M vectors,
    benchmarks/README.md)."""
    import faiss

    emb = np.ascontiguousarray(emb, dtype=np.float32)
    n, d = emb.shape
    if kind == "flat":
        index = faiss.IndexFlatIP(d)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(d, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_construction
        index.hnsw.efSearch = ef_search
    elif kind == "ivfpq":
        nlist = max(1, min(ivf_lists, n // 39))
        if pq_m is None:
            if d % 8:
                raise ConfigError(f"retriever.pq_m: set it to a divisor of the embedding size {d} (the default d / 8 needs d % 8 == 0)")
            pq_m = d // 8
        if d % pq_m:
            raise ConfigError(f"retriever.pq_m={pq_m} must divide the embedding size {d}")
        quant = faiss.IndexFlatIP(d)
        index = faiss.IndexIVFPQ(quant, d, nlist, pq_m, 8, faiss.METRIC_INNER_PRODUCT)
        if n < 256:
            raise ConfigError(f"retriever.index=ivfpq needs at least 256 passages to train its codebooks, got {n}")
        index.train(emb)
        index.nprobe = min(nlist, 16)
    else:
        raise ConfigError(f"retriever.index: unknown index type {kind!r}")
    if use_gpu and kind != "hnsw" and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        gpu = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
        gpu.add(emb)
        return faiss.index_gpu_to_cpu(gpu)
    index.add(emb)
    return index


def save_index(index, path: str | Path) -> None:
    import faiss

    with atomic_path(path) as tmp:
        faiss.write_index(index, str(tmp))


def load_index(path: str | Path):
    import faiss

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: index file not found")
    return faiss.read_index(str(path))


def load_embeddings(paths: list[str | Path]) -> np.ndarray:
    arrays = []
    for p in paths:
        p = Path(p)
        if not p.is_file():
            raise DataError(f"{p}: embedding shard not found")
        try:
            arrays.append(np.load(p, allow_pickle=False))
        except (ValueError, OSError) as exc:
            raise DataError(f"{p}: unreadable embedding shard ({exc})") from None
    dims = {a.shape[1] for a in arrays if a.size}
    if len(dims) > 1:
        raise DataError(f"embedding shards disagree on dimension: {sorted(dims)}")
    return np.concatenate(arrays).astype(np.float32)


def recall_against_flat(index, emb: np.ndarray, queries: np.ndarray, k: int = 10) -> float:
    """Share of the exact top-k (flat search) that ``index`` also returns."""
    import faiss

    exact = faiss.IndexFlatIP(emb.shape[1])
    exact.add(np.ascontiguousarray(emb, dtype=np.float32))
    _, gold = exact.search(queries, k)
    _, got = index.search(queries, k)
    hits = sum(len(set(g) & set(h)) for g, h in zip(gold.tolist(), got.tolist()))
    return hits / gold.size
