"""The retriever's training objectives, as pure tensor functions over each question's K documents: the doc
scores s(z, x) (the logits of p(z|x), carrying the retriever's gradient) and the generator's log-likelihood of
the target under each document, log p(y|x, z) (held fixed: the generator only supervises the retriever).

- ``marginal``: RAG's own (Lewis et al. 2020): the retriever trains through the variant's marginal
  likelihood, nothing is added (:func:`retriever_loss` is not called for it).
- ``emdr2`` (Sachan et al. 2021): -log sum_z p(z|x) sg[p(y|x, z)], the sequence-level marginal with the
  generator's part a constant, whichever marginal the generator trains with.
- ``pdist`` (Atlas's perplexity distillation, Izacard et al. 2022): KL(Q || P) from the target
  Q(z) = softmax_z(log p(y|x, z) / T) to P = p(z|x).
- ``lsr`` (REPLUG's LM-supervised retrieval, Shi et al. 2023; RA-DIT): KL(P || Q), the retriever's
  distribution to the generator's.

``T`` is config key ``train.objective_temperature``. Every loss is per question, in fp32.
"""

from __future__ import annotations

import torch

from rag.models.marginal import shift_left
from rag.tasks import RETRIEVER_OBJECTIVES as OBJECTIVES


def document_loglik(ll: torch.Tensor, target: torch.Tensor, pad_id: int, k: int) -> torch.Tensor:
    """log p(y | x, z) per question and document, [B, K], from the target tokens' log-probabilities
    ``ll`` [B*K, T] (question-major) and the targets [B, T] (BOS first, as :mod:`rag.models.marginal`)."""
    tgt = shift_left(target, pad_id)
    b, t = tgt.shape
    return ll.float().view(b, k, t).masked_fill(tgt.eq(pad_id)[:, None, :], 0.0).sum(2)


def retriever_loss(objective: str, doc_scores: torch.Tensor, doc_loglik: torch.Tensor,
                   temperature: float = 1.0) -> torch.Tensor:
    """The retriever's loss per question [B] under ``objective`` (emdr2 | pdist | lsr; see the module):
    ``doc_scores`` [B, K] with their gradient, ``doc_loglik`` [B, K] taken as constants."""
    if objective not in OBJECTIVES[1:]:
        raise ValueError(f"unknown retriever objective {objective!r} (known: {', '.join(OBJECTIVES[1:])})")
    log_p = torch.log_softmax(doc_scores.float(), dim=1)
    lm = doc_loglik.detach().float()
    if objective == "emdr2":
        return -torch.logsumexp(log_p + lm, dim=1)
    log_q = torch.log_softmax(lm / temperature, dim=1)
    if objective == "pdist":
        return (log_q.exp() * (log_q - log_p)).sum(1)
    return (log_p.exp() * (log_p - log_q)).sum(1)
