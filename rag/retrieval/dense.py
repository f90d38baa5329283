"""Dense retrieval (DPR): a question encoder, a FAISS index and the fixed passage embeddings.

The index finds the top K passages; their doc scores d(z).q(x) are recomputed from the stored
embeddings so that gradients reach the question encoder (the document side stays fixed)."""

from __future__ import annotations

import numpy as np
import torch

from rag import precision as P
from rag.retrieval import RetrievalFiles, Retrieved, Retriever
from rag.sections import QuestionEncoder


class DenseRetriever(Retriever):
    def __init__(self, passages, question_encoder, doc_emb: np.ndarray, index, score_scale: float = 1.0):
        super().__init__()
        self.passages = passages
        self.question_encoder = question_encoder
        self.doc_emb = doc_emb
        self.index = index
        self.score_scale = score_scale

    @classmethod
    def from_files(cls, files: RetrievalFiles, options: QuestionEncoder, device: str, question_encoder_dir: str | None = None):
        from rag.data.corpus import read_passages
        from rag.errors import DataError
        from rag.retrieval.encoders import Encoder
        from rag.retrieval.index import load_embeddings, load_index

        passages = read_passages(files.passages)
        emb = load_embeddings(files.embeddings)
        if len(emb) != len(passages):
            raise DataError(f"{files.embeddings[0]}: {len(emb)} embeddings for {len(passages)} passages in {files.passages}")
        qenc = Encoder.load(question_encoder_dir or options.question_encoder, options.pooling, options.normalize,
                            options.max_length)
        return cls(passages, qenc.to(device), emb, load_index(files.index), options.score_scale)

    def nested_top_k(self, k: int) -> bool:
        """Exact and IVF search rank one candidate set whatever K; HNSW's grows with K once K
        exceeds its efSearch (faiss searches max(efSearch, K) candidates)."""
        hnsw = getattr(self.index, "hnsw", None)  # faiss.read_index gives the index's own class
        return hnsw is None or hnsw.efSearch >= k

    def retrieve(self, questions: list[str], k: int) -> Retrieved:
        q = self.question_encoder.encode_texts(questions).float()  # [B, d] (under the caller's autocast)
        _, ids = self.index.search(np.ascontiguousarray(q.detach().cpu().numpy()), k)
        if (ids < 0).any():
            raise RuntimeError(f"the index returned fewer than K={k} passages; lower K or enlarge the corpus")
        d = torch.from_numpy(self.doc_emb[ids]).to(q.device, torch.float32)  # [B, K, d], fixed
        with P.full_precision(q.device.type):  # doc scores in fp32 whatever the precision
            scores = torch.bmm(q.unsqueeze(1), d.transpose(1, 2)).squeeze(1) * self.score_scale
        return Retrieved(ids, scores)
