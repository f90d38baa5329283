"""Evaluation and experiment commands: ``evaluate`` (rule ``evaluate``:
:mod:`rag.stages.evaluation`), ``experiments`` (rule ``experiments``: :mod:`rag.stages.experiments`)
and ``score`` (one metric over a predictions file: :mod:`rag.metrics`)."""

from __future__ import annotations

import json

from rag.cli import add_command
from rag.cli.task_args import add_eval_args, add_task_command, eval_io, task_setup
from rag.errors import ConfigError
from rag.metrics import METRICS, score_files
from rag.retrieval import RetrievalFiles, add_file_args
from rag.sections import ExperimentsSection, read_section


def cmd_evaluate(args) -> None:
    from rag.stages.evaluation import evaluate_model

    cfg, device = task_setup(args)
    evaluate_model(cfg, args.variant, eval_io(args, required=True), args.model_dir, device,
                   files=RetrievalFiles.from_args(args))


def cmd_experiments(args) -> None:
    from rag.stages.experiments import run_experiments

    hot = {"questions": args.questions, "passages_b": args.passages_b, "embeddings_b": args.embeddings_b,
           "index_b": args.index_b}
    if args.hotswap_out and not all(hot.values()) or not args.hotswap_out and any(hot.values()):
        raise ConfigError("the hot-swap needs --hotswap-out, --questions, --passages-b, --embeddings-b and --index-b together")
    cfg, device = task_setup(args)
    files = RetrievalFiles.from_args(args)
    snapshot_b = RetrievalFiles(passages=args.passages_b, embeddings=args.embeddings_b, index=args.index_b)
    run_experiments(cfg, read_section(ExperimentsSection, args.experiments_config), device, args.variant,
                    model_dir=args.model_dir, files=files, test=args.test, decoded=args.test_predictions,
                    topk_out=args.topk_out, oracle_out=args.oracle_out, hotswap_out=args.hotswap_out,
                    questions=args.questions, snapshot_b=snapshot_b)


def cmd_score(args) -> None:
    score, n = score_files(args.metric, args.predictions, args.references)
    print(json.dumps({"metric": args.metric, "score": float(score), "n": n}))


def register(sub) -> None:
    p = add_task_command(sub, "evaluate", cmd_evaluate, "decode dev and test, score, log to the run")
    add_file_args(p)
    add_eval_args(p, required=True)
    p.add_argument("--model-dir", required=True)

    p = add_task_command(sub, "experiments", cmd_experiments,
                         "one model's experiments: Figure 3's K sweep, the oracle, the index hot-swap")
    add_file_args(p)
    p.add_argument("--test", required=True, help="test jsonl to decode at each K and with the gold passage")
    p.add_argument("--test-predictions", help="the run's test predictions (the task's test-time K): that K is read, not decoded again")
    p.add_argument("--experiments-config", required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--topk-out", required=True, help="Figure 3: the task metric and answer recall at each K")
    p.add_argument("--oracle-out", help="the reader given the gold passage (from --passages) as its only document")
    p.add_argument("--hotswap-out", help="Section 4.5: the leader questions answered with each snapshot's index "
                   "(--passages/--embeddings/--index, then the -b ones)")
    p.add_argument("--questions", help="the hot-swap's questions (rag hotswap-data)")
    p.add_argument("--passages-b")
    p.add_argument("--embeddings-b", nargs="+")
    p.add_argument("--index-b")

    p = add_command(sub, "score", cmd_score, "score predictions against references with one metric")
    p.add_argument("--metric", required=True, metavar="NAME", help=f"one of: {', '.join(METRICS)}")
    p.add_argument("--predictions", required=True, metavar="P.jsonl", help='lines {"id": ..., "prediction": "..."}')
    p.add_argument("--references", required=True, metavar="R.jsonl", help='lines {"id": ..., "targets": [...]}')
