"""The files a report reads, named one by one (no globbing): exactly its Snakemake rule's inputs.

Each file says what it is: a ``metrics.json`` its task, variant, split and seed; a top-K sweep or
oracle file its task, variant and seed; a hot-swap file its variant and seed (no seed: seed 0).
Predictions pair with the metrics files by position; a task's training file (the majority-label
baseline) is given as ``task=path``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rag.errors import DataError
from rag.io import read_json

RunKey = tuple[str, str, str]  # task, variant, split


@dataclass
class ReportInputs:
    # (task, variant, split) -> seed -> file
    metrics: dict[RunKey, dict[int, Path]] = field(default_factory=dict)
    predictions: dict[RunKey, dict[int, Path]] = field(default_factory=dict)
    # kind (topk | oracle | hotswap) -> key ((task, variant) or (variant,)) -> seed -> file
    experiments: dict[str, dict[tuple[str, ...], dict[int, Path]]] = field(default_factory=dict)
    train_data: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def from_files(cls, metrics=(), predictions=(), topk=(), hotswap=(), oracle=(), train_data=()) -> "ReportInputs":
        """``predictions`` (optional) pair with ``metrics`` by position; ``train_data`` are ``task=path``."""
        metrics, predictions = [Path(p) for p in metrics], [Path(p) for p in predictions]
        if predictions and len(predictions) != len(metrics):
            raise DataError(f"{len(predictions)} predictions files for {len(metrics)} metrics files "
                            "(give one per metrics file, in the same order)")
        out = cls()
        for i, path in enumerate(metrics):
            data = _object(path)
            key, seed = _run_key(path, data), _seed(path, data)
            seeds = out.metrics.setdefault(key, {})
            if seed in seeds:
                raise DataError(f"{path}: a second metrics file for {'/'.join(key)} seed {seed} (first: {seeds[seed]})")
            seeds[seed] = path
            if predictions:
                _check_pair(path, predictions[i])
                out.predictions.setdefault(key, {})[seed] = predictions[i]
        for kind, files, fields in (("topk", topk, ("task", "variant")), ("oracle", oracle, ("task", "variant")),
                                    ("hotswap", hotswap, ("variant",))):
            table = out.experiments.setdefault(kind, {})
            for path in map(Path, files):
                data = _object(path)
                if any(not isinstance(data.get(f), str) for f in fields):
                    raise DataError(f"{path}: a {kind} result must name its {' and '.join(fields)}")
                seeds = table.setdefault(tuple(data[f] for f in fields), {})
                seed = _seed(path, data)
                if seed in seeds:
                    raise DataError(f"{path}: a second {kind} result for {'/'.join(data[f] for f in fields)} seed {seed} "
                                    f"(first: {seeds[seed]})")
                seeds[seed] = path
        for item in train_data:
            task, sep, path = str(item).partition("=")
            if not sep or not task or not path:
                raise DataError(f"--train-data {item!r}: expected task=path")
            out.train_data[task] = Path(path)
        return out

    def experiment(self, kind: str, *key: str) -> dict[int, Path]:
        """seed -> file of one experiment result (empty when not given)."""
        return dict(sorted(self.experiments.get(kind, {}).get(tuple(key), {}).items()))

    def experiment_files(self, kind: str) -> list[Path]:
        """Every file of one kind of experiment, by key and seed."""
        table = self.experiments.get(kind, {})
        return [table[k][s] for k in sorted(table) for s in sorted(table[k])]

    def experiment_keys(self, kind: str) -> list[tuple[str, ...]]:
        return sorted(self.experiments.get(kind, {}))


def _check_pair(metrics: Path, predictions: Path) -> None:
    """A predictions file paired by position with a metrics file must be the same run's where both
    sit in the DAG's layout (``<task>/<variant>/seed<seed>/<split>/``): a list given in another
    order would otherwise score one run's answers as another's."""
    a, b = metrics.parent.parts[-4:], predictions.parent.parts[-4:]
    if len(a) == len(b) == 4 and a[2].startswith("seed") and b[2].startswith("seed") and a != b:
        raise DataError(f"{predictions}: paired by position with {metrics}, but it is run {'/'.join(b)}, not "
                        f"{'/'.join(a)} (give one predictions file per metrics file, in the same order)")


def _object(path: Path) -> dict:
    data = read_json(path)
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object")
    return data


def _run_key(path: Path, data: dict) -> RunKey:
    key = tuple(data.get(f) for f in ("task", "variant", "split"))
    if not all(isinstance(x, str) and x for x in key):
        raise DataError(f"{path}: a metrics file must name its task, variant and split")
    return key  # type: ignore[return-value]


def _seed(path: Path, data: dict) -> int:
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise DataError(f"{path}: 'seed' must be an integer, got {seed!r}")
    return seed
