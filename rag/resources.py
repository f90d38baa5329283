"""Per-job resource records: what each job of a run cost.

Every rule writes two files under ``results/<name>/resources/<rule>/``, named by its wildcard values
(``<rule>`` for a rule without wildcards): ``<job>.json``, written by :func:`run_recorded` (``rag-record --out
FILE -- COMMAND ...``, the rule's shell command run as its child), holds the job's
exact wall time, CPU time (user + system of the whole process tree, from ``wait4``'s rusage at its exit,
and the recorder's own) and the peak resident memory of its largest process; ``<job>.tsv`` is
Snakemake's ``benchmark:`` file, whose ``max_rss`` samples the sum over the tree (every 0.5 s for the
first 15 s, then every 30 s). A record's ``cpu_s`` and ``wall_s`` come from the first, its
``peak_rss_mb`` is the larger of the two memories (several ranks of one job: the sampled sum).
"""

from __future__ import annotations

import csv
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from rag.errors import DataError


def run_recorded(out: str | os.PathLike, command: list[str]) -> int:
    """Run ``command`` as a child and wait for it; when it succeeds, write its record to ``out``
    (atomically); its exit code (128 + N for signal N). SIGTERM and SIGINT are passed on to it."""
    start = time.monotonic()
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        print(f"error: {command[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    _, status, usage = os.wait4(child.pid, 0)  # a signal passed on: wait4 is resumed (PEP 475)
    wall = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        from rag.io import write_json

        own = resource.getrusage(resource.RUSAGE_SELF)
        record = {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime + own.ru_utime + own.ru_stime, 3),
                  "user_s": round(usage.ru_utime + own.ru_utime, 3), "system_s": round(usage.ru_stime + own.ru_stime, 3),
                  "max_rss_mb": round(max(usage.ru_maxrss, own.ru_maxrss) / 1024, 1)}  # Linux: KiB
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        write_json(out, record)
    return code if code >= 0 else 128 - code


def _rss(value: str, path: Path) -> float:
    if value == "NA":  # a job over before Snakemake's first sample
        return 0.0
    try:
        return float(value)
    except ValueError:
        raise DataError(f"{path}: not a Snakemake benchmark file ({value!r} is not a number)") from None


def read_record(path: str | os.PathLike) -> dict:
    """One job's record from its benchmark file ``path`` and the exact record beside it (``.json``):
    ``wall_s``, ``cpu_s`` (exact), ``peak_rss_mb`` (the larger of the sampled tree's, the largest of the
    benchmark's rows, and the largest process's). A file of another kind, or a benchmark file without its
    exact record (a job run by a workflow that did not write one), is an error naming it."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if not rows or "max_rss" not in rows[0]:
        raise DataError(f"{path}: not a Snakemake benchmark file (no max_rss column)")
    exact_file = path.with_suffix(".json")
    if not exact_file.is_file():
        raise DataError(f"{path}: no exact record {exact_file.name} beside it (the job ran without python -m "
                        "rag.resources): run the job again")
    from rag.io import read_json

    exact = read_json(exact_file)
    if not isinstance(exact, dict) or not all(isinstance(exact.get(k), (int, float)) for k in ("wall_s", "cpu_s", "max_rss_mb")):
        raise DataError(f"{exact_file}: not a resource record (wall_s, cpu_s and max_rss_mb numbers)")
    return {"wall_s": float(exact["wall_s"]), "cpu_s": float(exact["cpu_s"]),
            "peak_rss_mb": max(float(exact["max_rss_mb"]), *(_rss(row["max_rss"], path) for row in rows))}


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


def main(argv: list[str] | None = None) -> int:
    """``rag-record --out FILE -- COMMAND ...``: the rule's command, recorded."""
    import argparse

    p = argparse.ArgumentParser(prog="rag-record", description=run_recorded.__doc__.split(";")[0])
    p.add_argument("--out", required=True, help="the job's exact record (JSON), written when the command succeeds")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- and the command")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command after --")
    return run_recorded(args.out, command)


if __name__ == "__main__":
    sys.exit(main())
