"""What the task commands (``train``, ``evaluate``, ``experiments``) share:
their ``--seed``, config, variant, retrieval-file and dev/test flags, and the set-up of the task's
sections and device."""

from __future__ import annotations

import argparse

from rag import runtime
from rag.cli import add_command
from rag.errors import ConfigError
from rag.sections import TrainSection, read_task_sections
from rag.tasks import EVAL_SPLITS, VARIANTS, variant_spec

EVAL_FLAGS = ("dev", "test", "dev_predictions", "dev_metrics", "test_predictions", "test_metrics")


def add_task_command(sub, name: str, func, help_: str):
    """The subcommand ``name`` running ``func``, with what every task command takes (:func:`task_setup`
    reads them): ``--seed`` (the fine-tune seed), ``--config`` and ``--variant``."""
    p = add_command(sub, name, func, help_)
    p.add_argument("--seed", type=int, help="the fine-tune seed (config key seeds; default: the section's seed)")
    p.add_argument("--config", required=True, nargs="+", help="config section file(s), merged")
    p.add_argument("--variant", required=True, type=_variant,
                   help=f"a variant ({', '.join(VARIANTS)}), or <variant>@<generator> for a run of config key generators")
    return p


def _variant(name: str) -> str:
    try:
        variant_spec(name)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name


def add_eval_args(p, required: bool) -> None:
    """The dev and test files to decode and the predictions and metrics to write for each."""
    p.add_argument("--dev", required=required, help="dev jsonl to decode")
    p.add_argument("--test", required=required, help="test jsonl to decode")
    for split in EVAL_SPLITS:
        p.add_argument(f"--{split}-predictions", required=required, help=f"{split} predictions.jsonl to write")
        p.add_argument(f"--{split}-metrics", required=required, help=f"{split} metrics.json to write")


def task_setup(args) -> tuple[TrainSection, str]:
    """The task's train_<task> section (with eval_<task> when given) and the device, set up; ``--seed``
    (the fine-tune seed, wildcard ``{seed}``) replaces the section's top-level ``seed``."""
    cfg = read_task_sections(args.config)
    if args.seed is not None:
        cfg = cfg.model_copy(update={"seed": args.seed})
    return cfg, runtime.setup(cfg.device, seed=cfg.seed, precision=cfg.precision)


def eval_io(args, required: bool) -> dict[str, tuple[str, str, str]] | None:
    """split -> (data file, predictions file, metrics file) from the --dev/--test/--*-predictions/
    --*-metrics flags: all six, or (``required=False``) none."""
    given = {f: getattr(args, f) for f in EVAL_FLAGS}
    if not any(given.values()) and not required:
        return None
    missing = [f"--{f.replace('_', '-')}" for f, v in given.items() if not v]
    if missing:
        raise ConfigError(f"evaluation needs {', '.join(missing)} (the files to read and write for dev and test)")
    return {split: (given[split], given[f"{split}_predictions"], given[f"{split}_metrics"]) for split in EVAL_SPLITS}
