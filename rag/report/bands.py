"""Score bands: the expected score of each (task, variant, split, metric) with a tolerance, and the
check of a finished experiment against them (``rag check``), in the manner of Anserini's
reproduction matrix: every cell prints OK (in band) or FAIL (out of band) beside its expected value.

A band file (YAML) is data, versioned with the code::

    version: 2
    method: how the bands were obtained (free text, shown by rag check)
    cells:
      - {task: nq, variant: rag_token, split: test, metric: em, expected: 74.9, tolerance: 6.2, seeds: 3,
         source: "..."}

``metric`` names a key of a metrics.json's ``metrics`` or ``retrieval`` object. A run's value is the
mean over its seeds (its metrics.json files, one per seed). ``rag bands`` writes a band file from a
finished experiment and replicates of it with more fine-tune seeds, on the same world (:func:`make_bands`).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from rag.errors import DataError
from rag.io import read_json

Cell = tuple[str, str, str, str]  # task, variant, split, metric


@dataclass(frozen=True)
class Band:
    task: str
    variant: str
    split: str
    metric: str
    expected: float
    tolerance: float
    seeds: int | None = None
    source: str = ""

    @property
    def cell(self) -> Cell:
        return (self.task, self.variant, self.split, self.metric)


BAND_VERSIONS = (1, 2)  # 1: cells and method; 2: rag bands' header too (name, family_wise, widest, seed, unchecked)
MAX_BAND_BYTES = 1 << 20  # the default's band file is 62 KB for its 120 cells
MAX_BAND_CELLS = 5_000


def _header_error(data: dict) -> str | None:
    """What is wrong with a band file's header (its keys but ``cells``), or None."""
    version = data.get("version")
    if "version" not in data:
        return f"no version: (the band file format's, one of {', '.join(map(str, BAND_VERSIONS))})"
    if isinstance(version, bool) or version not in BAND_VERSIONS:
        return f"version {version!r:.40} is not a band file format this harness reads ({', '.join(map(str, BAND_VERSIONS))})"
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        return f"'seed' (the world's top-level seed) must be an integer, got {seed!r:.40}"
    if not isinstance(data.get("unchecked", []), list):
        return "'unchecked' must be a list"
    return None


def load_bands(path: str | Path) -> tuple[dict, list[Band]]:
    """(the file's header, its bands); one-line errors naming the file and the entry."""
    import yaml

    from rag.io import alias_bomb, read_yaml

    path = Path(path)
    if not path.is_file():
        from rag.io import not_a_file

        raise DataError(f"{path}: band file {not_a_file(path).replace('file not found', 'not found')}")
    if (size := path.stat().st_size) > MAX_BAND_BYTES:
        raise DataError(f"{path}: {size:,} bytes, more than a band file holds ({MAX_BAND_BYTES:,}); is it a band file?")
    try:
        data = read_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DataError(f"{path}: not valid UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise DataError(f"{path}{f':{mark.line + 1}' if mark else ''}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise DataError(f"{path}: expected a mapping with a 'cells' list")
    if len(data["cells"]) > MAX_BAND_CELLS:
        raise DataError(f"{path}: {len(data['cells']):,} cells, more than a band file holds ({MAX_BAND_CELLS:,})")
    if alias_bomb(data) is not None:
        raise DataError(f"{path}: its YAML aliases expand to more than a band file holds (an alias bomb?); write the cells out")
    if wrong := _header_error(data):
        raise DataError(f"{path}: {wrong}")
    bands, seen = [], set()
    for i, entry in enumerate(data["cells"]):
        where = f"{path}: cells[{i}]"
        if not isinstance(entry, dict):
            raise DataError(f"{where}: expected a mapping")
        missing = [k for k in ("task", "variant", "split", "metric", "expected", "tolerance") if k not in entry]
        if missing:
            raise DataError(f"{where}: missing {', '.join(missing)}")
        for k in ("expected", "tolerance"):
            v = entry[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (k == "tolerance" and v < 0):
                raise DataError(f"{where}: '{k}' must be a finite number{' >= 0' if k == 'tolerance' else ''}, got {v!r}")
        seeds = entry.get("seeds")
        if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1):
            raise DataError(f"{where}: 'seeds' (how many fine-tune seeds the band is for) must be an integer >= 1, "
                            f"got {seeds!r:.40}")
        band = Band(str(entry["task"]), str(entry["variant"]), str(entry["split"]), str(entry["metric"]),
                    float(entry["expected"]), float(entry["tolerance"]), seeds, str(entry.get("source", "")))
        wrong = cell_error(band)
        if wrong:
            raise DataError(f"{where} ({'/'.join(band.cell)}): {wrong}; fix the cell or remove it")
        if band.cell in seen:
            raise DataError(f"{where}: a second band for {'/'.join(band.cell)}")
        seen.add(band.cell)
        bands.append(band)
    return {k: v for k, v in data.items() if k != "cells"}, bands


_RECALL = re.compile(r"(answer|passage)_recall@[1-9][0-9]*")


def cell_metrics(task: str, variant: str) -> list[str]:
    """The metrics a run of ``task`` x ``variant`` records (``@K``: any K it retrieves)."""
    from rag.tasks import TASKS, VARIANTS

    spec, out = TASKS[task], list(TASKS[task].metrics)
    if VARIANTS[variant].retriever is not None:
        out += (["answer_recall@K"] if spec.kind in ("qa", "regex") else []) + ["passage_recall@K"]
    return out


def cell_error(band: Band) -> str | None:
    """What makes ``band`` name a cell no run can have (a task, variant, split or metric the registry
    does not know, or a metric its task and variant do not record), or None."""
    from rag.tasks import EVAL_SPLITS, TASKS, VARIANTS, renamed_variant

    if band.task not in TASKS:
        return f"unknown task {band.task!r} (known: {', '.join(TASKS)})"
    if (renamed := renamed_variant(band.variant)) is not None:
        return renamed
    if band.variant not in VARIANTS:
        return f"unknown variant {band.variant!r} (known: {', '.join(VARIANTS)})"
    if band.split not in EVAL_SPLITS:
        return f"unknown split {band.split!r} (known: {', '.join(EVAL_SPLITS)})"
    known = cell_metrics(band.task, band.variant)
    recall = _RECALL.fullmatch(band.metric)
    if band.metric not in known and not (recall and f"{recall.group(1)}_recall@K" in known):
        return f"{band.task} {band.variant} runs record no metric {band.metric!r} (they record: {', '.join(known)})"
    return None


def run_values(metrics_files: list[str | Path], predictions_files: list[str | Path] = ()) -> dict[Cell, dict[int, float]]:
    """(task, variant, split, metric) -> fine-tune seed -> its value, from metrics.json files.

    ``predictions_files`` (optional, one per metrics file in the same order, as the report takes
    them): the task metrics (the ``metrics`` object's keys) are scored again from the predictions,
    with the run's own metric options, so a check vouches for the predictions themselves, not for a
    number written beside them. Retrieval recall comes from the ``retrieval`` object."""
    from rag.io import read_jsonl
    from rag.metrics import Scorer
    from rag.report.inputs import ReportInputs

    inputs = ReportInputs.from_files(metrics=metrics_files, predictions=predictions_files)
    out: dict[Cell, dict[int, float]] = {}
    for (task, variant, split), files in sorted(inputs.metrics.items()):
        for seed, path in sorted(files.items()):
            data = read_json(path)
            values = dict(data.get("retrieval") or {})
            pred_path = (inputs.predictions.get((task, variant, split)) or {}).get(seed)
            if pred_path is not None:
                rows = read_jsonl(pred_path, required=("prediction", "targets"))
                sc = Scorer.of(data.get("metric_options"))
                p, t = [r["prediction"] for r in rows], [r["targets"] for r in rows]
                values.update({m: sc.compute(m, p, t) for m in (data.get("metrics") or {})})
            else:
                values.update(data.get("metrics") or {})
            for metric, value in sorted(values.items()):
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    out.setdefault((task, variant, split, metric), {})[seed] = float(value)
    return out


@dataclass(frozen=True)
class Result:
    band: Band
    measured: float | None
    seeds: int

    @property
    def status(self) -> str:
        if self.measured is None:
            return "not run"
        return "OK" if abs(self.measured - self.band.expected) <= self.band.tolerance + 1e-9 else "FAIL"


def check(bands: list[Band], values: dict[Cell, dict[int, float]]) -> list[Result]:
    out = []
    for band in bands:
        vals = list((values.get(band.cell) or {}).values())
        out.append(Result(band, None if not vals else statistics.fmean(vals), len(vals)))
    return out


def drop_caught(band: Band) -> float | None:
    """The drop (points below the expected value) beyond which ``band`` fails a run, or None where the
    tolerance reaches below 0 and no drop can."""
    return band.tolerance if band.expected - band.tolerance > 0 else None


COLUMNS = ("cell", "expected", "measured", "seeds", "catches a drop", "status")
STATUS = {"OK": "in band (OK)", "FAIL": "OUT OF BAND (FAIL)", "not run": "not run"}


def result_row(r: Result) -> tuple[str, ...]:
    """A checked cell's row under :data:`COLUMNS`."""
    b, drop = r.band, drop_caught(r.band)
    return ("/".join(b.cell), f"{b.expected:.1f} ± {b.tolerance:.1f}", "–" if r.measured is None else f"{r.measured:.1f}",
            str(r.seeds or "–"), "none" if drop is None else f"> {drop:.1f}", STATUS[r.status])


def summary(header: dict, results: list[Result]) -> str:
    """One line: how many cells are in band, out of band and not run."""
    counts = {s: sum(r.status == s for r in results) for s in STATUS}
    return (f"{counts['OK']} in band, {counts['FAIL']} out of band, {counts['not run']} not run "
            f"(of {len(results)} bands{'; ' + str(header['name']) if header.get('name') else ''})")


def format_results(header: dict, results: list[Result]) -> str:
    rows = [COLUMNS, *map(result_row, results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join([*lines, summary(header, results), sensitivity(header, [r.band for r in results])])


def world_note(header: dict, bands_file: str | Path, seed: int | None) -> str | None:
    """A note when the band file holds for another world than the experiment's top-level ``seed``, else None."""
    if seed is None or header.get("seed") is None or seed == header["seed"]:
        return None
    return (f"{bands_file} holds for top-level seed {header['seed']} (its world); this experiment's is {seed}, another "
            "world, whose cells need not fall in these bands (rag bands makes bands for it)")


def report_section(header: dict, results: list[Result], bands_file: str | Path, seed: int | None) -> dict:
    """What the report's score-band section shows: rag check's table (cells out of band first), its summary and
    sensitivity lines and the world note."""
    ordered = sorted(results, key=lambda r: r.status != "FAIL")
    return {"file": str(bands_file), "summary": summary(header, results), "failed": sum(r.status == "FAIL" for r in results),
            "sensitivity": sensitivity(header, [r.band for r in results]), "note": world_note(header, bands_file, seed),
            "columns": COLUMNS, "rows": [(r.status, result_row(r)) for r in ordered]}


def sensitivity(header: dict, bands: list[Band]) -> str:
    """One line: how many cells are checked, how many catch a drop of 5 and of 10 points, how many
    the band file leaves unchecked."""
    drops = [drop_caught(b) for b in bands]
    within = {w: sum(d is not None and d <= w for d in drops) for w in (5, 10)}
    unchecked = len(header.get("unchecked") or ())
    return (f"sensitivity: {len(bands)} cell(s) checked, {within[5]} catch a drop of 5 points or less, {within[10]} of "
            f"10 points or less; {unchecked} cell(s) unchecked" + (" (the band file's unchecked: list says why)" if unchecked else ""))


# --------------------------------------------------------------------------- making bands
FAMILY_WISE = 0.95  # the chance that every checked cell of a band file holds on a run with other floats
WIDEST = 10.0  # points: a cell whose band is wider would miss a 10-point drop, and is listed unchecked


@lru_cache(maxsize=None)
def band_multiplier(df: int, cells: int) -> float:
    """Student's t quantile that a cell leaves with probability ``(1 - FAMILY_WISE) / cells`` (two-sided):
    a tolerance of this many estimated SDs lets all ``cells`` bands of a file hold together with
    probability at least ``FAMILY_WISE`` (Bonferroni), where the SD is estimated with ``df`` degrees of
    freedom (its uncertainty widens the band, as a prediction interval)."""
    from scipy.stats import t

    if df < 1 or cells < 1:
        raise ValueError(f"a band multiplier needs df >= 1 and cells >= 1, got {df}, {cells}")
    return float(t.ppf(1.0 - (1.0 - FAMILY_WISE) / (2 * cells), df))


def rule() -> str:
    """How :func:`make_bands` sets a band, in words (a band file's ``method:`` says it)."""
    return ("Each cell is centred on the mean over every fine-tune seed measured on this world (the default's seeds "
            "and the replicates'), the test set fixed and only training varying: what another machine's floats do. "
            "One fine-tune's SD is the cell's own, pooled over its run's dev and test splits per example (an SD "
            "scales with one over the square root of the examples scored); no variant lends its spread to another. "
            "The tolerance is that SD times Student's t at its degrees of freedom, for the difference between a mean "
            "over the seeds the default runs and the mean over all seeds measured, at the level where every checked "
            f"cell holds together with probability {FAMILY_WISE:.0%} (Bonferroni over the checked cells), and at least two "
            f"test examples' worth. A cell whose band is wider than {WIDEST:g} points, or whose spread no replicate "
            "measured, is listed under unchecked: with its reason and is not counted as checked.")


def seed_draws(experiments: list[dict[Cell, dict[int, float]]]) -> dict[Cell, list[float]]:
    """Every fine-tune seed's value of each cell over ``experiments`` of one world. A seed with the same
    value in two of them is one run (a replicate made over a copy of the centre) and counts once; with
    another value it is another draw of training noise (another machine's floats)."""
    out: dict[Cell, dict[tuple[int, float], float]] = {}
    for exp in experiments:
        for cell, by_seed in exp.items():
            for seed, value in by_seed.items():
                out.setdefault(cell, {})[(seed, value)] = value
    return {cell: list(draws.values()) for cell, draws in out.items()}


def training_sd(draws: dict[Cell, list[float]], n_of: dict[tuple[str, str, str], int]) -> dict[Cell, tuple[float, int]]:
    """(one fine-tune's SD, its degrees of freedom) of each cell measured over two seeds or more: the
    cell's spread pooled over the splits of its run (the same models scoring dev and test), each
    split's variance scaled to its number of examples ``n``."""
    parts: dict[tuple[str, str, str], list[tuple[float, int]]] = {}
    for (task, variant, split, metric), vals in draws.items():
        if len(vals) > 1:
            n = n_of.get((task, variant, split)) or 1
            parts.setdefault((task, variant, metric), []).append((statistics.variance(vals) * n, len(vals) - 1))
    out = {}
    for (task, variant, split, metric), vals in draws.items():
        pool = parts.get((task, variant, metric))
        if pool:
            df = sum(d for _, d in pool)
            per_example = sum(v * d for v, d in pool) / df
            out[(task, variant, split, metric)] = (math.sqrt(per_example / (n_of.get((task, variant, split)) or 1)), df)
    return out


def seeds_needed(k: float, sd: float, measured: int) -> int | None:
    """The fewest fine-tune seeds a run needs for a band of ``k`` SDs to be at most WIDEST points wide
    (the mean over at least as many seeds measured), or None beyond 20."""
    for s in range(1, 21):
        if k * sd * math.sqrt(1 / s + 1 / max(measured, s)) <= WIDEST:
            return s
    return None


def make_bands(center: dict[Cell, dict[int, float]], replicates: list[dict[Cell, dict[int, float]]],
               n_of: dict[tuple[str, str, str], int]) -> tuple[list[Band], list[dict]]:
    """(bands, unchecked cells) of the ``center`` experiment's cells, by :func:`rule`: centred on the mean
    of every seed measured on the world (``center`` and ``replicates``, the same config with more
    fine-tune seeds), ``band_multiplier(df, cells) · σ · sqrt(1/S + 1/R)`` wide (σ from
    :func:`training_sd`, S the centre's seeds, R all seeds measured, ``cells`` the number of cells
    checked: those at most WIDEST points wide), at least 200 / n."""
    draws = seed_draws([center, *replicates])
    sds = training_sd({c: draws[c] for c in center}, n_of)

    def spread(cell: Cell, family: int) -> float:  # t SDs of the difference of the means
        sd, df = sds[cell]
        return band_multiplier(df, family) * sd * math.sqrt(1 / len(center[cell]) + 1 / len(draws[cell]))

    def floor(cell: Cell) -> float:  # two test examples' worth
        return 200.0 / (n_of.get(cell[:3]) or 1)

    # Bonferroni over the cells a check tests: the smallest family that holds every cell checked at its level
    family = next((m for m in range(1, len(sds) + 1) if sum(max(spread(c, m), floor(c)) <= WIDEST for c in sds) <= m), 1)
    bands, unchecked = [], []
    for cell in sorted(center):
        task, variant, split, _ = cell
        vals, ran = draws[cell], len(center[cell])
        expected = statistics.fmean(vals)
        if cell not in sds:
            unchecked.append({"cell": "/".join(cell), "expected": round(expected, 2),
                              "why": f"{len(vals)} seed measured on this world: no training spread (rag bands --replicates)"})
            continue
        (sd, df), k = sds[cell], band_multiplier(sds[cell][1], family)
        tol = spread(cell, family)
        how = (f"{len(vals)} seeds measured, the default runs {ran}; one fine-tune's SD {sd:.2f} ({df} df, pooled over "
               f"the run's splits per example); {k:.2f} SD (t, {df} df, {family} cells checked) "
               f"of the difference of a new run's {ran}-seed mean from the mean of the {len(vals)} measured is {tol:.2f}")
        if tol < floor(cell):
            how += f"; raised to two test examples ({floor(cell):.2f})"
            tol = floor(cell)
        if tol > WIDEST:
            need = seeds_needed(k, sd, len(vals))
            unchecked.append({"cell": "/".join(cell), "expected": round(expected, 2), "tolerance": round(tol, 2),
                              "why": how + f": wider than {WIDEST:g} points; "
                              + (f"{need} fine-tune seeds would check it" if need else "more than 20 seeds would check it")})
            continue
        bands.append(Band(task, variant, split, cell[3], round(expected, 2), round(tol, 2), ran, how))
    return bands, unchecked


def recorded_runs(root: str | Path) -> tuple[list[Path], list[Path], list[Path]]:
    """The runs the config of the experiment folder ``root`` (``results/<name>``) runs, as its report
    section records them (``config/report.json``, key ``runs``: what ``snakemake check`` reads too):
    (the metrics.json of each split of each that exists, of each that does not (a run not finished); the
    seed folders under ``root/runs`` holding a metrics.json of none of them: runs of a config it no longer is)."""
    from rag.tasks import EVAL_SPLITS

    root = Path(root)
    section = root / "config" / "report.json"
    if not section.is_file():
        raise DataError(f"{section}: not found: an experiment folder records the runs of its config there (snakemake "
                        "writes it); rag check --metrics checks the files it is given")
    data = read_json(section)
    runs = data.get("runs") if isinstance(data, dict) else None
    ok = isinstance(runs, list) and all(
        isinstance(r, dict) and isinstance(r.get("task"), str) and isinstance(r.get("variant"), str)
        and isinstance(r.get("seeds"), list) and all(isinstance(x, int) and not isinstance(x, bool) for x in r["seeds"])
        for r in runs)
    if not ok:
        raise DataError(f"{section}: no 'runs' list of {{task, variant, seeds}} (the runs of the experiment's config); "
                        "snakemake on that config writes it again")
    listed = [root / "runs" / r["task"] / r["variant"] / f"seed{seed}" / split / "metrics.json"
              for r in runs for seed in r["seeds"] for split in EVAL_SPLITS]
    stale = sorted({m.parents[1] for m in set(root.glob("runs/*/*/seed*/*/metrics.json")) - set(listed)})
    return [m for m in listed if m.is_file()], [m for m in listed if not m.is_file()], stale


def runs_note(root: str | Path, missing: list[Path], stale: list[Path]) -> str | None:
    """A note naming the files of runs of ``root``'s config not written yet and the seed folders of
    runs it does not have (:func:`recorded_runs`), else None."""
    def named(paths: list[Path]) -> str:
        names = [str(p.relative_to(root)) for p in paths]
        return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")

    parts = ([f"{len(missing)} metrics file(s) of its config's runs are not written (not finished?), their cells not "
              f"measured: {named(missing)}"] if missing else [])
    parts += ([f"{len(stale)} seed folder(s) are no run of its config, not counted: {named(stale)}"] if stale else [])
    return f"{root} (runs of its config/report.json): " + "; ".join(parts) if parts else None


def experiment_files(root: str | Path) -> tuple[list[Path], list[Path], str | None]:
    """The metrics.json of every finished run (task, variant, seed, split) of the config of the experiment
    folder ``results/<name>`` (:func:`recorded_runs`), the predictions.jsonl beside each (in the same
    order; a missing one is a DataError naming it) and :func:`runs_note`."""
    metrics, missing, stale = recorded_runs(root)
    if not metrics:
        raise DataError(f"{root}: no runs/<task>/<variant>/seed<seed>/<split>/metrics.json files of its config's runs")
    predictions = [m.with_name("predictions.jsonl") for m in metrics]
    absent = [p for p in predictions if not p.is_file()]
    if absent:
        more = f" (and {len(absent) - 1} more)" if len(absent) > 1 else ""
        raise DataError(f"{absent[0]}: missing{more}: each run of {root} writes its predictions beside its metrics.json")
    return metrics, predictions, runs_note(root, missing, stale)


def experiment_values(root: str | Path) -> tuple[dict[Cell, dict[int, float]], dict[tuple[str, str, str], int], str | None]:
    """Every finished run's values (and test sizes) of the config of one experiment folder ``results/<name>``
    (:func:`recorded_runs`), and :func:`runs_note`."""
    files, missing, stale = recorded_runs(root)
    if not files:
        raise DataError(f"{root}: no runs/<task>/<variant>/seed<seed>/<split>/metrics.json files of its config's runs")
    n_of = {}
    for f in files:
        d = read_json(f)
        n_of[(d["task"], d["variant"], d["split"])] = int(d.get("n") or 0)
    return run_values(files), n_of, runs_note(root, missing, stale)


def write_bands(path: str | Path, bands: list[Band], header: dict) -> None:
    import yaml

    from rag.io import atomic_open

    cells = [{"task": b.task, "variant": b.variant, "split": b.split, "metric": b.metric, "expected": b.expected,
              "tolerance": b.tolerance, "seeds": b.seeds, "source": b.source} for b in bands]
    rest = {k: v for k, v in header.items() if k != "unchecked"}
    tail = {"unchecked": header["unchecked"]} if header.get("unchecked") else {}
    text = yaml.safe_dump({**rest, "cells": cells, **tail}, sort_keys=False, allow_unicode=True, width=120)
    with atomic_open(Path(path)) as fh:
        fh.write(text)
