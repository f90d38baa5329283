"""Per-job resource records: what each job of a run cost.

Every rule's command runs as the child of ``rag-record --out FILE -- COMMAND ...`` (:func:`run_recorded`),
which writes the job's record, ``results/<name>/resources/<rule>/<job>.json`` (``<job>``: its wildcard values
joined by ``-``, ``<rule>`` for a rule without wildcards): its exact wall time (the recorder's included), its exact CPU time (user +
system of the whole process tree, from ``wait4``'s rusage at its exit, and the recorder's own), the peak
resident memory of its largest process (the same rusage: the tree's, not the recorder's) and the peak of the sum over its tree (sampled
every second from ``/proc``: several ranks of one job). A record's ``peak_rss_mb`` is the larger of the two.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

from rag.errors import DataError


SAMPLE_EVERY_S = 1.0


def _sample_tree_rss(pid: int, stop: threading.Event, peak: list[int]) -> None:
    """Until ``stop``: every :data:`SAMPLE_EVERY_S` the resident bytes of process ``pid`` and its descendants
    (``/proc/<pid>/statm`` each, through psutil), the largest sum into ``peak[0]``."""
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return
    while True:
        total = 0
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:  # the child is gone
            return
        for proc in tree:
            try:
                total += proc.memory_info().rss
            except psutil.Error:  # a descendant that ended since
                pass
        peak[0] = max(peak[0], total)
        if stop.wait(SAMPLE_EVERY_S):
            return


def _own_age_s() -> float:
    """Seconds since this process started, to a clock tick: the system's uptime less the process' start in
    ticks after boot (``/proc``; psutil's ``create_time`` adds the boot time's whole seconds, off by up to
    one); 0 where ``/proc`` has neither."""
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])  # field 22, starttime
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))


def run_recorded(out: str | os.PathLike, command: list[str]) -> int:
    """Run ``command`` as a child and wait for it; when it succeeds, write its record to ``out``
    (atomically); its exit code (128 + N for signal N). SIGTERM and SIGINT are passed on to it. The wall time
    runs from this process' start (its interpreter's and imports' fraction of a second counted, as its CPU is)."""
    start = time.monotonic() - _own_age_s()
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        print(f"error: {command[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    stop, tree_peak = threading.Event(), [0]
    sampler = threading.Thread(target=_sample_tree_rss, args=(child.pid, stop, tree_peak), daemon=True)
    sampler.start()
    _, status, usage = os.wait4(child.pid, 0)  # a signal passed on: wait4 is resumed (PEP 475)
    wall = time.monotonic() - start
    stop.set()
    sampler.join()
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        from rag.io import write_json

        own = resource.getrusage(resource.RUSAGE_SELF)
        record = {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime + own.ru_utime + own.ru_stime, 3),
                  "user_s": round(usage.ru_utime + own.ru_utime, 3), "system_s": round(usage.ru_stime + own.ru_stime, 3),
                  # the child's alone (Linux: KiB): the recorder's own high-water mark holds the memory of the process
                  # that forked it (Snakemake's, a test runner's), kept across exec
                  "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
                  "tree_rss_mb": round(tree_peak[0] / 2**20, 1)}
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        write_json(out, record)
    return code if code >= 0 else 128 - code


def read_record(path: str | os.PathLike) -> dict:
    """One job's record ``path`` (``<job>.json``): ``wall_s``, ``cpu_s`` and ``peak_rss_mb`` (the larger of its
    largest process's and its tree's sampled sum). A file of another kind is an error naming it."""
    from rag.io import read_json

    path = Path(path)
    rec = read_json(path)  # an empty or invalid file: an error naming it and the line
    if not isinstance(rec, dict) or not all(isinstance(rec.get(k), (int, float)) and not isinstance(rec.get(k), bool)
                                            for k in ("wall_s", "cpu_s", "max_rss_mb")):
        raise DataError(f"{path}: not a resource record (wall_s, cpu_s and max_rss_mb numbers)")
    tree = rec.get("tree_rss_mb", 0.0)
    if not isinstance(tree, (int, float)) or isinstance(tree, bool):
        raise DataError(f"{path}: not a resource record (tree_rss_mb is not a number)")
    return {"wall_s": float(rec["wall_s"]), "cpu_s": float(rec["cpu_s"]), "peak_rss_mb": max(float(rec["max_rss_mb"]), float(tree))}


def read_records(folder: str | os.PathLike) -> dict[str, list[dict]]:
    """rule -> its jobs' records, from ``<folder>/<rule>/<job>.json`` (results/<name>/resources/);
    each record gets ``rule``, ``job`` (the file's stem) and ``file``."""
    out: dict[str, list[dict]] = {}
    for p in sorted(Path(folder).glob("*/*.json")):
        out.setdefault(p.parent.name, []).append({**read_record(p), "rule": p.parent.name, "job": p.stem, "file": str(p)})
    return out


def summary(records: list[dict]) -> dict:
    """Jobs, total and largest wall and CPU time, largest peak RSS of one rule's records."""
    return {"jobs": len(records), "wall_s_sum": sum(r["wall_s"] for r in records),
            "wall_s_max": max(r["wall_s"] for r in records), "cpu_s_sum": sum(r["cpu_s"] for r in records),
            "cpu_s_max": max(r["cpu_s"] for r in records), "peak_rss_mb_max": max(r["peak_rss_mb"] for r in records)}


def main(argv: list[str] | None = None) -> NoReturn:
    """``rag-record --out FILE -- COMMAND ...``: the rule's command, recorded; this process ends with its exit code."""
    import argparse

    p = argparse.ArgumentParser(prog="rag-record", description=run_recorded.__doc__.split(";")[0])
    p.add_argument("--out", required=True, help="the job's exact record (JSON), written when the command succeeds")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- and the command")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command after --")
    code = run_recorded(args.out, command)
    # the record holds this process' CPU up to its writing: nothing runs after it, so the interpreter's
    # teardown (a few hundredths of a second, a few per cent of a short job) is skipped, not left out of it
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
