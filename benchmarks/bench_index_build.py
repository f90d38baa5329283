"""8. `rag index` peak memory: the index built from embedding shards in a process of its own.

Writes ``--index-build-n`` clustered 384-d float32 vectors as ``--index-build-shards`` ``.npy``
shards (what ``rag encode`` jobs write), runs ``rag index`` on them for each index type in a
subprocess under ``/usr/bin/time -v`` (its "Maximum resident set size"; the peak the kernel reports
for the process tree when it is waited for, ``wait4``'s ``ru_maxrss``, beside it), and reports the
peak RSS over the embeddings' bytes. The flat index file is compared byte for byte with a one-shot build (``IndexFlatIP.add`` of all rows at once, what
`rag index` did before it streamed shards); ``--index-build-baseline REV`` also runs the `rag index`
of git revision REV on the same shards (its peak RSS, and its flat file against this one).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT

D = 384


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def write_shards(folder: Path, n: int, shards: int, clusters: int) -> list[Path]:
    """``shards`` .npy files of clustered unit vectors, n rows in all (one shard in memory at a time)."""
    from benchmarks.bench_index import clustered

    rng = np.random.default_rng(0)
    centers = rng.standard_normal((clusters, D)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    per = -(-n // shards)
    paths = []
    for i in range(shards):
        m = max(0, min(per, n - i * per))
        x, _ = clustered(m, D, clusters, seed=10 + i, centers=centers)
        path = folder / f"emb-{i}.npy"
        np.save(path, x)
        paths.append(path)
        del x
    return paths


def scratch(prefix: str, base_dir: str | None, threads: int) -> tuple[Path, dict]:
    """A fresh folder for a section's files (under ``base_dir``, else the system's temporary one) and
    the environment its `rag` processes run in (this tree first on PYTHONPATH, ``threads`` threads)."""
    if base_dir:
        Path(base_dir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=base_dir or None))
    env = {**os.environ, "RAG_THREADS": str(threads), "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return work, env


def measure(cmd: list[str], env: dict, cwd: Path = ROOT, stdout: bool = False) -> dict:
    """Run ``cmd`` under /usr/bin/time -v (when present): wall seconds, peak RSS bytes (time -v's and
    ``wait4``'s), CPU seconds (and with ``stdout``, the last line the command printed)."""
    timer = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    full = ([timer, "-v"] if timer else []) + cmd
    t = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err, tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(full, env=env, stdout=out if stdout else subprocess.DEVNULL, stderr=err, text=True, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        err.seek(0)
        stderr = err.read()
        out.seek(0)
        printed = out.read()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... failed ({code}): {stderr[-2000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    res = {"wall_s": wall, "peak_rss_time_v": int(m.group(1)) * 1024 if m else None,
           "peak_rss_rusage": usage.ru_maxrss * 1024, "cpu_s": usage.ru_utime + usage.ru_stime}
    if stdout:
        res["stdout_last_line"] = (printed.strip().splitlines() or [""])[-1]
    return res


def baseline_tree(rev: str, folder: Path) -> Path:
    """The ``rag`` package of git revision ``rev``, unpacked under ``folder`` (read-only use of the repository)."""
    out = folder / f"rag-{rev}"
    out.mkdir()
    archive = subprocess.run(["git", "archive", rev, "rag"], cwd=ROOT, capture_output=True, check=True).stdout
    tar = folder / "rag.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as tf:
        tf.extractall(out, filter="data")
    tar.unlink()
    return out


def run(args) -> dict:
    n = 20_000 if args.quick else args.index_build_n
    shards_n = args.index_build_shards
    kinds = [k for k in args.index_build_kinds.split(",") if k]
    work, env = scratch("rag-index-build-", args.index_build_dir, args.threads)
    rows, table = [], []
    try:
        paths = write_shards(work, n, shards_n, clusters=50 if args.quick else 1000)
        emb_bytes = n * D * 4
        params = {"flat": {}, "hnsw": {"hnsw_m": 32, "hnsw_ef_search": 64}, "ivfpq": {"ivf_lists": 256, "pq_m": None}}
        for kind in kinds:
            cfg = work / f"index-{kind}.json"
            cfg.write_text(json.dumps({"device": "cpu", "retriever": {"index": kind, **params[kind]}}))
            out, stats = work / f"{kind}.faiss", work / f"{kind}.stats.json"
            m = measure([sys.executable, "-m", "rag", "index", "--config", str(cfg), "--embeddings",
                         *map(str, paths), "--out", str(out), "--stats", str(stats)], env)
            st = json.loads(stats.read_text())
            peak = m["peak_rss_time_v"] or m["peak_rss_rusage"]
            row = {"code": "this tree", "index": kind, "n": n, "d": D, "shards": shards_n, "embedding_bytes": emb_bytes,
                   **m, "ratio": peak / emb_bytes, "index_file_bytes": out.stat().st_size,
                   "recall@10_vs_flat": st.get("recall@10_vs_flat"), "file_sha256": _sha256(out)}
            rows.append(row)
            if kind != "flat":
                out.unlink()
        identity = None
        flat = next((r for r in rows if r["index"] == "flat"), None)
        if flat is not None and not args.index_build_no_identity:
            import faiss

            from rag.retrieval.index import EmbeddingShards

            one = faiss.IndexFlatIP(D)
            one.add(EmbeddingShards(paths).load())  # all rows at once
            faiss.write_index(one, str(work / "one_shot.faiss"))
            del one
            identity = _sha256(work / "one_shot.faiss") == flat["file_sha256"]
            flat["identical_to_one_shot_build"] = identity
            (work / "one_shot.faiss").unlink()
        if args.index_build_baseline:
            tree = baseline_tree(args.index_build_baseline, work)
            for kind in [k for k in kinds if k == "flat"]:
                cfg, out = work / f"index-{kind}.json", work / f"base-{kind}.faiss"
                benv = {**env, "PYTHONPATH": str(tree)}
                m = measure([sys.executable, "-c", "import sys; from rag.cli import main; sys.exit(main())", "index",
                             "--config", str(cfg), "--embeddings", *map(str, paths), "--out", str(out), "--stats",
                             str(work / f"base-{kind}.stats.json")], benv, cwd=tree)
                same = _sha256(out) == flat["file_sha256"]
                rows.append({"code": f"git {args.index_build_baseline}", "index": kind, "n": n, "d": D, "shards": shards_n,
                             "embedding_bytes": emb_bytes, **m, "ratio": m["peak_rss_time_v"] / emb_bytes,
                             "index_file_bytes": out.stat().st_size, "identical_to_this_tree": same})
                out.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for r in rows:
        table.append([r["code"], r["index"], f"{r['n']:,} x {r['d']} in {r['shards']}", r["embedding_bytes"] / 1e9,
                      (r["peak_rss_time_v"] or 0) / 1e9, r["peak_rss_rusage"] / 1e9, r["ratio"],
                      r["wall_s"], r["index_file_bytes"] / 1e9, r.get("recall@10_vs_flat"),
                      r.get("identical_to_one_shot_build", r.get("identical_to_this_tree"))])
    summary = [{"section": "index_build", "metric": f"rag index peak RSS / embedding bytes, {r['index']}, {r['n']:,} x {r['d']} "
                f"float32 in {r['shards']} shards ({r['code']})", "value": r["ratio"], "baseline": None, "ratio": None,
                "target": "<= 1.3" if r["code"] == "this tree" else "-",
                "met": r["ratio"] <= 1.3 if r["code"] == "this tree" else None} for r in rows]
    if identity is not None:
        summary.append({"section": "index_build", "metric": "flat index file identical to a one-shot build of the same shards",
                        "value": identity, "baseline": None, "ratio": None, "target": "identical", "met": identity})
    return {"rows": rows, "summary": summary,
            "tables": [{"title": "`rag index` in its own process, peak RSS (GB) against the embeddings' bytes",
                        "headers": ["code", "index", "vectors", "embeddings GB", "peak RSS GB (time -v)",
                                    "peak RSS GB (wait4)", "ratio", "wall s", "index file GB", "recall@10 vs exact",
                                    "flat file identical"], "rows": table}],
            "notes": ["Peak RSS is /usr/bin/time -v's maximum resident set size of the `python -m rag index` process "
                      "(wait4's ru_maxrss beside it); the ratio divides it by n x d x 4 bytes. IVF-PQ: 256 lists, d/8 = "
                      "48-byte codes, trained on a 65,536-row sample. The flat file is compared byte for byte with "
                      "IndexFlatIP.add of all rows at once."]}
