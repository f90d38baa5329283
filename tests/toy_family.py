"""A toy third generator family, in one file (tests/test_causal_generator.py registers it).

p(y_t | x, y_<t) = softmax(W (mean of the source's embeddings + embedding of y_{t-1})): a
first-order model of the target conditioned on a bag of source words, small enough to check by
hand, and nothing like an encoder-decoder or a causal LM.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rag.models.interface import Generator, SourceStates


class ToyModel(torch.nn.Module):
    def __init__(self, vocab: int, d: int = 8, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(vocab, d)
        self.out = torch.nn.Linear(d, vocab)
        with torch.no_grad():
            self.embed.weight.mul_(2.0)

    def get_output_embeddings(self):
        return self.out

    def context(self, src: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask[:, :, None].float()
        return (self.embed(src) * m).sum(1) / m.sum(1)  # [N, d]

    def logits(self, ctx: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        return self.out(ctx[:, None] + self.embed(prev))  # [N, t, V]


class ToyStates(SourceStates):
    def __init__(self, ctx: torch.Tensor):
        self.ctx = ctx

    def select(self, rows):
        return ToyStates(self.ctx[rows])


class ToyGenerator(Generator):
    @classmethod
    def load(cls, path, device, max_source_len, max_target_len):
        model, tok = torch.load(Path(path) / "toy.pt", weights_only=False)
        return cls(model.to(device), tok, max_source_len, max_target_len)

    def source_text(self, title, text, question):
        return f"{title} {text} {question}"

    def question_text(self, question):
        return question

    def tokenize_sources(self, texts):
        enc = self.tokenizer(texts, padding=True, return_tensors="pt")
        return enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)

    def tokenize_targets(self, targets):
        return self.tokenizer(targets, padding=True, return_tensors="pt")["input_ids"].to(self.device)

    def logits(self, src, mask, target, overhead):
        return self.model.logits(self.model.context(src, mask), target)

    def target_logprobs(self, src, mask, target, pad_id, smooth, overhead):
        lp = torch.log_softmax(self.logits(src, mask, target, overhead).float(), -1)
        nxt = torch.cat([target[:, 1:], target.new_full((target.shape[0], 1), pad_id)], 1)
        keep = nxt.ne(pad_id)
        ll = lp.gather(-1, nxt[:, :, None])[..., 0] * keep
        return ll, (lp.sum(-1) * keep if smooth else None)

    def encode(self, src, mask, overhead):
        return ToyStates(self.model.context(src, mask))

    def step(self, states, inputs, past):
        return self.model.logits(states.ctx, inputs[:, -1:])[:, -1], ()

    def reorder(self, past, order):
        return past

    def hypothesis_logprobs(self, states, docs, expand, tgt):
        bos = tgt.new_full((tgt.shape[0], 1), self.tokenizer.bos_token_id)
        lp = torch.log_softmax(self.model.logits(states.ctx[docs[expand]], torch.cat([bos, tgt[:, :-1]], 1)).float(), -1)
        return lp.gather(-1, tgt[:, :, None])[..., 0].cpu()
