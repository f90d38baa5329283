"""Commands about runs and their records: ``init-store`` (the MLflow store, rule ``init_store``:
:mod:`rag.tracking`), ``plan`` (what each rule of a config will need: :mod:`rag.plan`),
``diff-runs`` (what differs between two runs' manifests: :mod:`rag.manifest`) and
``import-hf-rag`` (a Hugging Face RAG checkpoint as a model folder: :mod:`rag.hf_import`)."""

from __future__ import annotations

import json
from pathlib import Path

from rag.cli import add_command
from rag.plan import DEFAULT_PROFILE, ROOT


def cmd_init_store(args) -> None:
    from rag.tracking import init_store

    init_store(args.uri, Path(args.marker))


def cmd_plan(args) -> None:
    from rag.config import load_config
    from rag.errors import ConfigError
    from rag.plan import make_plan, render

    for flag in ("passages", "dim", "cores"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise ConfigError(f"--{flag}: at least 1, got {getattr(args, flag)}")
    from snakemake.utils import update_config

    from rag.config import read_config_file

    merged: dict = {}
    for path in args.configfile:  # as snakemake --configfile merges several: a later file's keys win
        update_config(merged, read_config_file(path))
    cfg = load_config(merged, check_files=False)
    # the profile as given, else the checkout's of that name
    profile = None if args.no_profile else next(
        (p for p in (Path(args.profile), ROOT / args.profile) if p.exists()), Path(args.profile))
    results = Path(args.results) if args.results else Path("results") / cfg["name"]
    plan = make_plan(cfg, config_paths=[Path(p) for p in args.configfile], profile_path=profile, results=results,
                     passages=args.passages, dim=args.dim, cores=args.cores, targets=args.target)
    print(json.dumps(plan, indent=2) if args.json else render(plan))


def cmd_diff_runs(args) -> None:
    from rag.manifest import describe, diff_manifests, read_manifest

    a, pa = read_manifest(args.a)
    b, pb = read_manifest(args.b)
    diffs = diff_manifests(a, b)
    if args.json:
        print(json.dumps({"a": str(pa), "b": str(pb), "differences": [d.__dict__ for d in diffs]}, indent=2, default=str))
    else:
        print(f"A: {pa}\nB: {pb}", *describe(diffs), sep="\n")


def cmd_import_hf_rag(args) -> None:
    from rag.hf_import import import_hf_rag

    import_hf_rag(args.checkpoint, args.out, task=args.task, variant=args.variant, tracking_uri=args.tracking_uri,
                  experiment=args.experiment, question_tokenizer=args.question_tokenizer,
                  generator_tokenizer=args.generator_tokenizer)


def register(sub) -> None:
    p = add_command(sub, "init-store", cmd_init_store, "create the MLflow tracking store once, before parallel jobs")
    p.add_argument("--uri", required=True)
    p.add_argument("--marker", required=True)

    p = add_command(sub, "plan", cmd_plan, "what each rule of a config will need (memory, disk, time) against what its "
                    "jobs request (the jobs and requests: Snakemake's DAG, run from ./Snakefile or the checkout's)")
    p.add_argument("--configfile", nargs="+", default=["config.yaml"],
                   help="the config (default config.yaml); several are merged as snakemake --configfile merges them")
    p.add_argument("--profile", default=DEFAULT_PROFILE, help=f"Snakemake profile whose requests to check (default {DEFAULT_PROFILE})")
    p.add_argument("--no-profile", action="store_true", help="no profile: the rules' own requests (from the config's resources:)")
    p.add_argument("--results", help="an earlier run's results folder, whose resource records refine the needs "
                   "(default results/<name>, when it exists)")
    p.add_argument("--passages", type=int, help="the corpus' passage count, when it cannot be read or looked up")
    p.add_argument("--dim", type=int, help="the context encoder's output size, when no config.json for it is here")
    p.add_argument("--cores", type=int, help="CPU cores the DAG's wall time is bounded on (default: this machine's)")
    p.add_argument("--target", nargs="+", help="the run's targets, rules or files, as snakemake <targets> (default: its "
                   "default target; e.g. generators)")
    p.add_argument("--json", action="store_true", help="the plan as JSON")

    p = add_command(sub, "diff-runs", cmd_diff_runs,
                    "what differs between two runs' manifests, the most likely cause first")
    p.add_argument("a", help="a manifest.json, a run's metrics.json, or a run folder (runs/<task>/<variant> or its model/)")
    p.add_argument("b", help="the other run")
    p.add_argument("--json", action="store_true", help="the differences as JSON")

    p = add_command(sub, "import-hf-rag", cmd_import_hf_rag,
                    "convert a Hugging Face RAG checkpoint into a project model folder")
    p.add_argument("--checkpoint", required=True, help="folder saved with Rag{Sequence,Token}ForGeneration.save_pretrained")
    p.add_argument("--out", required=True, help="model folder to write (generator/, question_encoder/, meta.json)")
    p.add_argument("--task", help="task name recorded in meta.json")
    p.add_argument("--variant", help="variant recorded in meta.json (default rag_sequence / rag_token from the checkpoint)")
    p.add_argument("--tracking-uri", help="MLflow store: create a run and record its id (rag evaluate needs one)")
    p.add_argument("--experiment", help="MLflow experiment name (default imported/<task>)")
    p.add_argument("--question-tokenizer", help="tokenizer name/path if the checkpoint has no question_encoder_tokenizer/")
    p.add_argument("--generator-tokenizer", help="tokenizer name/path if the checkpoint has no generator_tokenizer/")
