"""Reliability of experiment tracking: concurrent writers.

* sqlite (the default store, ``sqlite:///results/mlflow.db``): the ``init_store`` rule creates
  the schema once, then parallel train/evaluate jobs write. Here 8 processes at once each create
  a run in the same experiment (created concurrently too) with params, a 50-point curve,
  metrics and an artifact; nothing may be lost and the store must read back.
* cluster mode (``tracking.uri: http://host:port``): 4 processes log to an ``mlflow server``
  started locally on a free port (its process group, huey consumers included, is killed after).
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
run.params({"worker": i, "train": {"steps": 50, "lr": 1e-3}, "variants": ["bart", "rag_token"]})
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
        assert json.loads(run.data.params["variants"]) == ["bart", "rag_token"]
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
