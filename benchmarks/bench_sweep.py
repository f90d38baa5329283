"""10. Figure 3's K sweep on the default run's own models: `rag experiments` as the DAG ran it, the sweep alone.

Reruns the NQ RAG-Sequence sweep jobs of a finished default run (their command lines as Snakemake recorded
them, ``snakemake --detailed-summary``) in processes of their own, one at a time, one torch thread each as
in the DAG, without the job's other experiments (oracle, hot-swap); ``--sweep-baseline REV`` runs git revision
REV's `rag experiments` on the same jobs, alternating
with this tree's, ``--sweep-rounds`` times. Reports each job's CPU seconds (the process', start-up
included), this tree's over the baseline's, and
whether each output has the bytes of the run's own experiment file. The sweeps log to a copy of the
MLflow store, so the run's store is left as it was.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT


def sweep_jobs(summary: str, n: int, task: str | None = None) -> list[dict]:
    """The first ``n`` RAG-Sequence sweep jobs of ``task`` (default: config.yaml's experiments.topk_task),
    by seed, of ``summary`` (the TSV of ``snakemake --detailed-summary``: each output's rule and the
    shell command that wrote it): their argv (the words after ``rag``, up to the other experiments' flags
    or the log's redirection) and the sweep's file each wrote."""
    import yaml

    task = task or yaml.safe_load((ROOT / "config.yaml").read_text())["experiments"]["topk_task"]
    jobs = []
    for row in csv.DictReader(io.StringIO(summary), delimiter="\t"):
        words = shlex.split(row.get("shellcmd") or "")
        if (row["rule"] != "experiments" or f"/topk/{task}/rag_sequence/" not in row["output_file"]
                or "rag" not in words):
            continue
        argv = words[words.index("rag") + 1:]
        argv = argv[:min([argv.index(w) for w in ("--oracle-out", "--hotswap-out", "2>") if w in argv], default=None)]
        jobs.append({"seed": int(argv[argv.index("--seed") + 1]), "argv": argv, "out": argv[argv.index("--topk-out") + 1]})
    return sorted(jobs, key=lambda j: j["seed"])[:n]


def rewrite(argv: list[str], out: Path, train_config: Path) -> list[str]:
    """``argv`` with its output and its train section (the first ``--config`` file, which names the
    MLflow store) replaced."""
    argv = list(argv)
    argv[argv.index("--topk-out") + 1] = str(out)
    argv[argv.index("--config") + 1] = str(train_config)
    return argv


def private_store(train_config: Path, work: Path) -> Path:
    """A copy of the train section whose tracking store is a copy of the run's (a sqlite file
    under ``work``)."""
    section = json.loads(train_config.read_text())
    uri = section["tracking"]["uri"]
    m = re.fullmatch(r"sqlite:///(.+)", uri)
    if m is None:
        raise RuntimeError(f"{train_config}: tracking.uri {uri!r} is not a sqlite file; the sweep would log to it")
    db = Path(m.group(1))
    db = db if db.is_absolute() else ROOT / db
    shutil.copyfile(db, work / "mlflow.db")
    section["tracking"]["uri"] = f"sqlite:///{work / 'mlflow.db'}"
    copy = work / train_config.name
    copy.write_text(json.dumps(section))
    return copy


def _env(tree: str) -> dict:
    """One torch thread (the DAG's ``threads: 1``); ``rag`` from ``tree`` (with ``python -P`` the working
    folder, the repository, does not come first)."""
    return {**os.environ, "RAG_THREADS": "1", "PYTHONPATH": tree}


def _check_package(code: str, tree: str) -> None:
    got = subprocess.run([sys.executable, "-P", "-c", "import rag; print(rag.__file__)"], env=_env(tree), cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.strip()
    if Path(got).resolve().parent != (Path(tree) / "rag").resolve():
        raise RuntimeError(f"sweep: {code} should run the rag package under {tree}, imports {got}")


def _cpu_of_children() -> float:
    """User + system CPU seconds of the child processes waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(args) -> dict:
    from benchmarks.bench_index_build import baseline_tree

    summary = subprocess.run([sys.executable, "-m", "snakemake", "--detailed-summary"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    jobs = sweep_jobs(summary, 1 if args.quick else args.sweep_models)
    if not jobs:
        raise RuntimeError(f"sweep: no NQ RAG-Sequence experiments job in Snakemake's records of {ROOT} (run the "
                           "default DAG first)")
    work = Path(tempfile.mkdtemp(prefix="rag-sweep-"))
    codes = {"this tree": str(ROOT)}
    try:
        train_config = Path(jobs[0]["argv"][jobs[0]["argv"].index("--config") + 1])
        config = private_store(train_config if train_config.is_absolute() else ROOT / train_config, work)
        if args.sweep_baseline:
            codes[f"git {args.sweep_baseline}"] = str(baseline_tree(args.sweep_baseline, work))
        for code, tree in codes.items():
            _check_package(code, tree)
        rows = []
        for rnd in range(1 if args.quick else args.sweep_rounds):
            for job in jobs:
                for code, tree in codes.items():
                    tag = f"{len(rows)}"
                    out = work / f"out-{tag}.json"
                    env = _env(tree)
                    cmd = [sys.executable, "-P", "-c", "import sys; from rag.cli import main; sys.exit(main())",
                           *rewrite(job["argv"], out, config)]
                    cpu, wall = _cpu_of_children(), time.perf_counter()
                    res = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
                    cpu, wall = _cpu_of_children() - cpu, time.perf_counter() - wall
                    if res.returncode != 0:
                        raise RuntimeError(f"sweep: {code}, seed {job['seed']} failed ({res.returncode}): {res.stderr[-2000:]}")
                    expected = ROOT / job["out"]
                    rows.append({"code": code, "round": rnd + 1, "seed": job["seed"], "cpu_s": cpu, "wall_s": wall,
                                 "same_bytes_as_run": out.read_bytes() == expected.read_bytes()})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    mean = {c: statistics.mean(r["cpu_s"] for r in rows if r["code"] == c) for c in codes}
    same = all(r["same_bytes_as_run"] for r in rows)
    summary = [{"section": "sweep", "metric": f"NQ RAG-Sequence K sweep, CPU s per job, mean over {len(jobs)} model(s) "
                f"x {len(rows) // len(jobs) // len(codes)} round(s) ({c})", "value": mean[c], "baseline": None,
                "ratio": None, "target": "-", "met": None} for c in codes]
    if args.sweep_baseline:
        base = mean[f"git {args.sweep_baseline}"]
        summary.append({"section": "sweep", "metric": f"this tree / git {args.sweep_baseline}, CPU s per sweep job",
                        "value": mean["this tree"], "baseline": base, "ratio": mean["this tree"] / base, "target": "< 1",
                        "met": mean["this tree"] < base})
    summary.append({"section": "sweep", "metric": "every sweep's file has the bytes of the run's own", "value": same,
                    "baseline": None, "ratio": None, "target": "identical", "met": same})
    return {"rows": rows, "summary": summary,
            "tables": [{"title": "`rag experiments` (the K sweep) of the default run's NQ RAG-Sequence models, one job at a time, one thread",
                        "headers": ["code", "round", "fine-tune seed", "CPU s", "wall s", "same bytes as the run's"],
                        "rows": [[r["code"], r["round"], r["seed"], r["cpu_s"], r["wall_s"], r["same_bytes_as_run"]]
                                 for r in rows]}]}
