"""What produced a run's numbers: its manifest, and what differs between two of them.

A fine-tune writes ``manifest.json`` into its model folder (and its MLflow run; its metrics.json carry a
copy): the sha256 of the files it read, its config section, the code's git commit and uncommitted changes,
the package versions, the hardware, precision and seed (:func:`build_manifest`, the one writer).
``rag diff-runs A B`` (:func:`diff_manifests`) lists what differs, the most likely cause first.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag.errors import DataError
from rag.tasks import SPLITS

SCHEMA = 1
PACKAGES = {  # manifest name -> distributions that provide it (the first one installed)
    "torch": ("torch",),
    "transformers": ("transformers",),
    "tokenizers": ("tokenizers",),
    "faiss": ("faiss-cpu", "faiss-gpu", "faiss-gpu-cu12", "faiss-gpu-cu11", "faiss"),
    "numpy": ("numpy",),
    "snakemake": ("snakemake",),
    "mlflow": ("mlflow",),
    "bm25s": ("bm25s",),
}
# config keys that name or file a run without changing what it computes
LABEL_KEYS = ("name", "tracking")


# ------------------------------------------------------------------------------------ hashing
def sha256_file(path: str | os.PathLike, progress: bool = False) -> str:
    """The sha256 of a file; ``progress``: with a progress bar (bytes read) on stderr."""
    with open(path, "rb") as fh:
        if not progress:
            return hashlib.file_digest(fh, "sha256").hexdigest()
        from tqdm.auto import tqdm

        h = hashlib.sha256()
        with tqdm(total=os.fstat(fh.fileno()).st_size, desc=f"sha256 {path}", unit="B", unit_scale=True) as bar:
            while block := fh.read(1 << 20):
                h.update(block)
                bar.update(len(block))
        return h.hexdigest()


PROGRESS_BYTES = 1 << 28  # sha256_files shows a progress bar for files from 256 MiB (about a second's hashing)


def file_stamp(path: str | os.PathLike) -> list[int]:
    """A file's size, mtime, ctime, inode and device: while all five are unchanged, so is its content
    (the ctime moves with every write and every change of the other four, and cannot be set back)."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def sha256_files(paths: list[str | os.PathLike], cache: str | os.PathLike) -> dict[str, str]:
    """``{path: sha256}`` of each file in ``paths``, hashed once per content: ``cache`` (a JSON
    file) keeps each file's sha256 with its size, mtime, ctime, inode and device, and a file whose
    five are unchanged is not read again. The ctime moves with every write and every change of the
    other four (a ``cp -p`` over the file, an unpacked archive, ``touch -d``), and cannot be set
    back, so a cached sha256 is never one of other content. An unreadable cache counts as empty."""
    from rag.io import write_json

    try:
        with open(cache, encoding="utf-8") as fh:
            held = json.load(fh)
        held = held if isinstance(held, dict) else {}
    except (OSError, ValueError):
        held = {}
    out, kept = {}, {}
    for path in paths:
        key, stamp = os.path.abspath(path), file_stamp(path)
        entry = held.get(key)
        if not (isinstance(entry, dict) and entry.get("stat") == stamp and isinstance(entry.get("sha256"), str)):
            entry = {"stat": stamp, "sha256": sha256_file(path, progress=stamp[0] >= PROGRESS_BYTES)}
        out[str(path)] = entry["sha256"]
        kept[key] = entry
    if kept != {k: held.get(k) for k in kept}:
        Path(cache).parent.mkdir(parents=True, exist_ok=True)
        write_json(cache, {**held, **kept})
    return out


def _folder_files(folder: Path) -> list[Path]:
    return sorted(q for q in folder.rglob("*") if q.is_file())


def _tree_sha256(folder: Path, shas: dict[str, str]) -> str:
    """The sha256 of a folder: over its files' relative paths and sha256s (``shas``: path -> sha256), in sorted order."""
    h = hashlib.sha256()
    for f in _folder_files(folder):
        h.update(f"{f.relative_to(folder).as_posix()}\0{shas[str(f)]}\n".encode())
    return h.hexdigest()


def sha256_folder(folder: str | os.PathLike, cache: str | os.PathLike) -> str:
    """The sha256 of a folder (as :func:`file_entry` gives it), each file hashed once per content
    (:func:`sha256_files` with ``cache``)."""
    folder = Path(folder)
    return _tree_sha256(folder, sha256_files(_folder_files(folder), cache))


def file_entry(path: str | os.PathLike | None) -> dict | None:
    """{path, sha256, bytes} of a file, or of a folder (sha256 over its files' relative paths and
    contents, in sorted order); None for None. A missing path is an error naming it."""
    if path is None:
        return None
    p = Path(path)
    if p.is_file():
        return {"path": str(path), "sha256": sha256_file(p), "bytes": p.stat().st_size}
    if p.is_dir():
        files = _folder_files(p)
        return {"path": str(path), "sha256": _tree_sha256(p, {str(f): sha256_file(f) for f in files}),
                "bytes": sum(f.stat().st_size for f in files), "folder": True}
    raise DataError(f"{path}: not found (a file the run's manifest hashes)")


def canonical_hash(obj: Any, length: int | None = None) -> str:
    """The sha256 of ``obj`` as canonical JSON (sorted keys, no spaces), in hex; ``length``: its first that many
    digits (a config's hash as a run's tag and a checkpoint's identity: 12)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()[:length]


# ------------------------------------------------------------------------------------ environment
def git_state(where: str | os.PathLike | None = None) -> dict:
    """The commit of the checkout that holds the ``rag`` package and whether its tracked files have
    uncommitted changes (None for both outside a git checkout). Takes no lock (GIT_OPTIONAL_LOCKS=0):
    jobs running side by side call it."""
    cwd = Path(where) if where else Path(__file__).resolve().parent
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*args: str) -> subprocess.CompletedProcess | None:
        try:
            return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, env=env)
        except (OSError, subprocess.SubprocessError):
            return None

    head = git("rev-parse", "HEAD")
    if head is None or head.returncode != 0:
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    changed = [line[3:] for line in status.stdout.splitlines()] if status is not None and status.returncode == 0 else None
    diff = git("diff", "HEAD", "--binary") if changed else None
    return {"git_commit": head.stdout.strip(), "git_dirty": None if changed is None else bool(changed),
            # the uncommitted changes themselves: two dirty trees of one commit run the same code when these agree
            "git_diff_sha256": hashlib.sha256(diff.stdout.encode()).hexdigest() if diff is not None and diff.returncode == 0 else None,
            "git_changed_files": changed[:50] if changed else []}


def package_versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name, dists in PACKAGES.items():
        out[name] = None
        for dist in dists:
            try:
                out[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_model(device: str) -> str | None:
    if device != "cuda":
        return None
    import torch

    return torch.cuda.get_device_name(torch.cuda.current_device())


# ------------------------------------------------------------------------------------ writing
def data_entries(*, passages: str | os.PathLike | None, splits: dict[str, str | os.PathLike],
                 index: str | os.PathLike | None, init: str | os.PathLike | None = None) -> dict:
    """The ``data`` of a run's manifest: :func:`file_entry` of each file it read (``passages`` / ``index``
    None for a closed-book run; ``splits``: split -> file; ``init``: the model folder it started from)."""
    return {"passages": file_entry(passages), "index": file_entry(index),
            "splits": {split: file_entry(path) for split, path in sorted(splits.items())}, "init": file_entry(init)}


def build_manifest(*, run: dict, config: dict, seed: int, device: str, threads: int, precision: str, data: dict,
                   extra: dict | None = None) -> dict:
    """The manifest of one run: ``run`` says what it is (experiment, task, variant, ...), ``config`` its
    config section(s) (their ``seed`` keys left out: ``seed`` is the run's), ``data`` :func:`data_entries`."""
    section = _without(config, ("seed",))
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run": dict(run),
        "data": data,
        "config": {"sha256": canonical_hash(_without(section, LABEL_KEYS)), "section": section},
        "code": git_state(),
        "packages": package_versions(),
        "hardware": {"device": device, "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "gpu_model": gpu_model(device),
                     "threads": threads, "precision": precision},
        "seed": seed,
        **({"extra": extra} if extra else {}),
    }


def _without(obj: Any, keys: tuple[str, ...]) -> Any:
    """``obj`` without the dict keys ``keys`` at any depth."""
    if isinstance(obj, dict):
        return {k: _without(v, keys) for k, v in obj.items() if k not in keys}
    return obj


def read_manifest(where: str | os.PathLike) -> tuple[dict, Path]:
    """A manifest from ``where``: a manifest.json, a metrics.json that carries one, or a run folder
    (its ``manifest.json``, ``model/manifest.json`` or ``test/metrics.json``)."""
    from rag.io import read_json

    p = Path(where)
    candidates = [p] if p.is_file() else [p / "manifest.json", p / "model" / "manifest.json", p / "test" / "metrics.json"]
    for c in candidates:
        if c.is_file():
            data = read_json(c)
            if isinstance(data, dict) and isinstance(data.get("manifest"), dict):
                data = data["manifest"]
            if not isinstance(data, dict) or data.get("schema") != SCHEMA or "data" not in data:
                raise DataError(f"{c}: not a run manifest (no schema {SCHEMA} manifest with 'data')")
            _check_shape(data, c)
            return data, c
    if not p.exists():
        raise DataError(f"{where}: no such file or folder")
    if not p.is_dir():
        from rag.io import not_a_file

        raise DataError(f"{where}: {not_a_file(p)}")
    raise DataError(f"{where}: no manifest found (looked for {', '.join(str(c) for c in candidates)})")


def _check_shape(m: dict, path: Path) -> None:
    """A manifest's parts are objects where :func:`diff_manifests` reads them as such: a malformed
    one (hand-edited, another tool's) is a DataError naming the file and the key."""
    def obj(value: Any, key: str) -> dict:
        if value is not None and not isinstance(value, dict):
            raise DataError(f"{path}: malformed run manifest: '{key}' is {type(value).__name__}, expected an object")
        return value or {}

    data = obj(m["data"], "data")
    for key in ("passages", "index", "init"):
        obj(data.get(key), f"data.{key}")
    for split, entry in obj(data.get("splits"), "data.splits").items():
        obj(entry, f"data.splits.{split}")
    for key in ("run", "config", "code", "packages", "hardware"):
        obj(m.get(key), key)
    obj((m.get("config") or {}).get("section"), "config.section")


# ------------------------------------------------------------------------------------ diffing
@dataclass
class Difference:
    category: str  # data, config, code, packages, hardware, seed or labels
    key: str
    a: Any
    b: Any

    def line(self) -> str:
        return f"{self.category}: {self.key}: {_show(self.a)} vs {_show(self.b)}"


def _show(v: Any) -> str:
    if isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v):
        return f"sha256 {v[:12]}"
    if v is None:
        return "none"
    return json.dumps(v) if isinstance(v, (dict, list, bool)) else str(v)


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one dict of dotted keys (an empty dict is a value)."""
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: obj}


def _data_diffs(a: dict, b: dict) -> list[Difference]:
    out = []

    def entry(name: str, x: dict | None, y: dict | None):
        hx, hy = (x or {}).get("sha256"), (y or {}).get("sha256")
        if hx != hy:
            label = f"{name} differs" if hx and hy else f"{name} read by one run only"
            out.append(Difference("data", f"{label} ({(x or {}).get('path', 'none')} vs {(y or {}).get('path', 'none')})", hx, hy))

    da, db = a.get("data", {}), b.get("data", {})
    entry("passages file", da.get("passages"), db.get("passages"))
    sa, sb = da.get("splits") or {}, db.get("splits") or {}
    for split in sorted(set(sa) | set(sb), key=lambda s: (SPLITS + (s,)).index(s)):
        entry(f"{split} split file", sa.get(split), sb.get(split))
    entry("index", da.get("index"), db.get("index"))
    entry("initial model", da.get("init"), db.get("init"))
    return out


def diff_manifests(a: dict, b: dict) -> list[Difference]:
    """What differs between two manifests, the most likely cause of different numbers first: the
    data (passages, splits, index), the config (and the run's task/variant), the code, the
    packages, the hardware (device, CPU/GPU, threads, precision), the seed; labels (the
    experiment's name, the tracking store) last, they change no number."""
    diffs = _data_diffs(a, b) + _keyed("config", a.get("run", {}), b.get("run", {}), ("task", "variant"))
    sa, sb = ((m.get("config") or {}).get("section") or {} for m in (a, b))
    diffs += _keyed("config", flatten(_without(sa, LABEL_KEYS)), flatten(_without(sb, LABEL_KEYS)))
    if not any(d.category == "config" for d in diffs):
        diffs += _keyed("config", a.get("config") or {}, b.get("config") or {}, ("sha256",))
    diffs += _keyed("code", a.get("code") or {}, b.get("code") or {}, ("git_commit", "git_dirty", "git_diff_sha256"))
    for cat in ("packages", "hardware"):
        diffs += _keyed(cat, a.get(cat) or {}, b.get(cat) or {})
    diffs += _keyed("seed", a, b, ("seed",))
    return diffs + _keyed("labels", _labels(sa), _labels(sb))


def _keyed(category: str, x: dict, y: dict, keys: tuple[str, ...] | None = None) -> list[Difference]:
    """The differences of ``x`` and ``y`` at ``keys`` (default: all of either's, sorted)."""
    return [Difference(category, k, x.get(k), y.get(k))
            for k in keys or sorted(set(x) | set(y)) if x.get(k) != y.get(k)]


def _labels(section: dict) -> dict[str, Any]:
    """The flattened config keys under a label key (LABEL_KEYS), at any depth."""
    return {k: v for k, v in flatten(section).items() if set(k.split(".")) & set(LABEL_KEYS)}


def describe(diffs: list[Difference]) -> list[str]:
    """The report of :func:`diff_manifests`: a verdict line, then one line per difference."""
    causes = [d for d in diffs if d.category != "labels"]
    labels = [d for d in diffs if d.category == "labels"]
    if not causes:
        head = ["No difference: same data, config, code, packages, hardware and seed."]
    elif all(d.category == "seed" for d in causes):
        d = causes[0]
        head = [f"The runs differ only by seed: {d.a} vs {d.b} (same data, config, code, packages and hardware)."]
    else:
        first = causes[0]
        head = [f"{len(causes)} difference(s), the most likely cause first: {first.category}."]
        head += [f"{i}. {d.line()}" for i, d in enumerate(causes, 1)]
    if labels:
        head.append("Labels (no effect on the numbers): " + "; ".join(f"{d.key}: {_show(d.a)} vs {_show(d.b)}" for d in labels))
    return head
