"""How a ``rag`` process ends (rag.cli.main run as a program, rag.cli.leave): with the command's
code, its output flushed and the exit handlers run, without the interpreter's teardown; and the
collector thresholds it runs under. Each case runs a fresh interpreter."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONUNBUFFERED", None)  # standard output to a pipe is then block-buffered, as under Snakemake
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


# a program that records what happens as it ends: an exit handler (which reads the collector's
# thresholds the command ran under) and a finalizer that only the interpreter's teardown runs
PROBE = """
import atexit, gc, json, sys
seen = {{}}
atexit.register(lambda: open("atexit.json", "w").write(json.dumps(seen)))
atexit.register(lambda: seen.update(threshold=gc.get_threshold()))  # handlers run last in, first out
atexit.register(lambda: sys.stdout.write("after"))  # buffered: written out only by a flush after the handlers

class Teardown:  # holds what it writes with: module globals are gone by then
    def __init__(self, os):
        self.write, self.fd = os.write, os.open("teardown.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    def __del__(self):
        self.write(self.fd, b"ran")

import os
keep = Teardown(os)  # a module global: finalized by the interpreter's teardown only
from rag.cli import main
sys.argv = ["rag", *{argv!r}]
sys.stdout.write("before ")
main()
"""


def probe(tmp_path: Path, argv: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    proc = run_python(PROBE.format(argv=argv), tmp_path)
    handler = tmp_path / "atexit.json"
    return proc, json.loads(handler.read_text()) if handler.exists() else {}


def references(tmp_path: Path) -> list[str]:
    (tmp_path / "p.jsonl").write_text('{"id": "1", "prediction": "Paris"}\n{"id": "2", "prediction": "x"}\n')
    (tmp_path / "r.jsonl").write_text('{"id": "1", "targets": ["Paris"]}\n{"id": "2", "targets": ["y"]}\n')
    return ["score", "--metric", "em", "--predictions", "p.jsonl", "--references", "r.jsonl"]


def test_a_command_that_returns_ends_the_process_with_its_output_and_exit_handlers_but_no_teardown(tmp_path):
    from rag.cli import PROGRAM_GC_THRESHOLDS

    proc, seen = probe(tmp_path, references(tmp_path))
    assert proc.returncode == 0, proc.stderr
    # the command's output between what the program wrote before it and an exit handler's: all flushed
    assert proc.stdout == 'before {"metric": "em", "score": 50.0, "n": 2}\nafter'
    assert seen["threshold"] == list(PROGRAM_GC_THRESHOLDS)  # the exit handler ran, under the program's thresholds
    assert (tmp_path / "teardown.txt").read_text() == ""  # the interpreter's teardown was skipped


def test_a_command_error_ends_the_process_with_code_2_and_its_message(tmp_path):
    proc, seen = probe(tmp_path, ["check", "--bands", "missing.yaml", "--experiment", "nowhere"])
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: missing.yaml: band file not found"
    assert "threshold" in seen


@pytest.mark.parametrize("argv", [["--help"], ["no-such-command"]])
def test_help_and_usage_errors_leave_the_normal_way(tmp_path, argv):
    """argparse's SystemExit is not a returned command: the interpreter ends as usual, teardown included."""
    proc, seen = probe(tmp_path, argv)
    assert proc.returncode == (0 if argv == ["--help"] else 2)
    assert (tmp_path / "teardown.txt").read_text() == "ran"
    assert "threshold" in seen


def test_leave_waits_for_a_thread_the_interpreter_would_wait_for(tmp_path):
    proc = run_python("""
        import threading, time
        from rag.cli import leave

        def work():
            time.sleep(0.3)
            open("thread.txt", "w").write("done")

        threading.Thread(target=work).start()  # not a daemon: a normal exit waits for it
        leave(3)
    """, tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert (tmp_path / "thread.txt").read_text() == "done"


def test_leave_skips_the_teardown_with_only_daemon_threads_running(tmp_path):
    proc = run_python("""
        import threading, time
        from rag.cli import leave

        class Teardown:
            def __init__(self, os):
                self.write, self.fd = os.write, os.open("teardown.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            def __del__(self):
                self.write(self.fd, b"ran")

        import os
        keep = Teardown(os)
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        leave(5)
    """, tmp_path)
    assert proc.returncode == 5, proc.stderr
    assert (tmp_path / "teardown.txt").read_text() == ""


def test_main_called_with_arguments_returns_and_leaves_the_collector_alone(tmp_path, monkeypatch, capsys):
    """Tests call main(argv): it returns the code, the process goes on."""
    from rag.cli import main

    monkeypatch.chdir(tmp_path)
    before = gc.get_threshold()
    assert main(references(tmp_path)) == 0
    assert gc.get_threshold() == before
    assert json.loads(capsys.readouterr().out)["score"] == 50.0
