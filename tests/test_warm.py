"""Warm start (rag.warm): a child of the server runs the command as a process of its own would,
with the client's arguments, environment, working directory, umask and stdin/stdout/stderr;
exit statuses and signals pass through; a dead client's child is ended; a server of another
interpreter is refused; Snakemake's side switches it off for clusters and conda. A server with
torch and MLflow preloaded is single-threaded and forks; one that runs a second thread, or whose
import-time environment differs from the job's, refuses in one line and the job runs by itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rag import warm

TESTS = str(Path(__file__).resolve().parent)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as ended)."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait(predicate, timeout=30.0) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _env() -> dict:
    """The environment of server and clients alike (PYTHONPATH is read at start: it must match):
    tests/ on the path for warm_entry and warm_thread."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)}


def _start(*args: str):
    """A server on a fresh short socket path (AF_UNIX paths are limited to ~100 bytes)."""
    folder = tempfile.mkdtemp(prefix="rw")
    path = os.path.join(folder, "s")
    log = open(os.path.join(folder, "log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "rag.warm", "serve", "--socket", path, *args],
                            env=_env(), stdout=log, stderr=log)
    assert _wait(lambda: warm.READY in Path(folder, "log").read_text()), Path(folder, "log").read_text()
    return proc, path, Path(folder, "log")


@pytest.fixture
def server():
    proc, path, log = _start("--preload", "warm_entry", "--entry", "warm_entry:main")
    yield path, log
    proc.terminate()
    proc.wait(timeout=20)
    assert not os.path.exists(path), "the server removes its socket when it stops"


def _client(path, args, tmp_path, env=None, **kw):
    """``python -m rag ARGS`` as a rule runs it, with RAG_WARM_SOCKET set."""
    env = {**_env(), warm.ENV: path, "WARM_TEST_X": "from the client", **(env or {})}
    env.pop("WORLD_SIZE", None)
    return subprocess.Popen([sys.executable, "-m", "rag", *args], cwd=tmp_path, env=env, **kw)


def test_child_sees_the_clients_arguments_environment_folder_umask_and_stdio(server, tmp_path):
    path, log = server
    out, err = tmp_path / "out", tmp_path / "err"
    (tmp_path / "jobtmp").mkdir()
    with open(out, "w") as o, open(err, "w") as e:
        proc = _client(path, ["report", "3"], tmp_path, env={"TMPDIR": str(tmp_path / "jobtmp")}, stdin=subprocess.PIPE,
                       stdout=o, stderr=e, preexec_fn=lambda: os.umask(0o027))
        proc.communicate(b"typed on stdin", timeout=60)
    assert proc.returncode == 3  # the child's exit status is the client's
    seen = json.loads(out.read_text())
    assert seen["argv"] == ["report", "3"] and seen["sys_argv"][1:] == ["report", "3"]
    assert seen["cwd"] == str(tmp_path) and seen["umask"] == 0o027 and seen["x"] == "from the client"
    assert seen["stdin"] == "typed on stdin"
    assert seen["tmp"] == str(tmp_path / "jobtmp")  # the server looked its own up when it imported warm_entry
    assert err.read_text() == "said on stderr\n"  # written to the client's own stderr file
    assert seen["pid"] != proc.pid and f"pid {seen['pid']}:" in log.read_text()  # it ran in a child of the server


def test_sys_exit_with_a_message_exits_1_and_prints_it(server, tmp_path):
    path, _ = server
    run = _client(path, ["bogus"], tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 1 and err.decode() == "unknown mode bogus\n" and out == b""


def test_signals_reach_the_child_and_a_dead_clients_child_is_ended(server, tmp_path):
    path, _ = server
    for how in ("relayed", "client killed"):
        proc = _client(path, ["sleep"], tmp_path, stdout=subprocess.PIPE)
        pid = json.loads(proc.stdout.readline())["pid"]
        assert _alive(pid)
        if how == "relayed":  # snakemake stopping a job: SIGTERM to the client
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        else:  # SIGKILL cannot be relayed: the server sees the client's connection close
            proc.kill()
            proc.wait(timeout=30)
        assert _wait(lambda: not _alive(pid)), f"{how}: the child still runs"
        proc.stdout.close()


def test_a_server_killed_outright_takes_its_children_along(tmp_path):
    proc, path, _ = _start("--preload", "warm_entry", "--entry", "warm_entry:main")
    client = _client(path, ["sleep"], tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pid = json.loads(client.stdout.readline())["pid"]
    proc.kill()
    proc.wait(timeout=30)
    out, err = client.communicate(timeout=30)
    assert client.returncode == 1 and b"went away" in err  # the job fails, and says why
    assert _wait(lambda: not _alive(pid)), "the child outlived its server"


def test_real_rag_command_through_the_server(tmp_path):
    proc, path, _ = _start("--preload", "rag.metrics")
    try:
        (tmp_path / "p.jsonl").write_text('{"id": "1", "prediction": "Paris"}\n{"id": "2", "prediction": "x"}\n')
        (tmp_path / "r.jsonl").write_text('{"id": "1", "targets": ["paris"]}\n{"id": "2", "targets": ["y"]}\n')
        run = _client(path, ["score", "--metric", "em", "--predictions", "p.jsonl", "--references", "r.jsonl"], tmp_path,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        assert json.loads(out) == {"metric": "em", "score": 50.0, "n": 2}
        run = _client(path, ["score", "--metric", "em", "--predictions", "missing.jsonl", "--references", "r.jsonl"],
                      tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, err = run.communicate(timeout=120)
        assert run.returncode == 2 and b"error:" in err and b"missing.jsonl" in err
    finally:
        proc.terminate()
        proc.wait(timeout=20)


HEAVY_PRELOAD = ("torch", "transformers", "transformers.models.bart.modeling_bart", "mlflow",
                 "mlflow.store.tracking.sqlalchemy_store", "faiss", "rag.metrics")


def _score(path, tmp_path):
    """``rag --record rec.json score`` of two predictions through the server at ``path``."""
    (tmp_path / "p.jsonl").write_text('{"id": "1", "prediction": "Paris"}\n{"id": "2", "prediction": "x"}\n')
    (tmp_path / "r.jsonl").write_text('{"id": "1", "targets": ["paris"]}\n{"id": "2", "targets": ["y"]}\n')
    run = _client(path, ["--record", "rec.json", "score", "--metric", "em", "--predictions", "p.jsonl",
                         "--references", "r.jsonl"], tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    assert json.loads(out) == {"metric": "em", "score": 50.0, "n": 2}
    return json.loads((tmp_path / "rec.json").read_text()), err


def test_a_server_with_torch_transformers_and_mlflow_preloaded_is_single_threaded_and_forks(tmp_path):
    """Imported as a fresh process imports them, numpy's OpenBLAS and pyarrow's jemalloc (under
    MLflow) start threads: the server imports with SINGLE_THREADED_ENV and stays at one thread."""
    proc, path, log = _start("--preload", *HEAVY_PRELOAD)
    try:
        rec, err = _score(path, tmp_path)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert "threads" not in log.read_text() and err == ""
    assert rec["forked_from_warm_server"] is True and f"pid {rec['pid']}: rag --record" in log.read_text()


def test_a_thread_started_before_the_fork_makes_the_server_refuse_in_one_line(tmp_path):
    """A preloaded module started a thread (as a library might): no fork of a threaded process;
    the server logs it once, each command runs in its own process and says why in one line."""
    proc, path, log = _start("--preload", *HEAVY_PRELOAD, "warm_thread")
    try:
        rec, err = _score(path, tmp_path)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert rec["forked_from_warm_server"] is False
    assert err.count("\n") == 1 and "refused this command (the server runs 2 threads" in err
    assert "running it in its own process" in err
    assert "2 threads after the preload: no command will be forked" in log.read_text()


def test_an_import_time_variable_that_differs_is_refused_in_one_line(server, monkeypatch, capsys):
    """huggingface_hub reads HF_HUB_OFFLINE once, at import: the server's value, not the job's."""
    path, log = server
    monkeypatch.setenv("HF_HUB_OFFLINE", "0" if os.environ.get("HF_HUB_OFFLINE") == "1" else "1")
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    assert warm.run_remote(["report", "0"], path) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "refused this command (HF_HUB_OFFLINE differs from the server's, read when it imported its libraries)" in err
    assert "refused rag report: HF_HUB_OFFLINE differs" in log.read_text()


def test_client_runs_the_command_itself_when_the_server_cannot_take_it(server, monkeypatch, capsys, tmp_path):
    path, _ = server
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])  # as the server's: only the python differs below
    assert warm.run_remote(["report", "0"], str(tmp_path / "no-such-socket")) is None
    assert "not reachable" in capsys.readouterr().err
    real = warm.identity()
    monkeypatch.setattr(warm, "identity", lambda: {**real, "python": "/another/python"})
    assert warm.run_remote(["report", "0"], path) is None
    err = capsys.readouterr().err
    assert "refused" in err and "/another/python" in err
    monkeypatch.setenv("WORLD_SIZE", "2")  # under torchrun every rank runs in its own process
    assert warm.run_remote(["report", "0"], "/unused") is None


def test_server_exits_when_its_parent_is_gone():
    proc, path, log = _start("--preload", "--parent", "1")  # pid 1 is not its parent: as if snakemake had died
    assert proc.wait(timeout=30) == 0
    assert "snakemake is gone" in log.read_text() and not os.path.exists(path)


def test_snakemake_side_switches_off_for_clusters_and_deployed_environments(tmp_path, monkeypatch):
    assert warm.WarmStart(False, "x").reason == "config key 'warm_start' is false"
    assert warm.WarmStart(True, "x", local=False).reason == "jobs run on a cluster executor"
    assert warm.WarmStart(True, "x", deployment=["conda"]).reason == "jobs run in conda environments"
    off = warm.WarmStart(True, "x", local=False)
    off.start()
    assert off.proc is None and warm.ENV not in os.environ
    monkeypatch.delenv(warm.ENV, raising=False)
    on = warm.WarmStart(True, str(tmp_path / "logs" / "warm.log"), preload=())
    on.start()
    try:
        path = os.environ[warm.ENV]
        on.wait_ready(timeout=60)
        assert os.path.exists(path)
    finally:
        on.stop()
    assert warm.ENV not in os.environ and not os.path.exists(path) and on.proc is None


SNAKEMAKE_STANDIN = r"""
import sys, time
from rag.warm import WarmStart

w = WarmStart(True, sys.argv[1], preload=())
w.start()
w.wait_ready()
print(w.dir, w.proc.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.reliability
def test_no_socket_folder_left_when_snakemake_is_killed(tmp_path):
    """SIGKILL to snakemake left an empty ragrepro-warm-* folder in the temp folder each time: the
    server, finding snakemake gone, now removes its folder, and a start removes what a server
    killed outright left (folders of a process that is gone)."""
    tmp = Path(tempfile.mkdtemp(prefix="rw"))  # short: AF_UNIX paths are limited to ~100 bytes
    try:
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        stale = tmp / f"{warm.DIR_PREFIX}{gone.pid}-abcdefgh"
        stale.mkdir()
        (stale / "sock").touch()
        env = {**os.environ, "TMPDIR": str(tmp),
               "PYTHONPATH": os.pathsep.join(p for p in (str(Path(TESTS).parent), os.environ.get("PYTHONPATH")) if p)}
        proc = subprocess.Popen([sys.executable, "-c", SNAKEMAKE_STANDIN, str(tmp_path / "warm.log")], env=env,
                                stdout=subprocess.PIPE, text=True)
        folder, server = proc.stdout.readline().split()
        assert os.path.exists(os.path.join(folder, "sock")) and Path(folder).parent == tmp
        assert not stale.exists(), "the stale folder of a process that is gone was not removed"
        proc.kill()
        proc.wait()
        assert _wait(lambda: not _alive(int(server))), "the server outlived snakemake"
        assert os.listdir(tmp) == [], os.listdir(tmp)
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.reliability
def test_stale_folder_rules(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    old = time.time() - 3600
    folders = {name: tmp_path / name for name in (
        f"{warm.DIR_PREFIX}{gone.pid}-aaaaaaaa", f"{warm.DIR_PREFIX}{os.getpid()}-bbbbbbbb",  # gone, alive
        f"{warm.DIR_PREFIX}oldempty", f"{warm.DIR_PREFIX}oldbusy0", f"{warm.DIR_PREFIX}justmade", "other")}
    for path in folders.values():
        path.mkdir()
    (folders[f"{warm.DIR_PREFIX}oldbusy0"] / "sock").touch()  # a server of the older naming serves there
    for name in (f"{warm.DIR_PREFIX}oldempty", f"{warm.DIR_PREFIX}oldbusy0"):
        os.utime(folders[name], (old, old))
    removed = warm.remove_stale_folders(str(tmp_path))
    assert sorted(removed) == sorted(str(folders[n]) for n in (f"{warm.DIR_PREFIX}{gone.pid}-aaaaaaaa",
                                                                  f"{warm.DIR_PREFIX}oldempty"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(set(folders) - {Path(r).name for r in removed})
