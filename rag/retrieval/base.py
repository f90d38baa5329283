"""The retriever interface: ``Retriever.retrieve(questions, k) -> Retrieved``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Retrieved:
    ids: np.ndarray  # [B, K] passage row numbers, best first
    scores: torch.Tensor  # [B, K] doc scores (logits of p(z|x)); carries grad for a trained question encoder


class Retriever(torch.nn.Module):
    """``retrieve(questions, k) -> Retrieved`` over ``self.passages``; a module, so a trainable
    ``question_encoder`` (the dense retriever's) is part of the RAG system that holds it."""

    def retrieve(self, questions: list[str], k: int) -> Retrieved:
        raise NotImplementedError

    def nested_top_k(self, k: int) -> bool:
        """Whether the first j passages of a search for ``k`` are what a search for j returns
        (every j <= k), so one search can serve a sweep over K. True for an exact ranking."""
        return True
