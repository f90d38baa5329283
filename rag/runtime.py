"""The process set-up every compute command shares: threads, seed, device, precision."""

from __future__ import annotations

import os

from rag.errors import ConfigError


def threads(cfg: dict) -> None:
    """torch's CPU threads: RAG_THREADS (the rule's ``threads``), else the config's ``threads``."""
    import torch

    torch.set_num_threads(int(os.environ.get("RAG_THREADS", cfg.get("threads", 1))))


def setup(cfg: dict, *, seed: bool = True, check_precision: bool = True) -> str:
    """Set threads and (``seed``) torch's seed; return the configured device ("cuda" | "cpu").

    Raises ConfigError when cuda is configured and torch sees no GPU, and (``check_precision``)
    when the configured precision does not run on the device."""
    import torch

    threads(cfg)
    if seed:
        torch.manual_seed(cfg["seed"])
    device = "cpu"
    if cfg.get("device") == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("config key 'device': cuda requested but torch sees no GPU")
        device = "cuda"
    if check_precision:
        from rag import precision

        precision.check(cfg["precision"], device)
    return device
