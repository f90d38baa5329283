"""7. How a ``rag`` process starts and ends: the ``rag`` program (its collector thresholds, its exit
without the interpreter's teardown: rag.cli.main, rag.cli.leave) against the same command through
``main(argv)`` from a plain Python script (CPython's default collector, the normal exit). CPU and
wall seconds of each process, as Snakemake runs it (a process of its own).

Two commands whose work is small beside their imports: ``rag init-store`` (MLflow and its SQL
store: what every train job's MLflow run needs) and ``rag encode`` of 4 passages (torch,
transformers' BERT and the MiniLM encoder's weights: what every model-loading job needs). Rounds
alternate the two ways, so a change of the machine's speed hits both.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT


def _commands(folder: Path) -> dict[str, list[str]]:
    import yaml

    from rag.config import load_config, sections
    from rag.data.corpus import write_passages
    from rag.io import write_json

    cfg = load_config(yaml.safe_load((ROOT / "config.yaml").read_text()))
    write_json(folder / "encode.json", sections(cfg)["encode"])
    write_passages(folder / "passages.tsv", [(f"p{i}", f"Title {i}", f"passage number {i} about the river that flows past the town")
                                             for i in range(4)])
    return {
        "rag init-store": ["rag", "init-store", "--uri", f"sqlite:///{folder}/m.db", "--marker", str(folder / "m.json")],
        "rag encode (4 passages)": ["rag", "encode", "--config", str(folder / "encode.json"), "--passages",
                                    str(folder / "passages.tsv"), "--shard", "0", "--num-shards", "1",
                                    "--out", str(folder / "emb.npy")],
    }


# the command through main(argv) in a plain script: default collector, normal exit with teardown
PLAIN = "import sys; from rag.cli import main; sys.exit(main(sys.argv[1:]))"


def _cpu_of_children() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _time(cmd: list[str], env: dict) -> tuple[float, float]:
    """Wall seconds of ``cmd`` and the CPU seconds of its process."""
    start, cpu_start = time.perf_counter(), _cpu_of_children()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took, cpu = time.perf_counter() - start, _cpu_of_children() - cpu_start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
    return took, cpu


def run(args) -> dict:
    rounds = 1 if args.quick else 5
    folder = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    commands = _commands(folder)
    env = {**os.environ, "RAG_THREADS": "1"}
    times = {name: {"rag": [], "plain": [], "rag_cpu": [], "plain_cpu": []} for name in commands}
    try:
        for rnd in range(rounds):
            for name, cmd in commands.items():
                ways = [("rag", cmd), ("plain", [sys.executable, "-c", PLAIN, *cmd[1:]])]
                for way, full in ways if rnd % 2 == 0 else ways[::-1]:
                    wall, cpu = _time(full, env)
                    times[name][way].append(wall)
                    times[name][f"{way}_cpu"].append(cpu)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows, summary = [], []
    for name, t in times.items():
        cpu, plain_cpu = statistics.median(t["rag_cpu"]), statistics.median(t["plain_cpu"])
        rows.append([name, plain_cpu, cpu, plain_cpu - cpu, statistics.median(t["plain"]), statistics.median(t["rag"])])
        summary.append({"section": "startup", "metric": f"{name}: CPU s as the rag program vs through main(argv) with "
                        f"the default collector and exit (median of {rounds})", "value": cpu, "baseline": plain_cpu,
                        "ratio": cpu / plain_cpu, "target": "-", "met": None})
    return {"times": times, "summary": summary, "notes": [f"python {sys.version.split()[0]}, RAG_THREADS=1"],
            "tables": [{"title": "A rag process of its own: the rag program vs main(argv) in a plain script (median)",
                        "headers": ["command", "plain CPU s", "rag CPU s", "saved CPU s", "plain wall s", "rag wall s"],
                        "rows": rows}]}
