"""Reference computations the tests compare the project's code with: the RAG-Sequence NLL from
full generator logits, the plain generator NLL, and one question's sequence log-probabilities.
The project computes each from fewer numbers (the target tokens' log-probabilities, every
question at once); these spell out the definition from the project's own parts."""

from __future__ import annotations

import torch

from rag.models.marginal import shift_left, token_logprobs, rag_sequence_nll_from_logprobs, rag_token_nll


def rag_sequence_nll(seq_logits: torch.Tensor, doc_scores: torch.Tensor, target: torch.Tensor, pad_id: int,
                     epsilon: float = 0.0, exclude_bos_score: bool = False, bos_id: int | None = None) -> torch.Tensor:
    """Per-example negative marginal log-likelihood of RAG-Sequence.

    seq_logits: [B*K, T, V] generator logits for each (x, z); doc_scores: [B, K]; target: [B, T].
    """
    b, k = doc_scores.shape
    tgt = shift_left(target, pad_id)  # [B, T]
    t = tgt.shape[1]
    ll, smooth_obj = token_logprobs(seq_logits, tgt.unsqueeze(1).expand(b, k, t).reshape(b * k, t), epsilon > 0)
    return rag_sequence_nll_from_logprobs(ll, smooth_obj, seq_logits.size(-1), doc_scores, target, pad_id, epsilon,
                                          exclude_bos_score, bos_id)


def generator_nll(logits: torch.Tensor, target: torch.Tensor, pad_id: int, epsilon: float = 0.0) -> torch.Tensor:
    """Plain sequence NLL (the BART-only baseline) in the same target convention."""
    doc_scores = logits.new_zeros(target.shape[0], 1, dtype=torch.float32)
    return rag_token_nll(logits, doc_scores, target, pad_id, epsilon)


def sequence_logprobs(system, enc, i: int, hyps: list[tuple[int, ...]]) -> torch.Tensor:
    """log p(h | x_i, z_j) for every hypothesis h (tokens after BOS) of question ``i`` and document
    j -> [H, K]: ``RagSystem.sequence_logprobs_batch`` with question ``i``'s hypotheses alone."""
    return system.sequence_logprobs_batch(enc, [[] if q != i else hyps for q in range(enc.doc_lp.shape[0])])[i]
