"""Data commands: ``corpus``, ``tasks``, ``hotswap-data`` (rules ``corpus``, ``tasks``,
``hotswap_data``; the work is :mod:`rag.stages.datasets`'), ``prepare-task`` and ``prepare-corpus``
(:mod:`rag.data.formats`) and ``download`` (:mod:`rag.data.download`)."""

from __future__ import annotations

from pathlib import Path

from rag.cli import add_command
from rag.data import download as D
from rag.data.formats import CORPUS_FORMATS, PARSERS
from rag.errors import ConfigError
from rag.sections import CorpusSection, DataSection, read_section
from rag.tasks import SPLITS, TASKS


def cmd_corpus(args) -> None:
    from rag.stages.datasets import build_corpus

    build_corpus(read_section(CorpusSection, args.config), args.out, snapshot=args.snapshot, source_file=args.input,
                 restatements=args.restatements)


def cmd_tasks(args) -> None:
    from rag.stages.datasets import build_task

    build_task(read_section(DataSection, args.config), {s: getattr(args, f"out_{s}") for s in SPLITS},
               {s: getattr(args, f"in_{s}") for s in SPLITS})


def cmd_hotswap_data(args) -> None:
    from rag.stages.datasets import hotswap_questions

    hotswap_questions(read_section(CorpusSection, args.config), args.out)


def cmd_prepare_task(args) -> None:
    from rag.data.formats import prepare_task, takes_option

    kw = {}
    if args.well_formed_only:
        if not takes_option(args.format, "well_formed_only"):
            raise ConfigError(f"--well-formed-only applies to --format "
                              f"{' / '.join(f for f in PARSERS if takes_option(f, 'well_formed_only'))} only")
        kw["well_formed_only"] = True
    n = prepare_task(args.format, Path(args.input), Path(args.output), args.task, args.split, **kw)
    print(n)


def cmd_prepare_corpus(args) -> None:
    from rag.data.formats import prepare_corpus

    n = prepare_corpus(args.format, Path(args.input), Path(args.output), words=args.words)
    print(n)


def cmd_download(args) -> None:
    path = D.download(args.url, Path(args.out), sha256=args.sha256, allow_http=args.allow_http)
    print(path)


def register(sub) -> None:
    p = add_command(sub, "corpus", cmd_corpus,
                    "generate (miniworld) or convert a corpus into passages.tsv (corpus.passage_words words)")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--snapshot", default="a", choices=["a", "b"])
    p.add_argument("--input", help="downloaded/local corpus file (non-miniworld sources)")
    p.add_argument("--out", required=True)
    p.add_argument("--restatements", help="miniworld: also write the pretraining restatements (jsonl) here")

    p = add_command(sub, "tasks", cmd_tasks, "generate (miniworld) or convert one task's train/dev/test jsonl")
    p.add_argument("--config", required=True, nargs="+")
    for split in SPLITS:
        p.add_argument(f"--in-{split}", help=f"download/local sources: the {split} file (or folder) to convert")
    for split in SPLITS:
        p.add_argument(f"--out-{split}", required=True, help=f"the {split} jsonl to write")

    p = add_command(sub, "hotswap-data", cmd_hotswap_data, "world-leader questions with answers of both snapshots")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--out", required=True)

    p = add_command(sub, "prepare-task", cmd_prepare_task, "convert an official task file to the common jsonl")
    p.add_argument("--format", required=True, choices=sorted(PARSERS))
    p.add_argument("--input", required=True, help="source file (or a directory of SearchQA json for jeopardy)")
    p.add_argument("--output", required=True, help="output jsonl")
    p.add_argument("--task", required=True, choices=list(TASKS))
    p.add_argument("--split", required=True, choices=SPLITS)
    p.add_argument("--well-formed-only", action="store_true", help="msmarco: keep only rows with wellFormedAnswers")

    p = add_command(sub, "prepare-corpus", cmd_prepare_corpus, "convert a passage corpus to passages.tsv")
    p.add_argument("--format", required=True, choices=CORPUS_FORMATS)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True, help="output passages.tsv (id, title, text)")
    p.add_argument("--words", type=int, default=100, help="passage length in words for --format documents")

    p = add_command(sub, "download", cmd_download, "download a file over HTTPS (resumable, checksum-verified, atomic)",
                    description=D.__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="https:// URL to fetch")
    p.add_argument("--out", required=True, help="destination file")
    p.add_argument("--sha256", default=None, help="expected SHA-256 (hex); without it the first download is recorded")
    p.add_argument("--allow-http", action="store_true", help="allow plain http:// (local test servers only)")
