"""The seq2seq generator: a small BART built from config (default) or a pretrained one.

Default (miniworld): a byte-level BPE tokenizer trained on the corpus (so invented names are
one or two tokens) and a BART of the configured size, pretrained once on the corpus by the
``pretrain`` rule before every task x variant fine-tune starts from it, as the paper
fine-tuned a pretrained BART. Paper scale: ``generator.init: pretrained`` with
``name_or_path: facebook/bart-large``: the same loading code as any saved checkpoint.

Pretraining objectives, both laid out exactly like a RAG generator input
(``title / text // query``) with the span as the target:

- salient-span cloze with the passage in context (REALM's salient span masking, Guu et al.
  2020, with the passage given): one of the passage's sentences with a salient span (a run of
  capitalised words or a number, or the final word) replaced by ``<mask>`` is the query;
- restated-fact cloze (:class:`Restatements`, miniworld): a training entity's fact asked in
  another phrasing than its passage's, with a random value swapped into the passage.

They teach the small model to find the sentence a query points at and copy from it: the
reading skill RAG needs. BART's own denoising objective (reconstruct the whole text) was
measured to learn this far slower. ``generator.copy`` adds a copy distribution over the source
tokens (:class:`CopyBart`).
"""

from __future__ import annotations

import logging
import random
import re
from pathlib import Path

import torch
from transformers import BartForConditionalGeneration
from transformers.modeling_outputs import Seq2SeqLMOutput
from transformers.models.bart.modeling_bart import BartEncoder

from rag.errors import ConfigError
from rag.tasks import FEVER3_LABELS

log = logging.getLogger(__name__)

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def label_token(label: str) -> str:
    """The single output token a classification label maps to (FEVER)."""
    return "<" + label.replace(" ", "_") + ">"


def train_tokenizer(texts, vocab_size: int, extra_tokens: list[str], out_dir: Path):
    """Byte-level BPE trained on ``texts`` (lower-cased), wrapped as a BART tokenizer."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIALS + extra_tokens,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", mask_token="<mask>", additional_special_tokens=extra_tokens)
    fast.save_pretrained(out_dir)
    return fast


def save_tokenizer(tokenizer, folder: str | Path, max_length: int) -> None:
    """Save ``tokenizer`` to ``folder`` in the state the run tokenizes its inputs with: padding to
    the longest in the batch, truncation at ``max_length``. A fast tokenizer's tokenizer.json
    records the padding and truncation of its last call, so without this a run resumed at its last
    step (no call made) wrote another file than the uninterrupted run."""
    if getattr(tokenizer, "is_fast", False):
        from transformers.tokenization_utils_base import TruncationStrategy
        from transformers.utils import PaddingStrategy

        tokenizer.set_truncation_and_padding(PaddingStrategy.LONGEST, TruncationStrategy.LONGEST_FIRST,
                                             max_length=max_length, stride=0, pad_to_multiple_of=None,
                                             padding_side=None)
    tokenizer.save_pretrained(folder)


class LocalContextEncoder(BartEncoder):
    """BART's encoder, each token's embedding plus a convolution over the embeddings of the
    ``config.local_context`` tokens on either side of it.

    A token then enters the first layer knowing the words around it: a value knows the phrase
    that states it ("is governed by Vroux", "the Gledeix flows through"). Learnt positions give
    attention no such bias, and a small generator from scratch had to discover it: measured on
    miniworld with re-rendered restated-fact cloze, held-out restatements read after 1,000
    pretraining steps: 99 % with 3 tokens on either side (the default), 90 % with a causal
    convolution over the last 4 (a value stated before its phrase, "the Gledeix flows through",
    was then read half the time), 28 % after 1,500 steps without.
    Padding embeddings are zeroed before the convolution, so a row's states do not depend on
    how much padding its batch adds.

    With ``config.query_separator`` (the token ids of ``DOC_SEP``; ``generator.exact_match``),
    each embedding also gets a learnt embedding of :func:`exact_match`: whether its token occurs
    on the other side of the passage | query separator. A claim's value is then seen in the
    passage or not: measured on miniworld, FEVER-3 RAG-Sequence test accuracy 80 % with it,
    48 % without (given the gold passage, SUPPORTS vs REFUTES was at chance without it, even
    with each claim's SUPPORTS and REFUTES versions in one batch).
    """

    def __init__(self, config):
        super().__init__(config)
        d, r = config.d_model, config.local_context
        self.local_context = torch.nn.Conv1d(d, d, 2 * r + 1, padding=r)
        self.query_separator = tuple(getattr(config, "query_separator", None) or ())
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
    ``separator`` (the token ids of ``DOC_SEP``: passage | query) of its row, DrQA's exact-match
    feature (Chen et al. 2017). A row without the separator is all passage: all 0. Padding is 0
    and matches nothing."""
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
    where a_t is an attention of the decoder state over the encoder states and g_t a learned gate.
    ``logits`` are the log of that mixture (normalised log-probabilities, so log_softmax leaves
    them unchanged and every RAG marginalisation and decoder of the project applies as is).
    The source tokens are needed at every decoder call: pass ``input_ids`` with
    ``encoder_outputs``. A small from-scratch generator learns to copy an answer out of a
    passage far faster with it (measured on miniworld: cloze loss 3.0 after 200 pretraining
    steps with it, 8.3 without); ``generator.copy`` turns it on.
    """

    def __init__(self, config):
        super().__init__(config)
        d = config.d_model
        if getattr(config, "local_context", 0):
            self.model.encoder = LocalContextEncoder(config)
        self.copy_query = torch.nn.Linear(d, d)
        self.copy_gate = torch.nn.Linear(d, 1)
        self.post_init()
        if getattr(config, "local_context", 0):  # BART's initialisation leaves convolutions alone
            conv = self.model.encoder.local_context
            torch.nn.init.normal_(conv.weight, std=0.5 * (d * (2 * config.local_context + 1)) ** -0.5)
            torch.nn.init.zeros_(conv.bias)

    def _mixture(self, out, attention_mask):
        """The parts of the output distribution at each decoder state: log p_vocab [N, T, V], the
        copy attention over source positions [N, T, S] and the gate g_t [N, T, 1] (the share
        generated from the vocabulary)."""
        h = out.last_hidden_state  # [N, T, d]
        enc = out.encoder_last_hidden_state  # [N, S, d]
        vocab_lp = torch.log_softmax((self.lm_head(h) + self.final_logits_bias.to(h.dtype)).float(), dim=-1)
        scores = (self.copy_query(h) @ enc.transpose(1, 2)).float() / h.shape[-1] ** 0.5  # [N, T, S]
        scores = scores.masked_fill(attention_mask[:, None, :].eq(0), float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        gate = torch.sigmoid(self.copy_gate(h).float())
        return vocab_lp, attn, gate

    def target_logprobs(self, targets, input_ids, attention_mask, decoder_input_ids, encoder_outputs,
                        past_key_values=None):
        """log p(targets[n, t]) [N, T] under the distribution ``forward``'s logits give at each
        decoder position, without the [N, T, V] mixture: the copy share of a target is the
        attention on the source positions that hold it (thorough decoding's rescoring)."""
        # past_key_values (the decoder start token's cache) is read; no cache is handed back
        out = self.model(attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                         encoder_outputs=encoder_outputs, past_key_values=past_key_values, use_cache=False)
        vocab_lp, attn, gate = self._mixture(out, attention_mask)
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
        vocab_lp, attn, gate = self._mixture(out, attention_mask)
        copy = vocab_lp.new_zeros(vocab_lp.shape).scatter_add_(
            2, input_ids[:, None, :].expand(-1, vocab_lp.shape[1], -1), attn)
        logits = self._log_mix(gate, vocab_lp.exp(), copy)
        loss = None
        if labels is not None:
            loss = torch.nn.functional.nll_loss(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
        return Seq2SeqLMOutput(loss=loss, logits=logits, past_key_values=out.past_key_values,
                               encoder_last_hidden_state=out.encoder_last_hidden_state)


def query_separator(tokenizer) -> list[int]:
    """The token ids ``DOC_SEP`` (passage | query) takes inside a generator input."""
    from rag.models.rag import DOC_SEP, TITLE_SEP

    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    head, tail, full = ids("a" + TITLE_SEP + "b"), ids("c"), ids("a" + TITLE_SEP + "b" + DOC_SEP + "c")
    if full[: len(head)] != head or full[len(full) - len(tail):] != tail or len(full) <= len(head) + len(tail):
        raise ConfigError("generator.exact_match: the tokenizer does not keep the passage | query separator apart")
    return full[len(head) : len(full) - len(tail)]


def build_bart(tokenizer, g: dict):
    from transformers import BartConfig

    cfg = BartConfig(
        vocab_size=len(tokenizer), d_model=g["d_model"], encoder_layers=g["layers"], decoder_layers=g["layers"],
        encoder_attention_heads=g["heads"], decoder_attention_heads=g["heads"], encoder_ffn_dim=g["ffn"],
        decoder_ffn_dim=g["ffn"], max_position_embeddings=max(g["max_source_len"], g["max_target_len"]) + 8,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id, forced_bos_token_id=None, dropout=g.get("dropout", 0.1),
        attention_dropout=0.0, scale_embedding=False,
        # BART's default init_std 0.02 suits d_model 1024; at small widths the embeddings carry too
        # little signal and training stalls at the unigram distribution (measured: no copying after
        # 1,000 steps at 0.02, copying learned in 150 steps at 0.1). Scale it with the width.
        init_std=g.get("init_std", g["d_model"] ** -0.5),
        copy_mechanism=bool(g.get("copy", False)),
        local_context=int(g.get("local_context", 0)),
        query_separator=query_separator(tokenizer) if g.get("exact_match") else None,
    )
    if cfg.local_context and not cfg.copy_mechanism:
        raise ConfigError("config key 'generator.local_context' needs generator.copy: true (the copy generator's encoder has it)")
    if cfg.query_separator and not cfg.local_context:
        raise ConfigError("config key 'generator.exact_match' needs generator.local_context > 0 (the local-context encoder has it); "
                          "set exact_match: false with local_context: 0")
    return CopyBart(cfg) if cfg.copy_mechanism else BartForConditionalGeneration(cfg)


def load_generator(path: str | Path, device: str = "cpu"):
    """Load a saved (or hub-named) seq2seq generator and its tokenizer."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(path))
        copy = getattr(AutoConfig.from_pretrained(str(path)), "copy_mechanism", False)
        model = (CopyBart if copy else AutoModelForSeq2SeqLM).from_pretrained(str(path))
    except OSError as exc:
        raise ConfigError(f"cannot load generator {str(path)!r}: {exc}") from None
    return model.to(device), tok


def ensure_label_tokens(tokenizer, model, labels: list[str]) -> list[int]:
    """Make every label one token (adding tokens and resizing embeddings where needed)."""
    toks = [label_token(lb) for lb in labels]
    missing = [t for t in toks if tokenizer.convert_tokens_to_ids(t) in (None, tokenizer.unk_token_id)]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": list(tokenizer.additional_special_tokens) + missing})
        model.resize_token_embeddings(len(tokenizer))
    return [tokenizer.convert_tokens_to_ids(t) for t in toks]


# ---------------------------------------------------------------------------- pretraining data
_SENT = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\S+")


def salient_spans(sentence: str) -> list[tuple[int, int]]:
    """Character spans of salient words: runs of capitalised words or numbers (not the first word), and the last word."""
    words = [(m.start(), m.end(), m.group().rstrip(".,;:!?")) for m in _WORD.finditer(sentence)]
    spans, run = [], None
    for i, (s, e, w) in enumerate(words):
        salient = i > 0 and w and (w[0].isupper() or w.isdigit())
        if salient:
            run = (run[0], s + len(w)) if run else (s, s + len(w))
        elif run:
            spans.append(run)
            run = None
    if run:
        spans.append(run)
    if words:
        s, _, w = words[-1]
        if w and not any(a <= s < b for a, b in spans):
            spans.append((s, s + len(w)))
    return spans


def _window(text: str, sentences: list[str], i: int, rng: random.Random, max_context: int | None) -> str:
    """The passage, or a window of 1..``max_context`` of its sentences holding sentence ``i``."""
    if max_context is None or max_context >= len(sentences):
        return text
    w = rng.randint(1, max_context)
    lo = rng.randint(max(0, i - w + 1), min(i, len(sentences) - w))
    return " ".join(sentences[lo : lo + w])


def cloze_example(title: str, text: str, rng: random.Random, mask_token: str = "<mask>", max_context: int | None = None):
    """(generator input, target span): one sentence of the passage with a salient span masked is
    the query; the context is the passage, or a window of at most ``max_context`` of its
    sentences around the masked one (the pretraining curriculum)."""
    from rag.models.rag import format_input

    sentences = [s for s in _SENT.split(text) if s.strip()]
    order = list(range(len(sentences)))
    rng.shuffle(order)
    for i in order:
        sent = sentences[i]
        spans = salient_spans(sent)
        if spans:
            s, e = rng.choice(spans)
            query = sent[:s] + mask_token + sent[e:]
            return format_input(title, _window(text, sentences, i, rng, max_context), query), sent[s:e]
    return None


class Restatements:
    """Restated-fact cloze (miniworld): a passage of a training entity, re-rendered so that only
    reading can answer, and one of its facts asked in another phrasing with ``<mask>`` for the
    value; the target is the value the re-rendered passage states.

    Re-rendering: every fact sentence of the passage gets a random value of its attribute (a
    counterfactual) in a random phrasing of its relation, and the passage's sentences are
    shuffled. The values keep the answer from being memorised; the phrasings and the order keep
    the model from memorising where in each training passage a relation sits (with values
    swapped but each passage's wording and order fixed, 2,500 pretraining steps read 85 % of
    training restatements and 45 % of held-out ones: the model had learnt the training
    passages' layouts). ``questions`` (record key, optional): the relation asked as the tasks
    ask it, e.g. "who is the leader of X", also drawn as queries."""

    def __init__(self, records: list[dict], passage_ids: list[str]):
        row = {pid: i for i, pid in enumerate(passage_ids)}
        missing = [r["passage"] for r in records if r["passage"] not in row]
        if missing:
            raise ConfigError(f"restatements name passages the corpus lacks, e.g. {missing[0]!r}")
        self.records = [r for r in records if r["queries"]]
        if not self.records:
            raise ConfigError("restatements: no fact has a second phrasing to ask it with")
        self.row = [row[r["passage"]] for r in self.records]
        self.siblings: dict[int, list[int]] = {}  # passage row -> its records
        for i, j in enumerate(self.row):
            self.siblings.setdefault(j, []).append(i)
        values: dict[str, set] = {}
        for r in self.records:
            values.setdefault(r["attribute"], set()).add(r["value"])
        self.values = {a: sorted(v) for a, v in values.items()}
        self.claimable = [i for i, r in enumerate(self.records) if r.get("claims")]
        self.sentence_records = [i for i, r in enumerate(self.records) if r.get("sentences")]

    def _render(self, i: int, texts: list[str], rng: random.Random):
        """The passage of record ``i`` re-rendered: (shuffled sentences, the value record ``i`` now
        has, its sentence, the phrasing it is stated in)."""
        text = texts[self.row[i]]
        for j in self.siblings[self.row[i]]:  # every fact of the passage, so no re-rendered one stands out
            r = self.records[j]
            stated = r["sentence"].format(v=r["value"])
            if stated not in text:
                raise ConfigError(f"restatements: passage {r['passage']!r} does not state {stated!r} (a corpus of another world?)")
            phrasing = rng.choice([r["sentence"]] + r["queries"])
            v = self._other_value(r["attribute"], r["value"], rng)
            text = text.replace(stated, phrasing.format(v=v), 1)
            if j == i:
                value, swapped, used = v, phrasing.format(v=v), phrasing
        sentences = [x for x in _SENT.split(text) if x.strip()]
        rng.shuffle(sentences)
        return sentences, value, swapped, used

    def _other_value(self, attribute: str, value: str, rng: random.Random) -> str:
        return rng.choice([v for v in self.values[attribute] if v != value] or [value])

    @staticmethod
    def _input(title: str, sentences: list[str], swapped: str, query: str, rng: random.Random, max_context: int | None):
        from rag.models.rag import format_input

        at = next(j for j, x in enumerate(sentences) if swapped in x)
        return format_input(title, _window(" ".join(sentences), sentences, at, rng, max_context), query)

    def example(self, titles: list[str], texts: list[str], rng: random.Random, mask_token: str = "<mask>",
                max_context: int | None = None):
        """(generator input, target); ``max_context``: the curriculum's window of sentences, as cloze_example."""
        i = rng.randrange(len(self.records))
        sentences, value, swapped, used = self._render(i, texts, rng)
        r = self.records[i]
        asks = [q for q in [r["sentence"]] + r["queries"] if q != used] + list(r.get("questions", ()))
        return self._input(titles[self.row[i]], sentences, swapped, rng.choice(asks).format(v=mask_token), rng, max_context), value

    def sentence(self, titles: list[str], texts: list[str], rng: random.Random, max_context: int | None = None):
        """(generator input, target): a fact of a re-rendered passage restated as a whole sentence
        (record key ``sentences``: an MS-MARCO answer, a Jeopardy clue), so the generator also
        learns to write sentences around what it reads, not only to copy a span."""
        if not self.sentence_records:
            raise ConfigError("restatements: no record has sentences to write (records of an older corpus rule?)")
        i = rng.choice(self.sentence_records)
        sentences, value, swapped, _ = self._render(i, texts, rng)
        query, target = rng.choice(self.records[i]["sentences"])
        return self._input(titles[self.row[i]], sentences, swapped, query, rng, max_context), target.format(v=value)

    def claim(self, titles: list[str], texts: list[str], rng: random.Random, labels: tuple[str, ...],
              max_context: int | None = None):
        """(generator input, label token): a claim about a re-rendered passage's entity, as FEVER
        states claims (record key ``claims``), labelled by what the passage says: its value
        (SUPPORTS), another value (REFUTES), or an attribute the passage does not state (NOT
        ENOUGH INFO, record key ``unstated``: [attribute, claim] pairs)."""
        if not self.claimable:
            raise ConfigError("restatements: no record has FEVER-style claims (records of an older corpus rule?)")
        i = rng.choice(self.claimable)
        sentences, value, swapped, _ = self._render(i, texts, rng)
        r = self.records[i]
        label = rng.choice([lb for lb in labels if lb != "NOT ENOUGH INFO" or r.get("unstated")])
        if label == "NOT ENOUGH INFO":
            attribute, template = rng.choice(r["unstated"])
            claim = template.format(v=rng.choice(self.values[attribute]))
        else:
            v = value if label == "SUPPORTS" else self._other_value(r["attribute"], value, rng)
            claim = rng.choice(r["claims"]).format(v=v)
        return self._input(titles[self.row[i]], sentences, swapped, claim, rng, max_context), label_token(label)


def curriculum_window(step: int, steps: int, sentences: int = 12) -> int | None:
    """Context size (sentences) of pretraining step ``step``: copying is learned first on one or
    two sentences, then the window grows to the whole passage by half of the steps (measured: from
    scratch, the small generator learns no copying from whole 100-word passages in 1,000 steps)."""
    half = max(1, steps // 2)
    if step >= half:
        return None
    return 1 + (sentences * step) // half


PRETRAIN_LOG_EVERY = 50  # steps per point of the pretraining loss curve
PRETRAIN_CHECKPOINT_EVERY = 100


def pretrain(model, tokenizer, titles: list[str], texts: list[str], steps: int, batch_size: int, lr: float,
             max_source_len: int, seed: int, log_fn=None, progress: bool = True, precision: str = "fp32",
             chunk_overhead: int | None = None, restatements: Restatements | None = None,
             restatement_share: float = 0.0, claim_share: float = 0.0, sentence_share: float = 0.0,
             ckpt_path: str | Path | None = None, identity: dict | None = None,
             checkpoint_every: int = PRETRAIN_CHECKPOINT_EVERY, stop_after: int | None = None) -> list[float]:
    """Pretrain ``model`` (on the device it is on) with the cloze objective, and a share
    ``restatement_share`` of each batch from ``restatements`` when given, of which a share
    ``claim_share`` are claims to label (:meth:`Restatements.claim`, FEVER's three labels) and a
    share ``sentence_share`` facts to restate as a sentence (:meth:`Restatements.sentence`). ``precision``: the forward
    runs under that autocast (fp16 with a gradient scaler), the loss in fp32; ``chunk_overhead``:
    generator.chunk_overhead (None: the device's default).

    The loop is the fine-tuning loop (:func:`rag.training.optimize`); with ``ckpt_path`` it is
    resumable like fine-tuning (:class:`rag.training.Checkpoint`, written under ``identity`` and
    these arguments): the checkpoint also holds the batch sampler's RNG state, so a run stopped
    and resumed ends with the weights and losses of an uninterrupted one. ``stop_after`` ends
    this call after that many steps (tests use it to play an interruption)."""
    from rag import precision as P
    from rag.models.seq2seq import chunk_overhead_for, target_logprobs
    from rag.training import Checkpoint, optimize

    device = next(model.parameters()).device
    overhead = chunk_overhead_for(device.type, chunk_overhead)
    scaler = P.grad_scaler(device.type, precision)

    rng = random.Random(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100) * max(0.0, 1 - s / max(1, steps)))
    start, losses, ckpt = 0, [], None
    if ckpt_path is not None:
        run = {"steps": steps, "batch_size": batch_size, "lr": lr, "max_source_len": max_source_len, "seed": seed,
               "precision": precision, "restatement_share": restatement_share, "claim_share": claim_share,
               "sentence_share": sentence_share, "n": len(texts), **(identity or {})}
        ckpt = Checkpoint(ckpt_path, run, {"generator": model})
        start, losses, extra = ckpt.load(opt, sched, scaler)
        if start:
            version, state, gauss = extra["sampler_rng"]
            rng.setstate((version, tuple(state), gauss))
    model.train()

    def step_loss(step: int) -> torch.Tensor:
        pairs = []
        window = curriculum_window(step, steps)
        while len(pairs) < batch_size:
            if restatements is not None and rng.random() < restatement_share:
                u = rng.random()
                if u < claim_share:
                    pairs.append(restatements.claim(titles, texts, rng, FEVER3_LABELS, window))
                elif u < claim_share + sentence_share:
                    pairs.append(restatements.sentence(titles, texts, rng, window))
                else:
                    pairs.append(restatements.example(titles, texts, rng, tokenizer.mask_token, window))
                continue
            i = rng.randrange(len(texts))
            ex = cloze_example(titles[i], texts[i], rng, tokenizer.mask_token, window)
            if ex:
                pairs.append(ex)
        src = tokenizer([p[0] for p in pairs], padding=True, truncation=True, max_length=max_source_len, return_tensors="pt")
        tgt = tokenizer([p[1] for p in pairs], padding=True, return_tensors="pt")["input_ids"].to(device)
        with P.autocast(device.type, precision):
            ll, _ = target_logprobs(model, src["input_ids"].to(device), src["attention_mask"].to(device), tgt,
                                    tokenizer.pad_token_id, overhead_tokens=overhead)
        return -ll.float().sum(1).mean()  # target_logprobs returns fp32 log-probabilities

    def sampler_state() -> dict:
        version, state, gauss = rng.getstate()
        return {"sampler_rng": [version, list(state), gauss]}

    return optimize(step_loss, list(model.parameters()), opt, sched, steps=steps, start=start, losses=losses,
                    scaler=scaler, checkpoint=ckpt, checkpoint_every=checkpoint_every, extra_state=sampler_state,
                    log_every=PRETRAIN_LOG_EVERY, log_fn=log_fn, desc="pretrain", progress=progress,
                    stop_after=stop_after)


def loss_curve(losses: list[float], every: int = PRETRAIN_LOG_EVERY) -> list[tuple[int, float]]:
    """(step, mean loss of the ``every`` steps up to it) at every ``every``-th step."""
    return [(s, sum(losses[s - every : s]) / every) for s in range(every, len(losses) + 1, every)]
