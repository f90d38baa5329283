"""Reliability: band-file typos, values that validate and then crash, one line for every failure, and
the trust boundaries. ``pytest -m reliability``.

Fault tried                                      | what the harness does (and the test checking it)
------------------------------------------------ | ------------------------------------------------------------------
A band cell naming an unknown variant            | DataError "<bands>: cells[i] (<cell>): unknown variant ...", exit 2
  (rag_tokenn), a metric its task and variant do | (rag.report.bands.cell_error)
  not record, an unknown task or split           |
A band cell whose run is not among those checked | exit 1 "error: N cell(s) of <bands> have no run among those
  (a task the config does not run, an unfinished | checked: <cell> (no <task> <variant> run)"; ``--allow-missing``
  run)                                           | shows it as not run and checks the rest
An integer-valued float for an integer key       | ConfigError "config key 'train.k': expected integer, got float
  (train.k: 2.0, --config seed=13.0)             | 2.0 (write 2)" (keyspec's integer is an int)
A YAML alias bomb under resources: or seeds:     | ConfigError naming the key: "... values once its YAML aliases are
                                                 | expanded (more than 100,000: an alias bomb?)", in well under a second
A local corpus whose first line is 200 MB        | ``rag plan``: passages unknown ("line 1 ... is over 16 MiB (not
                                                 | read for a plan); give --passages N"), RSS bounded; load_config
                                                 | leaves the K check to the corpus job
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rag.cli import main
from rag.config import load_config
from rag.errors import ConfigError, DataError
from rag.report.bands import load_bands

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[1]
BYO = ROOT / "examples" / "byo" / "config.yaml"


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return err


def _byo() -> dict:
    cfg = yaml.safe_load(BYO.read_text())
    for key, path in [("corpus", "path")]:
        cfg[key][path] = str(ROOT / cfg[key][path])
    cfg["tasks"]["nq"]["files"] = {k: str(ROOT / v) for k, v in cfg["tasks"]["nq"]["files"].items()}
    return cfg


# ------------------------------------------------------------------------------------ band files
def _run(root: Path, task="nq", variant="rag_token", em=50.0) -> Path:
    path = root / "runs" / task / variant / "seed1" / "test" / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"task": task, "variant": variant, "split": "test", "seed": 1, "n": 4,
                                "metrics": {"em": em}, "retrieval": {"answer_recall@2": 75.0}}))
    return path


def _bands(path: Path, *cells: dict) -> Path:
    good = {"task": "nq", "variant": "rag_token", "split": "test", "metric": "em", "expected": 50.0, "tolerance": 5.0}
    path.write_text(yaml.safe_dump({"cells": [good, *({**good, **c} for c in cells)]}))
    return path


@pytest.mark.parametrize("cell, message", [
    ({"variant": "rag_tokenn"}, "unknown variant 'rag_tokenn' (known: rag_sequence, rag_token,"),
    ({"task": "squad"}, "unknown task 'squad'"),
    ({"split": "valid"}, "unknown split 'valid'"),
    ({"metric": "rougeL"}, "nq rag_token runs record no metric 'rougeL' (they record: em, answer_recall@K, passage_recall@K)"),
    ({"variant": "bart", "metric": "answer_recall@2"}, "nq bart runs record no metric 'answer_recall@2' (they record: em)"),
], ids=["variant", "task", "split", "metric", "recall-of-bart"])
def test_a_band_cell_naming_nothing_that_can_exist_is_an_error(tmp_path, capsys, cell, message):
    bands = _bands(tmp_path / "b.yaml", cell)
    with pytest.raises(DataError, match=r"b.yaml: cells\[1\] \(.*\): " + message.replace("(", r"\(").replace(")", r"\)")):
        load_bands(bands)
    assert main(["check", "--bands", str(bands), "--metrics", str(_run(tmp_path))]) == 2
    err = _err(capsys)
    assert f"error: {bands}: cells[1]" in err and message in err


def test_a_band_cell_of_a_run_not_checked_fails_the_check_unless_allowed(tmp_path, capsys):
    bands = _bands(tmp_path / "b.yaml", {"task": "triviaqa"}, {"split": "dev"})
    args = ["check", "--bands", str(bands), "--metrics", str(_run(tmp_path)), "--out", str(tmp_path / "check.txt")]
    assert main(args) == 1
    err = _err(capsys)
    assert (f"error: 2 cell(s) of {bands} have no run among those checked: triviaqa/rag_token/test/em "
            "(no triviaqa rag_token run), nq/rag_token/dev/em;") in err and "--allow-missing" in err
    assert not (tmp_path / "check.txt").exists()
    assert main([*args, "--allow-missing"]) == 0
    assert "1 in band, 0 out of band, 2 not run" in capsys.readouterr().out and (tmp_path / "check.txt").is_file()


# ------------------------------------------------------------------------------------ values that validate, then crash
@pytest.mark.parametrize("key, value, message", [
    ("train.k", 2.0, "config key 'train.k': expected integer, got float 2.0 (write 2)"),
    ("generator.d_model", 32.0, "config key 'generator.d_model': expected integer, got float 32.0 (write 32)"),
    ("seed", 13.0, "config key 'seed': expected integer, got float 13.0 (write 13)"),
])
def test_an_integer_valued_float_is_refused_in_one_line(key, value, message):
    cfg = _byo()
    *parents, last = key.split(".")
    node = cfg
    for p in parents:
        node = node[p]
    node[last] = value
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    assert str(exc.value) == message


def test_seed_as_a_float_on_snakemakes_command_line_is_refused(tmp_path):
    from conftest import snakemake_bin

    config = tmp_path / "byo.yaml"
    config.write_text(yaml.safe_dump(_byo()))
    proc = subprocess.run([snakemake_bin(), "-n", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path / "wd"),
                           "--configfile", str(config), "--config", "seed=13.0"], capture_output=True, text=True, timeout=300)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stdout + proc.stderr
    assert errors == ["error: config key 'seed': expected integer, got float 13.0 (write 13)"], proc.stderr


def _alias_bomb(levels: int = 9) -> str:
    return "\n".join([f"- &b0 [{', '.join(['1'] * 10)}]"]
                     + [f"- &b{i} [{', '.join([f'*b{i - 1}'] * 10)}]" for i in range(1, levels)])


@pytest.mark.parametrize("where", ["resources", "seeds"])
def test_a_yaml_alias_bomb_is_refused_quickly(tmp_path, where):
    text = BYO.read_text()
    bomb = _alias_bomb().replace("\n", "\n    ")
    if where == "resources":
        text += f"\nresources:\n  train:\n    bomb:\n    {bomb}\n"
    else:
        text = text.replace("seeds: [1]", f"seeds:\n    {bomb}\n#")
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    start = time.monotonic()
    with pytest.raises(ConfigError, match=rf"config key '{where}[.a-z0-9]*': [0-9,]+ values once its YAML aliases are "
                                          r"expanded \(more than 100,000: an alias bomb\?\)"):
        load_config(path, check_files=False)
    assert time.monotonic() - start < 5


# this process' peak memory in KB (VmHWM: the peak of its own address space, unlike ru_maxrss, which a
# child inherits from a parent that was larger)
PEAK = "int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"


def test_plan_does_not_read_a_huge_corpus_line(tmp_path):
    corpus = tmp_path / "big.jsonl"
    with open(corpus, "w") as fh:  # 200 MB, one line
        fh.write('{"id": "d1", "title": "t", "text": "')
        for _ in range(1000):
            fh.write("word " * 40_000)
        fh.write('"}\n')
    cfg = _byo()
    cfg["corpus"]["path"] = str(corpus)
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(cfg))
    probe = ("import re, sys; from rag.cli import main; rc = main(sys.argv[1:]); "
             f"print('peak', {PEAK})")
    proc = subprocess.run([sys.executable, "-c", probe, "plan", "--configfile", str(path), "--no-profile"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert f"line 1 of {corpus} is over 16 MiB (not read for a plan); give --passages N" in proc.stdout
    assert int(proc.stdout.split("peak")[-1]) < 400_000  # KB: the line alone is 200 MB
    # the config's K check (snakemake -n) leaves the long line to the corpus job
    probe = ("import re, sys; from rag.config import load_config; load_config(sys.argv[1]); "
             f"print('peak', {PEAK})")
    proc = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split("peak")[-1]) < 400_000
