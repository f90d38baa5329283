"""The causal-LM family of the generator interface: any ``AutoModelForCausalLM`` as RAG's generator.

The source of a (question, passage) pair is a prompt (``generator.prompt_template``), padded and
truncated on the left so the K prompts of a question end together and the target follows without
a gap; position ids count real tokens only. The target's start token is never fed: it stands for
the prompt's end, so position t of the log-probabilities predicts ``target[t + 1]``, the layout
:mod:`rag.models.marginal` reads. Loaded from a path or hub name, or built from the configured sizes
(:func:`build_causal_lm`, a Llama; :class:`CopyLlama` with ``generator.copy``); optionally with
LoRA adapters (:func:`add_lora`) and gradient checkpointing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from transformers import AutoModelForCausalLM, LlamaForCausalLM
from transformers.modeling_outputs import CausalLMOutputWithPast

from rag.config import check_template
from rag.config_keys import PROMPT_TEMPLATE as DEFAULT_TEMPLATE
from rag.errors import ConfigError
from rag.models.interface import COPY_KEY, Generator, SourceStates
from rag.models.seq2seq import DEFAULT_CHUNK_OVERHEAD, scored_logprobs

if TYPE_CHECKING:
    from rag.config_keys import Generator as GeneratorOptions

PAD_TOKEN = "<pad>"  # added when a tokenizer has no pad token of its own, or pads with its EOS


class CausalStates(SourceStates):
    """Per prompt: its key/value cache (per layer), attention mask [N, L] and last position's logits
    [N, V]; for a :class:`CopyLlama` also its token ids [N, L] and last-layer hidden states [N, L, d]."""

    def __init__(self, kv: list[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor, last: torch.Tensor,
                 ids: torch.Tensor | None = None, hidden: torch.Tensor | None = None):
        self.kv, self.mask, self.last, self.ids, self.hidden = kv, mask, last, ids, hidden

    def select(self, rows: torch.Tensor) -> "CausalStates":
        pick = lambda t: None if t is None else t[rows]  # noqa: E731
        return CausalStates([(k[rows], v[rows]) for k, v in self.kv], self.mask[rows], self.last[rows],
                            pick(self.ids), pick(self.hidden))


@dataclass
class CopyLMOutput(CausalLMOutputWithPast):
    """A :class:`CopyLlama`'s output: a causal LM's, and the prompt's last-layer hidden states
    [N, P, d] when the prompt was part of the call (``prompt_len``)."""

    prompt_hidden_state: torch.FloatTensor | None = None


class CopyLlama(LlamaForCausalLM):
    """A Llama with a copy distribution over its prompt's tokens, the pointer-generator of
    :class:`rag.models.generator.CopyBart` (attention over the prompt's last-layer hidden states).

    Every call names its prompt: ``prompt_len`` (the first columns of ``input_ids``; the output
    then holds their hidden states, ``prompt_hidden_state``), or ``prompt_ids``, ``prompt_hidden``
    and ``prompt_mask`` of a prompt run earlier, whose cache ``past_key_values`` extends."""

    def __init__(self, config):
        super().__init__(config)
        d = config.hidden_size
        self.copy_query = torch.nn.Linear(d, d)
        self.copy_gate = torch.nn.Linear(d, 1)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, labels=None,
                use_cache=None, logits_to_keep=0, prompt_len=None, prompt_ids=None, prompt_hidden=None, prompt_mask=None,
                **kwargs):
        from rag.models.generator import CopyBart

        if input_ids is None or (prompt_len is None and prompt_hidden is None):
            raise ValueError("CopyLlama copies from its prompt: pass input_ids and either prompt_len or "
                             "prompt_ids, prompt_hidden and prompt_mask")
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=past_key_values, use_cache=use_cache, **kwargs)
        states = out.last_hidden_state  # [N, S, d]
        s = input_ids.shape[1]
        h = states[:, -logits_to_keep:] if logits_to_keep else states  # [N, T, d]
        if prompt_hidden is None:  # the prompt is in this call: position t reads prompt positions up to t
            prompt_ids, prompt_hidden = input_ids[:, :prompt_len], states[:, :prompt_len]
            prompt_mask = torch.ones_like(prompt_ids) if attention_mask is None else attention_mask[:, :prompt_len]
            seen = torch.arange(prompt_len, device=h.device)[None, :] <= torch.arange(s - h.shape[1], s, device=h.device)[:, None]
            visible = prompt_mask.bool()[:, None, :] & seen[None]  # [N, T, P]
            own = prompt_hidden
        else:
            visible, own = prompt_mask.bool()[:, None, :].expand(-1, h.shape[1], -1), None
        vocab_lp = torch.log_softmax(self.lm_head(h).float(), dim=-1)
        scores = (self.copy_query(h) @ prompt_hidden.transpose(1, 2)).float() / h.shape[-1] ** 0.5  # [N, T, P]
        # finite: a padded position sees no prompt token; its (never scored) copy share goes to padding
        attn = torch.softmax(scores.masked_fill(~visible, torch.finfo(scores.dtype).min), dim=-1)
        gate = torch.sigmoid(self.copy_gate(h).float())
        copy = vocab_lp.new_zeros(vocab_lp.shape).scatter_add_(2, prompt_ids[:, None, :].expand(-1, h.shape[1], -1), attn)
        logits = CopyBart._log_mix(gate, vocab_lp.exp(), copy)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CopyLMOutput(loss=loss, logits=logits, past_key_values=out.past_key_values, prompt_hidden_state=own)


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids that count real tokens only (0 on left padding)."""
    return (mask.long().cumsum(1) - 1).clamp_min(0)


class CausalLMGenerator(Generator):
    """A decoder-only language model behind the generator interface.

    ``template``: the prompt, with the fields ``{title}``, ``{text}`` and ``{question}`` (closed
    book: the template after its ``{text}``). :meth:`prepare_training` adds LoRA adapters when
    ``lora`` holds ``rank`` (> 0), ``alpha`` and ``target_modules``. :meth:`save` writes these
    settings into the folder's ``config.json`` (``rag_generator``)."""

    SETTINGS_KEY = "rag_generator"
    auto_class, copy_class = AutoModelForCausalLM, CopyLlama
    scratch_what = "a Llama from scratch"

    @staticmethod
    def scratch_config(*sizes, **more):
        return scratch_config(*sizes, **more)

    @classmethod
    def from_scratch(cls, tokenizer, g, device) -> "CausalLMGenerator":
        return cls.from_options(build_causal_lm(tokenizer, g).to(device), tokenizer, g)

    def __init__(self, model, tokenizer, max_source_len: int, max_target_len: int, template: str = DEFAULT_TEMPLATE,
                 lora: dict | None = None, gradient_checkpointing: bool = False):
        super().__init__(model, tokenizer, max_source_len, max_target_len)
        check_template(template)
        self.template = template
        self.lora = dict(lora) if lora and lora.get("rank") else None
        self.gradient_checkpointing = bool(gradient_checkpointing)
        self.copies = bool(getattr(model.config, COPY_KEY, False))  # a CopyLlama: every call names its prompt
        prepare_tokenizer(tokenizer, model)

    def _prompt(self, width: int) -> dict:
        """The keyword arguments naming a call's prompt (its first ``width`` columns) to a copying model."""
        return {"prompt_len": width} if self.copies else {}

    @classmethod
    def from_options(cls, model, tokenizer, g: GeneratorOptions) -> "CausalLMGenerator":
        """With the settings of the ``generator`` config group ``g``."""
        lora = {"rank": g.lora_rank, "alpha": g.lora_alpha,
                "target_modules": list(g.lora_target_modules) if g.lora_target_modules else None}
        return cls(model, tokenizer, g.max_source_len, g.max_target_len, g.prompt_template, lora, g.gradient_checkpointing)

    @classmethod
    def load(cls, path, device, max_source_len, max_target_len) -> "CausalLMGenerator":
        model, tok = cls.load_model(path, device)
        settings = getattr(model.config, cls.SETTINGS_KEY, None) or {}
        missing = [k for k in ("template", "lora", "gradient_checkpointing") if k not in settings]
        if missing:
            raise ConfigError(f"generator {str(path)!r}: config.json lacks {cls.SETTINGS_KEY}.{', '.join(missing)} (the settings "
                              "of a causal LM the pretrain_generator rule saves); run that rule on it (generator.init: pretrained)")
        return cls(model, tok, max_source_len, max_target_len, settings["template"], settings["lora"],
                   settings["gradient_checkpointing"])

    def save(self, folder) -> None:
        """The model (LoRA adapters merged into a copy of the weights) and its settings."""
        from rag.models.interface import FAMILY_KEY

        model = self.model
        if hasattr(model, "merge_and_unload"):  # a peft model
            import copy

            model = copy.deepcopy(model).merge_and_unload()
        setattr(model.config, FAMILY_KEY, "causal_lm")
        setattr(model.config, self.SETTINGS_KEY, {"template": self.template, "lora": self.lora,
                                                  "gradient_checkpointing": self.gradient_checkpointing})
        model.save_pretrained(folder)

    def prepare_training(self) -> torch.nn.Module:
        if self.gradient_checkpointing:
            self.model.activation_checkpointing_enable()
        if self.lora and not hasattr(self.model, "peft_config"):
            self.model = add_lora(self.model, self.lora["rank"], self.lora["alpha"], self.lora.get("target_modules"))
        return self.model

    # ---------------------------------------------------------------- text -> token ids
    def source_text(self, title: str, text: str, question: str) -> str:
        return self.template.format(title=title, text=text, question=question)

    def question_text(self, question: str) -> str:
        head, field, tail = self.template.partition("{text}")
        return (tail if field else head).format(title="", text="", question=question).lstrip()

    def continuation_ids(self, targets: list[str]) -> list[list[int]]:
        """Each answer's tokens as the model continues the prompt with it: the template's end (its text after
        the last field), a space, and the answer, tokenized together, less the template end's own tokens (a
        GPT-2 BPE continues "Answer:" with " Paris", not "Pa" "ris"); after a template that ends in whitespace
        (its own token in the prompt), the answer's tokens alone. A tokenizer that merges the template's end
        with an answer is a ConfigError naming the key."""
        import string

        tok = self.tokenizer
        literal, field, *_ = list(string.Formatter().parse(self.template))[-1]
        end = literal if field is None else ""
        if end[-1:].isspace():
            return tok(list(targets), add_special_tokens=False)["input_ids"]
        head = tok(end, add_special_tokens=False)["input_ids"] if end else []
        out = []
        for target, ids in zip(targets, tok([f"{end} {t}" for t in targets], add_special_tokens=False)["input_ids"]):
            if ids[: len(head)] != head:
                raise ConfigError(f"config key 'generator.prompt_template': the tokenizer merges the prompt's end {end!r} "
                                  f"with the answer {target[:40]!r}: end the template with a punctuation mark (\"Answer:\")")
            out.append(ids[len(head):])
        return out

    def tokenize_targets(self, targets: list[str]) -> torch.Tensor:
        tok = self.tokenizer
        # an answer longer than max_target_len keeps its beginning, as the seq2seq family's does
        body = [ids[: self.max_target_len - 2] for ids in self.continuation_ids(targets)]
        rows = [torch.tensor([tok.bos_token_id] + ids + [tok.eos_token_id]) for ids in body]
        return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=tok.pad_token_id).to(self.device)

    # ---------------------------------------------------------------- training
    def _joined(self, src: torch.Tensor, mask: torch.Tensor, fed: torch.Tensor):
        """Prompt [N, L] + fed target tokens [N, t]: input ids, attention mask and position ids."""
        ids = torch.cat([src, fed], 1)
        am = torch.cat([mask, fed.ne(self.tokenizer.pad_token_id).to(mask.dtype)], 1)
        return ids, am, _positions(am)

    def target_logprobs(self, src, mask, target, pad_id, smooth, overhead=DEFAULT_CHUNK_OVERHEAD):
        def run(rows, keep, used):
            width = max(1, int(mask[rows].sum(1).max()))  # left padding: the chunk's prompts end together
            ids, am, pos = self._joined(src[rows, -width:], mask[rows, -width:], target[rows, 1:used])
            out = self.model(input_ids=ids, attention_mask=am, position_ids=pos, use_cache=False, logits_to_keep=used,
                             **self._prompt(width))
            return out.logits[keep]

        return scored_logprobs(run, mask, target, pad_id, smooth, overhead)

    def logits(self, src, mask, target, overhead=DEFAULT_CHUNK_OVERHEAD):
        t = target.shape[1]
        ids, am, pos = self._joined(src, mask, target[:, 1:])
        return self.model(input_ids=ids, attention_mask=am, position_ids=pos, use_cache=False, logits_to_keep=t,
                          **self._prompt(src.shape[1])).logits

    # ---------------------------------------------------------------- decoding
    def encode(self, src, mask, overhead=DEFAULT_CHUNK_OVERHEAD) -> CausalStates:
        out = self.model(input_ids=src, attention_mask=mask, position_ids=_positions(mask), use_cache=True, logits_to_keep=1,
                         **self._prompt(src.shape[1]))
        kv = [(layer[0], layer[1]) for layer in out.past_key_values]
        if self.copies:
            return CausalStates(kv, mask, out.logits[:, -1], src, out.prompt_hidden_state)
        return CausalStates(kv, mask, out.logits[:, -1])

    def _extend(self, states: CausalStates, fed: torch.Tensor, past):
        """Logits [N, t, V] of ``fed`` tokens [N, t] read on ``past`` (the prompts' cache, then
        the tokens fed before); the cache extended by them."""
        done = past.get_seq_length() - states.mask.shape[1]  # target tokens already in the cache
        t = fed.shape[1]
        am = torch.cat([states.mask, states.mask.new_ones(len(fed), done + t)], 1)
        pos = states.mask.long().sum(1, keepdim=True) + done + torch.arange(t, device=fed.device)
        prompt = {"prompt_ids": states.ids, "prompt_hidden": states.hidden, "prompt_mask": states.mask}
        out = self.model(input_ids=fed, attention_mask=am, position_ids=pos, past_key_values=past, use_cache=True,
                         **(prompt if self.copies else {}))
        return out.logits, out.past_key_values

    def _cache(self, states: CausalStates):
        from transformers import DynamicCache

        return DynamicCache(ddp_cache_data=states.kv, config=self.model.config)

    def step(self, states: CausalStates, inputs, past):
        if past is None:  # whole prefixes: the start token stands for the prompt's end, the rest is fed
            past = self._cache(states)
            if inputs.shape[1] == 1:
                return states.last, past
            logits, past = self._extend(states, inputs[:, 1:], past)
        else:
            logits, past = self._extend(states, inputs, past)
        return logits[:, -1], past

    def hypothesis_logprobs(self, states: CausalStates, docs, expand, tgt) -> torch.Tensor:
        """Each hypothesis row reads its prompt's cache (computed once by :meth:`encode`)."""
        mine = states.select(docs[expand])
        lp = [torch.log_softmax(mine.last.float(), dim=-1)[:, None]]
        if tgt.shape[1] > 1:
            with self.autocast():
                logits, _ = self._extend(mine, tgt[:, :-1], self._cache(mine))
            lp.append(torch.log_softmax(logits.float(), dim=-1))
        return torch.cat(lp, 1).gather(-1, tgt[:, :, None]).squeeze(-1).cpu()


def prepare_tokenizer(tokenizer, model) -> None:
    """Left padding and truncation; a pad token of its own (added, and the embeddings resized, when
    the tokenizer has none or pads with its EOS); a BOS (the EOS when the tokenizer has none)."""
    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"
    if tokenizer.eos_token_id is None:
        raise ConfigError("generator: the causal LM's tokenizer has no EOS token, so an answer cannot end")
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        tokenizer.add_special_tokens({"pad_token": PAD_TOKEN})
    if tokenizer.bos_token_id is None:
        tokenizer.bos_token = tokenizer.eos_token
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id


def scratch_config(vocab_size: int, d_model: int, layers: int, heads: int, ffn: int, max_source_len: int,
                   max_target_len: int, **more):
    """The Llama configuration of a scratch causal LM of these sizes (``generator.*``), initialised
    as the scratch BART is; ``more``: further LlamaConfig fields."""
    from transformers import LlamaConfig

    if d_model % heads:
        raise ConfigError(f"config key 'generator.heads': {heads} does not divide generator.d_model {d_model}")
    return LlamaConfig(vocab_size=vocab_size, hidden_size=d_model, num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=heads, intermediate_size=ffn,
                       max_position_embeddings=max_source_len + max_target_len + 8, initializer_range=d_model ** -0.5,
                       **more)


def build_causal_lm(tokenizer, g: GeneratorOptions):
    """A Llama of the configured size on ``tokenizer``'s vocabulary; a :class:`CopyLlama` with ``generator.copy``."""
    cfg = scratch_config(len(tokenizer), g.d_model, g.layers, g.heads, g.ffn, g.max_source_len, g.max_target_len,
                         attention_dropout=g.dropout, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, **{COPY_KEY: g.copy})
    return CopyLlama._from_config(cfg) if g.copy else AutoModelForCausalLM.from_config(cfg)


def add_lora(model, rank: int, alpha: float, target_modules: list[str] | None, dropout: float = 0.0):
    """``model`` with LoRA adapters (``peft``) of rank ``rank`` and scale ``alpha`` on
    ``target_modules`` (None: peft's default for the architecture); only the adapters train."""
    from peft import LoraConfig, get_peft_model

    try:
        cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(target_modules) if target_modules else None,
                         lora_dropout=dropout, task_type="CAUSAL_LM")
        return get_peft_model(model, cfg)
    except ValueError as exc:
        raise ConfigError(f"config key 'generator.lora_target_modules': {exc}") from None
