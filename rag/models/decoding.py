"""Beam search over any next-token distribution (RAG-Token's marginal, RAG-Sequence's per-document
beams, the BART baseline), and ``decode_ids``, a found sequence's text. Scores are summed
log-probabilities without length normalisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

import torch


@dataclass
class Hypothesis:
    tokens: tuple[int, ...]  # generated tokens after BOS, EOS included when finished
    score: float  # sum of log-probabilities


def beam_search(step_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], batch_size: int, beams: int,
                max_new_tokens: int, bos_id: int, eos_id: int, return_all: bool = False) -> list[list[Hypothesis]]:
    """Search ``batch_size`` independent problems. step_fn(prefix_ids [N, t], owner [N]) -> log-probs
    [N, V], ``owner`` each prefix row's problem. Returns, per problem, its finished hypotheses
    (best first; all of them when return_all)."""
    live = [[((bos_id,), 0.0)] for _ in range(batch_size)]
    done: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
    for _ in range(max_new_tokens):
        rows, owners = [], []
        for b, hyps in enumerate(live):
            for toks, _ in hyps:
                rows.append(toks)
                owners.append(b)
        if not rows:
            break
        prefix = torch.tensor(rows, dtype=torch.long)
        logp = step_fn(prefix, torch.tensor(owners, dtype=torch.long)).float()
        width = min(2 * beams, logp.shape[-1])
        top_lp, top_ix = logp.topk(width, dim=-1)
        new_live = [[] for _ in range(batch_size)]
        cand: list[list[tuple[float, tuple[int, ...]]]] = [[] for _ in range(batch_size)]
        r = 0
        for b, hyps in enumerate(live):
            for toks, score in hyps:
                for lp, ix in zip(top_lp[r].tolist(), top_ix[r].tolist()):
                    cand[b].append((score + lp, toks + (ix,)))
                r += 1
        for b in range(batch_size):
            if not cand[b]:
                continue
            cand[b].sort(key=lambda c: -c[0])
            # as transformers: a finished candidate counts when it ranks within the top `beams`;
            # the live beam is refilled with the best unfinished candidates
            for rank, (score, toks) in enumerate(cand[b]):
                if toks[-1] == eos_id:
                    if rank < beams:
                        done[b].append(Hypothesis(toks[1:], score))
                elif len(new_live[b]) < beams:
                    new_live[b].append((toks, score))
                if rank >= beams and len(new_live[b]) >= beams:
                    break
            # stop a problem once its best finished hypothesis beats every live one (scores only fall)
            if done[b] and new_live[b] and not return_all:
                best_done = max(h.score for h in done[b])
                if best_done >= max(s for _, s in new_live[b]) and len(done[b]) >= beams:
                    new_live[b] = []
        live = new_live
    for b in range(batch_size):
        for toks, score in live[b]:  # unfinished at the length limit
            done[b].append(Hypothesis(toks[1:], score))
        done[b].sort(key=lambda h: -h.score)
        if not return_all:
            done[b] = done[b][:beams]
    return done


# ------------------------------------------------------------------------------------ ids -> text


@lru_cache(maxsize=1)
def _byte_level_chars() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's ``bytes_to_unicode``) read backwards: char -> byte."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {c: b for b, c in bytes_to_unicode().items()}


def _is_byte_level(tokenizer) -> bool:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    from tokenizers import decoders

    return isinstance(backend.decoder, decoders.ByteLevel)


def decode_ids(tokenizer, ids: Sequence[int]) -> str:
    """The text of one generated sequence (special tokens left out). A byte-level BPE tokenizer's
    bytes are joined and decoded once, bytes that form no complete UTF-8 character dropped (never
    U+FFFD); other tokenizers: ``tokenizer.decode``."""
    ids = [int(i) for i in ids]
    special = set(tokenizer.all_special_ids)
    ids = [i for i in ids if i not in special]
    if not _is_byte_level(tokenizer):
        return tokenizer.decode(ids, skip_special_tokens=True)
    chars = _byte_level_chars()
    added = {i: t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
    data = bytearray()
    for i, token in zip(ids, tokenizer.convert_ids_to_tokens(ids)):
        if i in added:
            data += added[i].encode("utf-8")
        elif token is not None:
            raw = [chars.get(c) for c in token]
            # a token outside the byte alphabet is taken as its text, as the tokenizers library does
            data += bytes(raw) if None not in raw else token.encode("utf-8")
    text = data.decode("utf-8", errors="ignore")
    if getattr(tokenizer, "clean_up_tokenization_spaces", False):
        text = tokenizer.clean_up_tokenization(text)
    return text
