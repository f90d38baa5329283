"""The data stages: the corpus (miniworld or a converted one), one task's train/dev/test files and
the hot-swap questions (rules ``corpus``, ``tasks``, ``hotswap_data``)."""

from __future__ import annotations

import logging
from pathlib import Path

from rag.errors import ConfigError
from rag.io import write_jsonl
from rag.sections import CorpusSection, DataSection
from rag.tasks import SPLITS, TASKS

log = logging.getLogger("rag")


def build_corpus(cfg: CorpusSection, out: str | Path, *, snapshot: str = "a", source_file: str | Path | None = None,
                 restatements: str | Path | None = None) -> int:
    """Write ``passages.tsv`` (``cfg``: the corpus section): miniworld's snapshot ``snapshot``
    (and, with ``restatements``, the pretraining restatements), or ``source_file`` converted from
    the configured format. Returns the number of passages."""
    from rag.data import miniworld
    from rag.data.corpus import write_passages

    corpus = cfg.corpus
    if corpus.source == "miniworld":
        world = miniworld.build_world(cfg.world().to_dict(), cfg.seed)[snapshot]
        n = write_passages(out, miniworld.passages(world, corpus.passage_words))
        if restatements:
            write_jsonl(restatements, miniworld.restatements(world, corpus.passage_words))
    else:
        from rag.data.formats import prepare_corpus

        if not source_file:
            raise ConfigError(f"corpus source {corpus.source!r} needs --input (the downloaded or local file)")
        n = prepare_corpus(corpus.format, Path(source_file), Path(out), words=corpus.passage_words)
    log.info("wrote %d passages to %s", n, out)
    return n


def build_task(cfg: DataSection, outs: dict[str, str | Path], sources: dict[str, str | Path | None]) -> None:
    """Write one task's split files ``outs`` (split -> jsonl; ``cfg``: the data_<task> section):
    generated from miniworld, or converted from ``sources`` (split -> downloaded or local file)."""
    from rag.data import miniworld

    name, task = cfg.task_name, cfg.task
    if task.source == "miniworld":
        if cfg.miniworld is None or cfg.seed is None:
            raise ConfigError(f"task {name}: a miniworld task's data section needs seed and miniworld")
        world = miniworld.build_world(cfg.miniworld.to_dict(), cfg.seed)["a"]
        for split in SPLITS:
            try:
                sampling = (task.train_sampling or "facts") if split == "train" else "facts"
                rows = miniworld.make_task(world, name, split, getattr(task, split), cfg.seed, cfg.miniworld.passage_words, sampling)
            except ValueError as exc:
                raise ConfigError(f"config key 'tasks.{name}.{split}': {exc}") from None
            write_jsonl(outs[split], rows)
    else:
        from rag.data.formats import prepare_task, takes_option

        for split in SPLITS:
            src = sources.get(split)
            if not src:
                raise ConfigError(f"task {name} (source {task.source}) needs --in-{split} (the downloaded or local file)")
            # the split's parser: tasks.<task>.formats, else .format, else the registry's format of the task
            fmt = (task.formats or {}).get(split, TASKS[name].format if task.format is None else task.format)
            wf = task.keeps_well_formed_only(split) and takes_option(fmt, "well_formed_only")
            extra = {"well_formed_only": True} if wf else {}
            prepare_task(fmt, Path(src), Path(outs[split]), task=name, split=split, **extra)


def hotswap_questions(cfg: CorpusSection, out: str | Path) -> None:
    """The world-leader questions with the answers of both miniworld snapshots (``cfg``: the corpus section)."""
    from rag.data import miniworld

    write_jsonl(out, miniworld.hotswap_questions(miniworld.build_world(cfg.world().to_dict(), cfg.seed)))
