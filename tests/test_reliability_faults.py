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
  (or in a band file)                            | expanded (more than 100,000: an alias bomb?)", in well under a second
A local corpus whose first line is 200 MB        | ``rag plan``: passages unknown ("line 1 ... is over 16 MiB (not
                                                 | read for a plan); give --passages N"), RSS bounded; load_config
                                                 | leaves the K check to the corpus job
Out of memory in ``rag train`` (torch's          | "error: rag train: out of memory (DefaultCPUAllocator: ...); give
  DefaultCPUAllocator)                           | the job more memory ... or make it need less (train.batch_size ...)"
                                                 | (rag.errors.failure_line, in the CLI)
A read-only MLflow store                         | RagError "<db>: the MLflow store cannot be written (attempt to write
                                                 | a readonly database); make the file and its folder writable, ..."
A name over 255 bytes (config path, tracking     | ConfigError naming the key when the config loads; an output path
  store, an output path)                         | given to a command: "<path>...: file name too long ..."
tracking.uri ``file://``, ``bogus://``,          | ConfigError naming tracking.uri and the stores it may be
  ``sqlite:///``, ``http://``                    |
tracking.uri at a port nothing listens on        | one line within seconds ("no MLflow server at host:port (Connection
                                                 | refused); start it ..."); MLflow's own retries bounded (2, 60 s)
``rag diff-runs`` on a malformed manifest        | "<file>: malformed run manifest: 'data' is list, expected an object"
A directory or FIFO where a file is read         | "<path>: is a directory, not a file" / "is a named pipe (FIFO), not
                                                 | a file" (rag.io.not_a_file), not "file not found"
``rag plan`` on 3e9 miniworld entities, or       | ConfigError "config key 'miniworld': ... more than the 20,000 ...";
  --passages -5                                  | a world over 3,000 entities is not generated for a plan;
                                                 | "error: --passages: at least 1, got -5"
``retriever.context_encoder: package:X``         | found with importlib.util.find_spec, nothing imported; X must be a
                                                 | top-level package shipping model/config.json
A NUL byte in a prediction                       | report.html shows U+FFFD; no control character reaches it
model.safetensors written 0600                   | atomic_dir gives every file in an output folder the umask's mode
``lr: 1e-4`` (a string to YAML 1.1), a quoted     | "config key 'train.lr': expected number, got str '1e-4' (YAML reads
  number                                         | 1e-4 as a string: write 1.0e-4 or 0.0001)"
``--config 'seeds=[1,2]'`` (Snakemake reads the  | read as the numbers their keys declare (rag.config
  values in a list or mapping as strings)        | .command_line_values, in common.smk); ``null`` of a nullable key None
``generator.name_or_path``: a missing path, an   | ConfigError "config key 'generator.name_or_path': '<path>': no such
  empty folder, a folder of no model, a model of | folder" / "an empty folder, not a model folder" / "not a model folder
  another family                                 | (no config.json)" / "holds a causal_lm model, and ... is seq2seq"
A seq2seq ``generators.<name>`` inheriting a     | ConfigError naming generators.<name>.generator.name_or_path
  causal generator's pretrained name_or_path     |
``lora_target_modules`` the model does not have  | ConfigError naming the key and the model's linear modules (the model
                                                 | built from its configuration on the meta device); ``snakemake -n``
                                                 | refuses it, a bad prompt_template and a missing name_or_path
"""

from __future__ import annotations

import copy
import json
import re
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
    cfg["tasks"]["byo_qa"]["files"] = {k: str(ROOT / v) for k, v in cfg["tasks"]["byo_qa"]["files"].items()}
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
    path.write_text(yaml.safe_dump({"version": 2, "cells": [good, *({**good, **c} for c in cells)]}))
    return path


@pytest.mark.parametrize("cell, message", [
    ({"variant": "rag_tokenn"}, "unknown variant 'rag_tokenn' (known: rag_sequence, rag_token,"),
    ({"task": "squad"}, "unknown task 'squad'"),
    ({"split": "valid"}, "unknown split 'valid'"),
    ({"metric": "rougeL"}, "nq rag_token runs record no metric 'rougeL' (they record: em, answer_recall@K, passage_recall@K)"),
    ({"variant": "closed_book", "metric": "answer_recall@2"}, "nq closed_book runs record no metric 'answer_recall@2' (they record: em)"),
    ({"variant": "bart"}, "variant 'bart' is renamed 'closed_book': write closed_book"),
], ids=["variant", "task", "split", "metric", "recall-of-closed-book", "renamed-variant"])
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


@pytest.mark.parametrize("text, message", [
    ("lr: 1e-4", "config key 'train.lr': expected number, got str '1e-4' (YAML reads 1e-4 as a string: write 1.0e-4 or 0.0001)"),
    ("lr: 5E3", "config key 'train.lr': expected number, got str '5E3' (YAML reads 5E3 as a string: write 5.0e+3 or 5000)"),
    ("lr: 1.0e4", "config key 'train.lr': expected number, got str '1.0e4' (YAML reads 1.0e4 as a string: write 1.0e+4 or 10000)"),
    ("lr: '0.001'", "config key 'train.lr': expected number, got str '0.001' (write 0.001 without quotes)"),
    ("steps: 1e1", "config key 'train.steps': expected integer, got str '1e1' (write 10)"),
])
def test_a_number_yaml_reads_as_a_string_is_refused_saying_how_to_write_it(tmp_path, text, message):
    config = tmp_path / "byo.yaml"
    config.write_text(yaml.safe_dump({**_byo(), "train": {}}).replace("train: {}", "train: {" + text + "}"))
    with pytest.raises(ConfigError) as exc:
        load_config(config)
    assert str(exc.value) == message
    for written, *hints in re.findall(r"got str '(\S+)' \(YAML .*: write (\S+) or (\S+)\)$", message):
        assert [yaml.safe_load(f"x: {h}")["x"] for h in hints] == [float(written)] * 2  # YAML reads each as the number


def test_numbers_inside_a_list_or_mapping_on_snakemakes_command_line_are_numbers(tmp_path):
    """snakemake --config reads a list's or a mapping's values as strings (seeds=[1,2]: '1', '2'): the
    config reads them as their keys declare (rag.config.command_line_values)."""
    from conftest import snakemake_bin
    from snakemake.cli import parse_config

    from rag.config import command_line_values

    given = parse_config(["seeds=[4,5]", "train={lr: 1e-4, steps: 3}", "retriever={pq_m: null}", "name=7x",
                          "generators={g2: {generator: {d_model: 64}, tasks: [byo_qa]}}"])
    assert given["seeds"] == ["4", "5"] and given["train"]["lr"] == "1e-4"  # as Snakemake reads them
    read = command_line_values(given)
    assert read["seeds"] == [4, 5] and read["train"] == {"lr": 0.0001, "steps": 3} and read["retriever"] == {"pq_m": None}
    assert read["name"] == "7x" and read["generators"]["g2"]["generator"] == {"d_model": 64}
    cfg = load_config({**_byo(), **read, "name": "byo"})
    assert cfg["seeds"] == [4, 5] and cfg["train"]["lr"] == 0.0001
    config = tmp_path / "byo.yaml"
    config.write_text(yaml.safe_dump(_byo()))
    proc = subprocess.run([snakemake_bin(), "-n", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path / "wd"),
                           "--configfile", str(config), "--config", "seeds=[4,5]", "train={lr: 1e-4}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "runs/byo_qa/rag_token/seed5/" in proc.stdout


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


def test_a_yaml_alias_bomb_in_a_band_file_is_refused_quickly(tmp_path):
    path = tmp_path / "bands.yaml"
    # str() of the cell's source would write out a billion values
    path.write_text("bomb:\n  " + _alias_bomb().replace("\n", "\n  ") + "\ncells:\n  - {task: nq, variant: closed_book, split: "
                    "test, metric: em, expected: 1, tolerance: 1, source: *b8}\n")
    start = time.monotonic()
    with pytest.raises(DataError, match=r"bands.yaml: its YAML aliases expand to more than a band file holds"):
        load_bands(path)
    assert time.monotonic() - start < 5


def test_a_key_given_twice_is_refused_naming_it_and_both_lines(tmp_path, capsys):
    """YAML keeps the last of a key given twice, silently: a config's second ``seeds:``, and a band
    file's second ``cells:`` (where the dropped one holds a cell that would fail), are refused in one
    line naming the key and both lines, by load_config, rag check and snakemake -n alike."""
    from tests.conftest import smk

    config = tmp_path / "twice.yaml"
    config.write_text(BYO.read_text().replace("seeds: [1]", "seeds: [1, 2]", 1) + "seeds: [1]\n")
    line = len(config.read_text().splitlines())
    first = next(i for i, t in enumerate(config.read_text().splitlines(), 1) if t.startswith("seeds:"))
    message = f"{config}:{line}: invalid YAML: key 'seeds' given twice, on lines {first} and {line}"
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        load_config(config, check_files=False)
    dry = smk(tmp_path, "-n", configfile=config)
    assert dry.returncode != 0 and f"error: {message}" in dry.stderr and not (tmp_path / "results").exists()
    bands = tmp_path / "b.yaml"
    bands.write_text("version: 2\ncells:\n  - {task: nq, variant: rag_tokenn, split: test, metric: em, expected: 1, "
                     "tolerance: 1}\ncells:\n  - {task: nq, variant: rag_token, split: test, metric: em, expected: 50, "
                     "tolerance: 5}\n")
    assert main(["check", "--bands", str(bands), "--metrics", str(_run(tmp_path))]) == 2
    assert f"error: {bands}:4: invalid YAML: key 'cells' given twice, on lines 2 and 4" in _err(capsys)
    # a mapping's merge key (<<) and the keys it overrides are one mapping's keys once each
    bands.write_text("version: 2\ncells:\n  - &c {task: nq, variant: closed_book, split: test, metric: em, expected: 1, tolerance: 1}\n"
                     "  - {<<: *c, split: dev}\n")
    assert [b.split for b in load_bands(bands)[1]] == ["test", "dev"]


@pytest.mark.parametrize("text, message", [
    ("cells: []\n", "no version: (the band file format's, one of 1, 2)"),
    ("version: 99\ncells: []\n", "version 99 is not a band file format this harness reads (1, 2)"),
    ("version: 2\nseed: thirteen\ncells: []\n", "'seed' (the world's top-level seed) must be an integer, got 'thirteen'"),
    ("version: 2\ncells:\n  - {task: nq, variant: closed_book, split: test, metric: em, expected: 1, tolerance: 1, seeds: three}\n",
     "cells[0]: 'seeds' (how many fine-tune seeds the band is for) must be an integer >= 1, got 'three'"),
], ids=["no-version", "version-99", "seed", "seeds"])
def test_a_band_file_of_no_or_another_version_or_with_words_for_numbers_is_refused(tmp_path, text, message):
    path = tmp_path / "b.yaml"
    path.write_text(text)
    with pytest.raises(DataError, match="^" + re.escape(f"{path}: {message}") + "$"):
        load_bands(path)


def test_a_huge_band_file_is_refused_before_it_is_read(tmp_path):
    """200,000 cells took 115 s and 2 GB to read and were then called an alias bomb: a band file over
    1 MiB is refused by its size, at once; one of more cells than a band file holds, by their number."""
    from rag.report import bands as B

    cell = "  - {task: nq, variant: closed_book, split: test, metric: em, expected: 1, tolerance: 1}\n"
    path = tmp_path / "huge.yaml"
    path.write_text("version: 2\ncells:\n" + cell * 200_000)
    start = time.monotonic()
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: [0-9,]+ bytes, more than a band file holds \(1,048,576\)"):
        load_bands(path)
    assert time.monotonic() - start < 1
    path.write_text("version: 2\ncells:\n" + cell * (B.MAX_BAND_CELLS + 1))
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: 5,001 cells, more than a band file holds \(5,000\)$"):
        load_bands(path)


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

    def plan(config: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", probe, "plan", "--configfile", str(config), "--no-profile"],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)

    proc = plan(path)
    assert proc.returncode == 0, proc.stderr
    assert f"line 1 of {corpus} is over 16 MiB (not read for a plan); give --passages N" in proc.stdout
    small = tmp_path / "small.yaml"  # the same plan of the example's own corpus: what a plan holds anyway
    small.write_text(yaml.safe_dump(_byo()))
    reference = plan(small)
    assert reference.returncode == 0, reference.stderr
    peak, base = (int(p.stdout.split("peak")[-1]) for p in (proc, reference))
    assert peak < base + 100_000, (peak, base)  # KB: the line alone is 200 MB
    # the config's K check (snakemake -n) leaves the long line to the corpus job
    probe = ("import re, sys; from rag.config import load_config; load_config(sys.argv[1]); "
             f"print('peak', {PEAK})")
    proc = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split("peak")[-1]) < 400_000


# ------------------------------------------------------------------------------------ one line, not a traceback
def test_out_of_memory_in_training_is_one_line_naming_the_step(tmp_path, capsys, monkeypatch):
    """The allocator's own failure (a real torch allocation that cannot be met), inside rag train."""
    import torch

    from rag.cli import training_commands
    from rag.stages import fine_tuning

    monkeypatch.setattr(training_commands, "task_setup", lambda _args: (None, "cpu"))
    monkeypatch.setattr(fine_tuning, "fine_tune", lambda *_a, **_k: torch.empty(10**15, dtype=torch.uint8))
    argv = ["train", "--config", "x.json", "--variant", "rag_token", "--passages", "p.tsv", "--embeddings", "e",
            "--index", "i", "--bm25", "b", "--train-data", "t.jsonl", "--generator", "g", "--checkpoint-dir", "c", "--out", "o"]
    assert main(argv) == 2
    err = _err(capsys).strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: rag train: out of memory (DefaultCPUAllocator: can't allocate memory"), err
    assert "give the job more memory (config resources: <rule>: mem_mb" in err[0] and "train.batch_size" in err[0]


def test_a_read_only_mlflow_store_is_one_line(tmp_path, monkeypatch):
    """SQLite's "attempt to write a readonly database" (a read-only file or mount; root writes any
    file, so the test raises what SQLAlchemy raises there)."""
    import sqlite3

    import sqlalchemy.exc
    from mlflow.tracking import MlflowClient

    from rag.errors import RagError
    from rag.tracking import Run, init_store

    db = tmp_path / "mlflow.db"
    init_store(f"sqlite:///{db}")

    def read_only(*_args, **_kwargs):
        raise sqlalchemy.exc.OperationalError("INSERT INTO experiments", {}, sqlite3.OperationalError("attempt to write a readonly database"))

    monkeypatch.setattr(MlflowClient, "create_experiment", read_only)
    with pytest.raises(RagError) as exc:
        Run(f"sqlite:///{db}", "nq", run_name="r")
    assert str(exc.value) == (f"{db}: the MLflow store cannot be written (attempt to write a readonly database); make the "
                              "file and its folder writable, or set tracking.uri to a store this user can write")


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c["corpus"].update(path="x" * 300 + ".jsonl"), "config key 'corpus.path': the name 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... "
                                                            "is 306 bytes, over the 255 a file name may have; use a shorter one"),
    (lambda c: c.update(tracking={"uri": "sqlite:///results/" + "x" * 300 + ".db"}), "config key 'tracking.uri': the name"),
    (lambda c: c.update(tracking={"uri": "file://"}), "config key 'tracking.uri': 'file://' is not a store this harness logs to: "
                                                      "sqlite:///<file>"),
    (lambda c: c.update(tracking={"uri": "bogus://x"}), "config key 'tracking.uri': 'bogus://x' is not a store"),
    (lambda c: c.update(tracking={"uri": "sqlite:///"}), "config key 'tracking.uri': 'sqlite:///' names no file"),
    (lambda c: c.update(tracking={"uri": "http://"}), "config key 'tracking.uri': 'http://' names no host"),
], ids=["long-name", "long-store", "file", "bogus", "sqlite-no-file", "http-no-host"])
def test_paths_and_stores_that_cannot_work_are_refused_when_the_config_loads(mutate, message):
    cfg = _byo()
    mutate(cfg)
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    assert str(exc.value).startswith(message), str(exc.value)


def test_an_output_name_over_255_bytes_is_one_line_naming_it(tmp_path, capsys):
    bands = _bands(tmp_path / "b.yaml")
    out = tmp_path / ("y" * 300)
    assert main(["check", "--bands", str(bands), "--metrics", str(_run(tmp_path)), "--out", str(out)]) == 2
    assert _err(capsys).strip().splitlines()[-1] == (f"error: {str(out)[:80]}...: file name too long (over 255 bytes a "
                                                     "name, or 4096 a path); use a shorter one")
    assert main(["diff-runs", str(out), str(bands)]) == 2
    assert "file name too long" in _err(capsys)


def test_an_mlflow_server_that_does_not_answer_fails_fast(tmp_path, capsys, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    assert main(["init-store", "--uri", f"http://127.0.0.1:{port}", "--marker", str(tmp_path / "m.json")]) == 2
    assert time.monotonic() - start < 15
    err = _err(capsys).strip().splitlines()
    assert err == [f"error: tracking.uri http://127.0.0.1:{port}: no MLflow server at 127.0.0.1:{port} (Connection refused); "
                   f"start it (mlflow server --host 127.0.0.1 --port {port}) or set tracking.uri to one that runs"]
    # behind a proxy (here one that does not answer either) MLflow's own requests fail, after its
    # bounded retries: seconds, one line
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    start = time.monotonic()
    assert main(["init-store", "--uri", "http://mlflow.example:5000", "--marker", str(tmp_path / "m.json")]) == 2
    assert time.monotonic() - start < 30
    err = [line for line in _err(capsys).strip().splitlines() if "WARNING" not in line]
    assert len(err) == 1 and err[0].startswith("error: tracking.uri http://mlflow.example:5000: the MLflow server did not "
                                               "answer (API request to http://mlflow.example:5000/api/2.0/mlflow/"), err


@pytest.mark.parametrize("data, message", [
    ({"schema": 1, "data": [1]}, "malformed run manifest: 'data' is list, expected an object"),
    ({"schema": 1, "data": {"splits": {"train": "x"}}}, "malformed run manifest: 'data.splits.train' is str, expected an object"),
    ({"schema": 1, "data": {}, "run": "x"}, "malformed run manifest: 'run' is str, expected an object"),
    ({"schema": 1, "data": {}, "config": {"section": [1]}}, "malformed run manifest: 'config.section' is list, expected an object"),
])
def test_diff_runs_on_a_malformed_manifest_is_one_line(tmp_path, capsys, data, message):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(data))
    b.write_text(json.dumps({"schema": 1, "data": {}}))
    assert main(["diff-runs", str(a), str(b)]) == 2
    assert _err(capsys).strip() == f"error: {a}: {message}"
    a.write_text(json.dumps({"schema": 1, "data": {}, "config": {"sha256": "x"}}))  # one run records a config, the other none
    assert main(["diff-runs", str(a), str(b)]) == 0
    assert "config: sha256: x vs none" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_directory_or_fifo_is_named_as_what_it_is(tmp_path, capsys, kind):
    import os

    from rag.io import read_json, read_jsonl

    thing = tmp_path / "x.jsonl"
    if kind == "directory":
        thing.mkdir()
        what = "is a directory, not a file"
    else:
        os.mkfifo(thing)
        what = "is a named pipe (FIFO), not a file"
    for read in (read_json, read_jsonl):
        with pytest.raises(DataError, match=f"^{thing}: {re.escape(what)}$"):
            read(thing)
    if kind == "fifo":  # a folder can be an input (a task's files read as one)
        cfg = _byo()
        cfg["corpus"]["path"] = str(thing)
        with pytest.raises(ConfigError, match=f"^config key 'corpus.path': input {thing} {re.escape(what)}$"):
            load_config(cfg)
    assert main(["check", "--bands", str(thing), "--metrics", str(thing)]) == 2
    assert _err(capsys).strip() == f"error: {thing}: band file {what}"
    assert main(["diff-runs", str(thing), str(thing)]) == 2
    assert f"error: {thing}:" in _err(capsys)


def test_plan_bounds_absurd_miniworld_sizes_and_refuses_negative_passages(tmp_path, capsys):
    cfg = {"name": "mw", "corpus": {"name": "mw", "source": "miniworld"}, "tasks": {"nq": {"train": 10, "dev": 4, "test": 4}},
           "miniworld": {"countries": 10**9, "people": 2 * 10**9, "cities": 10}}
    path = tmp_path / "mw.yaml"
    path.write_text(yaml.safe_dump(cfg))
    start = time.monotonic()
    assert main(["plan", "--configfile", str(path), "--no-profile"]) == 2
    assert time.monotonic() - start < 30
    assert _err(capsys).strip() == ("error: config key 'miniworld': 3,000,000,010 entities (countries + people + cities), "
                                    "more than the 20,000 the synthetic world is made for (its names run out, and writing "
                                    "its articles takes time growing with the square of its size)")
    cfg["miniworld"] = {"countries": 2000, "people": 4000, "cities": 100}  # allowed, but not generated for a plan
    path.write_text(yaml.safe_dump(cfg))
    start = time.monotonic()
    assert main(["plan", "--configfile", str(path), "--no-profile"]) == 0
    assert time.monotonic() - start < 30
    assert "unknown: a miniworld of 6,100 entities is not generated for a plan (minutes); give --passages N" in capsys.readouterr().out
    assert main(["plan", "--configfile", str(BYO), "--passages", "-5"]) == 2
    assert _err(capsys).strip() == "error: --passages: at least 1, got -5"


# ------------------------------------------------------------------------------------ trust boundaries
def test_a_package_encoder_is_found_without_importing_the_package(tmp_path, monkeypatch):
    from rag.retrieval.encoders import resolve_model_path

    marker = tmp_path / "IMPORTED"
    pkg = tmp_path / "site" / "not_an_encoder"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(ConfigError, match=r"'not_an_encoder' ships no encoder \(no model/config.json in its package folder\)"):
        resolve_model_path("package:not_an_encoder")
    assert not marker.exists() and "not_an_encoder" not in sys.modules
    with pytest.raises(ConfigError, match="names a top-level Python package"):
        resolve_model_path("package:os.path")
    with pytest.raises(ConfigError, match="'no_such_package_x' is not installed"):
        resolve_model_path("package:no_such_package_x")
    # a package that ships an encoder: its model folder, still not imported
    (pkg / "model").mkdir()
    (pkg / "model" / "config.json").write_text("{}")
    assert resolve_model_path("package:not_an_encoder") == str(pkg / "model") and not marker.exists()


def report_of_a_prediction(tmp_path, prediction: str) -> str:
    """The HTML of a small report whose first NQ RAG-Token test prediction is ``prediction``."""
    from tests.test_report import SCALE, listed, make_inputs, table_files

    from rag.report.build import build_report

    inputs = make_inputs(tmp_path)
    pred = inputs["runs"] / "nq" / "rag_token" / "test" / "predictions.jsonl"
    rows = [json.loads(line) for line in pred.read_text().splitlines()]
    rows[0]["prediction"] = prediction
    pred.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out" / "report.html"
    build_report(listed(inputs), inputs["passages"], SCALE, out, table_files(tmp_path / "out" / "tables"), samples_per_task=5)
    return out.read_text(encoding="utf-8")


def test_a_nul_byte_of_the_data_does_not_reach_the_report(tmp_path):
    html = report_of_a_prediction(tmp_path, "before\x00after\x07bell")
    assert "\x00" not in html and "\x07" not in html
    assert "before\ufffdafter\ufffdbell" in html


def test_a_saved_model_is_as_readable_as_every_other_output(tmp_path):
    """safetensors writes model.safetensors 0600; atomic_dir gives every file the umask's mode."""
    import os
    import stat

    import torch
    from safetensors.torch import save_file

    from rag.io import atomic_dir, current_umask, write_json

    out = tmp_path / "model"
    with atomic_dir(out) as tmp:
        save_file({"w": torch.zeros(2)}, str(tmp / "model.safetensors"))
        (tmp / "sub").mkdir()
        write_json(tmp / "sub" / "meta.json", {})
    want = 0o666 & ~current_umask()
    assert {p.name: stat.S_IMODE(os.stat(p).st_mode) for p in out.rglob("*") if p.is_file()} == {
        "model.safetensors": want, "meta.json": want}


# ------------------------------------------------------------------------------------ generator settings, checked with the config
CAUSAL = ROOT / "tests" / "data" / "e2e_causal.yaml"


@pytest.fixture(scope="module")
def small_lm(tmp_path_factory) -> Path:
    """A saved tiny Llama and its tokenizer: a local causal LM folder."""
    from ddp_worker import make_tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("lm") / "lm"
    tok = make_tokenizer()
    LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _causal(**generator) -> dict:
    cfg = yaml.safe_load(CAUSAL.read_text())
    cfg["generator"].update(generator)
    return cfg


def _pretrained(name: str, **more) -> dict:
    """e2e_causal.yaml's generator loading ``name``; its seq2seq generators.s2s from scratch."""
    cfg = _causal(init="pretrained", name_or_path=name, **more)
    cfg["generators"]["s2s"]["generator"]["init"] = "scratch"
    return cfg


@pytest.mark.parametrize("name, says", [
    ("/no/such/lm", "no such folder"),
    ("./models/lm", "no such folder"),
    ("models/causal/lm", "no such folder"),  # no repository id (namespace/name): a path
    ("~/lm", "no such folder (a ~ is not expanded: write the whole path)"),
    ("<empty>", "an empty folder, not a model folder"),
    ("<notes>", "not a model folder (no config.json)"),
])
def test_a_generator_path_that_is_no_model_folder_is_one_line_naming_the_key(tmp_path, monkeypatch, name, says):
    """A missing local path got the hub's repository-id rule, an empty folder or one that is not a model a
    transformers traceback, in the pretrain job; now the config refuses it, naming generator.name_or_path."""
    monkeypatch.chdir(tmp_path)
    if name.startswith("<"):
        name = str(tmp_path / name.strip("<>"))
        Path(name).mkdir()
        if name.endswith("notes"):
            (Path(name) / "README.md").write_text("my model, soon")
    with pytest.raises(ConfigError) as exc:
        load_config(_pretrained(name))
    assert str(exc.value) == f"config key 'generator.name_or_path': {name!r}: {says}"
    load_config(_pretrained("someone/lm"))  # a repository id: a Hugging Face model, fetched by the pretrain job


def test_a_generator_folder_of_another_family_is_refused_with_the_config(small_lm):
    load_config(_pretrained(str(small_lm)))
    cfg = _pretrained(str(small_lm), family="seq2seq", local_context=3, exact_match=True)
    with pytest.raises(ConfigError, match=rf"^config key 'generator.name_or_path': '{small_lm}' holds a causal_lm model, "
                                          "and generator.family is seq2seq$"):
        load_config(cfg)


def test_a_further_generator_of_another_family_inheriting_a_pretrained_model_is_refused():
    """generators.s2s (seq2seq) inherited init: pretrained and name_or_path of a causal generator: a
    transformers traceback in its pretrain job; now a config error naming its key."""
    cfg = _causal(init="pretrained", name_or_path="Qwen/Qwen2.5-1.5B")
    with pytest.raises(ConfigError) as exc:
        load_config(cfg, check_files=False)
    assert str(exc.value) == ("config key 'generators.s2s.generator.name_or_path': generators.s2s is of family seq2seq and "
                              "would load generator.name_or_path 'Qwen/Qwen2.5-1.5B', a causal_lm model (generator.family); "
                              "set its own name_or_path, or init: scratch")
    cfg["generators"]["s2s"]["generator"].update(init="scratch")
    load_config(cfg, check_files=False)


@pytest.mark.parametrize("where", ["generator", "generators.big.generator"])
def test_lora_target_modules_the_model_does_not_have_are_refused_with_the_config(small_lm, where):
    """Found in the train job before, after corpus, encoding, index and pretraining: the model's modules
    are known from its configuration, built on the meta device."""
    lora = {"lora_rank": 2, "lora_target_modules": ["c_attn"]}
    if where == "generator":
        cfg = _pretrained(str(small_lm), **lora)
    else:
        cfg = _pretrained(str(small_lm))
        cfg["generators"] = {"big": {"generator": {"family": "causal_lm", "init": "scratch", **lora}, "tasks": ["nq"]}}
    from rag.models.sizing import check_lora

    with pytest.raises(ConfigError) as exc:
        check_lora(load_config(cfg))
    model = str(small_lm) if where == "generator" else "the scratch Llama"
    assert str(exc.value) == (f"config key '{where}.lora_target_modules': Target modules {{'c_attn'}} not found in the base "
                              f"model. Please check the target modules and try again. (the linear modules of {model}: "
                              "down_proj, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, v_proj)")
    check_lora(load_config(_pretrained(str(small_lm), lora_rank=2, lora_target_modules=["q_proj", "v_proj"])))


def test_generator_settings_stop_a_dry_run(small_lm, tmp_path):
    """snakemake -n refuses a bad prompt_template, LoRA target modules the model lacks and a
    name_or_path that does not exist, each in one line naming the key, before any job."""
    from conftest import snakemake_bin

    faults = {
        "template": (_causal(prompt_template="{title!r:>99999999} {question}"),
                     "error: config key 'generator.prompt_template': '{title!r:>99999999}' has a conversion or format spec;"),
        "lora": (_pretrained(str(small_lm), lora_rank=2, lora_target_modules=["c_attn"]),
                 "error: config key 'generator.lora_target_modules': Target modules {'c_attn'} not found in the base model."),
        "path": (_pretrained(str(tmp_path / "no-lm")), f"error: config key 'generator.name_or_path': '{tmp_path / 'no-lm'}': "
                                                         "no such folder"),
    }
    procs = {}
    for what, (cfg, _) in faults.items():
        (tmp_path / f"{what}.yaml").write_text(yaml.safe_dump(cfg))
        procs[what] = subprocess.Popen([snakemake_bin(), "-n", "-s", str(ROOT / "Snakefile"), "--directory",
                                        str(tmp_path / f"wd-{what}"), "--configfile", str(tmp_path / f"{what}.yaml")],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for what, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
        assert proc.returncode != 0 and "Traceback" not in stdout + stderr, (what, stderr)
        assert len(errors) == 1 and errors[0].startswith(faults[what][1]), (what, stderr)
        assert "Job stats" not in stdout
