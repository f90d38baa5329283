"""Training commands: ``pretrain`` (rule ``pretrain_generator``: :mod:`rag.stages.pretraining`)
and ``train`` (rule ``train``: :mod:`rag.stages.fine_tuning`)."""

from __future__ import annotations

from rag import runtime
from rag.cli import add_command
from rag.cli.task_args import add_eval_args, add_task_command, eval_io, task_setup
from rag.retrieval import RetrievalFiles, add_file_args
from rag.sections import GeneratorSection, read_section


def cmd_pretrain(args) -> None:
    from rag.stages.pretraining import copy_pretrained_generator, pretrain_generator

    cfg = read_section(GeneratorSection, args.config)
    if cfg.generator.init == "pretrained":  # a copy of the named weights: no device or precision involved
        runtime.threads()
        copy_pretrained_generator(cfg, args.out)
        return
    # pretraining from scratch runs on the configured device and precision
    device = runtime.setup(cfg.device, seed=cfg.seed, precision=cfg.precision)
    pretrain_generator(cfg, device, args.passages, args.out, restatements=args.restatements,
                       checkpoint_dir=args.checkpoint_dir)


def cmd_train(args) -> None:
    from rag.stages.fine_tuning import fine_tune

    cfg, device = task_setup(args)
    fine_tune(cfg, device, args.variant, train_data=args.train_data, generator=args.generator,
              checkpoint_dir=args.checkpoint_dir, out=args.out, files=RetrievalFiles.from_args(args),
              init_from=args.init_from, config_hash=args.config_hash,
              eval_io=eval_io(args, required=False))  # evaluate_in_train_job: dev/test decoded by this job too


def register(sub) -> None:
    p = add_command(sub, "pretrain", cmd_pretrain,
                    "build the generator (tokenizer + BART) and pretrain it on the corpus")
    p.add_argument("--config", required=True, nargs="+")
    p.add_argument("--passages", nargs="+", required=True)
    p.add_argument("--restatements", help="miniworld: restated facts (rag corpus --restatements) for the reading objective")
    p.add_argument("--checkpoint-dir", help="resumable: keep a checkpoint here and resume from it (from scratch only)")
    p.add_argument("--out", required=True)

    p = add_task_command(sub, "train", cmd_train, "fine-tune one task x variant (resumes from its checkpoint)")
    add_file_args(p)
    p.add_argument("--train-data", required=True, help="the task's train jsonl")
    p.add_argument("--generator", required=True, help="the pretrained generator folder")
    p.add_argument("--init-from", help="start from this model folder (WebQuestions/CuratedTrec start from NQ)")
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--config-hash", default="")
    p.add_argument("--out", required=True)
    add_eval_args(p, required=False)  # all six: then decode dev and test with the saved model, as `rag evaluate`
