"""The FAISS index built shard by shard in bounded memory (rag.retrieval.index.build_index_from_shards,
`rag index`): the same flat file as a one-shot build, recall statistics only for approximate
indexes, clear errors on bad shards, and peak memory about the index plus one chunk."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rag.errors import ConfigError, DataError
from tests.conftest import ROOT


def _vectors(n: int, d: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _shards(tmp_path, x: np.ndarray, sizes: list[int]) -> list:
    paths, lo = [], 0
    for i, m in enumerate(sizes):
        p = tmp_path / f"emb-{i}.npy"
        np.save(p, x[lo : lo + m] if m else np.zeros((0, 1), np.float32))
        paths.append(p)
        lo += m
    assert lo == len(x)
    return paths


def _index_section(tmp_path, index: str, **params):
    from rag.sections import IndexSection, read_section

    path = tmp_path / f"index-{index}.json"
    path.write_text(json.dumps({"device": "cpu", "retriever": {"index": index, **params}}))
    return read_section(IndexSection, path)


def test_flat_file_identical_to_a_one_shot_build(tmp_path):
    """The file `rag index` wrote before it streamed shards: IndexFlatIP.add of all rows at once."""
    import faiss

    from rag.stages.indexing import build_faiss_index

    x = _vectors(5_000, 48)
    paths = _shards(tmp_path, x, [1_700, 0, 2_000, 1_300])  # an empty shard (a tiny corpus) among them
    one_shot = faiss.IndexFlatIP(48)
    one_shot.add(x)
    faiss.write_index(one_shot, str(tmp_path / "one_shot.faiss"))
    build_faiss_index(_index_section(tmp_path, "flat"), paths, tmp_path / "flat.faiss", tmp_path / "flat.stats.json")
    assert (tmp_path / "flat.faiss").read_bytes() == (tmp_path / "one_shot.faiss").read_bytes()
    stats = json.loads((tmp_path / "flat.stats.json").read_text())
    assert stats["exact"] is True and stats["n"] == 5_000 and stats["dim"] == 48
    assert not any(k.startswith("recall") for k in stats)  # exact search: no recall to measure


def test_small_chunks_give_the_same_flat_index(tmp_path, monkeypatch):
    from rag.retrieval import index as I

    x = _vectors(1_000, 16)
    shards = I.EmbeddingShards(_shards(tmp_path, x, [333, 667]))
    monkeypatch.setattr(I, "CHUNK_ROWS", 100)
    a = I.build_index_from_shards(shards, "flat")
    assert a.ntotal == 1_000 and np.array_equal(a.reconstruct_n(0, 1_000), x)
    assert np.array_equal(shards.load(), x)
    ids = np.array([999, 0, 333, 332, 500])
    assert np.array_equal(shards.rows(ids), x[ids])


@pytest.mark.parametrize("kind, params", [("hnsw", {"hnsw_m": 16, "hnsw_ef_search": 64}),
                                          ("ivfpq", {"ivf_lists": 16, "pq_m": 8})])
def test_approximate_index_from_shards_with_recall_stats(tmp_path, kind, params):
    import faiss

    from rag.stages.indexing import build_faiss_index

    x = _vectors(3_000, 32)
    paths = _shards(tmp_path, x, [1_000, 1_000, 1_000])
    build_faiss_index(_index_section(tmp_path, kind, **params), paths, tmp_path / "i.faiss", tmp_path / "s.json")
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["kind"] == kind and stats["recall_queries"] == 200 and "exact" not in stats
    index = faiss.read_index(str(tmp_path / "i.faiss"))
    assert index.ntotal == 3_000
    # the statistics' exact side equals a flat search; the index finds the query's own row
    from rag.retrieval.index import EmbeddingShards, exact_top_k

    q = x[:50]
    flat = faiss.IndexFlatIP(32)
    flat.add(x)
    assert np.array_equal(exact_top_k(EmbeddingShards(paths), q, 5), flat.search(q, 5)[1])
    assert stats["recall@1_vs_flat"] >= (0.9 if kind == "hnsw" else 0.3)
    assert 0.0 <= stats["recall@10_vs_flat"] <= 1.0


@pytest.mark.parametrize("kind, params", [("flat", {}), ("hnsw", {"hnsw_m": 16, "hnsw_ef_search": 64}),
                                          ("ivfpq", {"ivf_lists": 16, "pq_m": 8})])
def test_a_jobs_index_is_mapped_and_searches_as_one_read_whole(tmp_path, kind, params):
    """A retrieving job maps the index's bulk from the file instead of reading it (IVF lists on disk,
    flat and HNSW vectors left in the file) and finds the same rows with the same scores."""
    import faiss

    from rag.retrieval.index import load_index
    from rag.stages.indexing import build_faiss_index

    x = _vectors(3_000, 32)
    paths = _shards(tmp_path, x, [1_500, 1_500])
    build_faiss_index(_index_section(tmp_path, kind, **params), paths, tmp_path / "i.faiss", tmp_path / "s.json")
    read, mapped = (load_index(tmp_path / "i.faiss", rows=3_000, dim=32, mapped=m) for m in (False, True))
    if kind == "ivfpq":
        lists = [type(faiss.downcast_InvertedLists(faiss.extract_index_ivf(i).invlists)).__name__ for i in (read, mapped)]
        assert lists == ["ArrayInvertedLists", "OnDiskInvertedLists"]
    else:
        codes = [faiss.downcast_index(i.storage if kind == "hnsw" else i).codes for i in (read, mapped)]
        assert [c.is_owned for c in codes] == [True, False]
    q = x[:40] + 0.01
    got_read, got_mapped = read.search(q, 10), mapped.search(q, 10)
    assert np.array_equal(got_read[1], got_mapped[1]) and np.array_equal(got_read[0], got_mapped[0])


def test_ivfpq_trains_on_a_sample(tmp_path, monkeypatch):
    from rag.retrieval import index as I

    monkeypatch.setattr(I, "TRAIN_SAMPLE", 2_000)
    seen = []
    real = I.EmbeddingShards.rows
    monkeypatch.setattr(I.EmbeddingShards, "rows", lambda self, ids: seen.append(len(ids)) or real(self, ids))
    x = _vectors(6_000, 16)
    idx = I.build_index_from_shards(I.EmbeddingShards(_shards(tmp_path, x, [3_000, 3_000])), "ivfpq", ivf_lists=8, pq_m=4)
    assert idx.ntotal == 6_000 and seen == [2_000]
    assert np.array_equal(I.train_sample_ids(10), np.arange(10))


def test_bad_shards_are_one_line_errors(tmp_path):
    from rag.retrieval.index import EmbeddingShards

    np.save(tmp_path / "a.npy", _vectors(10, 8))
    np.save(tmp_path / "b.npy", _vectors(10, 6))
    with pytest.raises(DataError, match="disagree on dimension"):
        EmbeddingShards([tmp_path / "a.npy", tmp_path / "b.npy"])
    with pytest.raises(DataError, match="missing.npy: embedding shard not found"):
        EmbeddingShards([tmp_path / "missing.npy"])
    np.save(tmp_path / "c.npy", np.zeros(5, np.float32))
    with pytest.raises(DataError, match="c.npy: expected a 2-D array"):
        EmbeddingShards([tmp_path / "c.npy"])
    np.save(tmp_path / "d.npy", np.zeros((4, 3), np.int64))
    with pytest.raises(DataError, match="d.npy: expected native-endian float"):
        EmbeddingShards([tmp_path / "d.npy"])
    (tmp_path / "e.npy").write_bytes(b"not a numpy file")
    with pytest.raises(DataError, match="e.npy: unreadable embedding shard"):
        EmbeddingShards([tmp_path / "e.npy"])
    data = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "f.npy").write_bytes(data[:-40])
    with pytest.raises(DataError, match="f.npy: truncated"):
        EmbeddingShards([tmp_path / "f.npy"])
    with pytest.raises(ConfigError, match="ivfpq needs at least 256"):
        from rag.retrieval.index import build_index_from_shards

        build_index_from_shards(EmbeddingShards([tmp_path / "a.npy"]), "ivfpq")


def test_float16_shards_are_read_as_float32(tmp_path):
    from rag.retrieval.index import EmbeddingShards

    x = _vectors(100, 8).astype(np.float16)
    np.save(tmp_path / "h.npy", x)
    got = EmbeddingShards([tmp_path / "h.npy"]).load()
    assert got.dtype == np.float32 and np.array_equal(got, x.astype(np.float32))


PEAK = textwrap.dedent("""
    import json, sys
    import faiss, numpy  # imported before the baseline: the build's own memory is what is measured
    from rag.sections import IndexSection, read_section
    from rag.stages.indexing import build_faiss_index
    def status(key):
        return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key + ":"))
    base = status("VmRSS")
    cfg = read_section(IndexSection, sys.argv[1])
    build_faiss_index(cfg, sys.argv[4:], sys.argv[2], sys.argv[3])
    # VmHWM: this process image's peak RSS (ru_maxrss would count the parent's RSS at the fork too)
    peak = status("VmHWM")
    print(json.dumps({"base": base, "peak": peak}))
""")


@pytest.mark.parametrize("kind, params", [("flat", {}), ("ivfpq", {"ivf_lists": 64, "pq_m": 16})])
def test_build_memory_is_the_index_plus_one_chunk(tmp_path, kind, params):
    """Peak RSS of the build over the process' RSS before it, against the embeddings' bytes: at
    most 1.3x (the shards concatenated, copied and added, as before, took 3x)."""
    x = _vectors(400_000, 128)  # 205 MB in 4 shards
    paths = _shards(tmp_path, x, [100_000] * 4)
    emb_bytes = x.nbytes
    del x
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"device": "cpu", "retriever": {"index": kind, **params}}))
    res = subprocess.run([sys.executable, "-c", PEAK, str(cfg), str(tmp_path / "i.faiss"), str(tmp_path / "s.json"),
                          *map(str, paths)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    m = json.loads(res.stdout.strip().splitlines()[-1])
    ratio = (m["peak"] - m["base"]) / emb_bytes
    assert ratio <= 1.3, f"{kind}: build took {ratio:.2f}x the embeddings' bytes"
    if kind == "flat":
        assert ratio >= 0.95  # the index itself is the embeddings' size
