"""Per-job resource records: what each job of a run cost, as Snakemake's ``benchmark:`` measured it.

Every rule names a benchmark file, ``results/<name>/resources/<rule>/<its wildcard values>.tsv``
(``<rule>.tsv`` for a rule without wildcards): Snakemake writes it when the job succeeds, with the
job's wall time (``s``) and, sampled over the process tree of its shell (every 0.5 s for the first
15 s, then every 30 s), the peak resident memory (``max_rss``, MB) and the CPU time (``cpu_time``,
user + system, s) up to the last sample. CPU a job spends after its last sample is not counted: a
job's CPU time here is at most what it used. A job over before the first sample reads ``NA``: 0.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from rag.errors import DataError

# the benchmark file's columns a record reads, and the keys it gives them
COLUMNS = {"s": "wall_s", "cpu_time": "cpu_s", "max_rss": "peak_rss_mb"}


def _number(value: str, path: Path) -> float:
    if value == "NA":
        return 0.0
    try:
        return float(value)
    except ValueError:
        raise DataError(f"{path}: not a Snakemake benchmark file ({value!r} is not a number)") from None


def read_record(path: str | os.PathLike) -> dict:
    """One job's record from its benchmark file: ``wall_s``, ``cpu_s``, ``peak_rss_mb`` (the largest of
    its rows, one per ``repeat``). A file without those columns is an error naming it."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if not rows or not set(COLUMNS) <= set(rows[0]):
        raise DataError(f"{path}: not a Snakemake benchmark file (no {', '.join(COLUMNS)} columns)")
    return {key: max(_number(row[col], path) for row in rows) for col, key in COLUMNS.items()}


def read_records(folder: str | os.PathLike) -> dict[str, list[dict]]:
    """rule -> its jobs' records, from ``<folder>/<rule>/<job>.tsv`` (results/<name>/resources/);
    each record gets ``rule``, ``job`` (the file's stem) and ``file``."""
    out: dict[str, list[dict]] = {}
    for p in sorted(Path(folder).glob("*/*.tsv")):
        out.setdefault(p.parent.name, []).append({**read_record(p), "rule": p.parent.name, "job": p.stem, "file": str(p)})
    return out


def summary(records: list[dict]) -> dict:
    """Jobs, total and largest wall and CPU time, largest peak RSS of one rule's records."""
    return {"jobs": len(records), "wall_s_sum": sum(r["wall_s"] for r in records),
            "wall_s_max": max(r["wall_s"] for r in records), "cpu_s_sum": sum(r["cpu_s"] for r in records),
            "cpu_s_max": max(r["cpu_s"] for r in records), "peak_rss_mb_max": max(r["peak_rss_mb"] for r in records)}
