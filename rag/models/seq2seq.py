"""Generator passes that skip padding: rows sorted by length and run in chunks, each cut to its
longest row, and logits only at the positions whose next token is scored.
:class:`rag.models.generator.Seq2SeqGenerator` (the seq2seq family) runs them.
"""

from __future__ import annotations

import torch

TITLE_SEP = " / "  # as transformers' RagConfig.title_sep
DOC_SEP = " // "  # as transformers' RagConfig.doc_sep


def format_input(title: str, text: str, question: str) -> str:
    """The generator input for one (x, z) pair, exactly as transformers' RagRetriever builds it."""
    if title.startswith('"'):
        title = title[1:]
    if title.endswith('"'):
        title = title[:-1]
    return (title + TITLE_SEP + text + DOC_SEP + question).replace("  ", " ")

# cost of one more generator call, in padded tokens: a chunk costs rows x width + this
DEFAULT_CHUNK_OVERHEAD = 512
ONE_CHUNK = 10**9  # an overhead no padding saving can pay for: always one generator call
# per device type (config key generator.chunk_overhead: null)
DEVICE_CHUNK_OVERHEAD = {"cpu": DEFAULT_CHUNK_OVERHEAD, "cuda": ONE_CHUNK}


def chunk_overhead_for(device_type: str, configured: int | None = None) -> int:
    """The chunk overhead to use on ``device_type``: ``configured`` (generator.chunk_overhead) when
    set, else the device's default from :data:`DEVICE_CHUNK_OVERHEAD`."""
    if configured is not None:
        return int(configured)
    if device_type not in DEVICE_CHUNK_OVERHEAD:
        raise ValueError(f"no default generator.chunk_overhead for device type {device_type!r}; set the config key")
    return DEVICE_CHUNK_OVERHEAD[device_type]


def length_chunks(mask: torch.Tensor, overhead_tokens: int = DEFAULT_CHUNK_OVERHEAD) -> list[torch.Tensor]:
    """Row indices sorted by length (longest first), cut into the chunks that minimise the padded
    tokens computed plus ``overhead_tokens`` per chunk (exact dynamic programme over the cut points)."""
    order = torch.argsort(mask.sum(1), descending=True, stable=True)
    n = len(order)
    if overhead_tokens >= n * mask.shape[1]:  # a second call costs more than all the padding: one chunk
        return [order]
    lengths = mask.sum(1)[order].tolist()
    best, cut = [0.0] + [float("inf")] * n, [0] * (n + 1)
    for i in range(1, n + 1):
        for j in range(i):  # last chunk = sorted rows j..i-1, as wide as row j
            cost = best[j] + (i - j) * lengths[j] + overhead_tokens
            if cost < best[i]:
                best[i], cut[i] = cost, j
    bounds, i = [], n
    while i > 0:
        bounds.append((cut[i], i))
        i = cut[i]
    return [order[a:b] for a, b in reversed(bounds)]


def _cut(ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor):
    width = max(1, int(mask[rows].sum(1).max()))
    return ids[rows, :width], mask[rows, :width]


def encode(generator, input_ids: torch.Tensor, attention_mask: torch.Tensor,
           overhead_tokens: int = DEFAULT_CHUNK_OVERHEAD) -> torch.Tensor:
    """Encoder states [N, L, d] of the generator (zeros at padding), computed chunk by chunk."""
    encoder = generator.get_encoder()
    chunks = length_chunks(attention_mask, overhead_tokens)
    if len(chunks) == 1:
        return encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    out = None
    for rows in chunks:
        ids, mask = _cut(input_ids, attention_mask, rows)
        h = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        if out is None:
            out = h.new_zeros(input_ids.shape[0], input_ids.shape[1], h.shape[-1])
        out[rows, : h.shape[1]] = h
    return out


def _bart_like(generator) -> bool:
    """Logits = lm_head(decoder states) + final_logits_bias (BartForConditionalGeneration and kin)."""
    return (hasattr(generator, "model") and hasattr(generator, "final_logits_bias")
            and getattr(generator, "lm_head", None) is not None
            and not getattr(generator.config, "copy_mechanism", False))


def target_logprobs(generator, input_ids: torch.Tensor, attention_mask: torch.Tensor, target: torch.Tensor, pad_id: int,
                    smooth: bool = False, overhead_tokens: int = DEFAULT_CHUNK_OVERHEAD):
    """log p(target[n, t+1] | input n, target[n, :t+1]) [N, T] (0 where the next token is padding)
    and, if ``smooth``, the sum over the vocabulary of log p at each position [N, T]."""
    bart = _bart_like(generator)

    def run(rows, keep, used):
        ids, mask = _cut(input_ids, attention_mask, rows)
        if bart:
            h = generator.model(input_ids=ids, attention_mask=mask, decoder_input_ids=target[rows, :used]).last_hidden_state
            return generator.lm_head(h[keep]) + generator.final_logits_bias.to(h.dtype)[0]
        return generator(input_ids=ids, attention_mask=mask, decoder_input_ids=target[rows, :used]).logits[keep]

    return scored_logprobs(run, attention_mask, target, pad_id, smooth, overhead_tokens)


def scored_logprobs(run, attention_mask: torch.Tensor, target: torch.Tensor, pad_id: int, smooth: bool,
                    overhead_tokens: int):
    """:func:`target_logprobs` of any generator: ``run(rows, keep, used)`` gives the logits [M, V] of
    a length-sorted chunk of source ``rows`` at the target positions ``keep`` [len(rows), used] marks."""
    n, t = target.shape
    nxt = torch.cat([target[:, 1:], target.new_full((n, 1), pad_id)], 1)
    scored = nxt.ne(pad_id)  # positions whose prediction is scored
    used = int(scored.any(0).nonzero().max()) + 1 if bool(scored.any()) else 1  # trailing all-pad positions dropped
    rows_at, cols_at, lls, sms = [], [], [], []
    for rows in length_chunks(attention_mask, overhead_tokens):
        keep = scored[rows, :used]  # [n, used]
        logits = run(rows, keep, used).float()  # [M, V]
        lse = torch.logsumexp(logits, dim=-1)
        local, col = keep.nonzero(as_tuple=True)
        lls.append(logits.gather(-1, nxt[rows[local], col].unsqueeze(-1)).squeeze(-1) - lse)
        if smooth:
            sms.append(logits.sum(-1) - logits.shape[-1] * lse)
        rows_at.append(rows[local])
        cols_at.append(col)
    at = (torch.cat(rows_at), torch.cat(cols_at))
    ll = torch.zeros(n, t, device=target.device, dtype=torch.float32).index_put(at, torch.cat(lls))
    sm = torch.zeros(n, t, device=target.device, dtype=torch.float32).index_put(at, torch.cat(sms)) if smooth else None
    return ll, sm


def logits(generator, input_ids: torch.Tensor, attention_mask: torch.Tensor, decoder_input_ids: torch.Tensor,
           overhead_tokens: int = DEFAULT_CHUNK_OVERHEAD) -> torch.Tensor:
    """Full generator logits [N, T, V], computed on length-sorted chunks."""
    parts, order = [], []
    for rows in length_chunks(attention_mask, overhead_tokens):
        ids, mask = _cut(input_ids, attention_mask, rows)
        parts.append(generator(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids[rows]).logits)
        order.append(rows)
    inverse = torch.empty_like(torch.cat(order))
    inverse[torch.cat(order)] = torch.arange(len(inverse), device=inverse.device)
    return torch.cat(parts)[inverse]
