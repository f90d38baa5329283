"""BM25 retriever (bm25s) for the paper's Table 6 ablation: BM25 scores are the logits of p(z|x).
Its index is built by :func:`rag.retrieval.bm25_index.build_bm25` (no torch there)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from rag.errors import DataError
from rag.retrieval import RetrievalFiles
from rag.retrieval.base import Retrieved, Retriever
from rag.config_keys import QuestionEncoder


class BM25Retriever(Retriever):
    """Fixed BM25 retrieval; the BM25 scores are the logits of p(z|x)."""

    def __init__(self, path: str | Path, passages=None):
        import bm25s

        super().__init__()
        path = Path(path)
        if not path.is_dir():
            raise DataError(f"{path}: BM25 index folder not found")
        try:
            self.model = bm25s.BM25.load(str(path))
        except (OSError, ValueError, KeyError) as exc:
            raise DataError(f"{path}: unreadable BM25 index ({type(exc).__name__}: {exc}); delete it and run again to "
                            f"rebuild it") from None
        docs = int(self.model.scores.get("num_docs", -1))
        if passages is not None and docs != len(passages):
            raise DataError(f"{path}: the BM25 index holds {docs:,} documents, not the {len(passages):,} passages of "
                            f"{getattr(passages, 'path', 'the corpus')}; delete it and run again to rebuild it")
        self.passages = passages

    @classmethod
    def from_files(cls, files: RetrievalFiles, options: QuestionEncoder | None, device: str, question_encoder_dir: str | None = None,
                   *, declaration: dict | None = None, build=None):
        """Over ``files.bm25`` (a declared BM25 retriever's options are none: ``declaration`` and ``build`` are unused)."""
        from rag.data.corpus import PassageStore

        return cls(files.bm25, PassageStore(files.passages))

    def retrieve(self, questions: list[str], k: int) -> Retrieved:
        """Passage rows [B, k] and BM25 scores [B, k], best first."""
        import bm25s

        tokens = bm25s.tokenize(questions, stopwords="en", show_progress=False)
        ids, scores = self.model.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return Retrieved(np.asarray(ids, dtype=np.int64), torch.from_numpy(np.asarray(scores, dtype=np.float32)))
