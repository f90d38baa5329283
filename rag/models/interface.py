"""The generator interface: what RAG's code (:mod:`rag.models.rag`) asks of a generator family
(``rag.tasks.GENERATOR_FAMILIES``): a target's token log-probabilities under each of K sources, a
decoding step on a key/value cache, and a reorder of that cache (beam search).

A target is ``[N, T]`` token ids whose first entry is the start token (the tokenizer's BOS);
position t of the log-probabilities predicts ``target[t + 1]``, as :mod:`rag.models.marginal`
reads them. A saved generator's ``config.json`` names its family (``rag_family``), else its
architecture does (:func:`load_generator`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import nullcontext
from pathlib import Path

import torch

from rag.models.folder import FAMILY_KEY, loading, model_family  # noqa: F401 (FAMILY_KEY: read here by the families)

COPY_KEY = "copy_mechanism"  # a saved scratch generator's config.json: true for a copy generator (CopyBart, CopyLlama)


class SourceStates(ABC):
    """What a family keeps of N encoded sources for decoding (encoder states, a prompt's key/value
    cache), row-indexable."""

    @abstractmethod
    def select(self, rows: torch.Tensor) -> "SourceStates":
        """The states of sources ``rows`` [M] (a copy, in that order)."""


class Generator(ABC):
    """One generator of a family: its trainable ``model``, tokenizer, source and target lengths,
    and the ``precision`` autocast its passes run under."""

    # the model classes load_model picks from: a folder made by transformers, a copy generator (COPY_KEY) and
    # the settings its config.json must hold
    auto_class: type
    copy_class: type
    copy_settings: tuple[str, ...] = ()
    scratch_what: str = ""  # the model init scratch builds, in words (rag plan's sizing)

    def __init__(self, model: torch.nn.Module, tokenizer, max_source_len: int, max_target_len: int | None):
        self.model = model
        self.tokenizer = tokenizer
        self.max_source_len = max_source_len
        self.max_target_len = max_target_len
        self.autocast = nullcontext  # set by the RAG system holding it: its precision autocast

    @classmethod
    @abstractmethod
    def load(cls, path: str | Path, device: str, max_source_len: int, max_target_len: int) -> "Generator":
        """The generator saved in the folder (or hub name) ``path``, on ``device``."""

    @classmethod
    def from_options(cls, model: torch.nn.Module, tokenizer, g) -> "Generator":
        """``model`` and ``tokenizer`` with the settings of the ``generator`` config group ``g``."""
        return cls(model, tokenizer, g.max_source_len, g.max_target_len)

    @classmethod
    def from_scratch(cls, tokenizer, g, device: str) -> "Generator":
        """A new model of the sizes and features of the ``generator`` config group ``g`` on ``tokenizer``'s
        vocabulary, on ``device``: the generator pretraining builds (a family that builds none: a ConfigError)."""
        from rag.errors import ConfigError

        raise ConfigError(f"config key 'generator.init': generator family {g.family} builds no model from scratch; "
                          "set init: pretrained and name_or_path")

    @staticmethod
    def scratch_config(vocab_size: int, d_model: int, layers: int, heads: int, ffn: int, max_source_len: int,
                       max_target_len: int, **more):
        """The transformers configuration of a scratch model of these sizes (``more``: further fields); None: the
        family builds none."""
        return None

    @classmethod
    def load_model(cls, path: str | Path, device: str = "cpu"):
        """A saved (or hub-named) model of the family and its tokenizer."""
        from transformers import AutoConfig, AutoTokenizer

        from rag.errors import ConfigError

        with loading(path, "generator"):
            tok = AutoTokenizer.from_pretrained(str(path))
            cfg = AutoConfig.from_pretrained(str(path))
            copy = getattr(cfg, COPY_KEY, False)
            missing = [k for k in cls.copy_settings if copy and not hasattr(cfg, k)]
            if missing:
                raise ConfigError(f"generator {str(path)!r}: config.json has {COPY_KEY} but not {', '.join(missing)}; "
                                  "build it again (snakemake --forcerun pretrain_generator)")
            model = (cls.copy_class if copy else cls.auto_class).from_pretrained(str(path))
        return model.to(device), tok

    def save(self, folder: str | Path) -> None:
        """Write the model to ``folder`` (the tokenizer is saved by the caller)."""
        self.model.save_pretrained(folder)

    def prepare_training(self) -> torch.nn.Module:
        """The module fine-tuning trains (the model, or the model with adapters)."""
        return self.model

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def vocab_size(self) -> int:
        """Entries of the output distribution (label smoothing spreads over them)."""
        return self.model.get_output_embeddings().weight.shape[0]

    # ---------------------------------------------------------------- text -> token ids
    @abstractmethod
    def source_text(self, title: str, text: str, question: str) -> str:
        """The source of one (question, passage) pair."""

    @abstractmethod
    def question_text(self, question: str) -> str:
        """The source of a question alone (the closed-book generator)."""

    def tokenize_sources(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and attention mask [N, L] of the sources, on the model's device."""
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_source_len, return_tensors="pt")
        return enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)

    @abstractmethod
    def tokenize_targets(self, targets: list[str]) -> torch.Tensor:
        """Target token ids [B, T], the start token first, padded with the pad token."""

    # ---------------------------------------------------------------- training
    @abstractmethod
    def target_logprobs(self, src: torch.Tensor, mask: torch.Tensor, target: torch.Tensor, pad_id: int,
                        smooth: bool, overhead: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """log p(target[n, t+1] | source n, target[n, :t+1]) [N, T] (0 where the next token is
        padding) and, if ``smooth``, the sum over the vocabulary of log p at each position [N, T].
        ``overhead``: the padded tokens one more model call costs (length-sorted chunks)."""

    @abstractmethod
    def logits(self, src: torch.Tensor, mask: torch.Tensor, target: torch.Tensor, overhead: int) -> torch.Tensor:
        """Next-token logits [N, T, V] at every target position (losses needing the whole vocabulary)."""

    # ---------------------------------------------------------------- decoding
    @abstractmethod
    def encode(self, src: torch.Tensor, mask: torch.Tensor, overhead: int) -> SourceStates:
        """The sources' states for decoding."""

    @abstractmethod
    def step(self, states: SourceStates, inputs: torch.Tensor, past) -> tuple[torch.Tensor, object]:
        """Next-token logits [N, V] after prefixes, and the cache that extends them: ``inputs`` [N, t]
        are whole prefixes (``past`` None) or [N, 1] each prefix's newest token, read on ``past``."""

    def reorder(self, past, order: torch.Tensor):
        """The cache whose row i is row ``order[i]`` of ``past`` (beam search)."""
        past.reorder_cache(order)
        return past

    @abstractmethod
    def hypothesis_logprobs(self, states: SourceStates, docs: torch.Tensor, expand: torch.Tensor,
                            tgt: torch.Tensor) -> torch.Tensor:
        """log p(tgt[r, t] | source docs[expand[r]], start token, tgt[r, :t]) [R, W] on the CPU, every
        position scored: RAG-Sequence's thorough rescoring of R (hypothesis, document) rows."""


def generator_class(family: str) -> type[Generator]:
    """The :class:`Generator` of a registered family (rag/tasks.py GENERATOR_FAMILIES)."""
    from rag.tasks import family_spec, load_object

    return load_object(family_spec(family).generator, "generator.family")


def saved_family(path: str | Path) -> str:
    """The family of the generator saved in ``path`` (:data:`FAMILY_KEY`, else its architecture)."""
    with loading(path, "generator"):
        return model_family(path)


def load_generator(path: str | Path, device: str, max_source_len: int, max_target_len: int) -> Generator:
    """The generator saved in ``path``, behind its family's interface."""
    return generator_class(saved_family(path)).load(path, device, max_source_len, max_target_len)
