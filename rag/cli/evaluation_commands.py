"""Evaluation and experiment commands: ``evaluate`` (rule ``evaluate``:
:mod:`rag.stages.evaluation`), ``topk-sweep``, ``oracle``, ``hotswap`` (rules ``topk_sweep``,
``oracle``, ``hotswap``: :mod:`rag.stages.experiments`) and ``score`` (one metric over a
predictions file: :mod:`rag.metrics`)."""

from __future__ import annotations

import json

from rag.cli import add_command
from rag.cli.task_args import add_eval_args, add_task_command, eval_io, task_setup
from rag.metrics import METRICS, score_files
from rag.retrieval import RetrievalFiles, add_file_args
from rag.sections import ExperimentsSection, read_section


def cmd_evaluate(args) -> None:
    from rag.stages.evaluation import evaluate_model

    cfg, device = task_setup(args)
    evaluate_model(cfg, args.variant, eval_io(args, required=True), args.model_dir, device,
                   files=RetrievalFiles.from_args(args))


def cmd_topk_sweep(args) -> None:
    from rag.stages.experiments import topk_sweep

    cfg, device = task_setup(args)
    topk_sweep(cfg, read_section(ExperimentsSection, args.experiments_config), device, args.variant,
               model_dir=args.model_dir, files=RetrievalFiles.from_args(args), test=args.test, out=args.out,
               decoded=args.test_predictions)


def cmd_hotswap(args) -> None:
    from rag.stages.experiments import hotswap

    cfg, device = task_setup(args)
    snapshots = {s: RetrievalFiles(passages=getattr(args, f"passages_{s}"), embeddings=getattr(args, f"embeddings_{s}"),
                                   index=getattr(args, f"index_{s}")) for s in ("a", "b")}
    hotswap(cfg, device, args.variant, model_dir=args.model_dir, questions=args.questions, snapshots=snapshots,
            out=args.out)


def cmd_oracle(args) -> None:
    from rag.stages.experiments import oracle

    cfg, device = task_setup(args)
    oracle(cfg, device, args.variant, model_dir=args.model_dir, passages=args.passages, test=args.test, out=args.out)


def cmd_score(args) -> None:
    score, n = score_files(args.metric, args.predictions, args.references)
    print(json.dumps({"metric": args.metric, "score": float(score), "n": n}))


def register(sub) -> None:
    p = add_task_command(sub, "evaluate", cmd_evaluate, "decode dev and test, score, log to the run")
    add_file_args(p)
    add_eval_args(p, required=True)
    p.add_argument("--model-dir", required=True)

    p = add_task_command(sub, "topk-sweep", cmd_topk_sweep,
                         "Figure 3: test-time K against the task metric and answer recall")
    add_file_args(p)
    p.add_argument("--test", required=True, help="test jsonl to decode at each K")
    p.add_argument("--test-predictions", help="the run's test predictions (the task's test-time K): that K is read, not decoded again")
    p.add_argument("--experiments-config", required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--out", required=True)

    p = add_task_command(sub, "oracle", cmd_oracle,
                         "reader quality: decode test with the gold passage as the only document (K = 1)")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--passages", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--out", required=True)

    p = add_task_command(sub, "hotswap", cmd_hotswap,
                         "Section 4.5: answer the leader questions with the index of each snapshot")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--questions", required=True)
    for s in ("a", "b"):
        p.add_argument(f"--passages-{s}", required=True)
        p.add_argument(f"--embeddings-{s}", nargs="+", required=True)
        p.add_argument(f"--index-{s}", required=True)
    p.add_argument("--out", required=True)

    p = add_command(sub, "score", cmd_score, "score predictions against references with one metric")
    p.add_argument("--metric", required=True, metavar="NAME", help=f"one of: {', '.join(METRICS)}")
    p.add_argument("--predictions", required=True, metavar="P.jsonl", help='lines {"id": ..., "prediction": "..."}')
    p.add_argument("--references", required=True, metavar="R.jsonl", help='lines {"id": ..., "targets": [...]}')
