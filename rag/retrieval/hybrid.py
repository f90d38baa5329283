"""Hybrid retrieval: two retrievers' lists fused into one ranking (a dense and a BM25 retriever, say).

Each part returns its top ``depth`` passages; the fused score of a passage is

* ``rrf`` (reciprocal rank fusion): the sum over the parts of 1 / (rrf_k + rank), rank 1 for a part's
  best passage, 0 from a part whose list lacks it;
* ``weighted``: weight * norm(s_first) + (1 - weight) * norm(s_second), each part's scores min-max
  normalised per question over its own list (its best 1, its worst 0), 0 from a part whose list lacks it;

times ``score_scale``: the logits of p(z|x) of the top K, best first, ties by passage row (ascending).
Weighted fusion carries a part's gradient (the dense retriever's, to its question encoder) through the
normalised scores; RRF is a function of ranks alone and carries none (:attr:`HybridRetriever.grads_reach_question_encoder`).
"""

from __future__ import annotations

import numpy as np
import torch

from rag.errors import ConfigError
from rag.retrieval.base import Retrieved, Retriever

FUSIONS = ("rrf", "weighted")


def min_max(scores: torch.Tensor) -> torch.Tensor:
    """``scores`` (one part's list for one question, [D]) mapped onto [0, 1]: (s - min) / (max - min).
    A constant list (max == min: the part tells its passages apart no better than that) is all 1: each
    was retrieved, so each stays above the passages the part did not return (0). Differentiable."""
    lo, hi = scores.min(), scores.max()
    span = hi - lo
    flat = span <= 0
    safe = torch.where(flat, torch.ones_like(span), span)  # no 0/0 in the branch torch.where drops (its grad)
    return torch.where(flat, torch.ones_like(scores), (scores - lo) / safe)


class HybridRetriever(Retriever):
    """Two retrievers fused (the module docstring says how); both search the same passages.

    ``depth``: how many passages each part returns for the fusion; None (the default) asks for 2K at a
    search for K: a passage just below the top K of both parts can still make the fused top K (with
    depth K it could not), at twice a part's search cost. A fixed depth (at least every K searched)
    gives each K the same candidates, so the rankings nest (:meth:`nested_top_k`).

    Each part's list is of distinct passage rows; a negative row (FAISS's padding) counts as absent.
    """

    def __init__(self, first: Retriever, second: Retriever, fusion: str = "rrf", rrf_k: float = 60.0,
                 weight: float = 0.5, depth: int | None = None, passages=None, score_scale: float = 1.0):
        super().__init__()
        if fusion not in FUSIONS:
            raise ConfigError(f"hybrid fusion: unknown fusion {fusion!r}; expected one of {', '.join(FUSIONS)}")
        if not rrf_k >= 0:
            raise ConfigError(f"hybrid rrf_k: {rrf_k!r} must be >= 0 (the rank-1 passage scores 1/(rrf_k + 1))")
        if not 0.0 <= weight <= 1.0:
            raise ConfigError(f"hybrid weight: {weight!r} must lie in [0, 1] (the first part's share)")
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
            raise ConfigError(f"hybrid depth: {depth!r} must be a positive integer (or None: 2K)")
        self.first = first
        self.second = second
        self.fusion = fusion
        self.rrf_k = float(rrf_k)
        self.weight = float(weight)
        self.depth = depth
        self.score_scale = score_scale
        self.passages = passages if passages is not None else getattr(first, "passages", None)

    @classmethod
    def from_declaration(cls, files, options, device: str, question_encoder_dir=None, *, declaration: dict, build):
        """A hybrid declared under config key ``retrievers.<name>`` (rag/tasks.py RETRIEVERS: its options),
        its parts built by ``build(name)``."""
        first, second = (build(part) for part in declaration["parts"])
        return cls(first, second, declaration["fusion"], declaration["rrf_k"], declaration["weight"], declaration["depth"],
                   score_scale=declaration["score_scale"])

    @property
    def question_encoder(self):
        """The trainable question encoder of a part (the first part's where both have one), else None;
        only weighted fusion passes it gradient (:attr:`grads_reach_question_encoder`)."""
        for part in (self.first, self.second):
            enc = getattr(part, "question_encoder", None)
            if enc is not None:
                return enc
        return None

    @property
    def grads_reach_question_encoder(self) -> bool:
        """Whether the fused scores are differentiable in the parts' scores: True for weighted fusion,
        False for RRF (ranks only: a variant training the question encoder through it gets no gradient
        from retrieval)."""
        return self.fusion == "weighted"

    def depth_for(self, k: int) -> int:
        """The depth each part is searched to for a search of ``k``: ``depth``, else 2k."""
        if self.depth is None:
            return 2 * k
        if self.depth < k:
            raise ConfigError(f"hybrid depth {self.depth} is below K={k}: each part returns its top depth passages "
                              f"for the fusion; set depth >= K (or None: 2K)")
        return self.depth

    def nested_top_k(self, k: int) -> bool:
        """True for a fixed depth >= k: every search of j <= k fuses the same two lists. With the default
        depth (2K) a larger K brings more candidates, which can reorder the top j."""
        return self.depth is not None and self.depth >= k

    def _contributions(self, got: Retrieved, i: int, device) -> tuple[np.ndarray, torch.Tensor]:
        """One part's rows for question ``i`` (absent ones dropped) and what each adds to its fused score."""
        rows = np.asarray(got.ids[i], dtype=np.int64)
        keep = rows >= 0
        if self.fusion == "rrf":
            ranks = np.flatnonzero(keep) + 1  # its place in the part's list, 1 the best
            return rows[keep], torch.from_numpy(1.0 / (self.rrf_k + ranks)).to(device, torch.float32)
        scores = got.scores[i].to(device, torch.float32)[torch.from_numpy(np.flatnonzero(keep)).to(device)]
        return rows[keep], min_max(scores) if len(scores) else scores

    def retrieve(self, questions: list[str], k: int) -> Retrieved:
        """The fused top ``k`` [B, k] (int64 rows, best first) and their fused scores [B, k]."""
        depth = self.depth_for(k)
        a, b = self.first.retrieve(questions, depth), self.second.retrieve(questions, depth)
        for part, got in (("first", a), ("second", b)):
            if np.shape(got.ids) != (len(questions), depth):
                raise RuntimeError(f"hybrid {part} part returned ids of shape {np.shape(got.ids)}, not "
                                   f"({len(questions)}, {depth})")
        device = a.scores.device
        shares = (self.weight, 1.0 - self.weight) if self.fusion == "weighted" else (1.0, 1.0)
        ids = np.empty((len(questions), k), dtype=np.int64)
        scores = []
        for i in range(len(questions)):
            (ra, ca), (rb, cb) = self._contributions(a, i, device), self._contributions(b, i, device)
            rows = np.union1d(ra, rb)  # ascending: the tie order
            if len(rows) < k:
                raise RuntimeError(f"the hybrid's parts returned {len(rows)} passages, fewer than K={k}; lower K or "
                                   f"enlarge the corpus")
            fused = torch.zeros(len(rows), device=device, dtype=torch.float32)
            for share, r, c in ((shares[0], ra, ca), (shares[1], rb, cb)):
                fused = fused.index_add(0, torch.from_numpy(np.searchsorted(rows, r)).to(device), share * c)
            best = np.lexsort((rows, -fused.detach().cpu().numpy()))[:k]  # fused score descending, then row
            ids[i] = rows[best]
            scores.append(fused[torch.from_numpy(best).to(device)])
        return Retrieved(ids, torch.stack(scores) * self.score_scale)
