"""Dense retrieval (DPR): a question encoder, a FAISS index and the fixed passage embeddings. The
doc scores d(z).q(x) of the top K are recomputed from the stored embeddings (read in place), so
gradients reach the question encoder."""

from __future__ import annotations

import numpy as np
import torch

from rag import precision as P
from rag.retrieval import RetrievalFiles
from rag.retrieval.base import Retrieved, Retriever
from rag.config_keys import QuestionEncoder


class DenseRetriever(Retriever):
    def __init__(self, passages, question_encoder, doc_emb, index, score_scale: float = 1.0):
        """``doc_emb``: the passage embeddings, an [n, d] array or the shards read in place
        (:class:`rag.retrieval.index.EmbeddingShards`)."""
        super().__init__()
        self.passages = passages
        self.question_encoder = question_encoder
        self.doc_emb = doc_emb
        self.index = index
        self.score_scale = score_scale

    @classmethod
    def from_files(cls, files: RetrievalFiles, options: QuestionEncoder, device: str, question_encoder_dir: str | None = None,
                   *, declaration: dict | None = None, build=None):
        """Over ``files``, with the retriever group's question encoder (a declared dense retriever's options are
        none: ``declaration`` and ``build`` are unused)."""
        from rag.data.corpus import PassageStore
        from rag.errors import DataError
        from rag.retrieval.encoders import Encoder
        from rag.retrieval.index import EmbeddingShards, check_shard_record, load_index

        passages = PassageStore(files.passages)
        emb = EmbeddingShards(files.embeddings)
        if emb.n != len(passages):
            raise DataError(f"{files.embeddings[0]}: {emb.n} embeddings for {len(passages)} passages in {files.passages}")
        index = load_index(files.index, rows=emb.n, dim=emb.d, of=f"the {emb.n:,} passages of {files.passages}",
                           mapped=True)
        check_shard_record(files.index, emb)  # the shards it was built from, in their order
        # a fine-tuned copy's prompts are its base's (a saved folder keeps the weights, not the prompts)
        qenc = Encoder.load(question_encoder_dir or options.question_encoder, options.encoder_text(), side="query",
                            prompts_of=options.question_encoder)
        return cls(passages, qenc.to(device), emb, index, options.score_scale)

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
        rows = self.doc_emb.rows(ids.ravel()) if hasattr(self.doc_emb, "rows") else self.doc_emb[ids.ravel()]
        d = torch.from_numpy(rows.reshape(*ids.shape, -1)).to(q.device, torch.float32)  # [B, K, d], fixed
        with P.full_precision(q.device.type):  # doc scores in fp32 whatever the precision
            scores = torch.bmm(q.unsqueeze(1), d.transpose(1, 2)).squeeze(1) * self.score_scale
        return Retrieved(ids, scores)
