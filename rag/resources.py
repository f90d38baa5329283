"""Per-job resource records: what a ``rag`` command cost, measured in the process that did the work.

``rag --record PATH <command> ...`` (every rule passes one: ``results/<name>/resources/<rule>/<job>.json``)
writes, when the command ends (also when it fails), wall time, CPU time (user + system, of the
process and of the children it waited for), peak resident memory, and on CUDA the peak GPU memory
torch allocated. Under warm start (rag.warm) the command runs in a child forked from the server:
the kernel starts a child's CPU counters at zero, so its CPU time is the job's own, not the thin
client's that Snakemake's ``benchmark:`` files saw; its resident set includes the server's
imported modules it shares (``rss_at_start_mb`` says how much of the peak was there at the start).

Linux: the peak is the process image's ``VmHWM`` (``/proc/self/status``), not ``ru_maxrss``, which
after a fork and exec also counts the RSS the parent had at the fork. Elsewhere ``ru_maxrss``.
"""

from __future__ import annotations

import os
import platform
import resource
import socket
import sys
import time
from pathlib import Path

from rag.errors import DataError

SCHEMA = 1


def _status_kb(key: str) -> float | None:
    """A ``kB`` field of /proc/self/status (VmRSS, VmHWM), None where there is no /proc."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _maxrss_mb(ru) -> float:
    return ru.ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)  # bytes on macOS, KiB on Linux


def _process_start() -> float:
    """This process' start (epoch seconds): its fork, for a child of the warm start server."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time()


class JobMeter:
    """Started when a command starts; :meth:`record` reads the counters when it ends."""

    def __init__(self):
        self.started = _process_start()
        rss = _status_kb("VmRSS")
        self.rss_at_start_mb = None if rss is None else rss / 1024

    def record(self, argv: list[str], command: str | None, exit_code: int) -> dict:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        hwm = _status_kb("VmHWM")
        now = time.time()
        from rag import warm

        out = {
            "schema": SCHEMA,
            "command": command,
            "argv": list(argv),
            "exit_code": exit_code,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "wall_s": round(now - self.started, 3),
            "cpu_user_s": round(me.ru_utime, 3),
            "cpu_sys_s": round(me.ru_stime, 3),
            "children_cpu_s": round(kids.ru_utime + kids.ru_stime, 3),
            "cpu_s": round(me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, 3),
            "peak_rss_mb": round(hwm / 1024 if hwm is not None else _maxrss_mb(me), 1),
            "peak_rss_source": "VmHWM" if hwm is not None else "ru_maxrss",
            "rss_at_start_mb": None if self.rss_at_start_mb is None else round(self.rss_at_start_mb, 1),
            "children_peak_rss_mb": round(_maxrss_mb(kids), 1),
            "threads": int(os.environ["RAG_THREADS"]) if os.environ.get("RAG_THREADS", "").isdigit() else None,
            "forked_from_warm_server": warm.FORKED,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "python": platform.python_version(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID") or None,
            **_gpu_peak(),
        }
        return out


def _gpu_peak() -> dict:
    """Peak GPU memory torch allocated and reserved in this process (CUDA only; torch not
    imported or CUDA never initialised: none)."""
    torch = sys.modules.get("torch")
    none = {"gpu_peak_allocated_mb": None, "gpu_peak_reserved_mb": None, "gpu_name": None}
    if torch is None:
        return none
    try:
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return none
        n = torch.cuda.device_count()
        return {"gpu_peak_allocated_mb": round(max(torch.cuda.max_memory_allocated(i) for i in range(n)) / 2**20, 1),
                "gpu_peak_reserved_mb": round(max(torch.cuda.max_memory_reserved(i) for i in range(n)) / 2**20, 1),
                "gpu_name": torch.cuda.get_device_name(0)}
    except Exception:  # a broken CUDA context must not lose the rest of the record
        return none


def record_path(path: str | os.PathLike) -> Path:
    """Where this process writes its record: ``path``, or under torchrun (WORLD_SIZE > 1) for a
    rank other than 0 ``<stem>.rank<r>.json`` beside it."""
    path = Path(path)
    rank = os.environ.get("RANK", "0")
    if os.environ.get("WORLD_SIZE", "1") not in ("", "1") and rank != "0":
        return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")
    return path


def write_record(path: str | os.PathLike, record: dict) -> None:
    from rag.io import write_json

    write_json(record_path(path), record)


def read_records(folder: str | os.PathLike) -> dict[str, list[dict]]:
    """rule -> its jobs' records, from ``<folder>/<rule>/<job>.json`` (results/<name>/resources/);
    each record gets ``rule`` and ``job`` (the file's stem). A malformed file is an error naming it."""
    from rag.io import read_json

    out: dict[str, list[dict]] = {}
    folder = Path(folder)
    for p in sorted(folder.glob("*/*.json")):
        rec = read_json(p)
        if not isinstance(rec, dict) or "wall_s" not in rec or "peak_rss_mb" not in rec:
            raise DataError(f"{p}: not a resource record (no wall_s / peak_rss_mb)")
        out.setdefault(p.parent.name, []).append({**rec, "rule": p.parent.name, "job": p.stem, "file": str(p)})
    return out


def succeeded(records: list[dict]) -> list[dict]:
    """The records of jobs that exited 0; all of them when none did (what a failed rule measured)."""
    return [r for r in records if r.get("exit_code") == 0] or records


def summary(records: list[dict]) -> dict:
    """Jobs, total and largest wall and CPU time, largest peak RSS (and GPU peak) of one rule's records."""
    ok = succeeded(records)
    gpu = [r["gpu_peak_allocated_mb"] for r in ok if r.get("gpu_peak_allocated_mb") is not None]
    return {"jobs": len(ok), "wall_s_sum": sum(r["wall_s"] for r in ok), "wall_s_max": max(r["wall_s"] for r in ok),
            "cpu_s_sum": sum(r["cpu_s"] for r in ok), "cpu_s_max": max(r["cpu_s"] for r in ok),
            "peak_rss_mb_max": max(r["peak_rss_mb"] for r in ok), "gpu_peak_allocated_mb_max": max(gpu) if gpu else None}
