"""Collect run metrics, experiments and predictions; write the CSV tables and the HTML report."""

from __future__ import annotations

import logging
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote

from rag.errors import ConfigError, DataError
from rag.io import atomic_open, read_json, read_jsonl
from rag.report import TABLE_KEYS
from rag.report.claims import Evidence, build_claims, cell_interval, frozen_twin, objectives_strategy
from rag.report.inputs import ReportInputs
from rag.tasks import TASKS, VARIANTS, paper_column, variant_spec

log = logging.getLogger(__name__)

DASH = "\u2013"  # the en dash shown for a missing number

VARIANT_NAMES = {name: spec.display for name, spec in VARIANTS.items()}


def _task_name(task: str | None):
    """The registry's display name of ``task`` (the name itself for an unregistered one)."""
    return TASKS[task].display if task in TASKS else task


def _variant_name(variant: str | None) -> str | None:
    """The report's name of ``variant`` (a further generator's with the generator's name; an unregistered one as is)."""
    try:
        return variant_spec(variant).display if isinstance(variant, str) else variant
    except ConfigError:
        return variant


def _rows(*variants: str) -> dict[str, str]:
    """Paper row label (the variant's registered display name) -> the variant measured for it."""
    return {VARIANT_NAMES[v]: v for v in variants}


# the variants each paper table measures, in the paper's row order
ROW_VARIANTS = {
    "table1": _rows("rag_token", "rag_sequence"),
    "table2": _rows("closed_book", "rag_token", "rag_sequence"),
    "table5": _rows("closed_book", "rag_token", "rag_sequence"),
    "table6": _rows("rag_token_bm25", "rag_sequence_bm25", "rag_token_frozen", "rag_sequence_frozen", "rag_token",
                    "rag_sequence"),
}
TABLE_SPLIT = {"table1": "test", "table2": "test", "table5": "test", "table6": "dev"}
EXTRA_ROWS = {"table1": [("BART (closed book)", "closed_book")]}
TABLE_NOTES = {
    "table1": [
        "This harness has a single TriviaQA test split, so the TQA and TQA-Wiki columns show the "
        "same measured number; the paper's two numbers come from two different TriviaQA test splits.",
        "BART (closed book) is measured here only; the paper's closed-book rows are T5.",
        "CT is scored with regular-expression matching (em_regex), as in the paper.",
    ],
    "table2": ["The SotA row is the paper's number only; it has no measured counterpart here."],
    "table5": [
        "Gold is computed here from the first reference of each test example "
        "(ratio of distinct to total tri-grams)."
    ],
    "table6": ["Dev split. The paper's FEVER scores are shared by RAG-Token and RAG-Sequence."],
}

HOTSWAP_PAPER_KEYS = {
    "a|a": "matched_2016",
    "a|b": "mismatched_2016_questions_2018_index",
    "b|a": "mismatched_2018_questions_2016_index",
    "b|b": "matched_2018",
}
HOTSWAP_PAPER_N = 82


@dataclass
class Cell:
    measured: str = DASH
    href: str | None = None
    paper: str | None = DASH
    value: float | None = None
    pm: str | None = None  # ± half-width of the 95 % interval (seeds and test examples: rag.report.stats)
    spread: str | None = None  # the seeds' spread (sample SD of the per-seed values); None for one seed


@dataclass
class Table:
    key: str
    title: str
    caption: str
    split: str
    columns: list[str]
    rows: list[tuple[str, list[Cell], str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _fmt(v: Any) -> str:
    if v is None:
        return DASH
    return f"{float(v):.1f}"


def _number(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(f"{where}: expected a number, got {value!r}")
    value = float(value)
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------- runs


class Runs:
    """The metrics.json (and predictions) files a report was given, by (task, variant, split), each
    with one file per fine-tune seed; a cell is the mean over its seeds."""

    def __init__(self, inputs: ReportInputs, tracking_url: str, tasks: list[str] | None, variants: list[str] | None):
        self.inputs = inputs
        self.evidence = Evidence(inputs, None)  # the predictions, read once
        self.tracking_url = tracking_url.rstrip("/")
        self.by_seed: dict[tuple[str, str, str], dict[int, dict]] = {}
        for key, files in sorted(inputs.metrics.items()):
            if (tasks is not None and key[0] not in tasks) or (variants is not None and key[1] not in variants):
                continue
            for seed, path in sorted(files.items()):
                data = read_json(path)
                if not isinstance(data, dict) or not isinstance(data.get("metrics", {}), dict):
                    raise DataError(f"{path}: expected an object with a 'metrics' object")
                if not isinstance(data.get("retrieval") or {}, dict):
                    raise DataError(f"{path}: 'retrieval' must be an object")
                self.by_seed.setdefault(key, {})[seed] = data
        # the first seed's file stands for the run's settings (n, metric options, MLflow experiment)
        self.metrics = {key: runs[min(runs)] for key, runs in self.by_seed.items()}
        if not inputs.metrics:
            log.warning("no metrics files given; every measured cell is empty")
        self.tasks = list(tasks) if tasks is not None else _ordered({k[0] for k in self.metrics}, TASKS)
        self.variants = list(variants) if variants is not None else _ordered({k[1] for k in self.metrics}, VARIANTS)

    def link(self, key: tuple[str, str, str]) -> str | None:
        """The MLflow run of a one-seed cell; for several seeds, the experiment's runs of this cell
        (tag ``cell``), which the UI lists side by side."""
        data = self.metrics.get(key)
        if not data:
            return None
        run_id, exp_id = data.get("mlflow_run_id"), data.get("mlflow_experiment_id")
        if not run_id or exp_id is None or exp_id == "":
            return None
        base = f"{self.tracking_url}/#/experiments/{quote(str(exp_id), safe='')}"
        if len(self.by_seed[key]) == 1:
            return f"{base}/runs/{quote(str(run_id), safe='')}"
        search = quote(f"tags.cell = '{key[0]}/{key[1]}'", safe="")
        return f"{base}?searchFilter={search}"

    def values(self, task: str, variant: str, split: str, metric: str, section: str = "metrics") -> list[float] | None:
        """The metric of each seed (None when a seed's file lacks it, or the run was not given)."""
        runs = self.by_seed.get((task, variant, split))
        if not runs:
            return None
        files = self.inputs.metrics[(task, variant, split)]
        out = [_number((data.get(section) or {}).get(metric), f"{files[seed]}: {section}.{metric}")
               for seed, data in sorted(runs.items())]
        return None if any(v is None for v in out) else out

    def cell(self, task: str, variant: str, split: str, metric: str, paper: Any = None, section: str = "metrics") -> Cell:
        key = (task, variant, split)
        vals = self.values(task, variant, split, metric, section)
        v = None if vals is None else float(sum(vals) / len(vals))
        pm = None
        spread = f"sd {statistics.stdev(vals):.1f}" if v is not None and len(vals) > 1 else None
        preds = self.evidence.predictions(task, variant, split) if v is not None and section == "metrics" else None
        if preds:
            iv = cell_interval(metric, list(preds.values()), self.metrics[key].get("metric_options"))
            pm = None if iv is None else f"±{iv.half_width:.1f}"
        return Cell(_fmt(v), self.link(key) if v is not None else None, _fmt(paper), v, pm, spread)

    def ran_without(self, task: str, variant: str, split: str) -> bool:
        """True when other variants of ``task`` were measured on ``split`` but ``variant`` was not
        (the experiment left it out there), as opposed to a task not run at all."""
        if (task, variant, split) in self.metrics:
            return False
        return any(t == task and s == split for t, _, s in self.metrics)

    def predictions_path(self, task: str, variant: str, split: str) -> Path | None:
        """The first seed's predictions file (the samples section shows one fine-tune's answers)."""
        files = self.inputs.predictions.get((task, variant, split))
        return files[min(files)] if files else None


def _ordered(present: set[str], canonical: Iterable[str]) -> list[str]:
    return [x for x in canonical if x in present] + sorted(present - set(canonical))


# ---------------------------------------------------------------- tables


def _gold(runs: Runs, task: str, metric: str) -> float | None:
    """``metric`` of the first reference of each test example, as if it were the prediction."""
    for variant in list(VARIANTS) + [v for v in runs.variants if v not in VARIANTS]:
        path = runs.predictions_path(task, variant, "test")
        if path is not None and path.is_file():
            rows = read_jsonl(path, required=("targets",))
            texts = [str(r["targets"][0]) for r in rows if isinstance(r["targets"], list) and r["targets"]]
            if not texts:
                return None
            from rag.metrics import Scorer

            options = runs.metrics.get((task, variant, "test"), {}).get("metric_options")  # that run's own
            return float(Scorer.of(options).compute(metric, texts, [[t] for t in texts]))
    return None


def weights_notes(runs: Runs) -> dict[str, str]:
    """Paper column -> which weights its runs were scored with (their metrics.json), for the columns
    whose metric reads weights (Q-BLEU-1's)."""
    from rag import metrics as M

    used: dict[tuple[str, str], dict[str, list[str]]] = {}  # (column, metric) -> weights -> runs
    for (task, variant, split), data in sorted(runs.metrics.items()):
        spec = TASKS.get(task)
        for col in spec.paper_columns if spec else ():
            if not M.metric_spec(col.metric).reads_weights or col.metric not in (data.get("metrics") or {}):
                continue
            opts = data.get("metric_options") or {}
            w = opts.get("qbleu1")
            if isinstance(w, dict) and all(isinstance(w.get(k), (int, float)) for k in ("w_ner", "w_qt", "w_re", "delta")):
                sw = 1.0 - w["w_ner"] - w["w_qt"] - w["w_re"]
                desc = (f"ner {w['w_ner']:g}, qt {w['w_qt']:g}, re {w['w_re']:g}, stop words {sw:.2g}, "
                        f"delta {w['delta']:g}, tokenizer {opts.get('tokenizer', 'python')}")
            else:
                desc = "not recorded (metrics.json written before the weights were configurable)"
            used.setdefault((col.label, col.metric), {}).setdefault(desc, []).append(f"{variant}/{split}")
    notes = {}
    for (label, metric), by_desc in used.items():
        name = M.metric_spec(metric).display
        if len(by_desc) == 1:
            notes[label] = f"{label} is {name} with weights {next(iter(by_desc))}."
        else:
            parts = "; ".join(f"{d} ({', '.join(runs_)})" for d, runs_ in by_desc.items())
            notes[label] = f"{label} is {name} with differing weights across runs: {parts}."
    return notes


def build_tables(runs: Runs, paper: dict, generators: dict[str, str] | None = None) -> list[Table]:
    """The paper's tables, then the experiment's own tasks' and its generators side by side (``generators``:
    name -> what it is; key "": the generator group's) where it has them."""
    tables = []
    wnotes = weights_notes(runs)
    for key in TABLE_KEYS:
        spec = paper[key]
        split = TABLE_SPLIT[key]
        columns = list(spec["columns"])
        table = Table(key, f"Table {key.removeprefix('table')}", spec.get("caption", ""), split, columns,
                      notes=list(TABLE_NOTES[key]))
        table.notes += [note for label, note in wnotes.items() if label in columns]
        row_variants = ROW_VARIANTS[key]
        targets = [paper_column(key, col) for col in columns]  # the (task, metric) of each column
        not_run: dict[str, list[str]] = {}  # row label -> the columns of tasks run without that variant
        for label, paper_values in spec["rows"].items():
            variant = row_variants.get(label)
            cells = []
            for col, (task, metric), pv in zip(columns, targets, paper_values):
                if variant is not None and runs.ran_without(task, variant, split):
                    not_run.setdefault(label, []).append(col)
                if label == "Gold" and key == "table5":
                    g = _gold(runs, task, metric)
                    cells.append(Cell(measured=_fmt(g), paper=_fmt(pv), value=g))
                elif variant is None:
                    cells.append(Cell(paper=_fmt(pv)))
                else:
                    cells.append(runs.cell(task, variant, split, metric, pv))
            kind = "paper-only" if variant is None and label != "Gold" else ""
            table.rows.append((label, cells, kind))
        by_columns: dict[tuple[str, ...], list[str]] = {}  # rows left out of the same columns: one note
        for label, cols in not_run.items():
            by_columns.setdefault(tuple(cols), []).append(label)
        for cols, labels in by_columns.items():
            table.notes.append(f"{', '.join(labels)}: not run in this experiment for {', '.join(cols)} "
                               "(config key tasks.<task>.variants), so those cells are blank.")
        for label, variant in EXTRA_ROWS.get(key, []):
            table.rows.append((label, [runs.cell(task, variant, split, metric) for task, metric in targets], "measured-only"))
        tables.append(table)
    extra = [own_tasks_table(runs), generators_table(runs, generators or {})]
    return tables + [t for t in extra if t]


def own_tasks_table(runs: Runs) -> Table | None:
    """The test scores of the tasks that fill no column of the paper's tables (a task the config
    declares): a column per task and metric, a row per variant measured; None when there are none."""
    tasks = [t for t in runs.tasks if not (TASKS[t].paper_columns if t in TASKS else ())]
    columns = [(t, m) for t in tasks for m in (TASKS[t].metrics if t in TASKS else ())]
    variants = [v for v in runs.variants if any((t, v, "test") in runs.metrics for t in tasks)]
    if not columns or not variants:
        return None
    table = Table("own_tasks", "Tasks of this experiment", "the tasks with no published numbers (no column of "
                  "the paper's tables)", "test", [f"{_task_name(t)} {m}" for t, m in columns])
    for v in variants:
        table.rows.append((_variant_name(v), [runs.cell(t, v, "test", m, None) for t, m in columns], ""))
    return table


def generators_table(runs: Runs, generators: dict[str, str]) -> Table | None:
    """The generators of the experiment side by side (config key generators): per task with runs of a
    further generator, a column per generator of the task's primary metric on test; a row per variant
    (the closed book's row holds each generator alone); None when no further generator ran."""
    from rag.metrics import metric_spec
    from rag.tasks import GENERATOR_SEP, split_variant

    further = {v: split_variant(v) for v in runs.variants if split_variant(v)[1]}  # <variant>@<generator> -> both
    tasks = [t for t in runs.tasks if any((t, v, "test") in runs.metrics for v in further)]
    if not tasks:
        return None
    families = [None, *sorted({g for _, g in further.values()})]
    base = _ordered({b for b, _ in further.values()}, VARIANTS)
    base.sort(key=lambda v: VARIANTS[v].retriever is None)  # the closed book last
    columns = [(t, g) for t in tasks for g in families]
    label = lambda g: g or "generator"  # noqa: E731
    table = Table("generators", "Generators side by side", "each variant fine-tuned on the same tasks, seeds and "
                  "retriever with each generator of the experiment", "test",
                  [f"{TASKS[t].short or _task_name(t)} {metric_spec(TASKS[t].primary).display} ({label(g)})"
                   for t, g in columns])
    table.notes = [f"{label(g)}: {generators[g or '']}" for g in families if generators.get(g or "")]
    for v in base:
        name = "Closed book" if VARIANTS[v].retriever is None else VARIANT_NAMES[v]
        table.rows.append((name, [runs.cell(t, v if g is None else f"{v}{GENERATOR_SEP}{g}", "test", TASKS[t].primary, None)
                                  for t, g in columns], "measured-only"))
    return table


RECALL_AT = (1, 5, 20)  # the retrievers table's recall columns


def _recall_at(rows: list[dict], j: int, passages, row_of, answers: bool, regex: bool = False) -> float | None:
    """Answer (``answers``) or passage recall at ``j`` of one run's predictions: the share of questions with a
    hit among the first j retrieved passages (ranked best first); None where the run retrieved fewer than j
    or the rows say nothing of it (no gold passages, no answers in passages)."""
    from rag.predictions import answer_hits, passage_hits

    if not rows or any(len(r.get("doc_ids") or ()) < j for r in rows):
        return None
    cut = [{**r, "doc_ids": r["doc_ids"][:j]} for r in rows]
    hits = answer_hits(cut, passages, regex, row_of) if answers else passage_hits(cut, passages, row_of)
    return sum(hits) / len(hits) if hits else None


def retriever_summary(decl: dict) -> str:
    """A declared retriever (family and options) in a few words: the retrievers table's note."""
    # an option the config fills in (an end-to-end retriever's passage encoding, a group of its own) is left out
    options = ", ".join(f"{k} {'+'.join(v) if isinstance(v, list) else v}" for k, v in sorted(decl["options"].items())
                        if not isinstance(v, dict))
    return decl["family"] + (f" ({options})" if options else "")


def retrievers_table(runs: Runs, retrievers: dict[str, dict], passages) -> Table | None:
    """The retrievers of the experiment side by side (config key retrievers): a row per task, split and
    variant run with a further retriever (<variant>+<name>), after the same variant with its own retriever;
    answer and passage recall at 1, 5 and 20 retrieved passages (from the predictions' ranked passages, each
    seed's, their mean; blank where a run retrieved fewer) and the task's primary metric. None when no further
    retriever ran or the passages are not at hand."""
    from rag.metrics import metric_spec
    from rag.tasks import split_variant, variant_retriever

    further = [v for v in runs.variants if variant_retriever(v)]
    if not further or passages is None:
        return None
    base = {v: split_variant(v)[0] for v in further}
    row_of = passages.index_of()  # once for every list the table scores
    columns = ([f"answer recall@{j}" for j in RECALL_AT] + [f"passage recall@{j}" for j in RECALL_AT] + ["primary metric"])
    table = Table("retrievers", "Retrievers side by side", "each variant fine-tuned on the same tasks and seeds with "
                  "its own retriever and with each further retriever of the experiment", "dev and test", columns)
    ran = {variant_retriever(v) for v in further}
    table.notes = [f"{name}: {retriever_summary(decl)}" for name, decl in retrievers.items() if name in ran]
    for split in ("test", "dev"):
        for task in runs.tasks:
            kinds = TASKS[task] if task in TASKS else None
            answers = kinds is not None and kinds.answers_in_passages
            for own in _ordered({base[v] for v in further if (task, v, split) in runs.metrics}, VARIANTS):
                for variant in ([own] * ((task, own, split) in runs.metrics)
                                + [v for v in further if base[v] == own and (task, v, split) in runs.metrics]):
                    files = runs.inputs.predictions.get((task, variant, split)) or {}
                    per_seed = [read_jsonl(path) for _, path in sorted(files.items())]
                    cells = []
                    for kind in (True, False):
                        for j in RECALL_AT:
                            vals = ([_recall_at(rows, j, passages, row_of, kind, answers and kinds.regex_targets) for rows in per_seed]
                                    if (answers or not kind) else [])
                            v = None if not vals or None in vals else sum(vals) / len(vals)
                            cells.append(Cell(_fmt(v), value=v))
                    primary = TASKS[task].primary if task in TASKS else None
                    cells.append(runs.cell(task, variant, split, primary, None) if primary else Cell())
                    label = f"{_task_name(task)} {split}: {_variant_name(variant)}"
                    if primary:
                        label += f" ({metric_spec(primary).display})"
                    table.rows.append((label, cells, "measured-only"))
    return table


def _answer_recall(runs: Runs, task: str, variant: str, j: int, passages, row_of) -> Cell:
    """The mean over seeds of a run's test answer recall at ``j`` (:func:`_recall_at`); blank where unknown."""
    kinds = TASKS[task] if task in TASKS else None
    files = runs.inputs.predictions.get((task, variant, "test")) or {}
    if kinds is None or not kinds.answers_in_passages or not files:
        return Cell()
    vals = [_recall_at(read_jsonl(path), j, passages, row_of, True, kinds.regex_targets) for _, path in sorted(files.items())]
    v = None if None in vals else sum(vals) / len(vals)
    return Cell(_fmt(v), value=v)


def _mean_cell(runs: Runs, task: str, variant: str, field: str, scale: float = 1.0) -> Cell:
    """The mean over seeds of ``field`` of a run's test ``index_refresh`` (metrics.json; times ``scale``)."""
    vals = runs.values(task, variant, "test", field, "index_refresh")
    v = None if vals is None else scale * sum(vals) / len(vals)
    return Cell(_fmt(v), value=v)


def end_to_end_runs(runs: Runs, task: str) -> dict[str, dict]:
    """variant -> how its index was kept (metrics.json ``index_refresh``: strategy, objective, ...) of ``task``'s
    runs whose passage encoder trained, in the report's variant order."""
    out = {}
    for v in runs.variants:
        seeds = runs.by_seed.get((task, v, "test")) or {}
        kept = [d.get("index_refresh") for d in seeds.values()]
        if kept and all(isinstance(k, dict) for k in kept):
            out[v] = kept[0]
    return out


def end2end_tables(runs: Runs, passages) -> list[Table]:
    """The retrievers trained end to end (runs whose passage encoder trained: their metrics' ``index_refresh``) side
    by side, per task on test: the index refresh strategies (the runs of RAG's marginal objective) with their
    staleness and cost, and the objectives (the runs of the strategy that more than one objective ran), each after
    the frozen retriever and the question encoder trained alone. [] when none ran or the passages are not at hand."""
    from rag.tasks import INDEX_STRATEGIES as STRATEGIES, RETRIEVER_OBJECTIVES as OBJECTIVES, split_variant

    tasks = {t: e for t in runs.tasks if (e := end_to_end_runs(runs, t))}
    if not tasks or passages is None:
        return []
    row_of = passages.index_of()
    recall = [f"answer recall@{j}" for j in (1, 5)]
    strategies = Table("end2end_strategies", "Index refresh strategies", "the passage encoder trained with the question "
                       "encoder (RAG's marginal), its index kept by each strategy, beside the question encoder trained alone "
                       "and the frozen retriever; staleness: the share of the stale index's top K the fresh one keeps, over "
                       "the probe questions at each refresh", "test",
                       recall + ["primary metric", "index refreshes", "stale/fresh top-K overlap %", "refresh CPU-s",
                                 "training CPU-s"])
    objectives = Table("end2end_objectives", "Retriever objectives", "what trains the retriever (both encoders), under one "
                       "index strategy, beside the question encoder trained alone and the frozen retriever", "test",
                       recall + ["primary metric", "training CPU-s", "refresh CPU-s"])

    def measured(task, v):
        primary = TASKS[task].primary if task in TASKS else None
        return [_answer_recall(runs, task, v, j, passages, row_of) for j in (1, 5)] + [
            runs.cell(task, v, "test", primary, None) if primary else Cell()]

    for task, kept in tasks.items():
        for base in _ordered({split_variant(v)[0] for v in kept}, VARIANTS):
            refs = [r for r in (frozen_twin(base), base) if r and (task, r, "test") in runs.metrics]
            mine = {v: k for v, k in kept.items() if split_variant(v)[0] == base}
            label = lambda v: f"{_task_name(task)}: {_variant_name(v)}"  # noqa: E731
            by_strategy = sorted((v for v, k in mine.items() if k["objective"] == "marginal"),
                                 key=lambda v: STRATEGIES.index(mine[v]["strategy"]))
            for r in refs if by_strategy else ():
                strategies.rows.append((label(r), measured(task, r) + [Cell()] * 4, "measured-only"))
            for v in by_strategy:
                strategies.rows.append((f"{label(v)}: {mine[v]['strategy']}", measured(task, v) + [
                    _mean_cell(runs, task, v, "index_refreshes"), _mean_cell(runs, task, v, "mean_refresh_overlap", 100),
                    _mean_cell(runs, task, v, "refresh_cpu_seconds"), _mean_cell(runs, task, v, "train_cpu_seconds")],
                    "measured-only"))
            shared = objectives_strategy(mine)
            if shared is None:
                continue
            for r in refs:
                objectives.rows.append((label(r), measured(task, r) + [Cell()] * 2, "measured-only"))
            for v in sorted((v for v, k in mine.items() if k["strategy"] == shared),
                            key=lambda v: OBJECTIVES.index(mine[v]["objective"])):
                objectives.rows.append((f"{label(v)}: {mine[v]['objective']}", measured(task, v) + [
                    _mean_cell(runs, task, v, "train_cpu_seconds"), _mean_cell(runs, task, v, "refresh_cpu_seconds")],
                    "measured-only"))
            objectives.notes.append(f"{_task_name(task)} {_variant_name(base)}: every objective under index_refresh "
                                    f"{shared}")
    strategies.notes.append("refresh CPU-s: the refreshes' encoding (an async run's in its encoder processes); training "
                            "CPU-s: the training process', a synchronous refresh included; both the mean over seeds")
    return [t for t in (strategies, objectives) if t.rows]


def seeds_line(runs: Runs) -> str:
    """One line on how many fine-tune seeds the report's cells have and what the intervals mean."""
    counts: dict[int, set[str]] = {}
    for (task, variant, _), seeds in runs.by_seed.items():
        counts.setdefault(len(seeds), set()).add(f"{_task_name(task)} {_variant_name(variant)}")
    if not counts:
        return "No runs."
    if set(counts) == {1}:
        return ("One fine-tune seed per run: every interval covers the test sample only and ignores training "
                "variance (the seed, and CPU float differences, which act like one); config key seeds runs more.")
    def runs_of(k: int) -> str:
        return f"{len(counts[k])} run{'s' * (len(counts[k]) > 1)}"

    several = "; ".join(f"{k} per run for {runs_of(k)} ({', '.join(sorted(counts[k]))})"
                        for k in sorted(counts, reverse=True) if k > 1)
    return (f"Fine-tune seeds: {several}" + (f", 1 for the other {runs_of(1)}" if 1 in counts else "")
            + ". Each number is the mean over its seeds; its interval carries the seed variance and the test sample, "
            "except where a run has one seed (the test sample only).")


def write_csvs(tables: list[Table], paths: dict[str, Path]) -> None:
    """Each table to the file ``paths`` names for its key (table1, table2, ...); tables without one are not written."""
    import pandas as pd

    for table in tables:
        if table.key not in paths:
            continue
        rows = [(label, cells) for label, cells, kind in table.rows if kind != "paper-only"]  # those measured
        df = pd.DataFrame([[c.value for c in cells] for _, cells in rows], columns=table.columns, dtype="float64",
                          index=pd.Index([label for label, _ in rows], name="model"))
        path = Path(paths[table.key])
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(path) as fh:
            df.to_csv(fh, float_format="%.4g")


def retrieval_table(runs: Runs) -> tuple[list[str], list[dict]]:
    keys = {k for data in runs.metrics.values() for k in data.get("retrieval") or {}}
    columns = sorted(keys, key=lambda k: (k.split("@")[0], _at_k(k)))
    rows = []
    for split in ("test", "dev"):
        for task in runs.tasks:
            for variant in runs.variants:
                data = runs.metrics.get((task, variant, split))
                if not data or not data.get("retrieval"):
                    continue
                rows.append(
                    {
                        "split": split,
                        "task": _task_name(task),
                        "variant": _variant_name(variant),
                        "n": data.get("n", DASH),
                        "cells": [runs.cell(task, variant, split, c, section="retrieval") for c in columns],
                    }
                )
    return columns, rows


def _at_k(key: str) -> int:
    try:
        return int(key.rsplit("@", 1)[1])
    except (IndexError, ValueError):
        return 0


# ---------------------------------------------------------------- experiments


def _seed_mean(rows: list[list[float | None]]) -> list[float | None]:
    """Element-wise mean over seeds (None where any seed has none)."""
    return [None if any(v is None for v in col) else float(sum(col) / len(col)) for col in zip(*rows)]


def figure3(inputs: ReportInputs) -> list[dict]:
    """One figure (two panels) per task that has top-K sweep files; each curve the mean over seeds."""
    from rag.report.svg import line_chart

    tasks = _ordered({key[0] for key in inputs.experiment_keys("topk")}, TASKS)
    figures = []
    for task in tasks:
        series: dict[str, list] = {"em": [], "answer_recall": []}  # metric -> its curves, one per variant
        for variant in ("rag_token", "rag_sequence"):
            files = inputs.experiment("topk", task, variant)
            if not files or any(not p.is_file() for p in files.values()):
                continue
            ks = None
            curves: dict[str, list] = {"em": [], "answer_recall": []}  # metric -> per seed: its curve, or None
            for path in files.values():
                data = read_json(path)
                k = data.get("k") if isinstance(data, dict) else None
                if not isinstance(k, list) or not k:
                    raise DataError(f"{path}: expected a non-empty list 'k'")
                k = [_number(x, f"{path}: k") for x in k]
                if ks is not None and k != ks:
                    raise DataError(f"{path}: K values {k} differ from another seed's {ks}")
                ks = k
                for metric, rows in curves.items():
                    ys = data.get(metric)
                    if ys is not None and (not isinstance(ys, list) or len(ys) != len(ks)):
                        raise DataError(f"{path}: '{metric}' must be a list as long as 'k'")
                    rows.append(None if ys is None else [_number(y, f"{path}: {metric}") for y in ys])
            name = VARIANT_NAMES[variant] + (f" (mean of {len(files)} seeds)" if len(files) > 1 else "")
            for metric, rows in curves.items():
                if rows and None not in rows:
                    series[metric].append((name, ks, _seed_mean(rows)))
        if not any(series.values()):
            continue
        tname = _task_name(task)
        short = (TASKS[task].figure3_label if task in TASKS else "") or tname
        panels = [line_chart(series[metric], title=f"{short}: {title}", xlabel="K retrieved documents", ylabel=ylabel)
                  for metric, title, ylabel in (("em", "exact match vs test-time K", f"{short} exact match (%)"),
                                                ("answer_recall", "answer recall@K", "answer recall@K (%)"))
                  if series[metric]]
        figures.append({"task": tname, "panels": panels})
    return figures


def oracle_tables(inputs: ReportInputs) -> list[dict]:
    """Reader quality apart from retrieval: EM with the gold passage alone, per attribute (mean over seeds)."""
    out = []
    for key in inputs.experiment_keys("oracle"):
        runs = []
        for path in inputs.experiment("oracle", *key).values():
            data = read_json(path)
            if not isinstance(data, dict) or not isinstance(data.get("by_attribute"), dict):
                raise DataError(f"{path}: expected an object with 'by_attribute'")
            runs.append(data)
        first = runs[0]
        attrs = sorted({a for d in runs for a in d["by_attribute"]})
        mean = lambda vals: float(sum(vals) / len(vals)) if vals else None  # noqa: E731
        out.append({"task": _task_name(first.get("task")),
                    "variant": _variant_name(first.get("variant")),
                    "n": first.get("n"), "seeds": len(runs), "em": _fmt(mean([d.get("em") for d in runs])),
                    "rows": [(a, first["by_attribute"].get(a, {}).get("n"),
                              _fmt(mean([d["by_attribute"][a]["em"] for d in runs if a in d["by_attribute"]]))) for a in attrs]})
    return out


def hotswap(inputs: ReportInputs, paper: dict) -> dict | None:
    """The 2 x 2 table of the index hot-swap per variant: answers (mean over seeds) out of n."""
    from rag.report.svg import bar_chart

    keys = inputs.experiment_keys("hotswap")
    if not keys:
        return None
    ppaper = paper.get("index_hot_swap", {})
    paper_cells = {k: ppaper.get(v) for k, v in HOTSWAP_PAPER_KEYS.items()}
    variants = []
    for variant in _ordered({k[0] for k in keys}, VARIANTS):
        n, per_seed = None, []
        for path in inputs.experiment("hotswap", variant).values():
            data = read_json(path)
            if not isinstance(data, dict) or not isinstance(data.get("cells"), dict):
                raise DataError(f"{path}: expected an object with 'cells'")
            n = data.get("n")
            n = int(_number(n, f"{path}: n") or 0) if n is not None else None
            per_seed.append([_number(data["cells"].get(k), f"{path}: cells.{k}") for k in HOTSWAP_PAPER_KEYS])
        cells = dict(zip(HOTSWAP_PAPER_KEYS, _seed_mean(per_seed)))
        one = len(per_seed) == 1

        def shown(k: str) -> dict:
            m, p, of = cells[k], paper_cells[k], n if n is not None else DASH
            return {"measured": DASH if m is None else f"{int(m) if one else round(m, 1)}/{of}",
                    "paper": DASH if p is None else f"{p}/{HOTSWAP_PAPER_N}"}

        rows = [(f"questions {q}", [shown(f"{q}|{idx}") for idx in "ab"]) for q in "ab"]
        pct = [None if cells[k] is None or not n else 100.0 * cells[k] / n for k in HOTSWAP_PAPER_KEYS]
        variants.append({"variant": _variant_name(variant), "n": n, "seeds": len(per_seed), "rows": rows, "pct": pct})
    categories = ["Q a / index a", "Q a / index b", "Q b / index a", "Q b / index b"]
    series = [(f"{v['variant']} (measured)", v["pct"]) for v in variants]
    series.append(
        ("paper (2016 / 2018)", [None if paper_cells[k] is None else 100.0 * paper_cells[k] / HOTSWAP_PAPER_N
                                 for k in HOTSWAP_PAPER_KEYS])
    )
    chart = bar_chart(categories, series, title="Index hot-swap: answers matching the questions' snapshot",
                      ylabel="% of questions")
    return {"variants": variants, "chart": chart}


# ---------------------------------------------------------------- samples


def samples(runs: Runs, passages, per_task: int) -> list[dict]:
    """Up to ``per_task`` examples of each task (its test split, else dev): each variant's prediction and
    retrieved passages, their title and text from ``passages`` (rag.data.corpus.Passages; None: titles only)."""
    out = []
    pending: list[dict] = []  # doc dicts waiting for passage text
    for task in runs.tasks:
        split = next((s for s in ("test", "dev") if any((p := runs.predictions_path(task, v, s)) is not None
                                                        and p.is_file() for v in runs.variants)), None)
        if split is None:
            continue
        preds: dict[str, dict[str, dict]] = {}  # id -> variant -> prediction, ids in the order first seen
        variants = []
        for variant in runs.variants:
            path = runs.predictions_path(task, variant, split)
            if path is None or not path.is_file():
                continue
            variants.append(variant)
            for r in read_jsonl(path, required=("id", "input", "targets", "prediction")):
                preds.setdefault(str(r["id"]), {})[variant] = r
        examples = []
        for rid in list(preds)[: max(per_task, 0)]:
            entries = preds[rid]
            first = next(iter(entries.values()))
            targets = first.get("targets")
            targets = [str(t) for t in targets] if isinstance(targets, list) else [str(targets)]
            ex = {"id": rid, "input": str(first.get("input", "")), "targets": targets, "predictions": [], "retrieved": []}
            for variant in variants:
                r = entries.get(variant)
                ex["predictions"].append(
                    {"variant": _variant_name(variant), "prediction": DASH if r is None else str(r["prediction"])}
                )
                if r is None or not r.get("doc_ids"):
                    continue
                titles, scores = r.get("doc_titles") or [], r.get("doc_scores") or []
                docs = [{"rank": i + 1, "id": str(did), "title": str(titles[i]) if i < len(titles) else "",
                         "text": None, "score": f"{float(scores[i]):.3f}"
                         if i < len(scores) and isinstance(scores[i], (int, float)) else DASH}
                        for i, did in enumerate(r["doc_ids"])]
                pending += docs
                ex["retrieved"].append({"variant": _variant_name(variant), "docs": docs})
            examples.append(ex)
        out.append({"task": _task_name(task), "split": split, "examples": examples,
                    "variants": [_variant_name(v) for v in variants]})
    wanted = {d["id"] for d in pending}
    row_of = {pid: i for i, pid in enumerate(passages.ids) if pid in wanted} if passages is not None and wanted else {}
    for doc in pending:
        if (i := row_of.get(doc["id"])) is not None:
            doc["title"], doc["text"] = passages.titles[i] or doc["title"], passages.texts[i]
    return out


# ---------------------------------------------------------------- manifests


def manifest_table(runs: Runs) -> dict:
    """One row per run (task x variant) from the manifest its test (else dev) metrics.json carries:
    seed, code commit, dirty tree, the data's hashes, device, CPU/GPU, threads, precision, torch."""
    headers = ["Run", "Seed", "Commit", "Dirty", "Passages sha256", "Index sha256", "Train data sha256", "Device",
               "CPU / GPU", "Threads", "Precision", "torch"]
    rows = []
    for task in runs.tasks:
        for variant in runs.variants:
            data = runs.metrics.get((task, variant, "test")) or runs.metrics.get((task, variant, "dev"))
            m = (data or {}).get("manifest")
            if not isinstance(m, dict):
                continue
            d, code, hw = m.get("data") or {}, m.get("code") or {}, m.get("hardware") or {}

            def short(entry):
                return (entry or {}).get("sha256", DASH)[:12] if entry else DASH

            dirty = code.get("git_dirty")
            rows.append([f"{task}/{variant}", str(m.get("seed", DASH)), (code.get("git_commit") or DASH)[:10],
                         DASH if dirty is None else ("yes" if dirty else "no"), short(d.get("passages")), short(d.get("index")),
                         short((d.get("splits") or {}).get("train")), hw.get("device", DASH),
                         hw.get("gpu_model") or hw.get("cpu_model") or DASH, str(hw.get("threads", DASH)),
                         hw.get("precision", DASH), (m.get("packages") or {}).get("torch") or DASH])
    common = [f"{h.lower()} {values[0]}" for h, values in zip(headers[1:], list(zip(*rows))[1:])  # shared by every run
              if len(rows) > 1 and len(set(values)) == 1 and values[0] != DASH]
    return {"headers": headers, "rows": rows, "common": "; ".join(common)}


# ---------------------------------------------------------------- HTML


def render_html(context: dict) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).resolve().parent / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # a control character of the data (a NUL in a prediction, C1's U+0085) is a parse error in HTML, which
    # browsers drop or replace, and a bidirectional override (U+202E) turns the text after it around:
    # the page shows U+FFFD in their place
    return _UNSHOWN.sub("\ufffd", env.get_template("report.html.j2").render(**context))


# C0 and C1 control characters but tab, newline and carriage return; the bidirectional marks, embeddings,
# overrides and isolates (Unicode's Bidi_Control)
_UNSHOWN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def build_report(
    inputs: ReportInputs,
    passages: Path | None,
    scale: dict,
    out_html: Path,
    tables: dict[str, Path],
    tracking_url: str = "http://127.0.0.1:5000",
    samples_per_task: int = 20,
    tasks: list[str] | None = None,
    variants: list[str] | None = None,
    generators: dict[str, str] | None = None,
    bands: dict | None = None,
    retrievers: dict[str, dict] | None = None,
) -> None:
    """Write the measured tables (CSV) to ``tables`` (key ``table1`` ... -> file) and the HTML
    report ``out_html``, from exactly the files ``inputs`` names; a measured number links to its MLflow run.
    ``bands``: the score-band section (:func:`rag.report.bands.report_section`), None without a band file."""
    from rag.data import paper_results

    paper = paper_results()
    runs = Runs(inputs, tracking_url, tasks, variants)
    built = build_tables(runs, paper, {"": scale.get("generator", ""), **(generators or {})})
    write_csvs(built, tables)
    retrieval_columns, retrieval_rows = retrieval_table(runs)
    from rag.data.corpus import read_passages

    read, texts = None, None  # the passages (the samples' titles and texts) and their texts by id (the claims')
    if passages is not None and Path(passages).is_file():
        read = read_passages(passages)
        texts = dict(zip(read.ids, read.texts))
    elif passages is not None:
        log.warning("passages file %s not found; showing titles only", passages)
    if retrievers and (table := retrievers_table(runs, retrievers, read)) is not None:
        built.append(table)
    built += end2end_tables(runs, read)
    context = {
        "seeds_line": seeds_line(runs),
        "claims": build_claims(inputs, texts, paper, retrievers),
        "bands": bands,
        "oracle": oracle_tables(inputs),
        "scale": scale,
        "scale_items": [(str(k), str(v)) for k, v in scale.items()],
        "paper_setup": [(str(k), str(v)) for k, v in (paper.get("setup") or {}).items()],
        "tables": built,
        "figures": figure3(inputs),
        "hotswap": hotswap(inputs, paper),
        "retrieval_columns": retrieval_columns,
        "retrieval_rows": retrieval_rows,
        "samples": samples(runs, read, samples_per_task),
        "manifests": manifest_table(runs),
        "tracking_url": runs.tracking_url,
        "n_runs": len(runs.metrics),
        "dash": DASH,
    }
    with atomic_open(Path(out_html)) as fh:
        fh.write(render_html(context))
    log.info("wrote %s and %d tables (%s)", out_html, len(built), ", ".join(str(p) for p in tables.values()))
