"""Dense index over passage embeddings (FAISS: flat, HNSW or IVF-PQ, inner product), built from
the ``.npy`` shards of ``rag encode`` in bounded memory (:func:`build_index_from_shards`: the
index plus one chunk of rows read straight from the files).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from rag.errors import ConfigError, DataError
from rag.io import atomic_path

CHUNK_ROWS = 65_536  # rows read and added at a time (100 MB at d = 384, 200 MB at d = 768)
# IVF-PQ trains on this many sampled rows: what FAISS's k-means would subsample to anyway (256
# points per centroid: 256 lists, 256 codes per sub-quantizer)
TRAIN_SAMPLE = 65_536
IVF_MIN_POINTS_PER_LIST = 39  # FAISS warns below 39 training points per list


@dataclass(frozen=True)
class Shard:
    path: Path
    rows: int
    dim: int
    dtype: np.dtype
    offset: int  # bytes before the first row (the .npy header)


class EmbeddingShards:
    """The embedding shards of one corpus, in order, known by their ``.npy`` headers only; rows are
    read on demand. Each must be 2-D, C-ordered, floating point and of one width (or empty)."""

    def __init__(self, paths: list[str | Path]):
        self.shards: list[Shard] = []
        for p in paths:
            self.shards.append(_read_header(Path(p)))
        if not self.shards:
            raise DataError("no embedding shards given")
        dims = sorted({s.dim for s in self.shards if s.rows})
        if len(dims) > 1:
            raise DataError(f"embedding shards disagree on dimension: {dims}")
        self.n = sum(s.rows for s in self.shards)
        if self.n == 0:
            raise DataError(f"{self.shards[0].path}: the embedding shards hold no rows")
        self.d = dims[0]
        self.starts = np.cumsum([0] + [s.rows for s in self.shards])

    def chunks(self, rows: int = CHUNK_ROWS) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, float32 [m, d] C-contiguous) for consecutive chunks of at most ``rows`` rows, in
        a buffer reused for the next chunk."""
        buf: np.ndarray | None = None
        for shard, start in zip(self.shards, self.starts):
            if not shard.rows:
                continue
            if buf is None or buf.dtype != shard.dtype or len(buf) < min(rows, shard.rows):
                buf = np.empty((min(rows, shard.rows), self.d), dtype=shard.dtype)
            with open(shard.path, "rb") as fh:
                fh.seek(shard.offset)
                for lo in range(0, shard.rows, rows):
                    m = min(rows, shard.rows - lo)
                    view = buf[:m]
                    got = fh.readinto(memoryview(view).cast("B"))
                    if got != view.nbytes:
                        raise DataError(f"{shard.path}: truncated embedding shard ({shard.rows} rows in its header, "
                                        f"the file ends in row {lo + got // (self.d * shard.dtype.itemsize)})")
                    yield int(start + lo), view if view.dtype == np.float32 else view.astype(np.float32)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """float32 [len(ids), d]: the rows ``ids`` (global row numbers, any order), read from the files."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty((len(ids), self.d), dtype=np.float32)
        shard_of = np.searchsorted(self.starts, ids, side="right") - 1
        for k, shard in enumerate(self.shards):
            sel = np.nonzero(shard_of == k)[0]
            if not len(sel):
                continue
            mm = np.memmap(shard.path, dtype=shard.dtype, mode="r", offset=shard.offset, shape=(shard.rows, self.d))
            out[sel] = mm[ids[sel] - self.starts[k]]
            del mm  # unmapped: its pages leave this process' resident set
        return out

    def load(self) -> np.ndarray:
        """All rows as one float32 [n, d] array (its size once: no list of shards, no concatenation copy)."""
        out = np.empty((self.n, self.d), dtype=np.float32)
        for start, chunk in self.chunks():
            out[start : start + len(chunk)] = chunk
        return out


def _read_header(path: Path) -> Shard:
    if not path.is_file():
        raise DataError(f"{path}: embedding shard not found")
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                raise ValueError(f"unknown .npy version {version}")
            offset = fh.tell()
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{path}: unreadable embedding shard ({exc})") from None
    rows = shape[0] if len(shape) else 0
    if rows == 0 and len(shape) <= 2:
        return Shard(path, 0, shape[1] if len(shape) == 2 else 0, np.dtype(np.float32), offset)
    if len(shape) != 2:
        raise DataError(f"{path}: expected a 2-D array of embeddings [passages, dim], got shape {shape}")
    if fortran:
        raise DataError(f"{path}: embedding shard stored in Fortran order; save it C-ordered (np.save of a C array)")
    if dtype.kind != "f" or dtype.byteorder not in ("=", "|", "<" if np.little_endian else ">"):
        raise DataError(f"{path}: expected native-endian float embeddings, got dtype {dtype}")
    expected = offset + rows * shape[1] * dtype.itemsize
    size = path.stat().st_size
    if size < expected:
        raise DataError(f"{path}: truncated embedding shard ({size} bytes, its header needs {expected})")
    return Shard(path, int(rows), int(shape[1]), dtype, offset)


def shard_record_path(index: str | Path) -> Path:
    """The record, beside the index file, of the embedding shards it was built from (:func:`write_shard_record`)."""
    return Path(f"{index}.shards.json")


def write_shard_record(index: str | Path, shards: EmbeddingShards) -> None:
    """Record, beside ``index``, the shards it is built from, in order: each one's rows, sha256 and file stamp."""
    from rag.io import write_json
    from rag.manifest import file_stamp, sha256_file

    write_json(shard_record_path(index), {"shards": [
        {"name": s.path.name, "rows": s.rows, "sha256": sha256_file(s.path), "stamp": file_stamp(s.path)}
        for s in shards.shards]})


def check_shard_record(index: str | Path, shards: EmbeddingShards) -> None:
    """DataError naming the first of ``shards`` that is not the shard the index was built from at its
    place (other content: the sha256 its record holds, read again where the file's stamp moved)."""
    from rag.io import read_json
    from rag.manifest import file_stamp, sha256_file

    path = shard_record_path(index)
    if not path.is_file():
        raise DataError(f"{path}: not found: the record of the embedding shards {index} was built from; delete the "
                        "index and run again to rebuild it")
    record = read_json(path)
    built = record.get("shards") if isinstance(record, dict) else None
    if not isinstance(built, list) or not all(isinstance(b, dict) for b in built):
        raise DataError(f"{path}: expected an object with a 'shards' list; delete the index and run again to rebuild it")
    if len(built) != len(shards.shards):
        raise DataError(f"{index}: built from {len(built)} embedding shard(s), {len(shards.shards)} given; give the "
                        "shards it was built from, or delete it and run again to rebuild it")
    for i, (b, shard) in enumerate(zip(built, shards.shards)):
        same = b.get("rows") == shard.rows and (b.get("stamp") == file_stamp(shard.path)
                                                 or b.get("sha256") == sha256_file(shard.path))
        if not same:
            raise DataError(f"{shard.path}: not the embedding shard {i} that {index} was built from ({b.get('name')!r:.80}: "
                            "other content); give the shards in their order, or delete the index and run again to rebuild it")


def ivf_lists_for(n: int, ivf_lists: int) -> int:
    """The inverted lists an IVF index over ``n`` vectors gets: the configured number, at most n / 39."""
    return max(1, min(ivf_lists, n // IVF_MIN_POINTS_PER_LIST))


def pq_bytes(d: int, pq_m: int | None) -> int:
    """IVF-PQ code size in bytes (8-bit sub-quantizers): ``pq_m``, or d / 8 when None."""
    if pq_m is None:
        if d % 8:
            raise ConfigError(f"retriever.pq_m: set it to a divisor of the embedding size {d} (the default d / 8 needs d % 8 == 0)")
        pq_m = d // 8
    if d % pq_m:
        raise ConfigError(f"retriever.pq_m={pq_m} must divide the embedding size {d}")
    return pq_m


def _empty_index(kind: str, d: int, n: int, hnsw_m: int, ivf_lists: int, pq_m: int | None, ef_search: int,
                 ef_construction: int):
    import faiss

    if kind == "flat":
        return faiss.IndexFlatIP(d)
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(d, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_construction
        index.hnsw.efSearch = ef_search
        return index
    if kind == "ivfpq":
        nlist = ivf_lists_for(n, ivf_lists)
        m = pq_bytes(d, pq_m)
        if n < 256:
            raise ConfigError(f"retriever.index=ivfpq needs at least 256 passages to train its codebooks, got {n}")
        index = faiss.IndexIVFPQ(faiss.IndexFlatIP(d), d, nlist, m, 8, faiss.METRIC_INNER_PRODUCT)
        index.nprobe = min(nlist, 16)
        return index
    raise ConfigError(f"retriever.index: unknown index type {kind!r}")


def _reserve(index, kind: str, n: int, d: int, hnsw_m: int) -> None:
    """Allocate the index's growing arrays once for ``n`` vectors, so adding in chunks never reallocates them."""
    import faiss

    def reserve(vec, size: int) -> None:
        vec.resize(size)  # capacity ``size``, zero-filled once
        vec.resize(0)  # size 0, the capacity stays: the adds fill it in place

    if kind == "flat":
        reserve(index.codes, n * d * 4)
    elif kind == "hnsw":
        reserve(faiss.downcast_index(index.storage).codes, n * d * 4)
        # 2M links at level 0, M per upper level, about 1 / (M - 1) upper levels per vector; 4 bytes a link
        reserve(index.hnsw.neighbors, int(n * (2 * hnsw_m + hnsw_m / (hnsw_m - 1) + 1)))


def build_index(emb: np.ndarray, kind: str = "flat", hnsw_m: int = 128, ivf_lists: int = 256, pq_m: int | None = None,
                ef_search: int = 128, ef_construction: int = 200, use_gpu: bool = False):
    """A maximum-inner-product FAISS index over the in-memory ``emb`` (float32 [N, d]); IVF-PQ:
    ``pq_m`` sub-quantizers of 8 bits (None: d / 8), trained on a sample of TRAIN_SAMPLE rows."""
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    chunks = ((s, emb[s : s + CHUNK_ROWS]) for s in range(0, len(emb), CHUNK_ROWS))
    return _build(*emb.shape, lambda ids: emb[ids], chunks, kind, hnsw_m, ivf_lists, pq_m, ef_search, ef_construction,
                  use_gpu)


def build_index_from_shards(shards: EmbeddingShards, kind: str = "flat", hnsw_m: int = 128, ivf_lists: int = 256,
                            pq_m: int | None = None, ef_search: int = 128, ef_construction: int = 200,
                            use_gpu: bool = False):
    """:func:`build_index` over the embedding ``shards`` in bounded memory: the index plus one chunk
    of CHUNK_ROWS rows (IVF-PQ: plus its training sample, before the adds)."""
    return _build(shards.n, shards.d, shards.rows, shards.chunks(), kind, hnsw_m, ivf_lists, pq_m, ef_search,
                  ef_construction, use_gpu)


def train_sample_ids(n: int, size: int | None = None) -> np.ndarray:
    """Sorted row numbers of the IVF-PQ training sample of ``size`` (default TRAIN_SAMPLE) rows, all
    rows when there are no more."""
    size = TRAIN_SAMPLE if size is None else size
    if n <= size:
        return np.arange(n)
    return np.sort(np.random.default_rng(0).choice(n, size=size, replace=False))


def _build(n: int, d: int, rows, chunks, kind: str, hnsw_m: int, ivf_lists: int, pq_m: int | None, ef_search: int,
           ef_construction: int, use_gpu: bool):
    """The index of ``n`` vectors of ``d``: ``rows(ids)`` reads the IVF-PQ training sample, ``chunks``
    yields (first row, rows) to add."""
    import faiss

    index = _empty_index(kind, d, n, hnsw_m, ivf_lists, pq_m, ef_search, ef_construction)
    if kind == "ivfpq":
        index.train(rows(train_sample_ids(n)))
    if use_gpu and kind != "hnsw" and hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        gpu = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
        for _, chunk in chunks:
            gpu.add(chunk)
        return faiss.index_gpu_to_cpu(gpu)
    _reserve(index, kind, n, d, hnsw_m)
    for _, chunk in chunks:
        index.add(chunk)
    return index


def save_index(index, path: str | Path) -> None:
    import faiss

    with atomic_path(path) as tmp:
        faiss.write_index(index, str(tmp))


def load_index(path: str | Path, rows: int | None = None, dim: int | None = None, of: str = "", mapped: bool = False):
    """The FAISS index of ``path``, checked against what it indexes: ``rows`` vectors of ``dim``
    (when given; ``of`` names them in the error). ``mapped``: the index's bulk (an IVF index's
    inverted lists, a flat or HNSW index's vectors) is mapped from the file, not read."""
    import faiss

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: index file not found")
    flags = 0
    if mapped:
        with open(path, "rb") as f:  # the file's fourcc: "Iw.."/"Iv.." for the IVF family
            flags = faiss.IO_FLAG_MMAP if f.read(2) in (b"Iw", b"Iv") else faiss.IO_FLAG_MMAP_IFC
    try:
        index = faiss.read_index(str(path), flags)
    except RuntimeError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{path}: unreadable FAISS index ({reason[:200]}); delete it and run again to rebuild it") from None
    if (rows is not None and index.ntotal != rows) or (dim is not None and index.d != dim):
        want = f"{rows if rows is not None else index.ntotal:,} of dimension {dim if dim is not None else index.d}"
        raise DataError(f"{path}: the index holds {index.ntotal:,} vectors of dimension {index.d}, "
                        f"{of + ' need' if of else 'expected'} {want}: it was built over other embeddings; delete it and "
                        f"run again to rebuild it")
    return index


def exact_top_k(shards: EmbeddingShards, queries: np.ndarray, k: int) -> np.ndarray:
    """Row numbers [len(queries), k] of the exact maximum-inner-product top-k over the shards,
    scanned chunk by chunk (the embeddings are never in memory at once)."""
    import faiss

    heap = faiss.ResultHeap(len(queries), k, keep_max=True)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    for start, chunk in shards.chunks():
        dist, ids = faiss.knn(queries, chunk, min(k, len(chunk)), metric=faiss.METRIC_INNER_PRODUCT)
        heap.add_result(dist, np.where(ids >= 0, ids + start, -1))
    heap.finalize()
    return heap.I


def recall_against_exact(index, shards: EmbeddingShards, queries: np.ndarray, k: int = 10) -> float:
    """Share of the exact top-k (a scan of the shards) that ``index`` also returns."""
    gold = exact_top_k(shards, queries, k)
    _, got = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
    hits = sum(len(set(g) & set(h)) for g, h in zip(gold.tolist(), got.tolist()))
    return hits / gold.size


def index_bytes(kind: str, n: int, d: int, *, hnsw_m: int = 128, ivf_lists: int = 256, pq_m: int | None = None) -> dict:
    """What a FAISS index of ``n`` ``d``-dimensional vectors takes, by arithmetic: ``memory`` once
    loaded and ``disk`` (its file), with the parts they add up from."""
    vectors = n * d * 4
    if kind == "flat":
        parts = {"vectors": vectors}
        header = 45
    elif kind == "hnsw":
        links = n * (2 * hnsw_m + hnsw_m / (hnsw_m - 1))  # as _reserve; a level (4 bytes) and offset (8) each
        parts = {"vectors": vectors, "graph": int(links * 4 + n * (4 + 8))}
        header = 45 + 45 + 8 * 20
    elif kind == "ivfpq":
        nlist, m = ivf_lists_for(n, ivf_lists), pq_bytes(d, pq_m)
        parts = {"codes": n * m, "ids": n * 8, "centroids": nlist * d * 4, "codebooks": 256 * d * 4}
        header = 45 * 2 + 8 * nlist + 64
    else:
        raise ConfigError(f"retriever.index: unknown index type {kind!r}")
    memory = sum(parts.values())
    return {"kind": kind, "n": n, "d": d, "memory": memory, "disk": memory + header, "parts": parts}
