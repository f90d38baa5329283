"""Data: corpora, task files, the miniworld generator and the paper's published numbers."""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

PAPER_RESULTS = Path(__file__).with_name("paper_results.yaml")


@lru_cache(maxsize=1)
def _paper_results() -> dict:
    import yaml

    with open(PAPER_RESULTS, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def paper_results() -> dict:
    """The paper's published numbers and dataset sizes (``rag/data/paper_results.yaml``), read once."""
    return copy.deepcopy(_paper_results())
