"""The seq2seq generator: a BART built from config (default) or a pretrained one, behind the
generator interface (:class:`Seq2SeqGenerator`). ``generator.copy`` adds a copy distribution over
the source tokens (:class:`CopyBart`), ``generator.copy_next`` reading on from the last copied
token (:func:`continuation`), ``generator.local_context`` and ``generator.exact_match`` its
encoder's inputs (:class:`LocalContextEncoder`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers import AutoModelForSeq2SeqLM, BartForConditionalGeneration
from transformers.modeling_outputs import Seq2SeqLMOutput
from transformers.models.bart.modeling_bart import BartEncoder

from rag.errors import ConfigError
from rag.models import seq2seq
from rag.models.interface import Generator, SourceStates

if TYPE_CHECKING:
    from rag.config_keys import Generator as GeneratorOptions


class LocalContextEncoder(BartEncoder):
    """BART's encoder, each token's embedding plus a convolution over the embeddings of the
    ``config.local_context`` tokens on either side (padding zeroed first); with
    ``config.query_separator`` (``generator.exact_match``) also a learnt embedding of :func:`exact_match`."""

    def __init__(self, config):
        super().__init__(config)
        d, r = config.d_model, config.local_context
        self.local_context = torch.nn.Conv1d(d, d, 2 * r + 1, padding=r)
        self.query_separator = tuple(config.query_separator or ())
        self.match_embed = torch.nn.Embedding(2, d) if self.query_separator else None

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, **kwargs):
        if inputs_embeds is None and input_ids is not None:
            e = self.embed_tokens(input_ids)
            if self.match_embed is not None:
                e = e + self.match_embed(exact_match(input_ids, attention_mask, self.query_separator))
            if attention_mask is not None:
                e = e * attention_mask[:, :, None].to(e.dtype)
            inputs_embeds, input_ids = e + self.local_context(e.transpose(1, 2)).transpose(1, 2), None
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)


def exact_match(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, separator: tuple[int, ...]) -> torch.Tensor:
    """(B, L) 0/1: whether a source token's id also occurs on the other side of the last
    ``separator`` (passage | query) of its row, DrQA's exact-match feature (Chen et al. 2017).
    A row without the separator is all 0; padding is 0 and matches nothing."""
    B, L = input_ids.shape
    n = len(separator)
    valid = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    pos = torch.arange(L, device=input_ids.device)
    if L >= n:
        sep = torch.tensor(separator, device=input_ids.device)
        hit = (input_ids.unfold(1, n, 1) == sep).all(-1) & valid.unfold(1, n, 1).all(-1)  # (B, L - n + 1): a separator starts here
        after = pos[: L - n + 1] + n  # where the query would start after a separator at each position
        last = torch.where(hit, after, torch.full_like(after, -1)).max(1).values  # -1: no separator
        query = pos[None, :] >= torch.where(last < 0, torch.full_like(last, L), last)[:, None]
    else:
        query = torch.zeros_like(valid)
    same = input_ids[:, :, None] == input_ids[:, None, :]
    across = query[:, :, None] != query[:, None, :]
    return (same & across & valid[:, None, :]).any(-1).long() * valid.long()


class CopyBart(BartForConditionalGeneration):
    """BART with a copy distribution over its source tokens (a pointer-generator, See et al. 2017).

    p(y_t) = g_t * p_vocab(y_t) + (1 - g_t) * sum over source positions i with x_i = y_t of a_ti,
    where a_t is an attention of the decoder state over the encoder states and g_t a learned gate;
    ``logits`` are the log of that mixture. Pass ``input_ids`` at every call (also with ``encoder_outputs``).

    With ``config.copy_next`` the decoder also reads on from the token it generated last (CopyNet's
    selective read, Gu et al. 2016): the mean encoder state of the positions that follow it
    (:func:`continuation`), projected, is added to the decoder state; their copy score gets a learnt bias."""

    def __init__(self, config):
        super().__init__(config)
        d = config.d_model
        if config.local_context:
            self.model.encoder = LocalContextEncoder(config)
        self.copy_query = torch.nn.Linear(d, d)
        self.copy_gate = torch.nn.Linear(d, 1)
        self.copy_next = config.copy_next
        if self.copy_next:
            self.next_read = torch.nn.Linear(d, d)
            self.next_bias = torch.nn.Parameter(torch.zeros(()))
            # the tokens that continue nothing (decoder start, separators, padding)
            self.next_specials = tuple(i for i in (config.pad_token_id, config.bos_token_id, config.eos_token_id,
                                                   config.decoder_start_token_id) if i is not None)
        self.post_init()
        if config.local_context:  # BART's initialisation leaves convolutions alone
            conv = self.model.encoder.local_context
            torch.nn.init.normal_(conv.weight, std=0.5 * (d * (2 * config.local_context + 1)) ** -0.5)
            torch.nn.init.zeros_(conv.bias)
        if self.copy_next:  # starts as the generator without it; pretraining learns how far to read on
            torch.nn.init.zeros_(self.next_read.weight)
            torch.nn.init.zeros_(self.next_read.bias)

    def _mixture(self, out, input_ids, attention_mask, decoder_input_ids):
        """The parts of the output distribution at each decoder state: log p_vocab [N, T, V], the copy
        attention over source positions [N, T, S] and the gate g_t [N, T, 1]."""
        h = out.last_hidden_state  # [N, T, d]
        enc = out.encoder_last_hidden_state  # [N, S, d]
        if self.copy_next:
            nxt = continuation(input_ids, attention_mask, decoder_input_ids, self.next_specials).to(enc.dtype)  # [N, T, S]
            h = h + self.next_read((nxt / nxt.sum(-1, keepdim=True).clamp_min(1)) @ enc)
        vocab_lp = torch.log_softmax((self.lm_head(h) + self.final_logits_bias.to(h.dtype)).float(), dim=-1)
        scores = (self.copy_query(h) @ enc.transpose(1, 2)).float() / h.shape[-1] ** 0.5  # [N, T, S]
        if self.copy_next:
            scores = scores + self.next_bias.float() * nxt.float()
        scores = scores.masked_fill(attention_mask[:, None, :].eq(0), float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        gate = torch.sigmoid(self.copy_gate(h).float())
        return vocab_lp, attn, gate

    def target_logprobs(self, targets, input_ids, attention_mask, decoder_input_ids, encoder_outputs,
                        past_key_values=None):
        """log p(targets[n, t]) [N, T] under ``forward``'s distribution, without the [N, T, V] mixture
        (the copy share of a target is the attention on the source positions that hold it)."""
        # past_key_values (the decoder start token's cache) is read; no cache is handed back
        out = self.model(attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                         encoder_outputs=encoder_outputs, past_key_values=past_key_values, use_cache=False)
        vocab_lp, attn, gate = self._mixture(out, input_ids, attention_mask, decoder_input_ids)
        copy = (attn * input_ids[:, None, :].eq(targets[:, :, None])).sum(-1)  # [N, T]
        return self._log_mix(gate[..., 0], vocab_lp.gather(-1, targets[:, :, None]).squeeze(-1).exp(), copy)

    @staticmethod
    def _log_mix(gate, p_vocab, p_copy):
        """log(g p_vocab + (1 - g) p_copy), floored at 1e-30: the output distribution's one formula."""
        return (gate * p_vocab + (1 - gate) * p_copy).clamp_min(1e-30).log()

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, encoder_outputs=None,
                past_key_values=None, labels=None, use_cache=None, **kwargs):
        if input_ids is None:
            raise ValueError("CopyBart copies from its source: pass input_ids (also together with encoder_outputs)")
        if decoder_input_ids is None and labels is not None:
            from transformers.models.bart.modeling_bart import shift_tokens_right

            decoder_input_ids = shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)
        if attention_mask is None:
            attention_mask = input_ids.ne(self.config.pad_token_id).long()
        out = self.model(input_ids=input_ids if encoder_outputs is None else None, attention_mask=attention_mask,
                         decoder_input_ids=decoder_input_ids, encoder_outputs=encoder_outputs,
                         past_key_values=past_key_values, use_cache=use_cache, **kwargs)
        vocab_lp, attn, gate = self._mixture(out, input_ids, attention_mask, decoder_input_ids)
        copy = vocab_lp.new_zeros(vocab_lp.shape).scatter_add_(
            2, input_ids[:, None, :].expand(-1, vocab_lp.shape[1], -1), attn)
        logits = self._log_mix(gate, vocab_lp.exp(), copy)
        loss = None
        if labels is not None:
            loss = torch.nn.functional.nll_loss(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
        return Seq2SeqLMOutput(loss=loss, logits=logits, past_key_values=out.past_key_values,
                               encoder_last_hidden_state=out.encoder_last_hidden_state)


def continuation(input_ids: torch.Tensor, attention_mask: torch.Tensor, decoder_input_ids: torch.Tensor,
                 specials: tuple[int, ...]) -> torch.Tensor:
    """(N, T, S) 0/1: ``input_ids[n, s - 1] == decoder_input_ids[n, t]`` (source position s follows
    the token generated last); special tokens continue nothing."""
    prev = torch.cat([input_ids.new_full((input_ids.shape[0], 1), -1), input_ids[:, :-1]], 1)  # [N, S]
    ok_src = attention_mask.bool() & ~torch.isin(prev, torch.tensor(specials + (-1,), device=prev.device))
    ok_dec = ~torch.isin(decoder_input_ids, torch.tensor(specials, device=prev.device))
    return (prev[:, None, :] == decoder_input_ids[:, :, None]) & ok_src[:, None, :] & ok_dec[:, :, None]


def query_separator(tokenizer) -> list[int]:
    """The token ids ``DOC_SEP`` (passage | query) takes inside a generator input."""
    from rag.models.seq2seq import DOC_SEP, TITLE_SEP

    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    head, tail, full = ids("a" + TITLE_SEP + "b"), ids("c"), ids("a" + TITLE_SEP + "b" + DOC_SEP + "c")
    if full[: len(head)] != head or full[len(full) - len(tail):] != tail or len(full) <= len(head) + len(tail):
        raise ConfigError("generator.exact_match: the tokenizer does not keep the passage | query separator apart")
    return full[len(head) : len(full) - len(tail)]


# what a saved CopyBart's config.json holds besides copy_mechanism (build_bart writes them)
COPY_SETTINGS = ("copy_next", "local_context", "query_separator")


def scratch_config(vocab_size: int, d_model: int, layers: int, heads: int, ffn: int, max_source_len: int,
                   max_target_len: int, **more):
    """The BART configuration of a scratch generator of these sizes (``generator.*``); ``more``: further
    BartConfig fields."""
    from transformers import BartConfig

    return BartConfig(vocab_size=vocab_size, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
                      encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn,
                      decoder_ffn_dim=ffn, max_position_embeddings=max(max_source_len, max_target_len) + 8, **more)


def build_bart(tokenizer, g: GeneratorOptions):
    """A BART of the configured size (``generator.*``), a :class:`CopyBart` with ``generator.copy``."""
    cfg = scratch_config(
        len(tokenizer), g.d_model, g.layers, g.heads, g.ffn, g.max_source_len, g.max_target_len,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id, forced_bos_token_id=None, dropout=g.dropout,
        attention_dropout=0.0, scale_embedding=False,
        init_std=g.d_model ** -0.5,
        copy_mechanism=g.copy, copy_next=g.copy_next, local_context=g.local_context,
        query_separator=query_separator(tokenizer) if g.exact_match else None,
    )
    if cfg.local_context and not cfg.copy_mechanism:
        raise ConfigError("config key 'generator.local_context' needs generator.copy: true (the copy generator's encoder has it)")
    if cfg.copy_next and not cfg.copy_mechanism:
        raise ConfigError("config key 'generator.copy_next' needs generator.copy: true (it reads on from a copied token)")
    if cfg.query_separator and not cfg.local_context:
        raise ConfigError("config key 'generator.exact_match' needs generator.local_context > 0 (the local-context encoder has it); "
                          "set exact_match: false with local_context: 0")
    return CopyBart(cfg) if cfg.copy_mechanism else BartForConditionalGeneration(cfg)


class Seq2SeqStates(SourceStates):
    """Encoder states [N, L, d], attention mask [N, L] and source tokens [N, L] (a copying
    generator reads them at every step)."""

    def __init__(self, hidden: torch.Tensor, mask: torch.Tensor, ids: torch.Tensor):
        self.hidden, self.mask, self.ids = hidden, mask, ids

    def select(self, rows: torch.Tensor) -> "Seq2SeqStates":
        return Seq2SeqStates(self.hidden[rows], self.mask[rows], self.ids[rows])


class Seq2SeqGenerator(Generator):
    """An encoder-decoder (BART, :class:`CopyBart`): the source is ``title / text // question`` as
    transformers' RagRetriever builds it, the target the decoder's input from its start token on."""

    auto_class, copy_class, copy_settings = AutoModelForSeq2SeqLM, CopyBart, COPY_SETTINGS
    scratch_what = "BART from scratch"
    scratch_config = staticmethod(scratch_config)

    @classmethod
    def from_scratch(cls, tokenizer, g, device) -> "Seq2SeqGenerator":
        # pretraining targets are not truncated
        return cls(build_bart(tokenizer, g).to(device), tokenizer, g.max_source_len, None)

    @classmethod
    def load(cls, path, device, max_source_len, max_target_len) -> "Seq2SeqGenerator":
        model, tok = cls.load_model(path, device)
        return cls(model, tok, max_source_len, max_target_len)

    def source_text(self, title: str, text: str, question: str) -> str:
        return seq2seq.format_input(title, text, question)

    def question_text(self, question: str) -> str:
        return question

    def tokenize_targets(self, targets: list[str]) -> torch.Tensor:
        enc = self.tokenizer(targets, padding=True, truncation=self.max_target_len is not None,
                             max_length=self.max_target_len, return_tensors="pt")
        ids = enc["input_ids"]
        bos = self.tokenizer.bos_token_id
        if bos is not None and not bool((ids[:, 0] == bos).all()):
            ids = torch.cat([ids.new_full((ids.shape[0], 1), bos), ids], 1)
        return ids.to(self.device)

    def target_logprobs(self, src, mask, target, pad_id, smooth, overhead):
        return seq2seq.target_logprobs(self.model, src, mask, target, pad_id, smooth, overhead)

    def logits(self, src, mask, target, overhead):
        return seq2seq.logits(self.model, src, mask, target, overhead)

    def encode(self, src, mask, overhead) -> Seq2SeqStates:
        return Seq2SeqStates(seq2seq.encode(self.model, src, mask, overhead), mask, src)

    def step(self, states: Seq2SeqStates, inputs, past):
        from transformers.modeling_outputs import BaseModelOutput

        out = self.model(input_ids=states.ids, encoder_outputs=BaseModelOutput(last_hidden_state=states.hidden),
                         attention_mask=states.mask, decoder_input_ids=inputs, past_key_values=past, use_cache=True)
        return out.logits[:, -1], out.past_key_values

    def hypothesis_logprobs(self, states: Seq2SeqStates, docs, expand, tgt) -> torch.Tensor:
        """The decoder start token runs once per document, then its cache is copied to every
        hypothesis row and the hypotheses' tokens run on it."""
        from transformers.modeling_outputs import BaseModelOutput

        from rag.models.marginal import token_logprobs

        gen, width = self.model, tgt.shape[1]
        rows = docs[expand]
        with self.autocast():
            first = gen(input_ids=states.ids[docs], encoder_outputs=BaseModelOutput(last_hidden_state=states.hidden[docs]),
                        attention_mask=states.mask[docs],
                        decoder_input_ids=torch.full((len(docs), 1), self.tokenizer.bos_token_id, device=docs.device),
                        use_cache=width > 1)
        ll = torch.zeros(len(rows), width)
        ll[:, 0] = torch.log_softmax(first.logits[:, 0].float(), dim=-1)[expand].gather(-1, tgt[:, :1]).squeeze(-1).cpu()
        if width > 1:
            cache = first.past_key_values
            cache.reorder_cache(expand)
            kwargs = dict(attention_mask=states.mask[rows], decoder_input_ids=tgt[:, :-1],
                          encoder_outputs=BaseModelOutput(last_hidden_state=states.hidden[rows]), past_key_values=cache)
            with self.autocast():
                if hasattr(gen, "target_logprobs"):
                    rest = gen.target_logprobs(tgt[:, 1:], states.ids[rows], **kwargs).float()
                else:
                    rest, _ = token_logprobs(gen(input_ids=states.ids[rows], **kwargs).logits.float(), tgt[:, 1:], False)
            ll[:, 1:] = rest.cpu()
        return ll
