"""MLflow logging: one experiment per task, one run per (task, variant).

The train job creates the run (params = the resolved config it ran with, the training-loss
curve as a stepped metric, tags for rule, config hash, git commit and SLURM job id) and leaves
its id in the model folder; the evaluate job re-opens that run to add metrics and artifacts.
The default store ``sqlite:///results/mlflow.db`` is created by one local rule (``init_store``)
before any parallel job, in a temporary file linked into place when complete. With a SQLite store,
artifacts go to ``mlartifacts/<experiment>/`` beside the store file, not to ``./mlruns``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from pathlib import Path
from typing import Any

from rag.errors import DiskFullError, RagError, chain, disk_full_reason

log = logging.getLogger(__name__)


# an MLflow server that does not answer fails a job in seconds, not after MLflow's default 7
# retries with doubling waits (minutes); the environment's own values win
HTTP_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": "60"}
CONNECT_TIMEOUT = 10.0  # seconds to wait for a server's TCP connection before the first request


def _quiet():
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    for name, value in HTTP_RETRIES.items():
        os.environ.setdefault(name, value)
    import mlflow  # noqa: F401  its import sets the level of its logger: set ours after it

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # it logs every database error with its traceback, then raises it: the raised error is reported
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def _sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def artifact_root(uri: str) -> Path | None:
    """Where a SQLite store's experiments keep their artifacts: ``mlartifacts/`` beside the store
    file; None for other stores (an MLflow server decides)."""
    db = _sqlite_path(uri)
    return db.parent / "mlartifacts" if db is not None else None


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"


def check_server(uri: str) -> None:
    """An ``http(s)://`` store: RagError, in at most CONNECT_TIMEOUT seconds, when nothing accepts a
    connection at its host and port (MLflow would retry each request for minutes)."""
    import socket
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return
    if getproxies().get(parts.scheme) and not proxy_bypass(parts.hostname):
        return  # reached through a proxy: MLflow's bounded retries say it
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise RagError(f"tracking.uri {uri}: no MLflow server at {parts.hostname}:{port} ({why}); start it "
                       f"(mlflow server --host {parts.hostname} --port {port}) or set tracking.uri to one that runs") from None


def _unanswered(uri: str, exc: BaseException) -> RagError | None:
    """The one-line error for an ``http(s)://`` store whose requests failed after MLflow's retries
    ("API request to ... failed"), else None."""
    text = " ".join(str(exc).split())
    if not uri.startswith(("http://", "https://")) or "API request to" not in text:
        return None
    return RagError(f"tracking.uri {uri}: the MLflow server did not answer ({text[:200]}); start it or set tracking.uri "
                    f"to one that runs")


def read_only_reason(exc: BaseException | None) -> str | None:
    """Why a write to the store was refused, when ``exc`` (or what it was raised from) says it is
    read-only (a read-only file or file system, no write permission); else None."""
    import errno

    for e in chain(exc):
        if isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return os.strerror(e.errno)
        for marker in ("attempt to write a readonly database", "Read-only file system", "unable to open database file"):
            if marker in str(e):
                return marker
    return None


def _raise_full_or_read_only(exc: BaseException, where: Any, failed: str, read_only: bool = True) -> None:
    """The one-line error for a full disk (``failed``: what failed, in its parentheses) or, where
    ``read_only``, a store that cannot be written under ``exc``; nothing for another failure."""
    full = disk_full_reason(exc)
    if full:
        raise DiskFullError(f"{where}: {full} ({failed}): free space and run again") from exc
    reason = read_only_reason(exc) if read_only else None
    if reason:
        raise RagError(f"{where}: the MLflow store cannot be written ({reason}); make the file and its folder writable, "
                       f"or set tracking.uri to a store this user can write") from exc


def init_store(uri: str, marker: Path | None = None) -> None:
    """Create the tracking store (tables, migrations) once; safe to call again. An existing store
    that cannot be opened stops with one line saying to move it aside."""
    _quiet()
    from mlflow.tracking import MlflowClient

    db = _open_store(uri)
    try:
        MlflowClient(uri).search_experiments(max_results=1)  # a store of another MLflow: schema migration
    except Exception as exc:
        if db is None:
            raise _unanswered(uri, exc) or exc
        _raise_full_or_read_only(exc, db, "opening the MLflow store failed")
        raise RagError(f"{db}: the MLflow store is unusable ({_reason(exc)}); move it aside (mv {db} {db}.broken) "
                       f"and run again: a new store is created (the runs in the old one are not carried over)") from exc
    if marker is not None:
        from rag.io import write_json

        write_json(marker, {"tracking_uri": uri})


def _open_store(uri: str) -> Path | None:
    """The SQLite file of store ``uri`` (None for a server, checked with :func:`check_server`), created
    when missing (tables, migrations, the default experiment) in a temporary file beside it, then
    linked into place; a store another process linked meanwhile is kept."""
    check_server(uri)
    db = _sqlite_path(uri)
    if db is None or db.exists():
        return db
    import tempfile

    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from rag.io import current_umask

    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{db.name}.", suffix=".tmp", dir=db.parent)
    except OSError as exc:
        _raise_full_or_read_only(exc, db, "creating the MLflow store failed; nothing was left in its place")
        raise
    os.close(fd)
    tmp = Path(name)
    tmp_uri = f"sqlite:///{tmp}"
    try:
        try:
            SqlAlchemyStore(tmp_uri, str(artifact_root(uri)))
        finally:
            engine = SqlAlchemyStore._engine_map.pop(tmp_uri, None)
            if engine is not None:
                engine.dispose()
        os.chmod(tmp, 0o666 & ~current_umask())
        try:
            os.link(tmp, db)  # never replaces a store that another process created meanwhile
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            if not db.exists():
                os.replace(tmp, db)
    except Exception as exc:
        _raise_full_or_read_only(exc, db, "creating the MLflow store failed; nothing was left in its place")
        raise RagError(f"{db}: creating the MLflow store failed ({_reason(exc)}); nothing was left in its place") from exc
    finally:
        for leftover in (tmp, Path(f"{tmp}-journal"), Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)
    return db


def metric_key(name: str) -> str:
    """MLflow metric names allow letters, digits and _-. :/ only: answer_recall@5 -> answer_recall_at_5."""
    import re

    return re.sub(r"[^0-9A-Za-z_\-. :/]", "_", name.replace("@", "_at_"))


def _experiment_id(client, name: str, artifact_location: str | None = None) -> str:
    """The id of experiment ``name``, created when missing (its artifacts under ``artifact_location``);
    a job that loses the race to create it reads the winner's."""
    from mlflow.exceptions import MlflowException

    for _ in range(5):
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        try:
            return client.create_experiment(name, artifact_location=artifact_location)
        except MlflowException as exc:
            if "RESOURCE_ALREADY_EXISTS" not in f"{exc.error_code} {exc}":
                raise
    raise RuntimeError(f"experiment {name!r} could neither be created nor found")


def _store_errors(method):
    """A full disk under a Run method raises DiskFullError naming the SQLite store file."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except RagError:
            raise
        except Exception as exc:
            uri = getattr(self, "uri", "")
            _raise_full_or_read_only(exc, _sqlite_path(uri) or uri,
                                     "writing to the MLflow store or its artifacts failed", _sqlite_path(uri) is not None)
            raise _unanswered(uri, exc) or exc

    return wrapper


class Run:
    """A thin wrapper over one MLflow run, opened by id (or created)."""

    @_store_errors
    def __init__(self, uri: str, experiment: str, run_name: str | None = None, run_id: str | None = None,
                 tags: dict | None = None, supersedes: tuple[str, ...] = ()):
        """The run ``run_id``, or a new one of ``experiment``; ``supersedes``: the keys of ``tags`` that name
        what the new run is (a fine-tune: its cell, seed and rule), whose runs still RUNNING are ended KILLED
        (a job killed with no chance to end its run; the caller holds the lock no two such jobs share)."""
        _quiet()
        from mlflow.tracking import MlflowClient

        self.uri = uri
        _open_store(uri)  # no init_store before (a run by hand): created the same way
        self.client = MlflowClient(uri)
        if run_id is None:
            root = artifact_root(uri)
            exp_id = _experiment_id(self.client, experiment, str(root / experiment) if root is not None else None)
            from rag.manifest import git_state

            all_tags = {"mlflow.runName": run_name or "run", "git_commit": git_state()["git_commit"] or "unknown",
                        "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""), **(tags or {})}
            if supersedes:
                self._end_abandoned(exp_id, {k: str(all_tags[k]) for k in supersedes})
            run = self.client.create_run(exp_id, tags={k: str(v) for k, v in all_tags.items()}, run_name=run_name)
            self.run_id, self.experiment_id = run.info.run_id, exp_id
        else:
            run = self.client.get_run(run_id)
            self.run_id, self.experiment_id = run_id, run.info.experiment_id
            for k, v in (tags or {}).items():
                self.client.set_tag(run_id, k, str(v))

    def _end_abandoned(self, exp_id: str, tags: dict[str, str]) -> None:
        """End KILLED the runs of ``exp_id`` still RUNNING with these tag values."""
        def quoted(value: str) -> str:
            return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

        where = " and ".join([f"tags.`{k}` = {quoted(v)}" for k, v in tags.items()] + ["attributes.status = 'RUNNING'"])
        for old in self.client.search_runs([exp_id], filter_string=where, max_results=1000):
            self.client.set_tag(old.info.run_id, "ended_by", "a later run of the same job (this one's process was killed)")
            self.client.set_terminated(old.info.run_id, "KILLED")

    @_store_errors
    def params(self, params: dict) -> None:
        """``params`` as MLflow takes them: dotted keys, string values (an empty dict: no param), the
        keys the run has already left as they are."""
        from mlflow.entities import Param

        from rag.manifest import flatten

        existing = set(self.client.get_run(self.run_id).data.params)
        self.client.log_batch(self.run_id, params=[  # MLflow splits them into batches
            Param(k[:250], (json.dumps(v) if isinstance(v, list) else str(v))[:6000])
            for k, v in flatten(params).items() if not isinstance(v, dict) and k[:250] not in existing])

    def metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self._log([(k, step or 0, v) for k, v in metrics.items()])

    def curve(self, name: str, points: list[tuple[int, float]]) -> None:
        self._log([(name, s, v) for s, v in points])

    @_store_errors
    def _log(self, points: list[tuple[str, int, float]]) -> None:
        """(name, step, value) metrics (MLflow splits them into batches)."""
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(metric_key(k), float(v), ts, int(s)) for k, s, v in points])

    @_store_errors
    def artifact(self, path: str | Path, subdir: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), subdir)

    @_store_errors
    def finish(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status)
