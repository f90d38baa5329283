"""The BM25 index (bm25s) of the passages, for the paper's Table 6 ablation: built here without
torch (rule ``build_bm25``); :class:`rag.retrieval.bm25.BM25Retriever` retrieves with it."""

from __future__ import annotations

from pathlib import Path

from rag.io import atomic_dir


def build_bm25(titles: list[str], texts: list[str], out_dir: str | Path) -> None:
    import bm25s

    corpus_tokens = bm25s.tokenize([f"{t} {x}" for t, x in zip(titles, texts)], stopwords="en", show_progress=False)
    retriever = bm25s.BM25()
    retriever.index(corpus_tokens, show_progress=False)
    with atomic_dir(out_dir) as tmp:
        retriever.save(str(tmp))
