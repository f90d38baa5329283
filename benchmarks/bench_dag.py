"""5. The default DAG: aggregate the jobs' resource records (results/miniworld/resources/<rule>/<job>.json,
rag-record's: rag.resources)."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.common import DEFAULT_RESULTS, ROOT


def read_records(root: Path) -> dict[str, list[dict]]:
    from rag.resources import read_records as read

    return read(root) if root.is_dir() else {}


def last_complete_run(log_dir: Path) -> dict | None:
    """The newest whole-DAG run in the Snakemake logs: among logs whose run finished every job
    ("N of N steps (100%) done"), the newest of those with the most jobs (a partial re-run has fewer);
    with the cores it was given ("Provided cores: N"; None where the log does not say)."""
    runs = []
    for p in log_dir.glob("*.snakemake.log"):
        text = p.read_text(errors="replace")
        done = re.search(r"^(\d+) of \1 steps \(100%\) done$", text, re.M)
        took = re.search(r"^Elapsed time: (\d+):(\d+):(\d+(?:\.\d+)?)$", text, re.M)
        cores = re.search(r"^Provided cores: (\d+)", text, re.M)
        if done and took:
            h, m, sec = took.groups()
            runs.append({"log": p.name, "jobs": int(done.group(1)), "wall_s": int(h) * 3600 + int(m) * 60 + float(sec),
                         "cores": int(cores.group(1)) if cores else None, "mtime": p.stat().st_mtime})
    return max(runs, key=lambda r: (r["jobs"], r["mtime"]), default=None)


def cpu_floor(cpu_s: float, cores: int) -> float:
    """The shortest wall time in which ``cores`` cores can give the jobs their ``cpu_s`` CPU-seconds:
    a bound on any schedule of those jobs (start-up, imports and decoding included), so a wall time
    above a target that the floor also exceeds is the work's, not the scheduler's."""
    return cpu_s / cores


def run(args) -> dict:
    from rag.resources import summary as summarize

    root = Path(args.dag_dir) if args.dag_dir else DEFAULT_RESULTS / "resources"
    per_rule = read_records(root)
    if not per_rule:
        raise RuntimeError(f"dag: no resource records under {root} (run the DAG first: every job writes "
                         "results/<name>/resources/<rule>/<job>.json; --dag-dir names another folder)")
    rows = []
    sums = {rule: summarize(rs) for rule, rs in per_rule.items()}
    for rule, s in sorted(sums.items(), key=lambda kv: -kv[1]["wall_s_sum"]):
        rows.append([rule, s["jobs"], s["wall_s_sum"], s["wall_s_sum"] / s["jobs"], s["wall_s_max"], s["cpu_s_sum"],
                     s["cpu_s_max"], s["peak_rss_mb_max"]])
    total = sum(r[2] for r in rows)
    cpu = sum(r[5] for r in rows)
    peak = max((r[7] for r in rows), default=0.0)
    rows.append(["**all**", sum(r[1] for r in rows), total, None, max((r[4] for r in rows), default=0.0), cpu,
                 max((r[6] for r in rows), default=0.0), peak])
    summary = [{"section": "dag", "metric": f"default DAG: sum of job wall times over {rows[-1][1]} jobs (s); job CPU time "
                f"{cpu:,.0f} s; peak job RSS {peak:.0f} MB", "value": total, "baseline": None, "ratio": None, "target": "-",
                "met": None}]
    whole = last_complete_run(ROOT / ".snakemake" / "log")
    if whole:
        summary.append({"section": "dag", "metric": f"default DAG wall time, {whole['jobs']} jobs (s), Snakemake log {whole['log']}",
                        "value": whole["wall_s"], "baseline": None, "ratio": None, "target": "< 600 s", "met": whole["wall_s"] < 600})
    if whole and whole["cores"]:
        floor = cpu_floor(cpu, whole["cores"])
        summary.append({"section": "dag", "metric": f"default DAG CPU floor on {whole['cores']} cores: the jobs' CPU time over "
                        "the cores (s), a wall time no schedule of these jobs beats", "value": floor, "baseline": None,
                        "ratio": None, "target": "< 900 s", "met": floor < 900})
    shown = root.relative_to(ROOT) if root.is_relative_to(ROOT) else root
    return {"dir": str(root), "rules": per_rule, "total_job_s": total, "total_cpu_s": cpu, "peak_rss_mb": peak, "run": whole,
            "summary": summary,
            "tables": [{"title": f"Job resource records under {shown}",
                        "headers": ["rule", "jobs", "sum wall s", "mean wall s", "max wall s", "sum CPU s", "max CPU s",
                                    "max peak RSS MB"], "rows": rows}],
            "notes": ["Read from the records each job writes when it succeeds (rag.resources): its exact wall time and "
                      "the CPU time of its process tree (rusage at its exit, from rag-record), and its peak RSS (its "
                      "largest process's, or its tree's summed where larger, sampled every second). Jobs run side by side, so the sum of job times exceeds the DAG's wall time; a job re-run "
                      "later overwrites its record. The wall time is the \"Elapsed time\" of the newest Snakemake log under "
                      ".snakemake/log that finished all its jobs."]}
