"""RAG marginalization (Lewis et al. 2020, Section 2) as pure tensor functions, in fp32 whatever
the dtype of their inputs.

RAG-Sequence:  p(y|x) = sum_z p(z|x) prod_i p(y_i | x, z, y_<i)
RAG-Token:     p(y|x) = prod_i sum_z p(z|x) p(y_i | x, z, y_<i)
p(z|x) = softmax over the top-K of the doc scores d(z).q(x).

As ``transformers.RagSequenceForGeneration`` / ``RagTokenForGeneration``: ``target`` includes the
leading BOS; position t of the logits predicts ``target[t + 1]``; the last position is masked.
"""

from __future__ import annotations

import torch


def shift_left(target: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The target tokens each position predicts: ``target[:, 1:]``, padded at the end."""
    return torch.cat([target[:, 1:], target.new_full((target.shape[0], 1), pad_id)], 1)


def token_logprobs(seq_logits: torch.Tensor, tgt: torch.Tensor, smooth: bool):
    """log p(tgt) per position, and (if smooth) the sum over the vocabulary of log p."""
    seq_logits = seq_logits.float()
    lse = torch.logsumexp(seq_logits, dim=-1)
    ll = seq_logits.gather(-1, tgt.unsqueeze(-1)).squeeze(-1) - lse
    smooth_obj = (seq_logits.sum(-1) - seq_logits.size(-1) * lse) if smooth else None
    return ll, smooth_obj


def rag_sequence_nll_from_logprobs(ll: torch.Tensor, smooth_obj: torch.Tensor | None, vocab: int, doc_scores: torch.Tensor,
                                   target: torch.Tensor, pad_id: int, epsilon: float = 0.0, exclude_bos_score: bool = False,
                                   bos_id: int | None = None) -> torch.Tensor:
    """Per-example negative marginal log-likelihood of RAG-Sequence from the target tokens'
    log-probabilities ``ll`` [B*K, T] and, for label smoothing, ``smooth_obj`` [B*K, T] (the sum over
    the vocabulary of log p at each position). doc_scores: [B, K]; target: [B, T]."""
    b, k = doc_scores.shape
    tgt = shift_left(target, pad_id)  # [B, T]
    t = tgt.shape[1]
    ll = ll.float().view(b, k, t)
    doc_lp = torch.log_softmax(doc_scores.float(), dim=1)  # [B, K]
    pad = tgt.eq(pad_id).unsqueeze(1)  # [B, 1, T]
    ll = ll.masked_fill(pad, 0.0)
    use_bos = bos_id is not None and bool(tgt[:, 0].eq(bos_id).all())
    # log p(z|x) enters once per (x, z), also for a one-token target (transformers drops it there),
    # so RAG-Sequence and RAG-Token agree on length-1 targets (Section 2.4)
    seq_ll = (ll[:, :, 1:].sum(2) if exclude_bos_score and use_bos else ll.sum(2)) + doc_lp
    nll = -torch.logsumexp(seq_ll, dim=1)
    if epsilon <= 0:
        return nll
    # smoothing objective: sum over positions and vocabulary of log p(z|x) + log p(w|...), as transformers
    smooth_obj = smooth_obj.float().view(b, k, t).masked_fill(pad, 0.0).sum(2) + doc_lp * vocab
    smooth_loss = -torch.logsumexp(smooth_obj, dim=1)
    return (1.0 - epsilon) * nll + (epsilon / vocab) * smooth_loss


def rag_token_logprobs(seq_logits: torch.Tensor, doc_scores: torch.Tensor) -> torch.Tensor:
    """Marginalized next-token log-probabilities [B, T, V] of RAG-Token."""
    b, k = doc_scores.shape
    lp = torch.log_softmax(seq_logits.float(), dim=-1).view(b, k, seq_logits.shape[1], seq_logits.shape[2])
    return torch.logsumexp(lp + torch.log_softmax(doc_scores.float(), dim=1)[:, :, None, None], dim=1)


def rag_token_nll(seq_logits: torch.Tensor, doc_scores: torch.Tensor, target: torch.Tensor, pad_id: int,
                  epsilon: float = 0.0) -> torch.Tensor:
    """Per-example negative marginal log-likelihood of RAG-Token."""
    b, k = doc_scores.shape
    tgt = shift_left(target, pad_id)
    t = tgt.shape[1]
    if epsilon <= 0:
        ll, _ = token_logprobs(seq_logits, tgt.unsqueeze(1).expand(b, k, t).reshape(b * k, t), False)
        return rag_token_nll_from_logprobs(ll, doc_scores, target, pad_id)
    pad = tgt.eq(pad_id)
    rag_lp = rag_token_logprobs(seq_logits, doc_scores)  # [B, T, V]
    tok_ll = rag_lp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1).masked_fill(pad, 0.0)
    smooth = rag_lp.sum(-1).masked_fill(pad, 0.0)
    v = rag_lp.size(-1)
    return (1.0 - epsilon) * (-tok_ll.sum(1)) + (epsilon / v) * (-smooth.sum(1))


def rag_token_nll_from_logprobs(ll: torch.Tensor, doc_scores: torch.Tensor, target: torch.Tensor, pad_id: int) -> torch.Tensor:
    """``rag_token_nll`` without label smoothing from the target tokens' log-probabilities [B*K, T]
    (the marginal of the target token needs only its own probability under each document)."""
    b, k = doc_scores.shape
    tgt = shift_left(target, pad_id)
    doc_lp = torch.log_softmax(doc_scores.float(), dim=1)[:, :, None]  # [B, K, 1]
    tok_ll = torch.logsumexp(ll.float().view(b, k, tgt.shape[1]) + doc_lp, dim=1)  # [B, T]
    return -tok_ll.masked_fill(tgt.eq(pad_id), 0.0).sum(1)
