"""Reliability of experiment tracking: concurrent writers.

* sqlite (the default store, ``sqlite:///results/mlflow.db``): the ``init_store`` rule creates
  the schema once, then parallel train/evaluate jobs write. Here 8 processes at once each create
  a run in the same experiment (created concurrently too) with params, a 50-point curve,
  metrics and an artifact; nothing may be lost and the store must read back.
* cluster mode (``tracking.uri: http://host:port``): 4 processes log to an ``mlflow server``
  started locally on a free port (its process group, huey consumers included, is killed after).
* a disk that fills up while the store is created (SQLite's page limit) leaves no store behind and
  the next run works; an unusable existing store says to move it aside; artifacts of a SQLite
  store go to ``mlartifacts/`` beside it, not to ``./mlruns``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.reliability

WORKER = r"""
import json, sys
from pathlib import Path
from rag.tracking import Run

uri, i, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
art = out / f"artifact-{i}.json"
art.write_text(json.dumps({"worker": i}))
run = Run(uri, "reliability/nq", run_name=f"worker{i}", tags={"worker": i})
run.params({"worker": i, "train": {"steps": 50, "lr": 1e-3}, "variants": ["closed_book", "rag_token"]})
run.curve("train_loss", [(s, 1.0 / (s + i + 1)) for s in range(1, 51)])
run.metrics({"em": float(i), "answer_recall@5": 50.0 + i})
run.artifact(art, "eval/test")
run.finish()
print(run.run_id)
"""
N_POINTS = 50


def _writers(uri: str, n: int, cwd: Path) -> list[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, uri, str(i), str(cwd)], cwd=cwd, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]
    ids = []
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"writer {i} failed:\n{err[-3000:]}"
        ids.append(out.strip().splitlines()[-1])
    return ids


def _check_store(uri: str, ids: list[str], tmp: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exps = [e for e in client.search_experiments() if e.name == "reliability/nq"]
    assert len(exps) == 1, f"experiment created {len(exps)} times"
    runs = client.search_runs([exps[0].experiment_id], max_results=100)
    assert sorted(r.info.run_id for r in runs) == sorted(ids), "a run was lost or duplicated"
    for run in runs:
        i = int(run.data.tags["worker"])
        assert run.info.status == "FINISHED"
        assert run.data.params["worker"] == str(i) and run.data.params["train.steps"] == "50"
        assert json.loads(run.data.params["variants"]) == ["closed_book", "rag_token"]
        assert run.data.metrics["em"] == float(i) and run.data.metrics["answer_recall_at_5"] == 50.0 + i
        hist = client.get_metric_history(run.info.run_id, "train_loss")
        assert sorted(m.step for m in hist) == list(range(1, N_POINTS + 1))
        assert all(m.value == 1.0 / (m.step + i + 1) for m in hist)
        arts = [a.path for a in client.list_artifacts(run.info.run_id, "eval/test")]
        assert arts == [f"eval/test/artifact-{i}.json"]
        local = client.download_artifacts(run.info.run_id, f"eval/test/artifact-{i}.json", str(tmp))
        assert json.loads(Path(local).read_text()) == {"worker": i}


def test_eight_concurrent_writers_sqlite(tmp_path):
    from rag.tracking import init_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    init_store(uri, tmp_path / "mlflow.ready")
    ids = _writers(uri, 8, tmp_path)
    assert len(set(ids)) == 8
    (tmp_path / "dl").mkdir()
    _check_store(uri, ids, tmp_path / "dl")
    assert not (tmp_path / "mlruns").exists() and (tmp_path / "mlartifacts" / "reliability" / "nq").is_dir()
    out = subprocess.run(["sqlite3", str(tmp_path / "mlflow.db"), "PRAGMA integrity_check;"], capture_output=True, text=True) \
        if _which("sqlite3") else None
    if out is not None:
        assert out.stdout.strip() == "ok"
    else:
        import sqlite3

        with sqlite3.connect(tmp_path / "mlflow.db") as con:
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _which(name: str) -> str | None:
    import shutil

    return shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_four_writers_through_mlflow_server(tmp_path):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        [_which("mlflow") or "mlflow", "server", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
         "--artifacts-destination", str(tmp_path / "artifacts"), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.time() + 240
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.time() > deadline:
                log.flush()
                pytest.fail(f"mlflow server did not come up:\n{(tmp_path / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        work = tmp_path / "work"
        work.mkdir()
        ids = _writers(url, 4, work)
        (tmp_path / "dl").mkdir()
        _check_store(url, ids, tmp_path / "dl")
        assert not (work / "mlruns").exists(), "artifacts went to a local folder instead of the server"
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(server.pid, sig)  # the server, its uvicorn workers and huey consumers
            except ProcessLookupError:
                break
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                continue
            time.sleep(0.5)
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()


# ------------------------------------------------------------------------------------ store creation, artifacts
FULL_DISK = r"""
import sys

import sqlalchemy
from sqlalchemy import event

# the file system fills up after 30 pages (120 KB) of the new store: SQLite's own "database or disk is full"
@event.listens_for(sqlalchemy.engine.Engine, "connect")
def _small_disk(dbapi_con, _record):
    dbapi_con.execute("PRAGMA max_page_count = 30")

if sys.argv[1] == "mlflow":  # how the store was created before: in place, by MLflow
    from mlflow.tracking import MlflowClient

    try:
        MlflowClient(sys.argv[2]).search_experiments()
    except Exception as exc:
        print(type(exc).__name__, exc)
else:
    from rag.cli import main

    sys.exit(main(["init-store", "--uri", sys.argv[2], "--marker", sys.argv[3]]))
"""


def _rag(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_store_creation_that_fails_on_a_full_disk_leaves_nothing(tmp_path):
    """The store is built beside and linked into place: a disk that fills up during its creation
    leaves no half-made results/mlflow.db (MLflow's own creation left one that every later run
    failed on, "index ... already exists"), the error is one line, and the next run works."""
    db, marker = tmp_path / "results" / "mlflow.db", tmp_path / "results" / "e" / "mlflow.ready"
    uri = f"sqlite:///{db}"
    full = _rag("-c", FULL_DISK, "rag", uri, str(marker), cwd=tmp_path)
    assert full.returncode == 2, full.stderr[-3000:]
    assert full.stderr.strip().splitlines()[-1] == (
        f"error: {db}: No space left on device (SQLite: database or disk is full) (creating the MLflow store failed; "
        "nothing was left in its place): free space and run again")
    assert sorted(p.name for p in db.parent.iterdir()) == [], "a partial store or its temporary file was left behind"
    assert not marker.exists()
    ok = _rag("-m", "rag", "init-store", "--uri", uri, "--marker", str(marker), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr[-3000:]
    ids = _writers(uri, 1, tmp_path)
    (tmp_path / "dl").mkdir()
    _check_store(uri, ids, tmp_path / "dl")


def test_unusable_store_says_to_move_it_aside(tmp_path):
    db = tmp_path / "results" / "mlflow.db"
    uri = f"sqlite:///{db}"
    broken = _rag("-c", FULL_DISK, "mlflow", uri, cwd=tmp_path)  # MLflow creating it in place on a full disk
    assert "database or disk is full" in broken.stdout and db.exists(), broken.stdout + broken.stderr[-3000:]
    proc = _rag("-m", "rag", "init-store", "--uri", uri, "--marker", str(tmp_path / "ready"), cwd=tmp_path)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {db}: the MLflow store is unusable (OperationalError: "), last
    assert last.endswith(f"move it aside (mv {db} {db}.broken) and run again: a new store is created "
                         "(the runs in the old one are not carried over)"), last
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    db.rename(f"{db}.broken")
    assert _rag("-m", "rag", "init-store", "--uri", uri, "--marker", str(tmp_path / "ready"), cwd=tmp_path).returncode == 0


def test_artifacts_go_beside_the_store_not_to_mlruns(tmp_path):
    """With the default relative URI sqlite:///results/mlflow.db, a run's artifacts go to
    results/mlartifacts/<experiment>/<run id>/artifacts/, not to ./mlruns of the working directory."""
    from rag.tracking import init_store

    init_store(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    (run_id,) = _writers("sqlite:///results/mlflow.db", 1, tmp_path)
    art = tmp_path / "results" / "mlartifacts" / "reliability" / "nq" / run_id / "artifacts" / "eval" / "test" / "artifact-0.json"
    assert json.loads(art.read_text()) == {"worker": 0}
    assert not (tmp_path / "mlruns").exists()


def test_a_run_left_running_by_a_killed_job_is_ended_by_the_next_run_of_that_job(tmp_path):
    """kill -9 leaves no chance to end an MLflow run: the next run of the same job (its cell, seed and rule)
    ends it KILLED; a run of another seed or cell, and a finished one, stay as they are."""
    from mlflow.tracking import MlflowClient

    from rag.tracking import Run

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    job = ("cell", "seed", "rule")

    def run(seed, cell="nq/rag_token"):
        return Run(uri, "e/nq", run_name=f"rag_token seed {seed}", tags={"cell": cell, "seed": seed, "rule": "train"},
                   supersedes=job)

    killed, other_seed, other_cell, done = run(1), run(2), run(1, "nq/it's"), run(1)
    done.finish()
    again = run(1)
    client = MlflowClient(uri)
    status = {name: client.get_run(r.run_id).info.status
              for name, r in {"killed": killed, "other_seed": other_seed, "other_cell": other_cell, "done": done,
                              "again": again}.items()}
    assert status == {"killed": "KILLED", "other_seed": "RUNNING", "other_cell": "RUNNING", "done": "FINISHED",
                      "again": "RUNNING"}
    assert "killed" in client.get_run(killed.run_id).data.tags["ended_by"]


def test_a_model_imported_without_a_run_gets_one_for_each_job_that_reads_it(tmp_path):
    """A job on a trained model logs to the model's run; a model imported without one (rag import-hf-rag
    with no store) gets a run of its cell, tagged with the job's rule, for evaluation and the K sweep alike."""
    from types import SimpleNamespace

    from mlflow.tracking import MlflowClient

    from rag.stages.model_loading import model_run
    from rag.tracking import Run

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cfg = SimpleNamespace(tracking=SimpleNamespace(uri=uri), name="e", task_name="nq", seed=1)
    own = Run(uri, "e/nq", run_name="rag_token seed 1")
    assert model_run(cfg, "rag_token", {"mlflow_run_id": own.run_id}, "topk_sweep").run_id == own.run_id
    for meta in ({}, {"mlflow_run_id": None}):
        run = model_run(cfg, "rag_token", meta, "topk_sweep")
        tags = MlflowClient(uri).get_run(run.run_id).data.tags
        assert run.run_id != own.run_id
        assert (tags["cell"], tags["rule"], tags["imported"]) == ("nq/rag_token", "topk_sweep", "yes")
