"""Report commands: ``report`` (the measured tables and the HTML report: :mod:`rag.report`),
``check`` (a finished experiment against a band file), ``bands`` (a band file from several
experiments): :mod:`rag.report.bands`, and ``replicate-config`` (the config whose experiment gives
``bands --replicates``)."""

from __future__ import annotations

import sys
from pathlib import Path

from rag.cli import add_command
from rag.report import TABLE_KEYS, ReportInputs


def declare_experiment_tasks(path: str | Path):
    """The JSON at ``path`` (an experiment's report section, results/<name>/config/report.json, or a scale
    summary), read; the tasks the experiment's config declares, as it records them (``declared_tasks``),
    join the registry."""
    from rag.io import read_json
    from rag.declared_tasks import declare_task

    data = read_json(path)
    declared = data.get("declared_tasks") if isinstance(data, dict) else None
    for name, decl in (declared.items() if isinstance(declared, dict) else ()):
        declare_task(name, decl, str(path))
    return data


def _declare_from_folder(root: str | Path) -> None:
    """:func:`declare_experiment_tasks` of the experiment folder ``root`` (results/<name>), where it has a report section."""
    section = Path(root) / "config" / "report.json"
    if section.is_file():
        declare_experiment_tasks(section)


def load_scale(path: str | None) -> tuple[dict, dict, dict]:
    """The scale summary of ``--scale-json`` (the file, or its key ``scale``) and the further generators and
    retrievers it names (keys ``generators`` and ``retrievers``: name -> what it is); {} for none. The tasks
    the report section declares join the registry (:func:`declare_experiment_tasks`)."""
    from rag.errors import DataError

    if not path:
        return {}, {}, {}
    data = declare_experiment_tasks(path)
    further = [data.get(key) if isinstance(data, dict) else None for key in ("generators", "retrievers")]
    if isinstance(data, dict) and isinstance(data.get("scale"), dict):
        data = data["scale"]
    if not isinstance(data, dict) or not all(isinstance(f or {}, dict) for f in further):
        raise DataError(f"{path}: expected a JSON object (the scale summary, or an object with key 'scale' and "
                        "optionally 'generators' and 'retrievers')")
    return data, further[0] or {}, further[1] or {}


def cmd_report(args) -> int:
    from rag.report.build import build_report

    scale, generators, retrievers = load_scale(args.scale_json)
    inputs = ReportInputs.from_files(metrics=args.metrics, predictions=args.predictions, topk=args.topk,
                                     hotswap=args.hotswap, oracle=args.oracle, train_data=args.train_data)
    bands = None
    if args.bands:  # the experiment against its score bands, as rag check
        from rag.report.bands import check, load_bands, report_section, run_values

        header, cells = load_bands(args.bands)
        bands = report_section(header, check(cells, run_values(args.metrics, args.predictions)), args.bands, args.seed)
    build_report(
        inputs=inputs,
        passages=Path(args.passages) if args.passages else None,
        scale=scale,
        out_html=Path(args.out),
        tables={k: Path(getattr(args, k)) for k in TABLE_KEYS if getattr(args, k)},
        tracking_url=args.tracking_url,
        samples_per_task=args.samples_per_task,
        tasks=args.tasks,
        variants=args.variants,
        generators=generators,
        bands=bands,
        retrievers=retrievers,
    )
    return 0


def cmd_check(args) -> int:
    from rag.errors import ConfigError
    from rag.io import atomic_open
    from rag.report.bands import check, experiment_files, format_results, load_bands, run_values, world_note

    if args.experiment and args.predictions:
        raise ConfigError("--predictions pairs with --metrics; --experiment reads the predictions beside each metrics.json")
    if args.experiment:  # the tasks the experiment's config declares
        _declare_from_folder(args.experiment)
    elif args.report_config:
        declare_experiment_tasks(args.report_config)
    header, bands = load_bands(args.bands)
    metrics, predictions, note = experiment_files(args.experiment) if args.experiment else (args.metrics, args.predictions, None)
    if note:
        print(f"note: {note}", file=sys.stderr)
    values = run_values(metrics, predictions)
    results = check(bands, values)
    text = format_results(header, results)
    print(text)
    other_seeds = [r for r in results if r.band.seeds and r.seeds and r.seeds != r.band.seeds]
    if other_seeds:
        print(f"note: {len(other_seeds)} cell(s) measured over another number of fine-tune seeds than their band was made "
              "for, whose tolerance is for a mean over that many: "
              + ", ".join(f"{'/'.join(r.band.cell)} ({r.seeds} against {r.band.seeds})" for r in other_seeds), file=sys.stderr)
    if not predictions:
        print("note: the task metrics were read from the metrics.json files, not scored again from the predictions "
              "(--predictions, or --experiment results/<name>, scores them)", file=sys.stderr)
    failed = [r for r in results if r.status == "FAIL"]
    if note := world_note(header, args.bands, args.seed):
        print(f"note: {note}", file=sys.stderr)
    if failed:
        print(f"error: {len(failed)} cell(s) out of band: " + ", ".join("/".join(r.band.cell) for r in failed), file=sys.stderr)
        return 1
    if not any(r.status == "OK" for r in results):
        print(f"error: none of the {len(results)} bands of {args.bands} matched a run given", file=sys.stderr)
        return 1
    missing = [r for r in results if r.status == "not run"]
    if missing and not args.allow_missing:
        ran = {(task, variant) for task, variant, _, _ in values}
        named = ["/".join(r.band.cell) + ("" if (r.band.task, r.band.variant) in ran else f" (no {r.band.task} {r.band.variant} run)")
                 for r in missing]
        print(f"error: {len(missing)} cell(s) of {args.bands} have no run among those checked: "
              + ", ".join(named[:8]) + (f" and {len(named) - 8} more" if len(named) > 8 else "")
              + "; a task, variant, split or metric this experiment does not run is a band file made for another config, "
                "else the run did not finish (--allow-missing checks the other cells)", file=sys.stderr)
        return 1
    if args.out:
        with atomic_open(Path(args.out)) as fh:
            fh.write(text + "\n")
    return 0


def _top_seed(root: str):
    """An experiment's top-level seed (its corpus section records it), or None."""
    from rag.io import read_json

    section = Path(root) / "config" / "corpus.json"
    return read_json(section).get("seed") if section.is_file() else None


def _described(root: str) -> str:
    """An experiment by its top-level seed, else its folder's name."""
    seed = _top_seed(root)
    return f"top-level seed {seed}" if seed is not None else Path(root).name


def cmd_bands(args) -> int:
    from rag.errors import ConfigError
    from rag.report.bands import FAMILY_WISE, WIDEST, experiment_values, make_bands, rule, write_bands

    world = _top_seed(args.center)
    for root in (args.center, *args.replicates):
        _declare_from_folder(root)  # the tasks each experiment's config declares
        if _top_seed(root) != world:
            raise ConfigError(f"{root}: top-level seed {_top_seed(root)}, not the centre's {world}: a replicate is the "
                              "same world with more fine-tune seeds (rag replicate-config), and a band file holds for one world")
    center, n_of, note = experiment_values(args.center)
    replicates, notes = [], [note]
    for root in args.replicates:
        values, _, note = experiment_values(root)
        replicates.append(values)
        notes.append(note)
    for note in filter(None, notes):
        print(f"note: {note}", file=sys.stderr)
    bands, unchecked = make_bands(center, replicates, n_of)
    method = (f"Made from the experiment of {_described(args.center)}"
              + (f" and {len(replicates)} replicate(s) of it with more fine-tune seeds" if replicates else "") + ". "
              + rule())
    header = {"version": 2, "name": args.name, "family_wise": FAMILY_WISE, "widest": WIDEST}
    if world is not None:
        header["seed"] = world  # the world the bands hold for (rag check --seed)
    if unchecked:
        header["unchecked"] = unchecked
    write_bands(args.out, bands, {**header, "method": method})
    print(f"wrote {len(bands)} bands to {args.out}" + (f"; {len(unchecked)} cell(s) unchecked" if unchecked else ""))
    return 0


def cmd_replicate_config(args) -> int:
    import yaml

    from rag.config import read_config_file, replicate_config
    from rag.io import atomic_open

    out, changes = replicate_config(read_config_file(args.config), args.seeds)
    seeds = " ".join(str(s) for s in args.seeds)
    with atomic_open(Path(args.out)) as fh:
        fh.write(f"# rag replicate-config --config {args.config} --seeds {seeds}: its runs with seeds {seeds}\n"
                 f"# (one_seed_variants: [], seeds on each task that ran fewer); run it over a copy of that experiment\n")
        yaml.safe_dump(out, fh, sort_keys=False)
    new = sum(len(after) - len(before) for _, _, before, after in changes)
    print(f"wrote {args.out}: {len(changes)} run(s) get more seeds, {new} more fine-tune(s)"
          + "".join(f"\n  {task}/{variant}: seeds {before} -> {after}" for task, variant, before, after in changes))
    return 0


def register(sub) -> None:
    p = add_command(sub, "report", cmd_report,
                    "write the measured tables (CSV) and the HTML report from the files named")
    p.add_argument("--metrics", nargs="*", default=[], help="metrics.json files (each names its task, variant, split)")
    p.add_argument("--predictions", nargs="*", default=[],
                   help="predictions.jsonl files, one per --metrics file in the same order (or none)")
    p.add_argument("--topk", nargs="*", default=[], help="Figure 3 top-K sweep results (rag experiments --topk-out)")
    p.add_argument("--hotswap", nargs="*", default=[], help="index hot-swap results (rag experiments --hotswap-out)")
    p.add_argument("--oracle", nargs="*", default=[], help="gold-passage reader results (rag experiments --oracle-out)")
    p.add_argument("--train-data", nargs="*", default=[], metavar="TASK=PATH",
                   help="a task's train jsonl (the claims' majority-label baseline)")
    p.add_argument("--passages", default=None, help="passages.tsv (id, title, text) for the sample browser")
    p.add_argument("--scale-json", default=None, help="JSON file with the scale summary (or {'scale': {...}})")
    p.add_argument("--out", required=True, help="HTML report to write")
    for key in TABLE_KEYS:
        p.add_argument(f"--{key}", help=f"CSV file for {key.replace('table', 'Table ')} (not written if omitted)")
    p.add_argument("--tracking-url", default="http://127.0.0.1:5000", help="MLflow UI base URL for links")
    p.add_argument("--samples-per-task", type=int, default=20, help="examples per task in the sample browser")
    p.add_argument("--tasks", nargs="+", default=None, help="restrict to these tasks (default: all given)")
    p.add_argument("--variants", nargs="+", default=None, help="restrict to these variants (default: all given)")
    p.add_argument("--bands", default=None, help="band file (config/bands/*.yaml): the report's score-band section, as rag check")
    p.add_argument("--seed", type=int, default=None,
                   help="with --bands: the experiment's top-level seed (a note when the band file holds for another)")

    p = add_command(sub, "check", cmd_check,
                    "check a finished experiment's scores against a band file: OK / FAIL per cell")
    p.add_argument("--bands", required=True, help="band file (config/bands/*.yaml)")
    runs = p.add_mutually_exclusive_group(required=True)
    runs.add_argument("--experiment", default=None,
                      help="results/<name> of a finished experiment: the metrics.json of every run of its config (as "
                           "its config/report.json records them), its task metrics scored again from the predictions.jsonl beside it")
    runs.add_argument("--metrics", nargs="+", help="the experiment's metrics.json files (one per run, split and seed)")
    p.add_argument("--predictions", nargs="*", default=[],
                   help="with --metrics: their predictions.jsonl files, in the same order: the task metrics are scored "
                        "again from them")
    p.add_argument("--report-config", default=None,
                   help="with --metrics: the experiment's report section (results/<name>/config/report.json), which "
                        "names the tasks its config declares")
    p.add_argument("--out", default=None, help="also write the table here (written only when every cell is in band)")
    p.add_argument("--seed", type=int, default=None,
                   help="the experiment's top-level seed: a note when the band file holds for another (its seed:)")
    p.add_argument("--allow-missing", action="store_true",
                   help="cells with no run among those checked are shown as not run instead of failing the check")

    p = add_command(sub, "bands", cmd_bands,
                    "write a band file from a finished experiment and replicates of it with more fine-tune seeds")
    p.add_argument("--center", required=True, help="results/<name> of the experiment the bands are for (the cells and seeds of its config's runs)")
    p.add_argument("--replicates", nargs="*", default=[],
                   help="results/<name> of the same config and world with more fine-tune seeds (rag replicate-config): "
                        "the training SD of each cell")
    p.add_argument("--name", required=True, help="what the bands are for (shown by rag check)")
    p.add_argument("--out", required=True, help="band file to write")

    p = add_command(sub, "replicate-config", cmd_replicate_config, "write the config that runs each of a config's runs "
                    "with more fine-tune seeds (bands --replicates)")
    p.add_argument("--config", required=True, help="the config of the experiment the bands are for (config.yaml)")
    p.add_argument("--seeds", nargs="+", type=int, required=True, help="the fine-tune seeds of every run that runs fewer")
    p.add_argument("--out", required=True, help="config file to write")
