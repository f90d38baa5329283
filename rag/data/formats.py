"""Converting official dataset files to the project's common records: a task split
(``prepare_task``: its parser, the task's parser options, its regex targets checked, ids unique,
the count against the paper's Table 7) and a corpus (``prepare_corpus``: ``passages.tsv``).

The parsers are :mod:`rag.data.parsers` (a format is named after its parser); the Table 7 checks
:mod:`rag.data.table7`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable, Iterator

from rag.data.corpus import write_passages
from rag.data.parsers import (CORPUS_FORMATS, PARSERS, check_regex_targets, corpus_passages,  # noqa: F401
                              parse_corpus_jsonl, parse_corpus_tsv, parse_dpr_passages, parser, takes_option)
from rag.data.table7 import check_counts
from rag.errors import ConfigError, DataError
from rag.tasks import SPLITS, TASKS

log = logging.getLogger(__name__)


def _checked(records: Iterable, src: Path, regex_targets: bool, user_fmt: str | None) -> Iterator[dict]:
    """The records, refused where an id repeats or (``regex_targets``) a target does not compile; those of
    ``user_fmt``, a parser of the user's, first checked to be {id, input, targets[, meta]} (meta: {} when absent)."""
    seen: set[str] = set()
    for n, rec in enumerate(records):
        if user_fmt is not None:
            ok = (isinstance(rec, dict) and isinstance(rec.get("id"), str) and isinstance(rec.get("input"), str)
                  and isinstance(rec.get("targets"), list) and all(isinstance(t, str) for t in rec["targets"])
                  and isinstance(rec.get("meta", {}), dict) and set(rec) <= {"id", "input", "targets", "meta"})
            if not ok:
                raise DataError(f"{src}: record {n} of parser {user_fmt} is {rec!r:.120}; a parser yields "
                                "{\"id\": str, \"input\": str, \"targets\": [str, ...], \"meta\": {...}}")
            rec = {**rec, "meta": rec.get("meta", {})}
        if regex_targets:
            check_regex_targets(rec["targets"], f"{src}: record {n} (id {rec['id']!r})")
        if rec["id"] in seen:
            raise DataError(f"{src}: duplicate example id {rec['id']!r} (record {n})")
        seen.add(rec["id"])
        yield rec


def prepare_task(fmt: str, src: Path, out: Path, task: str, split: str, **kw) -> int:
    """Parse ``src`` in format ``fmt`` and write the common jsonl to ``out`` atomically; return the count.
    The task's entry gives its own format's parser options (``format_options``, defaults of ``kw``) and
    whether its targets are regular expressions; a count other than Table 7's logs a warning."""
    from rag.io import write_jsonl

    parse = parser(fmt, f"tasks.{task}.format")
    if task not in TASKS:
        raise ConfigError(f"task: unknown task {task!r} (known: {', '.join(TASKS)})")
    if split not in SPLITS:
        raise ConfigError(f"split: unknown split {split!r} (known: {', '.join(SPLITS)})")
    spec = TASKS[task]
    if fmt == spec.format:
        for key, value in spec.format_options.items():
            kw.setdefault(key, value)
    kw.setdefault("id_prefix", f"{task}-{split}")
    src = Path(src)
    try:
        records = parse(src, **kw)
    except TypeError as exc:
        raise ConfigError(f"format {fmt!r}: bad options {sorted(kw)}: {exc}") from None
    n = write_jsonl(out, _checked(records, src, spec.regex_targets, None if fmt in PARSERS else fmt))
    warning = check_counts(task, split, n)
    if warning:
        log.warning("%s", warning)
    log.info("%s -> %s: %d %s/%s examples", src, out, n, task, split)
    return n


def prepare_corpus(fmt: str, src: Path, out: Path, words: int = 100) -> int:
    """Convert a corpus to ``passages.tsv`` (:func:`corpus_passages`)."""
    n = write_passages(out, corpus_passages(fmt, src, words))
    log.info("%s -> %s: %d passages", src, out, n)
    return n
