"""Two-stage retrieval: a first-stage retriever's top L passages reranked by a cross-encoder.

Each (question, passage) pair is one input to a sequence classifier with one label (the question as the
first segment, the passage's ``title text`` as the second); its logit times ``score_scale`` (plus the
first stage's score of the passage, with ``add_first_stage``) is the logit of p(z|x). The top K of the L
by that score, ties in first-stage order, are returned best first.

A frozen cross-encoder scores each (question, passage) pair once: a retriever keeps what it scored, and
its folder may hold :data:`PAIR_LOGITS` (rule ``train_reranker`` writes it: the first stage's top L of each
of the task's questions, scored), which :meth:`RerankRetriever.load` reads in, so the fine-tunes that ask
those pairs run no cross-encoder pass for them.

Gradient: the cross-encoder is frozen as :meth:`RerankRetriever.load` gives it (eval mode, no grad), so
the reranked scores carry no gradient of their own; with ``add_first_stage`` they carry the first
stage's (a dense retriever's, to its question encoder). Give the cross-encoder's parameters
``requires_grad`` and its logits carry theirs too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from rag.errors import ConfigError, DataError
from rag.retrieval.base import Retrieved, Retriever
from rag.retrieval.encoders import bound_text, resolve_model_path

PAIR_LOGITS = "pair_logits.jsonl"  # in a cross-encoder's folder: {"question", "rows", "logits"} a line


def passage_text(title: str, text: str) -> str:
    """A passage as the cross-encoder's second segment: its title, a space, its text (the text alone
    where the title is empty)."""
    return f"{title} {text}" if title else text


def check_cross_encoder_config(config, where: str) -> str | None:
    """What keeps a model of ``config`` from being a cross-encoder (a sequence classifier with one label:
    one logit a pair), else None. ``where``: how the problem names the model."""
    arch = list(getattr(config, "architectures", None) or [])
    labels = getattr(config, "num_labels", None)
    if not any(a.endswith("ForSequenceClassification") for a in arch):
        return f"{where}: not a sequence-classification model (architectures {arch or 'not given'}), which a cross-encoder is"
    if labels != 1:
        return f"{where}: a sequence classifier with {labels} labels, not the one label (one logit a pair) of a cross-encoder"
    return None


class RerankRetriever(Retriever):
    """``first``'s top ``depth_l`` passages reranked by ``cross_encoder`` (the module docstring says how).

    ``cross_encoder``: an ``AutoModelForSequenceClassification`` with ``num_labels=1`` (its output's
    ``logits`` [N, 1]), scored under ``torch.no_grad`` unless a parameter of it requires grad;
    ``tokenizer``: its tokenizer (pairs truncated longest first to ``max_length`` tokens);
    ``passages``: the corpus (``titles[j]``, ``texts[j]``: a PassageStore or Passages) the first stage's
    rows index; ``batch_size``: pairs a forward. Keep the cross-encoder in eval mode (dropout would make
    the ranking vary from one search to the next).
    """

    def __init__(self, first: Retriever, cross_encoder: torch.nn.Module, tokenizer, passages, depth_l: int,
                 max_length: int = 256, batch_size: int = 32, score_scale: float = 1.0, add_first_stage: bool = False):
        super().__init__()
        if isinstance(depth_l, bool) or not isinstance(depth_l, int) or depth_l < 1:
            raise ConfigError(f"rerank depth: {depth_l!r} must be a positive integer (the first stage's passages reranked)")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"rerank batch_size: {batch_size!r} must be a positive integer")
        config = getattr(cross_encoder, "config", None)
        if config is not None and getattr(config, "num_labels", 1) != 1:
            raise ConfigError(f"rerank cross-encoder: {config.num_labels} labels; a cross-encoder has one (one logit a pair)")
        self.first = first
        self.cross_encoder = cross_encoder
        self.tokenizer = tokenizer
        self.passages = passages
        self.depth_l = depth_l
        self.max_length = max_length
        self.batch_size = batch_size
        self.score_scale = score_scale
        self.add_first_stage = add_first_stage
        self._pair_cache: dict[tuple[str, int], float] = {}  # (question, passage row) -> logit, a frozen cross-encoder's

    @classmethod
    def load(cls, path_or_name: str, first: Retriever, passages, depth_l: int, **options) -> "RerankRetriever":
        """The reranker whose cross-encoder and tokenizer are at ``path_or_name`` (a folder, a Hugging Face
        name or ``package:<module>``: :func:`resolve_model_path`), frozen and in eval mode; a folder that
        is no sequence classifier of one label, or whose weights lack part of one, is a DataError naming it.
        ``options``: the constructor's (max_length, batch_size, score_scale, add_first_stage)."""
        from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

        from rag.models.folder import loading

        path = resolve_model_path(path_or_name)
        with loading(path, "cross-encoder"):
            problem = check_cross_encoder_config(AutoConfig.from_pretrained(path), f"cross-encoder {path}")
            if problem is not None:
                raise DataError(problem)
            tokenizer = AutoTokenizer.from_pretrained(path)
            model, info = AutoModelForSequenceClassification.from_pretrained(path, output_loading_info=True)
        missing = list(info.get("missing_keys") or [])
        if missing:
            raise DataError(f"cross-encoder {path}: its weights lack {len(missing)} of the model's tensors "
                            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): not a trained cross-encoder")
        model.eval().requires_grad_(False)
        reranker = cls(first, model, tokenizer, passages, depth_l, **options)
        scored = Path(path) / PAIR_LOGITS
        if scored.is_file():
            reranker.read_pair_logits(scored)
        return reranker

    @classmethod
    def from_declaration(cls, files, options, device: str, question_encoder_dir=None, *, declaration: dict, build):
        """A rerank retriever declared under config key ``retrievers.<name>`` (rag/tasks.py RETRIEVERS: its
        options): its first stage built by ``build(name)``, its cross-encoder the task's (``files.reranker``)."""
        first = build(declaration["first_stage"])
        options = {k: declaration[k] for k in ("max_length", "batch_size", "score_scale", "add_first_stage")}
        reranker = cls.load(files.reranker, first, first.passages, declaration["depth"], **options)
        reranker.cross_encoder.to(device)
        return reranker

    @property
    def question_encoder(self):
        """The first stage's trainable question encoder, else None; it gets gradient from the reranked
        scores only with ``add_first_stage`` (:attr:`grads_reach_question_encoder`)."""
        return getattr(self.first, "question_encoder", None)

    @property
    def grads_reach_question_encoder(self) -> bool:
        """Whether the reranked scores carry the first stage's gradient: with ``add_first_stage``."""
        return self.add_first_stage

    def nested_top_k(self, k: int) -> bool:
        """Every search of k <= depth reranks the same first-stage top L by the same scores."""
        return k <= self.depth_l

    def pair_logits(self, questions: list[str], passages: list[str]) -> torch.Tensor:
        """The cross-encoder's logit of each (question, passage) pair [N], float32, ``batch_size`` pairs a
        forward (grad only where a parameter of it requires grad)."""
        model = self.cross_encoder
        device = next(model.parameters()).device
        grad = torch.is_grad_enabled() and any(p.requires_grad for p in model.parameters())
        out = []
        with torch.set_grad_enabled(grad):
            for start in range(0, len(questions), self.batch_size):
                batch = self.tokenizer([bound_text(q, self.max_length) for q in questions[start:start + self.batch_size]],
                                       [bound_text(p, self.max_length) for p in passages[start:start + self.batch_size]],
                                       padding=True, truncation="longest_first", max_length=self.max_length,
                                       return_tensors="pt")
                logits = model(**{key: v.to(device) for key, v in batch.items()}).logits
                out.append(logits[:, 0].float())
        return torch.cat(out) if out else torch.zeros(0, device=device)

    def score_lists(self, questions: list[str], batch: int = 64, progress: bool = False) -> None:
        """Score the first stage's top L of each of ``questions`` (a frozen cross-encoder's pairs, kept), ``batch``
        questions a search; ``progress``: a progress bar (questions) on stderr."""
        from tqdm.auto import tqdm

        with torch.no_grad(), tqdm(total=len(questions), desc="rerank pairs", unit="question", disable=not progress) as bar:
            for start in range(0, len(questions), batch):
                chunk = questions[start:start + batch]
                self._logits(chunk, np.asarray(self.first.retrieve(chunk, self.depth_l).ids, dtype=np.int64))
                bar.update(len(chunk))

    def write_pair_logits(self, path) -> int:
        """The pairs scored so far, to ``path`` (:data:`PAIR_LOGITS`'s format: each question's passage rows and
        their logits, in the order scored); the number of pairs."""
        from rag.io import write_jsonl

        by_question: dict[str, list[tuple[int, float]]] = {}
        for (question, row), logit in self._pair_cache.items():
            by_question.setdefault(question, []).append((row, logit))
        write_jsonl(path, ({"question": q, "rows": [r for r, _ in pairs], "logits": [v for _, v in pairs]}
                           for q, pairs in by_question.items()))
        return len(self._pair_cache)

    def read_pair_logits(self, path) -> None:
        """Pairs scored by this cross-encoder (a file :meth:`write_pair_logits` wrote) into the pairs kept; a line
        that is no such list, or names a row outside the passages, is a DataError naming the file and line."""
        from rag.io import iter_jsonl

        n_rows = len(self.passages.texts)
        for lineno, line in iter_jsonl(path):
            q, rows, logits = line.get("question"), line.get("rows"), line.get("logits")
            if not isinstance(q, str) or not isinstance(rows, list) or not isinstance(logits, list) or len(rows) != len(logits) \
                    or not all(type(r) is int and 0 <= r < n_rows for r in rows) \
                    or not all(type(v) in (int, float) for v in logits):
                raise DataError(f"{path}:{lineno}: not a question with as many passage rows (0 to {n_rows - 1}) as logits "
                                f"(numbers): rerun its train_reranker job")
            self._pair_cache.update(((q, r), float(v)) for r, v in zip(rows, logits))

    def _logits(self, questions: list[str], ids: np.ndarray) -> torch.Tensor:
        """The cross-encoder's logit of each question with each of its rows ``ids`` [B, L], flat [B * L]. A frozen
        cross-encoder (no parameter requires grad) scores each (question, passage row) pair once: a pair met
        again (a training question in a later step, the same question at another K) is read from its cache."""
        p = self.passages
        keys = [(q, j) for q, row in zip(questions, ids.tolist()) for j in row]
        if any(param.requires_grad for param in self.cross_encoder.parameters()):
            return self.pair_logits([q for q, _ in keys], [passage_text(p.titles[j], p.texts[j]) for _, j in keys])
        todo = list(dict.fromkeys(key for key in keys if key not in self._pair_cache))
        if todo:
            got = self.pair_logits([q for q, _ in todo], [passage_text(p.titles[j], p.texts[j]) for _, j in todo])
            self._pair_cache.update(zip(todo, got.detach().cpu().tolist()))
        device = next(self.cross_encoder.parameters()).device
        return torch.tensor([self._pair_cache[key] for key in keys], dtype=torch.float32, device=device)

    def retrieve(self, questions: list[str], k: int) -> Retrieved:
        """The top ``k`` [B, k] of the first stage's top L by the cross-encoder, and their scores [B, k]."""
        if k > self.depth_l:
            raise ConfigError(f"rerank depth {self.depth_l} is below K={k}: the reranker returns K of the first stage's "
                              f"top depth passages; set depth >= K")
        got = self.first.retrieve(questions, self.depth_l)
        ids = np.asarray(got.ids, dtype=np.int64)
        if ids.shape != (len(questions), self.depth_l):
            raise RuntimeError(f"the first stage returned ids of shape {ids.shape}, not ({len(questions)}, {self.depth_l})")
        if (ids < 0).any():
            raise RuntimeError(f"the first stage returned fewer than depth={self.depth_l} passages; lower the depth or "
                               f"enlarge the corpus")
        logits = self._logits(questions, ids).view(len(questions), self.depth_l) * self.score_scale
        if self.add_first_stage:
            logits = logits + got.scores.to(logits.device, torch.float32)
        order = np.argsort(-logits.detach().cpu().numpy(), axis=1, kind="stable")[:, :k]  # ties: first-stage order
        return Retrieved(np.take_along_axis(ids, order, axis=1),
                         torch.gather(logits, 1, torch.from_numpy(order).to(logits.device)))
