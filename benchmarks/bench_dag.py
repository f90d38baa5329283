"""5. The default DAG: aggregate Snakemake ``benchmark:`` files (results/miniworld/benchmarks/<rule>/...tsv)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from benchmarks.common import DEFAULT_RESULTS, ROOT


def read_tsvs(root: Path) -> dict[str, list[dict]]:
    per_rule: dict[str, list[dict]] = {}
    for p in sorted(root.rglob("*.tsv")):
        rel = p.relative_to(root)
        rule = rel.parts[0] if len(rel.parts) > 1 else p.stem
        with p.open() as f:
            for row in csv.DictReader(f, delimiter="\t"):
                try:
                    per_rule.setdefault(rule, []).append({"s": float(row["s"]), "max_rss": float(row["max_rss"]),
                                                          "cpu_time": float(row.get("cpu_time") or "nan"), "file": str(rel)})
                except (KeyError, ValueError):
                    continue
    return per_rule


def last_complete_run(log_dir: Path) -> dict | None:
    """The newest whole-DAG run in the Snakemake logs: among logs whose run finished every job
    ("N of N steps (100%) done"), the newest of those with the most jobs (a partial re-run has fewer)."""
    runs = []
    for p in log_dir.glob("*.snakemake.log"):
        text = p.read_text(errors="replace")
        done = re.search(r"^(\d+) of \1 steps \(100%\) done$", text, re.M)
        took = re.search(r"^Elapsed time: (\d+):(\d+):(\d+(?:\.\d+)?)$", text, re.M)
        if done and took:
            h, m, sec = took.groups()
            runs.append({"log": p.name, "jobs": int(done.group(1)), "wall_s": int(h) * 3600 + int(m) * 60 + float(sec),
                         "mtime": p.stat().st_mtime})
    return max(runs, key=lambda r: (r["jobs"], r["mtime"]), default=None)


def run(args) -> dict:
    root = Path(args.dag_dir) if args.dag_dir else DEFAULT_RESULTS / "benchmarks"
    per_rule = read_tsvs(root)
    rows = []
    for rule, rs in sorted(per_rule.items(), key=lambda kv: -sum(r["s"] for r in kv[1])):
        s = [r["s"] for r in rs]
        m = [r["max_rss"] for r in rs]
        rows.append([rule, len(rs), sum(s), sum(s) / len(s), max(s), sum(m) / len(m), max(m)])
    total = sum(r[2] for r in rows)
    peak = max((r[6] for r in rows), default=0.0)
    rows.append(["**all**", sum(r[1] for r in rows), total, None, max((r[4] for r in rows), default=0.0), None, peak])
    summary = [{"section": "dag", "metric": f"default DAG: sum of job wall times over {rows[-1][1]} jobs (s); peak job RSS {peak:.0f} MB",
                "value": total, "baseline": None, "ratio": None, "target": "-", "met": None}]
    whole = last_complete_run(ROOT / ".snakemake" / "log")
    if whole:
        summary.append({"section": "dag", "metric": f"default DAG wall time, {whole['jobs']} jobs (s), Snakemake log {whole['log']}",
                        "value": whole["wall_s"], "baseline": None, "ratio": None, "target": "< 600 s", "met": whole["wall_s"] < 600})
    return {"dir": str(root), "rules": {k: v for k, v in per_rule.items()}, "total_job_s": total, "peak_rss_mb": peak, "run": whole,
            "summary": summary,
            "tables": [{"title": f"Snakemake benchmark files under {root.relative_to(ROOT) if root.is_relative_to(ROOT) else root}",
                        "headers": ["rule", "jobs", "sum s", "mean s", "max s", "mean max_rss MB", "max max_rss MB"], "rows": rows}],
            "notes": ["Read from the files Snakemake's `benchmark:` directive writes (columns s, h:m:s, max_rss, ...); jobs run side "
                      "by side, so the sum of job times exceeds the DAG's wall time. Only jobs finished when the benchmark ran are counted; a "
                      "job re-run later overwrites its file. The wall time is the \"Elapsed time\" of the newest Snakemake log under "
                      ".snakemake/log that finished all its jobs."]}
