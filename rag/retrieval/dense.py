"""Dense retrieval (DPR): a question encoder, a FAISS index and the passage embeddings it was built from. The
doc scores d(z).q(x) of the top K are recomputed from the stored embeddings (read in place), so gradients
reach the question encoder; with a trained passage encoder (``context_encoder``) the passages the index
proposes are encoded again by it in the forward pass, so the scores carry gradients to both encoders (the
index, built by an earlier state of that encoder, is stale: it only proposes)."""

from __future__ import annotations

import numpy as np
import torch

from rag import precision as P
from rag.retrieval import RetrievalFiles
from rag.retrieval.base import Retrieved, Retriever
from rag.config_keys import QuestionEncoder


class DenseRetriever(Retriever):
    def __init__(self, passages, question_encoder, doc_emb, index, score_scale: float = 1.0, context_encoder=None,
                 rescore_depth: int | None = None):
        """``doc_emb``: the passage embeddings, an [n, d] array or the shards read in place
        (:class:`rag.retrieval.index.EmbeddingShards`). ``context_encoder``: the passage encoder being trained
        (an :class:`rag.retrieval.encoders.Encoder`; it may share its model with the question encoder); then, in
        training mode, the index proposes the top ``rescore_depth`` passages (at least K; None: K), the current
        passage encoder encodes them, and the best K by their fresh scores are retrieved. In eval mode the index's
        own embeddings score, as without one (the index of a trained model is built by its final passage encoder)."""
        super().__init__()
        self.passages = passages
        self.question_encoder = question_encoder
        self.context_encoder = context_encoder
        self.rescore_depth = rescore_depth
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
        if self.reencodes:  # the fresh scores reorder what the stale index proposed
            return False
        hnsw = getattr(self.index, "hnsw", None)  # faiss.read_index gives the index's own class
        return hnsw is None or hnsw.efSearch >= k

    @property
    def reencodes(self) -> bool:
        """Whether the passages the index proposes are encoded again (a passage encoder, in training mode)."""
        return self.context_encoder is not None and self.context_encoder.training

    def retrieve(self, questions: list[str], k: int) -> Retrieved:
        q = self.question_encoder.encode_texts(questions).float()  # [B, d] (under the caller's autocast)
        reencode = self.reencodes
        depth = max(k, self.rescore_depth or k) if reencode else k
        _, ids = self.index.search(np.ascontiguousarray(q.detach().cpu().numpy()), depth)
        if (ids < 0).any():
            raise RuntimeError(f"the index returned fewer than K={depth} passages; lower K or enlarge the corpus")
        if not reencode:
            rows = self.doc_emb.rows(ids.ravel()) if hasattr(self.doc_emb, "rows") else self.doc_emb[ids.ravel()]
            d = torch.from_numpy(rows.reshape(*ids.shape, -1)).to(q.device, torch.float32)  # [B, K, d], fixed
        else:
            if depth > k:  # the best K of the proposed by their fresh scores (ties: the index's order), ranked
                with torch.no_grad(), P.full_precision(q.device.type):  # without a gradient: only the K chosen need one
                    fresh = torch.bmm(q.detach().float().unsqueeze(1),
                                      self.encode_rows(ids.ravel()).float().view(*ids.shape, -1).transpose(1, 2)).squeeze(1)
                order = torch.argsort(-fresh, dim=1, stable=True)[:, :k]
                ids = np.take_along_axis(ids, order.cpu().numpy(), 1)
            d = self.encode_rows(ids.ravel()).float().view(*ids.shape, -1)  # [B, K, d], encoded now, with their gradient
        with P.full_precision(q.device.type):  # doc scores in fp32 whatever the precision
            scores = torch.bmm(q.unsqueeze(1), d.transpose(1, 2)).squeeze(1) * self.score_scale
        if reencode:  # best first by their fresh scores (ties: the index's order)
            order = torch.argsort(-scores.detach(), dim=1, stable=True)
            ids, scores = np.take_along_axis(ids, order.cpu().numpy(), 1), torch.gather(scores, 1, order)
        return Retrieved(ids, scores)

    def encode_rows(self, rows: np.ndarray) -> torch.Tensor:
        """Passages ``rows`` encoded by the current passage encoder, as the index's embeddings were
        (:func:`rag.retrieval.encoders.tokenize_passages`), with their gradient: [len(rows), d]."""
        from rag.retrieval.encoders import tokenize_passages

        enc = self.context_encoder
        batch = tokenize_passages(enc, self.passages.titles, self.passages.texts, rows.tolist())
        return enc(**{key: v.to(next(enc.parameters()).device) for key, v in batch.items()})
