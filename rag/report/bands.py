"""Score bands: the expected score of each (task, variant, split, metric) with a tolerance, and the
check of a finished experiment against them (``rag check``), in the manner of Anserini's
reproduction matrix: every cell prints OK (in band) or FAIL (out of band) beside its expected value.

A band file (YAML) is data, versioned with the code::

    version: 1
    method: how the bands were obtained (free text, shown by rag check)
    cells:
      - {task: nq, variant: rag_token, split: test, metric: em, expected: 74.9, tolerance: 6.2, seeds: 3,
         source: "..."}

``metric`` names a key of a metrics.json's ``metrics`` or ``retrieval`` object. A run's value is the
mean over its seeds (its metrics.json files, one per seed). ``rag bands`` writes a band file from
finished experiments of one configuration under several top-level seeds (:func:`make_bands`).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
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


def load_bands(path: str | Path) -> tuple[dict, list[Band]]:
    """(the file's header, its bands); one-line errors naming the file and the entry."""
    import yaml

    path = Path(path)
    if not path.is_file():
        from rag.io import not_a_file

        raise DataError(f"{path}: band file {not_a_file(path).replace('file not found', 'not found')}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise DataError(f"{path}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise DataError(f"{path}: expected a mapping with a 'cells' list")
    from rag.config import alias_bomb

    if alias_bomb(data) is not None:
        raise DataError(f"{path}: its YAML aliases expand to more than a band file holds (an alias bomb?); write the cells out")
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
        band = Band(str(entry["task"]), str(entry["variant"]), str(entry["split"]), str(entry["metric"]),
                    float(entry["expected"]), float(entry["tolerance"]), entry.get("seeds"), str(entry.get("source", "")))
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
    from rag.tasks import EVAL_SPLITS, TASKS, VARIANTS

    if band.task not in TASKS:
        return f"unknown task {band.task!r} (known: {', '.join(TASKS)})"
    if band.variant not in VARIANTS:
        return f"unknown variant {band.variant!r} (known: {', '.join(VARIANTS)})"
    if band.split not in EVAL_SPLITS:
        return f"unknown split {band.split!r} (known: {', '.join(EVAL_SPLITS)})"
    known = cell_metrics(band.task, band.variant)
    recall = _RECALL.fullmatch(band.metric)
    if band.metric not in known and not (recall and f"{recall.group(1)}_recall@K" in known):
        return f"{band.task} {band.variant} runs record no metric {band.metric!r} (they record: {', '.join(known)})"
    return None


def run_values(metrics_files: list[str | Path], predictions_files: list[str | Path] = ()) -> dict[Cell, list[float]]:
    """(task, variant, split, metric) -> the value of each seed, from metrics.json files.

    ``predictions_files`` (optional, one per metrics file in the same order, as the report takes
    them): the task metrics (the ``metrics`` object's keys) are scored again from the predictions,
    with the run's own metric options, so a check vouches for the predictions themselves, not for a
    number written beside them. Retrieval recall comes from the ``retrieval`` object."""
    from rag.io import read_jsonl
    from rag.metrics import Scorer
    from rag.report.inputs import ReportInputs

    inputs = ReportInputs.from_files(metrics=metrics_files, predictions=predictions_files)
    out: dict[Cell, list[float]] = {}
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
                    out.setdefault((task, variant, split, metric), []).append(float(value))
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


def check(bands: list[Band], values: dict[Cell, list[float]]) -> list[Result]:
    out = []
    for band in bands:
        vals = values.get(band.cell)
        out.append(Result(band, None if not vals else statistics.fmean(vals), len(vals or ())))
    return out


def format_results(header: dict, results: list[Result]) -> str:
    rows = [("cell", "expected", "measured", "seeds", "status")]
    for r in results:
        b = r.band
        rows.append(("/".join(b.cell), f"{b.expected:.1f} ± {b.tolerance:.1f}",
                     "–" if r.measured is None else f"{r.measured:.1f}", str(r.seeds or "–"),
                     "in band (OK)" if r.status == "OK" else "OUT OF BAND (FAIL)" if r.status == "FAIL" else "not run"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    counts = {s: sum(r.status == s for r in results) for s in ("OK", "FAIL", "not run")}
    lines.append(f"{counts['OK']} in band, {counts['FAIL']} out of band, {counts['not run']} not run "
                 f"(of {len(results)} bands{'; ' + str(header['name']) if header.get('name') else ''})")
    if header.get("unchecked"):
        lines.append(f"{len(header['unchecked'])} cell(s) unchecked: their band would span the whole scale "
                     "(the band file's unchecked: list says why)")
    return "\n".join(lines)


# --------------------------------------------------------------------------- making bands
FAMILY_ALPHA = 0.05  # several-seed cells: the chance that any of them leaves its band by chance on another run
Z_ONE_SEED = 4.0  # one-seed cells: tolerance in SDs across worlds (which over-cover another machine's training noise)


def band_multiplier(df: int, cells: int) -> float:
    """Student's t quantile that a cell leaves with probability ``FAMILY_ALPHA / cells`` (two-sided):
    a tolerance of this many estimated SDs lets all ``cells`` bands of a file hold together with
    probability at least 1 - FAMILY_ALPHA (Bonferroni), where the SD is estimated with ``df`` degrees
    of freedom (a few seeds and worlds: its uncertainty widens the band, as a prediction interval)."""
    from scipy.stats import t

    if df < 1 or cells < 1:
        raise ValueError(f"a band multiplier needs df >= 1 and cells >= 1, got {df}, {cells}")
    return float(t.ppf(1.0 - FAMILY_ALPHA / (2 * cells), df))


def rule(replicates: bool = False) -> str:
    """How :func:`make_bands` sets a tolerance, in words (a band file's ``method:`` says it);
    ``replicates``: the bands were made with replicate experiments (the last sentence but one)."""
    return ("A several-seed cell's SD is that of one fine-tune, pooled within experiments (the test set fixed, only "
            "training varying: what another machine's floats do); its tolerance is that SD times Student's t at the "
            "SD's degrees of freedom, for a difference of two means over that many seeds, at the level where every "
            f"several-seed cell holds together with probability {1 - FAMILY_ALPHA:.0%} (Bonferroni): an SD from a few "
            "seeds and worlds can be small by chance, and t widens the band by what it does not know. A one-seed "
            "cell's SD is taken across the experiments (world, test set and training varying: it usually over-covers "
            "another machine), pooled over the one-seed cells of its task, split and metric and never below its own; its "
            f"tolerance is {Z_ONE_SEED:g} SD of a difference of two runs. "
            + ("Where replicates ran a one-seed cell with several fine-tune seeds, its tolerance is at least its "
               "training SD (within each replicate, pooled over them) times Student's t at that SD's degrees of "
               "freedom, for a difference of two runs, at the level where every such cell holds together with "
               f"probability {1 - FAMILY_ALPHA:.0%}: one training draw can move a small test set more than three "
               "worlds spread. " if replicates else "")
            + "Each at least two test examples' worth.")


def _pooled_sd(parts: list[tuple[float, int]]) -> tuple[float, int]:
    """(pooled SD, its degrees of freedom) of (variance, df) pairs: the df-weighted mean variance."""
    df = sum(d for _, d in parts)
    return math.sqrt(sum(v * d for v, d in parts) / df), df


def make_bands(center: dict[Cell, list[float]], others: list[dict[Cell, list[float]]],
               n_of: dict[tuple[str, str, str], int],
               replicates: list[dict[Cell, list[float]]] = ()) -> list[Band]:
    """Bands centred on the ``center`` experiment's mean over seeds, with the tolerances :func:`rule`
    describes: several-seed cells ``band_multiplier(df, several-seed cells) · σ · sqrt(2 / S)`` (σ pooled
    within experiments), one-seed cells ``Z_ONE_SEED · σ · sqrt(2)`` (σ across ``others``, pooled over
    the cell's task, split and metric, never below its own), at least
    ``band_multiplier(df, such cells) · σ_train · sqrt(2)`` where ``replicates`` (the same config with
    more fine-tune seeds) measured a one-seed cell's training SD; every tolerance at least 200 / n."""
    cells = [c for c in sorted(center) if center.get(c)]
    several = sum(len(center[c]) > 1 for c in cells)  # the family the several-seed tolerances hold together
    across: dict[Cell, tuple[float, int]] = {}  # one-seed cell -> (variance across experiments, its df)
    for cell in cells:
        if len(center[cell]) == 1:
            means = [statistics.fmean(center[cell])] + [statistics.fmean(o[cell]) for o in others if o.get(cell)]
            if len(means) > 1:
                across[cell] = (statistics.variance(means), len(means) - 1)
    pools: dict[tuple[str, str, str], list[tuple[float, int]]] = {}
    for (task, _, split, metric), vd in across.items():
        pools.setdefault((task, split, metric), []).append(vd)
    train: dict[Cell, tuple[float, int]] = {}  # one-seed cell -> (training variance within replicates, its df)
    for cell in (c for c in cells if len(center[c]) == 1):
        groups = [r[cell] for r in replicates if len(r.get(cell) or []) > 1]
        if groups:
            sd, df = _pooled_sd([(statistics.variance(g), len(g) - 1) for g in groups])
            train[cell] = (sd * sd, df)
    bands = []
    for cell in cells:
        vals = center[cell]
        task, variant, split, metric = cell
        n = n_of.get((task, variant, split)) or 1
        floor = 200.0 / n
        tol = 0.0
        if len(vals) > 1:
            groups = [v for v in [vals, *[o.get(cell) or [] for o in others]] if len(v) > 1]
            pooled, df = _pooled_sd([(statistics.variance(g), len(g) - 1) for g in groups])
            k = band_multiplier(df, several)
            tol = k * pooled * math.sqrt(2 / len(vals))
            how = (f"{len(vals)} seeds; one fine-tune's SD {pooled:.2f} pooled over {len(groups)} experiments "
                   f"({df} df); tolerance {k:.2f} SD (t, {df} df) of a difference of two {len(vals)}-seed means")
        elif cell in across:
            pool = pools[(task, split, metric)]
            pooled, df = _pooled_sd(pool)
            own = math.sqrt(across[cell][0])
            tol = Z_ONE_SEED * max(own, pooled) * math.sqrt(2)
            how = (f"1 seed; SD {own:.2f} across {across[cell][1] + 1} top-level seeds (world and training), "
                   f"{pooled:.2f} pooled over the {len(pool)} one-seed variant(s) of {task} {split} {metric} ({df} df); "
                   f"tolerance {Z_ONE_SEED:g} times the larger, of a difference of two runs")
        else:
            how = "1 seed in 1 experiment: no spread measured"
        if cell in train:
            sd, df = math.sqrt(train[cell][0]), train[cell][1]
            k = band_multiplier(df, len(train))
            by_training = k * sd * math.sqrt(2)
            how += (f"; training SD {sd:.2f} pooled within the replicates ({df} df): {k:.2f} SD (t, {df} df) of a "
                    f"difference of two runs is {by_training:.2f}")
            if by_training > tol:
                how += ", the tolerance"
                tol = by_training
        if tol < floor:
            how += f"; raised to two test examples ({floor:.2f})"
            tol = floor
        bands.append(Band(task, variant, split, metric, round(statistics.fmean(vals), 2), round(tol, 2), len(vals), how))
    return bands


def _metrics_files(root: Path) -> list[Path]:
    files = sorted(root.glob("runs/*/*/seed*/*/metrics.json"))
    if not files:
        raise DataError(f"{root}: no runs/<task>/<variant>/seed<seed>/<split>/metrics.json files")
    return files


def experiment_files(root: str | Path) -> tuple[list[Path], list[Path]]:
    """The metrics.json of every run (task, variant, seed, split) of the finished experiment folder
    ``results/<name>``, and the predictions.jsonl beside each (in the same order); a missing one is a
    DataError naming it."""
    metrics = _metrics_files(Path(root))
    predictions = [m.with_name("predictions.jsonl") for m in metrics]
    missing = [p for p in predictions if not p.is_file()]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise DataError(f"{missing[0]}: missing{more}: each run of {root} writes its predictions beside its metrics.json")
    return metrics, predictions


def experiment_values(root: str | Path) -> tuple[dict[Cell, list[float]], dict[tuple[str, str, str], int]]:
    """Every run's values (and test sizes) of one finished experiment folder ``results/<name>``."""
    files = _metrics_files(Path(root))
    n_of = {}
    for f in files:
        d = read_json(f)
        n_of[(d["task"], d["variant"], d["split"])] = int(d.get("n") or 0)
    return run_values(files), n_of


def split_unchecked(bands: list[Band]) -> tuple[list[Band], list[dict]]:
    """(the bands that can fail, the cells whose band spans the whole 0-100 scale of a percentage and so
    checks nothing): these go to the band file's ``unchecked:`` list with their reason (the source)."""
    spans = [b.expected - b.tolerance <= 0.0 and b.expected + b.tolerance >= 100.0 for b in bands]
    keep = [b for b, s in zip(bands, spans) if not s]
    out = [{"cell": "/".join(b.cell), "expected": b.expected, "tolerance": b.tolerance, "why": b.source}
           for b, s in zip(bands, spans) if s]
    return keep, out


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
