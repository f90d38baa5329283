"""The generator interface: what RAG's code (:mod:`rag.models.rag`) asks of a generator.

RAG needs three things of a generator, whatever its architecture: the log-probabilities of a
target's tokens under each of K sources (training, RAG-Sequence's rescoring), a decoding step
that extends prefixes on a key/value cache, and a reorder of that cache (beam search). A family
(:mod:`rag.models.families`) implements them for one kind of model: the encoder-decoder of
:mod:`rag.models.seq2seq`, the decoder-only language model of :mod:`rag.models.causal_lm`.

Layout shared by every family: a target is ``[N, T]`` token ids whose first entry is the start
token (the tokenizer's BOS); position t of the log-probabilities predicts ``target[t + 1]``, as
:mod:`rag.models.marginal` reads them. A family may feed the start token (an encoder-decoder's
decoder start) or stand it for the end of its source (a causal LM's prompt).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import nullcontext

import torch


class SourceStates(ABC):
    """What a family keeps of N encoded sources for decoding (encoder states, a prompt's key/value
    cache), row-indexable."""

    @abstractmethod
    def select(self, rows: torch.Tensor) -> "SourceStates":
        """The states of sources ``rows`` [M] (a copy, in that order)."""


class Generator(ABC):
    """One generator of a family: its model (``model``, the trainable ``torch.nn.Module``) and
    tokenizer, the source and target lengths, and the ``precision`` autocast
    (:mod:`rag.precision`) its passes run under."""

    def __init__(self, model: torch.nn.Module, tokenizer, max_source_len: int, max_target_len: int):
        self.model = model
        self.tokenizer = tokenizer
        self.max_source_len = max_source_len
        self.max_target_len = max_target_len
        self.autocast = nullcontext  # set by the RAG system to its precision autocast

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

    @abstractmethod
    def tokenize_sources(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and attention mask [N, L] of the sources, on the model's device."""

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
        """Next-token logits [N, V] after prefixes, and the key/value cache that extends them.

        ``past`` None: ``inputs`` [N, t] are whole prefixes (start token first) read from the
        sources' states; else ``inputs`` [N, 1] are each prefix's newest token, read on ``past``."""

    @abstractmethod
    def reorder(self, past, order: torch.Tensor):
        """The cache whose row i is row ``order[i]`` of ``past`` (beam search)."""

    @abstractmethod
    def hypothesis_logprobs(self, states: SourceStates, docs: torch.Tensor, expand: torch.Tensor,
                            tgt: torch.Tensor) -> torch.Tensor:
        """log p(tgt[r, t] | source docs[expand[r]], start token, tgt[r, :t]) [R, W] on the CPU,
        every position scored (the caller masks by hypothesis length): RAG-Sequence's thorough
        rescoring of R (hypothesis, document) rows over the distinct sources ``docs``."""
