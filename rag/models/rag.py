"""A RAG model: a retriever (``rag.retrieval.Retriever``) and a generator behind the generator
interface (:mod:`rag.models.interface`). Gradients reach a dense retriever's encoders through the doc
scores d(z).q(x) and the generator through the marginal likelihood; under another retriever objective
(:mod:`rag.models.objectives`) the retriever learns from that objective alone. Under a ``precision``
autocast (bf16/fp16) the doc scores, log-probabilities and marginalisation stay fp32.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.nn.utils.rnn import pad_sequence

from rag import precision as P
from rag.models.decoding import Hypothesis, beam_search, decode_ids
from rag.models import seq2seq
from rag.models.interface import Generator, SourceStates
from rag.retrieval.base import Retrieved, Retriever
from rag.models.marginal import (rag_sequence_nll_from_logprobs, rag_token_nll, rag_token_nll_from_logprobs, shift_left,
                                 token_logprobs)
from rag.models.objectives import OBJECTIVES, document_loglik, retriever_loss


@dataclass
class Encoded:
    """The generator's source states for B questions x K documents, ready for decoding."""

    states: SourceStates  # B*K rows, question-major
    doc_lp: torch.Tensor  # [B, K] log p(z|x)
    retrieved: Retrieved | None
    k: int


@dataclass
class Prediction:
    text: str
    doc_ids: list[str] = field(default_factory=list)
    doc_titles: list[str] = field(default_factory=list)
    doc_probs: list[float] = field(default_factory=list)
    score: float = 0.0


class RagSystem(torch.nn.Module):
    """``generator``: a :class:`rag.models.interface.Generator` (its ``model`` becomes
    ``self.generator``), or a seq2seq model, which :class:`rag.models.generator.Seq2SeqGenerator` wraps.
    ``objective``: what trains the retriever (:data:`rag.models.objectives.OBJECTIVES`), its target's
    ``objective_temperature``."""

    def __init__(self, generator, tokenizer, model: str, retriever: Retriever | None = None,
                 max_source_len: int = 192, max_target_len: int = 48, chunk_overhead: int | None = None,
                 precision: str = "fp32", objective: str = "marginal", objective_temperature: float = 1.0):
        super().__init__()
        if model not in ("sequence", "token", "closed_book"):
            raise ValueError(f"unknown model kind {model!r}")
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown retriever objective {objective!r} (known: {', '.join(OBJECTIVES)})")
        self.objective, self.objective_temperature = objective, objective_temperature
        P.check(precision)  # a known value; autocast checks it against the device
        if not isinstance(generator, Generator):
            from rag.models.generator import Seq2SeqGenerator

            generator = Seq2SeqGenerator(generator, tokenizer, max_source_len, max_target_len)
        self.gen = generator  # the generator interface; self.generator is its (trainable) model
        self.gen.autocast = self.autocast
        self.generator = generator.model
        self.tokenizer = tokenizer
        self.model_kind = model
        self.retriever = retriever
        self.configured_chunk_overhead = chunk_overhead
        self.precision = precision
        self.pad_id = tokenizer.pad_token_id
        self.bos_id = tokenizer.bos_token_id
        self.eos_id = tokenizer.eos_token_id

    @property
    def device(self) -> torch.device:
        return next(self.generator.parameters()).device

    def prepare_training(self) -> None:
        """The generator as fine-tuning trains it (``Generator.prepare_training``: adapters, checkpointing)."""
        self.generator = self.gen.prepare_training()

    @property
    def chunk_overhead(self) -> int:
        """Padded tokens one more generator call costs: generator.chunk_overhead, or the default of the
        device the generator is on (``seq2seq.chunk_overhead_for``)."""
        return seq2seq.chunk_overhead_for(self.device.type, self.configured_chunk_overhead)

    @chunk_overhead.setter
    def chunk_overhead(self, value: int | None) -> None:
        self.configured_chunk_overhead = value

    def autocast(self):
        """The ``precision`` autocast context on the generator's device (nothing for fp32)."""
        return P.autocast(self.device.type, self.precision)

    @property
    def passages(self):
        """The retriever's passages (None without retrieval)."""
        return None if self.retriever is None else self.retriever.passages

    @property
    def question_encoder(self):
        """The retriever's trainable question encoder (None unless dense)."""
        return getattr(self.retriever, "question_encoder", None)

    @property
    def context_encoder(self):
        """The retriever's passage encoder where it trains (None otherwise)."""
        return getattr(self.retriever, "context_encoder", None)

    # ------------------------------------------------------------------ retrieval
    def retrieve(self, questions: list[str], k: int) -> Retrieved:
        """The retriever's top ``k`` passages; the question encoder runs under the precision autocast."""
        with self.autocast():
            got = self.retriever.retrieve(questions, k)
        return Retrieved(got.ids, got.scores.to(self.device))

    def source_texts(self, questions: list[str], retrieved: Retrieved | None) -> list[str]:
        if retrieved is None:
            return [self.gen.question_text(q) for q in questions]
        p, source = self.passages, self.gen.source_text
        return [source(p.titles[j], p.texts[j], q) for q, row in zip(questions, retrieved.ids.tolist()) for j in row]

    def tokenize_targets(self, targets: list[str]) -> torch.Tensor:
        return self.gen.tokenize_targets(targets)

    # ------------------------------------------------------------------ training
    def loss(self, questions: list[str], target_ids: torch.Tensor, k: int, epsilon: float = 0.0) -> torch.Tensor:
        """Mean negative (marginal) log-likelihood of ``target_ids`` ([B, T], BOS first)."""
        retrieved = None if self.model_kind == "closed_book" else self.retrieve(questions, k)
        src, mask = self.gen.tokenize_sources(self.source_texts(questions, retrieved))
        scores = retrieved.scores if retrieved is not None else None
        return self.marginal_nll(src, mask, scores, target_ids, epsilon).mean()

    def marginal_nll(self, src: torch.Tensor, mask: torch.Tensor, doc_scores: torch.Tensor | None, target_ids: torch.Tensor,
                     epsilon: float = 0.0) -> torch.Tensor:
        """Per-example NLL given the tokenized generator inputs [B*K, L] (question-major) and the doc
        scores [B, K] (None for the BART baseline: one input per question); the loss in fp32. Under a
        retriever objective other than the marginal, the generator's NLL takes the doc scores as constants
        and the objective's loss (:func:`rag.models.objectives.retriever_loss`) is added."""
        own = doc_scores is not None and self.objective != "marginal"  # the retriever learns from its objective
        if doc_scores is None:
            doc_scores, dec = torch.zeros(target_ids.shape[0], 1, device=src.device), target_ids
        else:
            dec = target_ids.repeat_interleave(doc_scores.shape[1], dim=0)
        scores = doc_scores.detach() if own else doc_scores
        dev, overhead = src.device.type, self.chunk_overhead
        if self.model_kind == "token" and epsilon > 0:  # smoothing over the marginal needs every vocabulary entry
            with self.autocast():
                logits = self.gen.logits(src, mask, dec, overhead)
            with P.full_precision(dev):
                nll = rag_token_nll(logits, scores, target_ids, self.pad_id, epsilon)
                if not own:
                    return nll
                ll, _ = token_logprobs(logits, shift_left(dec, self.pad_id), False)
                return nll + self._retriever_loss(doc_scores, ll, target_ids)
        with self.autocast():
            ll, smooth = self.gen.target_logprobs(src, mask, dec, self.pad_id, epsilon > 0, overhead)
        with P.full_precision(dev):
            if self.model_kind == "token":
                nll = rag_token_nll_from_logprobs(ll, scores, target_ids, self.pad_id)
            else:  # RAG-Sequence; with one document and p(z|x) = 1 it is the plain generator NLL (BART)
                nll = rag_sequence_nll_from_logprobs(ll, smooth, self.gen.vocab_size, scores, target_ids, self.pad_id, epsilon)
            return nll + self._retriever_loss(doc_scores, ll, target_ids) if own else nll

    def _retriever_loss(self, doc_scores: torch.Tensor, ll: torch.Tensor, target_ids: torch.Tensor) -> torch.Tensor:
        """The objective's loss per question from the doc scores and the target tokens' log-probabilities [B*K, T]."""
        doc_ll = document_loglik(ll, target_ids, self.pad_id, doc_scores.shape[1])
        return retriever_loss(self.objective, doc_scores, doc_ll, self.objective_temperature)

    def forward(self, questions: list[str], target_ids: torch.Tensor, k: int, epsilon: float = 0.0) -> torch.Tensor:
        """``loss``, so DistributedDataParallel can wrap the system (its hooks run on forward)."""
        return self.loss(questions, target_ids, k, epsilon)

    # ------------------------------------------------------------------ inference
    @torch.inference_mode()
    def encode(self, questions: list[str], k: int) -> Encoded:
        retrieved = None if self.model_kind == "closed_book" else self.retrieve(questions, k)
        kk = 1 if retrieved is None else k
        src, mask = self.gen.tokenize_sources(self.source_texts(questions, retrieved))
        with self.autocast():
            states = self.gen.encode(src, mask, self.chunk_overhead)
        if retrieved is None:
            doc_lp = torch.zeros(len(questions), 1, device=src.device)
        else:
            doc_lp = torch.log_softmax(retrieved.scores.float(), dim=1)
        return Encoded(states, doc_lp, retrieved, kk)

    def _predictions(self, enc: Encoded, best: list[Hypothesis]) -> list[Prediction]:
        out = []
        for b, hyp in enumerate(best):
            toks = [t for t in hyp.tokens if t not in (self.eos_id, self.pad_id)]
            text = decode_ids(self.tokenizer, toks).strip()
            pred = Prediction(text, score=hyp.score)
            if enc.retrieved is not None:
                rows = enc.retrieved.ids[b].tolist()
                pred.doc_ids = [self.passages.ids[j] for j in rows]
                pred.doc_titles = [self.passages.titles[j] for j in rows]
                pred.doc_probs = enc.doc_lp[b].exp().tolist()
            out.append(pred)
        return out

    @torch.inference_mode()
    def generate(self, questions: list[str], k: int, method: str = "greedy", beams: int = 1,
                 max_new_tokens: int = 32) -> list[Prediction]:
        enc = self.encode(questions, k)
        if self.model_kind == "sequence" and method in ("thorough", "fast"):
            return self._predictions(enc, self._rag_sequence_decode(enc, beams, max_new_tokens, thorough=method == "thorough"))
        beams = 1 if method == "greedy" else beams
        kk, dev = enc.k, self.device
        if self.model_kind == "token":  # the next-token distribution marginalized over the K documents
            step = CachedStep(self, enc, lambda owner: owner[:, None] * kk + torch.arange(kk, device=dev),
                              lambda lp, owner: torch.logsumexp(lp + enc.doc_lp[owner][:, :, None], dim=1))
        else:  # the top document alone (RAG-Sequence's greedy/beam; BART's one source, K = 1)
            step = CachedStep(self, enc, lambda owner: owner[:, None] * kk, lambda lp, owner: lp[:, 0])
        found = beam_search(step, len(questions), beams, max_new_tokens, self.bos_id, self.eos_id)
        return self._predictions(enc, [h[0] for h in found])

    @torch.inference_mode()
    def generate_sweep(self, questions: list[str], ks: list[int], method: str = "greedy", beams: int = 1,
                       max_new_tokens: int = 32) -> dict[int, list[Prediction]]:
        """:meth:`generate` at each K in ``ks``. RAG-Sequence's thorough and fast decoding search the
        top max(ks) documents once, each K marginalizing over its first K, where the retriever's
        rankings nest (``Retriever.nested_top_k``)."""
        shared = self.model_kind == "sequence" and method in ("thorough", "fast")
        if not (shared and self.retriever is not None and self.retriever.nested_top_k(max(ks))):
            return {k: self.generate(questions, k, method, beams, max_new_tokens) for k in ks}
        top = self.encode(questions, max(ks))
        b, kmax = top.doc_lp.shape
        per_doc = self._document_beams(top, beams, max_new_tokens)
        rescored = None
        if method == "thorough":
            hyps = [sorted({h.tokens for j in range(kmax) for h in per_doc[i * kmax + j]}) for i in range(b)]
            rescored = (hyps, self.sequence_logprobs_batch(top, hyps))
        out = {}
        for k in ks:
            enc = _first_documents(top, k)
            mine = [per_doc[i * kmax + j] for i in range(b) for j in range(enc.k)]
            out[k] = self._predictions(enc, self.marginalize_beams(enc, mine, method == "thorough", rescored))
        return out

    def _rag_sequence_decode(self, enc: Encoded, beams: int, max_new_tokens: int, thorough: bool) -> list[Hypothesis]:
        """Beam search per document, then marginalize hypothesis probabilities over documents."""
        return self.marginalize_beams(enc, self._document_beams(enc, beams, max_new_tokens), thorough)

    def _document_beams(self, enc: Encoded, beams: int, max_new_tokens: int) -> list[list[Hypothesis]]:
        """A beam search per (question i, document j), as ``[i * K + j]``: each document read alone."""
        b, kk = enc.doc_lp.shape
        step = CachedStep(self, enc, lambda owner: owner[:, None], lambda lp, owner: lp[:, 0])
        return beam_search(step, b * kk, beams, max_new_tokens, self.bos_id, self.eos_id)

    def marginalize_beams(self, enc: Encoded, per_doc: list[list[Hypothesis]], thorough: bool,
                          rescored: tuple[list[list[tuple]], list[torch.Tensor]] | None = None) -> list[Hypothesis]:
        """The best hypothesis per question from its documents' beams (``per_doc[i * K + j]``),
        scored thorough (every hypothesis under every document) or fast (0 where not in a beam).
        ``rescored``: thorough scores over a superset (per question, sorted hypotheses and their
        [H, K'] log-probabilities, K' >= K), read instead of scoring again."""
        b, kk = enc.doc_lp.shape
        beam_scores: list[list[dict[tuple, float]]] = [
            [{h.tokens: h.score for h in per_doc[i * kk + j]} for j in range(kk)] for i in range(b)]
        hyps = [sorted({t for d in beam_scores[i] for t in d}) for i in range(b)]
        if thorough and rescored is None:
            seq_lps = self.sequence_logprobs_batch(enc, hyps)  # per question [H, K]
        elif thorough:
            seq_lps = []
            for i in range(b):
                row_of = {t: r for r, t in enumerate(rescored[0][i])}
                seq_lps.append(rescored[1][i][[row_of[t] for t in hyps[i]]][:, :kk])
        best = []
        for i in range(b):
            if thorough:
                seq_lp = seq_lps[i]
            else:  # a hypothesis missing from a document's beam has probability 0 there
                seq_lp = torch.tensor([[beam_scores[i][j].get(t, float("-inf")) for j in range(kk)] for t in hyps[i]])
            marg = torch.logsumexp(seq_lp + enc.doc_lp[i].cpu()[None, :], dim=1)
            h = int(marg.argmax())
            best.append(Hypothesis(hyps[i][h], float(marg[h])))
        return best

    # (hypothesis, document) rows per generator call of thorough decoding's rescoring
    SCORE_ROWS = 256

    def sequence_logprobs_batch(self, enc: Encoded, hyps: list[list[tuple[int, ...]]]) -> list[torch.Tensor]:
        """log p(h | x_i, z_j) for every hypothesis h (tokens after BOS) of every question i and
        document j: ``hyps[i]`` the hypotheses of question i -> per question [H_i, K], scored
        ``SCORE_ROWS`` (question, hypothesis, document) rows at a time."""
        kk = enc.k
        pairs = [(i, h) for i, hs in enumerate(hyps) for h in hs]  # question-major, hypothesis-minor
        out = torch.empty(len(pairs) * kk)
        per_call = max(1, self.SCORE_ROWS // kk)
        for start in range(0, len(pairs), per_call):
            part = pairs[start : start + per_call]
            # the hypothesis tokens, padded; an empty hypothesis (no new token) scores 0
            tgt = pad_sequence([torch.tensor(h or (self.pad_id,), dtype=torch.long) for _, h in part], batch_first=True,
                               padding_value=self.pad_id)
            width = tgt.shape[1]
            tgt = tgt.repeat_interleave(kk, dim=0).to(self.device)  # pair-major, doc-minor
            questions = sorted({i for i, _ in part})
            docs = (torch.tensor(questions, device=self.device)[:, None] * kk + torch.arange(kk, device=self.device)).reshape(-1)
            slot = {q: n for n, q in enumerate(questions)}
            expand = (torch.tensor([slot[i] for i, _ in part], device=self.device)[:, None] * kk
                      + torch.arange(kk, device=self.device)).reshape(-1)  # row -> its document in ``docs``
            ll = self.gen.hypothesis_logprobs(enc.states, docs, expand, tgt)
            # mask by each hypothesis' length, not by token value: a generated pad token is scored
            lengths = torch.tensor([len(h) for _, h in part]).repeat_interleave(kk)
            ll = ll.masked_fill(torch.arange(width)[None, :] >= lengths[:, None], 0.0)
            out[start * kk : (start + len(part)) * kk] = ll.sum(1)
        return list(out.view(len(pairs), kk).split([len(hs) for hs in hyps]))

    @torch.inference_mode()
    def score_labels(self, questions: list[str], label_token_ids: list[int], k: int) -> tuple[torch.Tensor, Encoded]:
        """log p(label | x) for single-token labels -> [B, L]; RAG-Sequence and RAG-Token agree here."""
        enc = self.encode(questions, k)
        n = len(questions) * enc.k
        prefix = torch.full((n, 1), self.bos_id, dtype=torch.long, device=self.device)
        with self.autocast():
            logits, _ = self.gen.step(enc.states.select(torch.arange(n, device=self.device)), prefix, None)
        lp = torch.log_softmax(logits.float(), dim=-1).view(len(questions), enc.k, -1)
        lab = lp[:, :, label_token_ids]  # [B, K, L]
        return torch.logsumexp(lab + enc.doc_lp[:, :, None], dim=1).cpu(), enc


    @torch.inference_mode()
    def classify(self, questions: list[str], label_token_ids: list[int], labels: list[str], k: int) -> list[Prediction]:
        """The most probable label per question (``score_labels``), with its retrieved passages."""
        scores, enc = self.score_labels(questions, label_token_ids, k)
        preds = self._predictions(enc, [Hypothesis((), 0.0) for _ in questions])
        for pred, best in zip(preds, scores.argmax(1).tolist()):
            pred.text = labels[best]
        return preds


def _first_documents(enc: Encoded, k: int) -> Encoded:
    """``enc`` cut to each question's first (best) ``k`` documents, p(z|x) renormalized over them
    as :meth:`RagSystem.encode` at that K gives it."""
    b, kmax = enc.doc_lp.shape
    rows = (torch.arange(b)[:, None] * kmax + torch.arange(k)).reshape(-1).to(enc.doc_lp.device)
    got = enc.retrieved
    cut = Retrieved(got.ids[:, :k], got.scores[:, :k])
    return Encoded(enc.states.select(rows), torch.log_softmax(cut.scores.float(), dim=1), cut, k)


class CachedStep:
    """The step function :func:`beam_search` calls, on the generator's key/value cache.

    step(prefix [N, t], owner [N]) -> log-probs [N, V]: the generator runs on the newest token only;
    each prefix's parent row (the prefix minus its last token) picks its cache row. ``rows_of(owner)``
    gives each prefix row's source rows [N, R] (R = K for RAG-Token, else 1); ``combine(lp [N, R, V],
    owner)`` turns their log-probs into the step's distribution."""

    def __init__(self, system: RagSystem, enc: Encoded, rows_of, combine):
        self.system, self.enc, self.rows_of, self.combine = system, enc, rows_of, combine
        self.cache = None
        self.index: dict[tuple, int] = {}
        self._rows = None  # (flat rows, their source states)

    def _encoder_rows(self, flat: torch.Tensor) -> SourceStates:
        if self._rows is None or not torch.equal(self._rows[0], flat):
            self._rows = (flat, self.enc.states.select(flat))
        return self._rows[1]

    def _reorder(self, order: torch.Tensor) -> None:
        """Cache row i <- row order[i]; nothing when every row keeps its place."""
        rows = len(self._rows[0])  # the cache holds the rows of the last step
        if len(order) != rows or not torch.equal(order, torch.arange(rows)):
            self.cache = self.system.gen.reorder(self.cache, order.to(self.system.device))

    @torch.inference_mode()
    def __call__(self, prefix: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
        dev = self.system.device
        owner = owner.to(dev)
        rows = self.rows_of(owner)  # [N, R]
        n, r = rows.shape
        flat = rows.reshape(-1)
        keys = list(zip(owner.tolist(), map(tuple, prefix.tolist())))
        if self.cache is None or prefix.shape[1] == 1:
            inp, past = prefix.to(dev), None
        else:
            parent = torch.tensor([self.index[(o, p[:-1])] for o, p in keys], dtype=torch.long)
            self._reorder((parent[:, None] * r + torch.arange(r)).reshape(-1))
            inp, past = prefix[:, -1:].to(dev), self.cache
        states = self._encoder_rows(flat)
        with self.system.autocast():
            logits, self.cache = self.system.gen.step(states, inp.repeat_interleave(r, dim=0), past)
        self.index = {key: i for i, key in enumerate(keys)}
        lp = torch.log_softmax(logits.float(), dim=-1).view(n, r, -1)
        return self.combine(lp, owner)
