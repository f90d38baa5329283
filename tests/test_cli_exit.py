"""How a ``rag`` process ends: with the command's code and its output; a user error in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def references(tmp_path) -> list[str]:
    (tmp_path / "p.jsonl").write_text('{"id": "1", "prediction": "Paris"}\n{"id": "2", "prediction": "x"}\n')
    (tmp_path / "r.jsonl").write_text('{"id": "1", "targets": ["Paris"]}\n{"id": "2", "targets": ["y"]}\n')
    return ["score", "--metric", "em", "--predictions", "p.jsonl", "--references", "r.jsonl"]


def rag(tmp_path, argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rag", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_a_command_that_returns_ends_the_process_with_its_output(tmp_path):
    proc = rag(tmp_path, references(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == '{"metric": "em", "score": 50.0, "n": 2}\n'


def test_a_command_error_ends_the_process_with_code_2_and_its_message(tmp_path):
    proc = rag(tmp_path, ["check", "--bands", "missing.yaml", "--experiment", "nowhere"])
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: missing.yaml: band file not found"


@pytest.mark.parametrize("argv, code", [(["--help"], 0), (["no-such-command"], 2)])
def test_help_and_usage_errors(tmp_path, argv, code):
    assert rag(tmp_path, argv).returncode == code


def test_main_called_with_arguments_returns_the_code(tmp_path, monkeypatch, capsys):
    from rag.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(references(tmp_path)) == 0
    assert json.loads(capsys.readouterr().out)["score"] == 50.0


def test_a_hot_swap_given_in_part_is_refused_before_any_model_loads(tmp_path):
    """`rag experiments` runs the hot-swap only with its output, questions and second snapshot all given."""
    argv = ["experiments", "--config", "train.json", "--variant", "rag_token", "--experiments-config", "e.json",
            "--model-dir", "m", "--test", "t.jsonl", "--topk-out", "k.json", "--hotswap-out", "h.json",
            "--questions", "q.jsonl"]
    proc = rag(tmp_path, argv)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: the hot-swap needs --hotswap-out, --questions, --passages-b, --embeddings-b "
                                   "and --index-b together")
    assert not list(tmp_path.iterdir())


def test_a_second_sigterm_does_not_cut_the_clean_up_of_the_first_short(tmp_path):
    """The signal sent to a job's process group and passed on by rag-record arrives twice: the
    clean-up that the first one starts (an MLflow run marked FAILED) still runs to its end."""
    script = tmp_path / "job.py"
    done = tmp_path / "cleaned-up"
    script.write_text(
        "import os, signal, sys, time\n"
        "from rag.cli import on_sigterm\n"
        "signal.signal(signal.SIGTERM, on_sigterm)\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(5)\n"
        "finally:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(0.2)\n"
        f"    open({str(done)!r}, 'w').write('yes')\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 143, proc.stderr
    assert done.read_text() == "yes"
