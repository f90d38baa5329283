"""7. Start-up of a rule's ``rag`` command: in a process of its own vs forked from the warm start
server (rag/warm.py, config key ``warm_start``), as Snakemake runs it (a shell running ``rag ...``).
And the same command in a process of its own the plain way: ``main(argv)`` from a Python script, under
CPython's default collector thresholds and with the interpreter's teardown at exit, which the ``rag``
program skips (rag.cli.leave): CPU seconds of the process, wall seconds beside them.

Two commands whose work is small beside their imports: ``rag init-store`` (MLflow and its SQL
store: what every train job's MLflow run needs) and ``rag encode`` of 4 passages (torch,
transformers' BERT and the MiniLM encoder's weights: what every model-loading job needs). Rounds
alternate the three ways, so a change of the machine's speed hits all of them.
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
    from rag.io import write_json

    cfg = load_config(yaml.safe_load((ROOT / "config.yaml").read_text()))
    write_json(folder / "encode.json", sections(cfg)["encode"])
    rows = ["id\ttitle\ttext"] + [f"p{i}\tTitle {i}\tpassage number {i} about the river that flows past the town"
                                  for i in range(4)]
    (folder / "passages.tsv").write_text("\n".join(rows) + "\n")
    return {
        "rag init-store": ["rag", "init-store", "--uri", f"sqlite:///{folder}/m.db", "--marker", str(folder / "m.json")],
        "rag encode (4 passages)": ["rag", "encode", "--config", str(folder / "encode.json"), "--passages",
                                    str(folder / "passages.tsv"), "--shard", "0", "--num-shards", "1",
                                    "--out", str(folder / "emb.npy")],
    }


# the command through main(argv) in a plain script: default collector, normal exit with teardown
PLAIN = "import sys; from rag.cli import main; sys.exit(main(sys.argv[1:]))"


def _plain(cmd: list[str]) -> list[str]:
    return [sys.executable, "-c", PLAIN, *cmd[1:]]


def _cpu_of_children() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _time(cmd: list[str], env: dict) -> tuple[float, float]:
    """Wall seconds of ``cmd`` and the CPU seconds of its process (through warm start: the thin client's only)."""
    start, cpu_start = time.perf_counter(), _cpu_of_children()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took, cpu = time.perf_counter() - start, _cpu_of_children() - cpu_start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
    if "warm start server" in done.stderr:  # it ran in its own process after all
        raise RuntimeError(f"{' '.join(cmd)} did not run in the warm start server: {done.stderr[-500:]}")
    return took, cpu


def run(args) -> dict:
    from rag import warm

    rounds = 1 if args.quick else 5
    folder = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    commands = _commands(folder)
    env = {k: v for k, v in os.environ.items() if k != warm.ENV}
    env["RAG_THREADS"] = "1"
    server = warm.WarmStart(True, str(folder / "warm.log"))
    start = time.perf_counter()
    server.start()
    try:
        server.wait_ready()
        ready = time.perf_counter() - start
        warm_env = {**env, warm.ENV: os.environ[warm.ENV]}
        times: dict[str, dict[str, list[float]]] = {
            name: {"own": [], "warm": [], "plain": [], "own_cpu": [], "plain_cpu": []} for name in commands}
        for _ in range(rounds):
            for name, cmd in commands.items():
                t = times[name]
                wall, cpu = _time(cmd, env)
                t["own"].append(wall)
                t["own_cpu"].append(cpu)
                t["warm"].append(_time(cmd, warm_env)[0])  # its CPU time would be the thin client's only
                wall, cpu = _time(_plain(cmd), env)
                t["plain"].append(wall)
                t["plain_cpu"].append(cpu)
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    rows, plain_rows, summary = [], [], []
    for name, t in times.items():
        own, fork = statistics.median(t["own"]), statistics.median(t["warm"])
        rows.append([name, own, fork, own / fork, own - fork])
        summary.append({"section": "startup", "metric": f"{name}: wall s in its own process vs forked from the warm server "
                        f"(median of {rounds})", "value": fork, "baseline": own, "ratio": own / fork, "target": "-",
                        "met": None})
        cpu, plain_cpu = statistics.median(t["own_cpu"]), statistics.median(t["plain_cpu"])
        plain_rows.append([name, plain_cpu, cpu, cpu / plain_cpu, statistics.median(t["plain"]), own])
        summary.append({"section": "startup", "metric": f"{name}: CPU s as the rag program vs through main(argv) with "
                        f"the default collector and exit (median of {rounds})", "value": cpu, "baseline": plain_cpu,
                        "ratio": cpu / plain_cpu, "target": "-", "met": None})
    notes = [f"the server was ready (its imports done) {ready:.1f} s after it started; each round ran both commands "
             "the three ways, one after the other", f"python {sys.version.split()[0]}, RAG_THREADS=1"]
    return {"times": times, "server_ready_s": ready, "summary": summary, "notes": notes,
            "tables": [{"title": "Start-up of a rag command (wall s, median)",
                        "headers": ["command", "own process", "warm start", "ratio", "saved s"], "rows": rows},
                       {"title": "A rag process of its own: the rag program vs main(argv) in a plain script (median)",
                        "headers": ["command", "plain CPU s", "rag CPU s", "ratio", "plain wall s", "rag wall s"],
                        "rows": plain_rows}]}
