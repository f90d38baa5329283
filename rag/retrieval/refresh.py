"""Keeping a dense retriever's index fresh while its passage encoder trains.

The index a run starts with was built by the passage encoder as it was; once that encoder trains, the index
goes stale. The strategies (:data:`STRATEGIES`):

- ``none``: that index proposes each question's top K throughout, the passage encoder rescoring them (the
  lower bound);
- ``rerank``: it proposes the top ``depth`` (L) and the current passage encoder picks the best K of them
  (:class:`rag.retrieval.dense.DenseRetriever` ``rescore_depth``), as Atlas's ``retrieve_with_rerank``;
- ``refresh``: every ``every`` steps the training process encodes the corpus again with the current passage
  encoder and rebuilds the index, training waiting for it (Atlas's ``refresh_index``);
- ``async``: every ``every`` steps a snapshot of the passage encoder goes to the job's encoder processes
  (ranks of torch.distributed: another CPU process, or other GPUs), which encode the corpus while training
  goes on; the trainer swaps the new index in after the first step at which it is complete (rag-end2end,
  EMDR²). Which step that is depends on the machine's speed: such a run is not reproducible step for step.

Each swap is recorded (:class:`IndexKeeper` ``records``): the step, the overlap of the replaced and the new
index's top K on probe questions (the dev set's), the CPU seconds of the encoding and the seconds training
waited. The checkpoint keeps the snapshot the current index was built from; a resume rebuilds that index, so a
resumed run retrieves from the index an uninterrupted one held at that step.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch

from rag.tasks import INDEX_STRATEGIES as STRATEGIES


@dataclass(frozen=True)
class RefreshOptions:
    strategy: str = "none"
    every: int = 100  # steps between refreshes (refresh, async)
    depth: int = 20  # rerank: the stale index's top L the passage encoder rescores
    batch_size: int = 32  # passages an encoder forward

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown index refresh strategy {self.strategy!r} (known: {', '.join(STRATEGIES)})")


def encode_corpus(encoder, passages, rows: tuple[int, int] | None = None, batch_size: int = 32) -> np.ndarray:
    """float32 [n, d]: the passages (rows ``lo:hi`` of them, or all) encoded by ``encoder`` as the index's
    embeddings are (:func:`rag.retrieval.encoders.encode_passages`)."""
    from rag.retrieval.encoders import encode_passages

    lo, hi = rows if rows is not None else (0, len(passages))
    device = next(encoder.parameters()).device
    return encode_passages(encoder, passages.titles[lo:hi], passages.texts[lo:hi], batch_size, str(device), progress=False)


def snapshot(encoder) -> dict[str, torch.Tensor]:
    """A copy of ``encoder``'s state, on the CPU."""
    return {k: v.detach().to("cpu", copy=True) for k, v in encoder.state_dict().items()}


class IndexKeeper:
    """The index of ``retriever`` (a DenseRetriever whose ``context_encoder`` trains) kept by ``options``; the
    probe questions measure each swap. ``channel`` (async): a :class:`DistributedEncoding`."""

    def __init__(self, retriever, options: RefreshOptions, probe: list[str], k: int, channel=None):
        if retriever.context_encoder is None:
            raise ValueError("an index is kept fresh for a trained passage encoder: the retriever has none")
        if options.strategy == "async" and channel is None:
            raise ValueError("the async strategy needs encoder processes (a DistributedEncoding)")
        self.retriever, self.options, self.probe, self.k, self.channel = retriever, options, probe, k, channel
        retriever.rescore_depth = options.depth if options.strategy == "rerank" else None
        self.built_from: dict | None = None  # the snapshot the index was built from (None: the one the run began with)
        self.records: list[dict] = []
        self._asked: dict | None = None  # async: the snapshot being encoded

    # ---------------------------------------------------------------- the checkpoint's part
    def state(self) -> dict:
        return {"built_from": self.built_from or {}, "records": [dict(r) for r in self.records]}

    def start(self, saved: dict | None) -> None:
        """Rebuild the index of a resumed run (``saved``: :meth:`state` from its checkpoint)."""
        if not saved:
            return
        self.records = [dict(r) for r in saved.get("records", [])]
        if saved.get("built_from"):
            self._swap(self._encode_here(saved["built_from"]), saved["built_from"])

    # ---------------------------------------------------------------- training's hook
    def after_step(self, step: int) -> None:
        """Called with the number of steps done: refresh, or start and collect an asynchronous encoding."""
        o = self.options
        if o.strategy == "refresh" and step % o.every == 0:
            started, cpu = time.perf_counter(), time.process_time()
            state = snapshot(self.retriever.context_encoder)
            emb = self._encode_here(state)
            self._record(step, self._swap(emb, state), time.process_time() - cpu, time.perf_counter() - started)
        elif o.strategy == "async":
            if self._asked is not None and self.channel.ready():
                started = time.perf_counter()
                emb, cpu = self.channel.result()
                self._record(step, self._swap(emb, self._asked), cpu, time.perf_counter() - started)
                self._asked = None
            if self._asked is None and step % o.every == 0:
                self._asked = snapshot(self.retriever.context_encoder)
                self.channel.submit(self._asked)

    def finish(self, step: int, emb: np.ndarray, cpu: float, waited: float) -> None:
        """The index over ``emb`` (the corpus encoded by the final passage encoder) swapped in, recorded at ``step``."""
        self._record(step, self._swap(emb, None), cpu, waited)

    def close(self) -> None:
        """Stop the encoder processes (an encoding in flight is dropped)."""
        if self.channel is not None:
            self.channel.close()

    # ---------------------------------------------------------------- its parts
    def _encode_here(self, state: dict) -> np.ndarray:
        encoder = copy.deepcopy(self.retriever.context_encoder)
        encoder.load_state_dict(state)
        return encode_corpus(encoder, self.retriever.passages, batch_size=self.options.batch_size)

    def _swap(self, emb: np.ndarray, state: dict) -> float:
        """The index over ``emb`` in place of the retriever's; the overlap of the two indexes' top K on the probe."""
        from rag.retrieval.index import build_index

        index = build_index(emb, "flat")
        overlap = top_k_overlap(self.retriever, self.retriever.index, index, self.probe, self.k)
        self.retriever.index, self.retriever.doc_emb, self.built_from = index, emb, state
        return overlap

    def _record(self, step: int, overlap: float, cpu: float, waited: float) -> None:
        self.records.append({"step": step, "overlap": overlap, "cpu_seconds": cpu, "wait_seconds": waited})


@torch.no_grad()
def top_k_overlap(retriever, old, new, questions: list[str], k: int) -> float:
    """The mean share of each question's top ``k`` in index ``old`` also in index ``new`` (the question encoder
    as it is, in eval mode); nan without questions."""
    if not questions:
        return float("nan")
    qenc = retriever.question_encoder
    mode = qenc.training
    qenc.eval()
    try:
        q = np.ascontiguousarray(qenc.encode_texts(questions).float().cpu().numpy())
    finally:
        qenc.train(mode)
    _, a = old.search(q, k)
    _, b = new.search(q, k)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a.tolist(), b.tolist())]))


class DistributedEncoding:
    """The trainer's side (rank 0) of encoding through torch.distributed: :meth:`submit` sends a snapshot of the
    passage encoder to each encoder rank, which encodes its share of the corpus (:func:`serve`); :meth:`ready`
    says whether every share is back, :meth:`result` gives them in order with the CPU seconds they cost. The
    shares come back on a thread (a gloo receive completes only when waited on)."""

    STOP, ENCODE = 0, 1

    def __init__(self, encoder_ranks: list[int], n_passages: int, dim: int, group=None):
        from rag.retrieval.encoders import shard_range

        self.ranks, self.group = list(encoder_ranks), group
        self.shares = [shard_range(n_passages, i, len(self.ranks)) for i in range(len(self.ranks))]
        self.dim = dim
        self._done: threading.Event | None = None
        self._got: list | None = None

    def submit(self, state: dict[str, torch.Tensor]) -> None:
        import torch.distributed as dist

        if self._done is not None:
            raise RuntimeError("an encoding is already in flight")
        for rank in self.ranks:
            dist.send(torch.tensor([self.ENCODE]), rank, group=self.group)
            for tensor in state.values():
                dist.send(tensor.contiguous(), rank, group=self.group)
        self._done, self._got = threading.Event(), [None] * len(self.ranks)
        threading.Thread(target=self._receive, name="receive-embeddings", daemon=True).start()

    def _receive(self) -> None:
        import torch.distributed as dist

        for i, (rank, (lo, hi)) in enumerate(zip(self.ranks, self.shares)):
            cpu, emb = torch.zeros(1, dtype=torch.float64), torch.empty(hi - lo, self.dim)
            dist.recv(cpu, rank, group=self.group)
            if hi > lo:
                dist.recv(emb, rank, group=self.group)
            self._got[i] = (emb.numpy(), float(cpu))
        self._done.set()

    def ready(self) -> bool:
        return self._done is not None and self._done.is_set()

    def result(self) -> tuple[np.ndarray, float]:
        """The whole corpus's embeddings [n, d] and the encoder ranks' CPU seconds (waiting for them if need be)."""
        self._done.wait()
        got, self._done, self._got = self._got, None, None
        return np.concatenate([g[0] for g in got]), sum(g[1] for g in got)

    def close(self) -> None:
        import torch.distributed as dist

        if self._done is not None:  # let the encoders finish what they were sent, so each is back at its receive
            self.result()
        for rank in self.ranks:
            dist.send(torch.tensor([self.STOP]), rank, group=self.group)


def serve(encoder, passages, share: tuple[int, int], trainer: int = 0, batch_size: int = 32, group=None) -> int:
    """An encoder rank's loop: receive a snapshot of the passage encoder from rank ``trainer``, encode the corpus
    rows ``share`` with it, send them back with the CPU seconds it took; until told to stop. The number of
    encodings it made."""
    import torch.distributed as dist

    template = encoder.state_dict()
    done = 0
    while True:
        command = torch.zeros(1, dtype=torch.long)
        dist.recv(command, trainer, group=group)
        if int(command) == DistributedEncoding.STOP:
            return done
        state = {}
        for key, like in template.items():
            tensor = torch.empty_like(like, device="cpu")
            dist.recv(tensor, trainer, group=group)
            state[key] = tensor
        cpu = time.process_time()
        encoder.load_state_dict(state)
        emb = encode_corpus(encoder, passages, share, batch_size)
        dist.send(torch.tensor([time.process_time() - cpu], dtype=torch.float64), trainer, group=group)
        if len(emb):
            dist.send(torch.from_numpy(np.ascontiguousarray(emb, dtype=np.float32)), trainer, group=group)
        done += 1
