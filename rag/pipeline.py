"""Train, evaluate and experiment subcommands (rules ``train``, ``evaluate``, ``topk_sweep``,
``hotswap``, ``oracle``): argument parsing only; the work is the stage functions' of
:mod:`rag.stages` (``train``, ``evaluate``, ``experiments``)."""

from __future__ import annotations

from dataclasses import replace

from rag import runtime
from rag.errors import ConfigError
from rag.retrieval import RetrievalFiles, add_file_args
from rag.sections import ExperimentsSection, TrainSection, read_section, read_task_sections
from rag.tasks import VARIANTS


def _task_setup(args) -> tuple[TrainSection, str]:
    """The task's train_<task> section (with eval_<task> when given) and the device, set up.

    ``--seed`` (the run's fine-tune seed, wildcard ``{seed}`` of the rules) replaces the section's
    ``seed`` (the top-level one, which made the world, the data and the pretrained generator): the
    fine-tune's initial RNG state and its batch order, and what the run's files and MLflow record."""
    cfg = read_task_sections(args.config)
    if args.seed is not None:
        cfg = replace(cfg, seed=args.seed)
    return cfg, runtime.setup(cfg.device, seed=cfg.seed, precision=cfg.precision)


def cmd_train(args) -> None:
    from rag.stages.fine_tuning import fine_tune

    cfg, device = _task_setup(args)
    fine_tune(cfg, device, args.variant, train_data=args.train_data, generator=args.generator,
              checkpoint_dir=args.checkpoint_dir, out=args.out, files=RetrievalFiles.from_args(args),
              init_from=args.init_from, config_hash=args.config_hash,
              eval_io=_eval_io(args, required=False))  # evaluate_in_train_job: dev/test decoded by this job too


EVAL_FLAGS = ("dev", "test", "dev_predictions", "dev_metrics", "test_predictions", "test_metrics")


def _eval_io(args, required: bool) -> dict[str, tuple[str, str, str]] | None:
    """split -> (data file, predictions file, metrics file) from the --dev/--test/--*-predictions/
    --*-metrics flags: all six, or (``required=False``) none."""
    given = {f: getattr(args, f) for f in EVAL_FLAGS}
    if not any(given.values()) and not required:
        return None
    missing = [f"--{f.replace('_', '-')}" for f, v in given.items() if not v]
    if missing:
        raise ConfigError(f"evaluation needs {', '.join(missing)} (the files to read and write for dev and test)")
    return {split: (given[split], given[f"{split}_predictions"], given[f"{split}_metrics"]) for split in ("dev", "test")}


def cmd_evaluate(args) -> None:
    from rag.stages.evaluation import evaluate_model

    cfg, device = _task_setup(args)
    evaluate_model(cfg, args.variant, _eval_io(args, required=True), args.model_dir, device,
                   files=RetrievalFiles.from_args(args))


def cmd_topk_sweep(args) -> None:
    from rag.stages.experiments import topk_sweep

    cfg, device = _task_setup(args)
    topk_sweep(cfg, read_section(ExperimentsSection, args.experiments_config), device, args.variant,
               model_dir=args.model_dir, files=RetrievalFiles.from_args(args), test=args.test, out=args.out)


def cmd_hotswap(args) -> None:
    from rag.stages.experiments import hotswap

    cfg, device = _task_setup(args)
    snapshots = {s: RetrievalFiles(passages=getattr(args, f"passages_{s}"), embeddings=getattr(args, f"embeddings_{s}"),
                                   index=getattr(args, f"index_{s}")) for s in ("a", "b")}
    hotswap(cfg, device, args.variant, model_dir=args.model_dir, questions=args.questions, snapshots=snapshots,
            out=args.out)


def cmd_oracle(args) -> None:
    from rag.stages.experiments import oracle

    cfg, device = _task_setup(args)
    oracle(cfg, device, args.variant, model_dir=args.model_dir, passages=args.passages, test=args.test, out=args.out)


def register(sub) -> None:
    def add(name, func, help_):
        p = sub.add_parser(name, help=help_)
        p.set_defaults(func=func)
        p.add_argument("--seed", type=int, help="the fine-tune seed (config key seeds; default: the section's seed)")
        return p

    def retrieval_args(p):
        p.add_argument("--config", required=True, nargs="+", help="config section file(s), merged")
        p.add_argument("--variant", required=True, choices=VARIANTS)
        add_file_args(p)  # the variant's retrieval files (rag/tasks.py RETRIEVERS names them)

    def eval_args(p, required):
        p.add_argument("--dev", required=required, help="dev jsonl to decode")
        p.add_argument("--test", required=required, help="test jsonl to decode")
        for split in ("dev", "test"):
            p.add_argument(f"--{split}-predictions", required=required, help=f"{split} predictions.jsonl to write")
            p.add_argument(f"--{split}-metrics", required=required, help=f"{split} metrics.json to write")

    p = add("train", cmd_train, "fine-tune one task x variant (resumes from its checkpoint)")
    retrieval_args(p)
    p.add_argument("--train-data", required=True, help="the task's train jsonl")
    p.add_argument("--generator", required=True, help="the pretrained generator folder")
    p.add_argument("--init-from", help="start from this model folder (WebQuestions/CuratedTrec start from NQ)")
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--config-hash", default="")
    p.add_argument("--out", required=True)
    eval_args(p, required=False)  # all six: then decode dev and test with the saved model, as `rag evaluate`

    p = add("evaluate", cmd_evaluate, "decode dev and test, score, log to the run")
    retrieval_args(p)
    eval_args(p, required=True)
    p.add_argument("--model-dir", required=True)

    p = add("topk-sweep", cmd_topk_sweep, "Figure 3: test-time K against the task metric and answer recall")
    retrieval_args(p)
    p.add_argument("--test", required=True, help="test jsonl to decode at each K")
    p.add_argument("--experiments-config", required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--out", required=True)

    p = add("oracle", cmd_oracle, "reader quality: decode test with the gold passage as the only document (K = 1)")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--variant", required=True, choices=VARIANTS)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--passages", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--out", required=True)

    p = add("hotswap", cmd_hotswap, "Section 4.5: answer the leader questions with the index of each snapshot")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--variant", required=True, choices=VARIANTS)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--questions", required=True)
    for s in ("a", "b"):
        p.add_argument(f"--passages-{s}", required=True)
        p.add_argument(f"--embeddings-{s}", nargs="+", required=True)
        p.add_argument(f"--index-{s}", required=True)
    p.add_argument("--out", required=True)
