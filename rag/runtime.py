"""The process set-up every compute command shares: threads, seed, device, precision."""

from __future__ import annotations

import os

from rag.errors import ConfigError


def threads() -> None:
    """torch's CPU threads: RAG_THREADS (the rule's ``threads``), else 1."""
    import torch

    torch.set_num_threads(int(os.environ.get("RAG_THREADS", 1)))


def faiss_threads() -> None:
    """FAISS's OpenMP threads: RAG_THREADS when set (a rule's ``threads``), else FAISS's default (all cores)."""
    if os.environ.get("RAG_THREADS"):
        import faiss

        faiss.omp_set_num_threads(int(os.environ["RAG_THREADS"]))


def setup(device: str, *, seed: int | None = None, precision: str | None = None) -> str:
    """Set threads and (given a ``seed``) torch's seed; return the device ("cuda" | "cpu"). A ConfigError
    when cuda is configured and torch sees no GPU, or (given) ``precision`` does not run on the device."""
    import torch

    threads()
    if seed is not None:
        torch.manual_seed(seed)
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("config key 'device': cuda requested but torch sees no GPU")
    device = "cuda" if device == "cuda" else "cpu"
    if precision is not None:
        from rag import precision as P

        P.check(precision, device)
    return device
