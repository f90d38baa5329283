"""The tasks a config declares (``tasks.<name>`` with a ``kind``): each declaration validated by its model
(rag/config_keys.py TaskDeclaration, or TaskKind for what a data or train section holds) and registered in
:data:`rag.tasks.TASKS` beside the registry's own."""

from __future__ import annotations

import re

from rag import keyspec
from rag.config_keys import TaskDeclaration, TaskKind
from rag.errors import ConfigError
from rag.tasks import BUILTIN_TASKS, KINDS, TASKS, TaskSpec, metric_name

# the keys of tasks.<task> that declare a task of the config's own (TaskDeclaration); format too
DECLARATION_KEYS = ("kind", "metrics", "primary", "labels", "display")


def declare_tasks(tasks) -> None:
    """Make :data:`TASKS` the registry's tasks plus those ``tasks`` (the config's ``tasks``
    mapping, as written) declares: each entry with a ``kind`` (:func:`declare_task`); the metrics
    of the user's are those these declarations name."""
    from rag import metrics as M

    for name in [n for n in TASKS if n not in BUILTIN_TASKS]:
        del TASKS[name]
    for name in [n for n, cls in M.METRICS.items() if not cls.__module__.startswith("rag.")]:
        del M.METRICS[name]  # the user's, registered by a declaration (metric_name)
    for name, decl in (tasks.items() if isinstance(tasks, dict) else ()):
        if isinstance(decl, dict) and any(k in decl for k in DECLARATION_KEYS):
            declare_task(name, decl)


def declare_task(name: str, decl: dict, where: str = "config", without_metrics: bool = False) -> TaskSpec:
    """Register the task the config declares under ``tasks.<name>`` (``decl``: its keys, as
    rag/config_keys.py TaskDeclaration types them) in :data:`TASKS` and return its entry; one ConfigError
    naming the key for a bad declaration. ``without_metrics``: ``decl`` is what a data or train section
    holds (TaskKind: no metrics, primary, display): the entry has no metrics."""
    prefix = "" if where == "config" else f"{where}: "

    def fail(sub: str, msg: str):
        raise ConfigError(f"{prefix}config key 'tasks.{name}.{sub}': {msg}")

    if name in BUILTIN_TASKS:
        sub = next(k for k in DECLARATION_KEYS if k in decl)
        fail(sub, f"{name} is a task of rag/tasks.py TASKS, declared there; a task the config declares takes a name of its own")
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9_]{0,63}", name):
        raise ConfigError(f"config key 'tasks.{name}': a task's name is lower-case letters, digits and _")
    model = TaskKind if without_metrics else TaskDeclaration
    d = keyspec.validate(model, {k: v for k, v in decl.items() if k in model.model_fields}, f"tasks.{name}", prefix)
    if d.kind is None:
        fail("kind", f"a declared task needs one of {', '.join(KINDS)}")
    if d.source not in ("local", "download"):
        fail("source", "a declared task reads its own files (source: local or download); miniworld generates the tasks "
                       "of rag/tasks.py only")
    if not d.format:
        fail("format", "a declared task names its files' format: a parser of rag/data/parsers.py PARSERS or "
                       "\"path/to/file.py:function\" / \"module:function\"")
    refs = () if without_metrics else d.metrics
    if refs is None:
        fail("metrics", "a declared task lists its metrics: names of rag/metrics.py METRICS or \"path/to/file.py:Class\"")
    names = tuple(metric_name(m, f"tasks.{name}.metrics") for m in refs)
    if len(set(names)) < len(names):
        fail("metrics", f"{', '.join(names)} names a metric twice")
    primary = getattr(d, "primary", None)
    primary = primary if primary is not None else names[0] if names else ""
    if primary not in names and not without_metrics:
        fail("primary", f"{primary!r} is not one of the task's metrics ({', '.join(names)})")
    if (d.kind == "classification") != (d.labels is not None):
        fail("labels", "a classification task lists its labels (at least two), and only a classification task does")
    if "" in (d.labels or ()):
        fail("labels", "a label is an empty string")
    display = getattr(d, "display", None)
    if display == "":
        fail("display", "the task's name in the report, a non-empty string")
    spec = TaskSpec(name, d.kind, names, primary, d.labels or (), display=display or name, short=display or name,
                    format=d.format)
    TASKS[name] = spec
    return spec
