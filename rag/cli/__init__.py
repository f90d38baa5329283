"""The ``rag`` command: one subcommand per pipeline step (each Snakemake rule calls one).

A module per command group (``MODULES``) defines ``register(subparsers)``, which adds its
subcommands and sets ``func`` on them: argument parsing and a call into the logic (the stages of
:mod:`rag.stages`, or the package that does the work), nothing else. Heavy imports (torch,
transformers, faiss, mlflow) happen inside the functions that need them, so ``rag --help`` and
the light commands start fast (tests/test_imports.py).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys

from rag.errors import RagError, failure_line

MODULES = (
    "rag.cli.data_commands",  # corpus, tasks, hotswap-data, prepare-task, prepare-corpus, download
    "rag.cli.retrieval_commands",  # encode, index, bm25
    "rag.cli.training_commands",  # pretrain, train
    "rag.cli.evaluation_commands",  # evaluate, experiments, score
    "rag.cli.report_commands",  # report, check, bands
    "rag.cli.run_commands",  # init-store, plan, diff-runs, import-hf-rag
)


def add_command(sub, name: str, func, help_: str, **kw) -> argparse.ArgumentParser:
    """The subcommand ``name`` of ``sub`` that runs ``func(args)``."""
    p = sub.add_parser(name, help=help_, **kw)
    p.set_defaults(func=func)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in MODULES:
        module = importlib.import_module(name)
        module.register(sub)
    return parser


def on_sigterm(_signum, _frame) -> None:
    """SIGTERM (a cluster's scancel, snakemake stopping a job) unwinds like an exception, so a job
    marks its MLflow run FAILED and removes its temporary outputs. It unwinds once: the same signal
    often comes twice (sent to the process group, and passed on by ``rag-record``), and a second
    exception raised inside that clean-up would cut it short; SIGKILL still ends a clean-up that hangs."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(143)


def main(argv: list[str] | None = None) -> int:
    """The ``rag`` command: parse ``argv`` (None: the command line) and run it; its exit code."""
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, on_sigterm)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        result = args.func(args)
    except RagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a full disk, no memory left, ...: one line (rag.errors.failure_line)
        line = failure_line(exc, args.command)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2
    return int(result or 0)
