"""The ``rag`` command: one subcommand per pipeline step (each Snakemake rule calls one).

A module per command group (``MODULES``) defines ``register(subparsers)``, which adds its
subcommands and sets ``func`` on them: argument parsing and a call into the logic (the stages of
:mod:`rag.stages`, or the package that does the work), nothing else. Heavy imports (torch,
transformers, faiss, mlflow) happen inside the functions that need them, so ``rag --help`` and
the light commands start fast (tests/test_imports.py).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import logging
import os
import signal
import sys
import threading
from typing import NoReturn

from rag.errors import RagError, failure_line

MODULES = (
    "rag.cli.data_commands",  # corpus, tasks, hotswap-data, prepare-task, prepare-corpus, download
    "rag.cli.retrieval_commands",  # encode, index, bm25
    "rag.cli.training_commands",  # pretrain, train
    "rag.cli.evaluation_commands",  # evaluate, topk-sweep, oracle, hotswap, score
    "rag.cli.report_commands",  # report, check, bands
    "rag.cli.run_commands",  # init-store, plan, diff-runs, import-hf-rag
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in MODULES:
        module = importlib.import_module(name)
        module.register(sub)
    return parser


# The collector's thresholds of a ``rag`` process (CPython's default: 700, 10, 10). A model command's
# imports (torch, transformers, MLflow) leave about half a million long-lived objects, and at the
# default each quarter of growth starts a full collection over all of them: about 1 s of a job's
# start-up. Collections still run, after every 50,000 objects a command allocates net.
PROGRAM_GC_THRESHOLDS = (50_000, 20, 20)


def main(argv: list[str] | None = None) -> int:
    """The ``rag`` command. Run as a program (``argv`` None), a command that returns ends the
    process at once (:func:`leave`)."""
    if argv is not None:
        return _run(build_parser().parse_args(argv))
    gc.set_threshold(*PROGRAM_GC_THRESHOLDS)
    leave(_run(build_parser().parse_args(None)))


def leave(code: int) -> NoReturn:
    """End this process with ``code`` once the command has returned: the exit handlers run (logging's
    flush, weakref finalizers, any library's), the standard streams are flushed, and the interpreter's
    teardown is skipped. That teardown only frees memory the system takes back anyway, and after a
    model command it costs 1-2 s of CPU (clearing thousands of modules, a last full collection).
    A process that still runs a thread the interpreter would wait for, or that is in a
    torch.distributed group (torchrun), leaves the normal way: the thread ends, the group is torn down."""
    dist = sys.modules.get("torch.distributed")
    in_group = dist is not None and dist.is_available() and dist.is_initialized()
    waits = any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread())
    if in_group or waits:
        raise SystemExit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing left to write to
            pass
    os._exit(code)


def _run(args) -> int:
    # SIGTERM (a cluster's scancel, snakemake stopping a job) unwinds like an exception, so jobs
    # mark their MLflow run FAILED and temporary outputs are removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
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
