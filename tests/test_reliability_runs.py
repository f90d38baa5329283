"""Reliability of fine-tuning runs on a bring-your-own corpus of 4 passages (``examples/byo``):
one writer per fine-tune, K checked against the corpus before any training, and a resume at the
last step that leaves every output byte-identical to an uninterrupted run.

The upstream (corpus, task files, passage embeddings, index, a generator pretrained for 2 steps,
the MLflow store) is built once by the ``rag`` commands the rules run, in this process; the
fine-tunes then run as ``rag train`` (in this process, or as processes of their own where two
must run at once).

Fault / bad input tried                          | what the harness does (and the test checking it)
------------------------------------------------ | ------------------------------------------------------------------
A second ``rag train`` of a fine-tune that is    | refused at once, exit 2, one line naming the fine-tune, the process
  training (``snakemake --unlock`` let a second  | holding it and the lock file (checkpoint/run.lock, fcntl.flock,
  run of the experiment in)                      | released when the process ends however it ends); it creates no
                                                 | MLflow run and writes nothing
K larger than the corpus (4 passages): train.k,  | load_config (so ``snakemake -n`` too) counts the local corpus'
  tasks.nq.decode_token.k,                       | passages (up to the largest K) and names the key; ``rag train``,
  experiments.topk_sweep: [1, 9]                 | ``rag evaluate`` and ``rag topk-sweep`` check the passages they are
                                                 | given before they build anything, naming the key (the sweep used to
                                                 | drop K = 9 silently; train failed after training, naming no key)
Interrupted after the last checkpoint, before    | the rerun resumes at the last step; every output file (weights,
  the model was written                          | tokenizer files, predictions) is byte-identical to an
                                                 | uninterrupted run's; meta.json and metrics.json differ only in
                                                 | timings and the MLflow run id
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[1]
BYO = ROOT / "examples" / "byo"
SPLITS = ("train", "dev", "test")


def _config(tmp: Path) -> dict:
    with open(BYO / "config.yaml", encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)
    cfg["name"] = "runs"
    cfg["corpus"]["path"] = str(BYO / "documents.jsonl")
    cfg["tasks"]["nq"]["files"] = {s: str(BYO / f"qa-{s}.jsonl") for s in SPLITS}
    cfg["tracking"] = {"uri": f"sqlite:///{tmp / 'results' / 'mlflow.db'}"}
    cfg["generator"].update(pretrain_steps=2)
    cfg["train"].update(steps=4, checkpoint_every=2, log_every=1)
    cfg["experiments"]["topk_sweep"] = [1, 2]
    return cfg


class Upstream:
    """The inputs of a fine-tune, built by the rag commands under ``root``."""

    def __init__(self, root: Path):
        self.root = root
        self.out = root / "results" / "runs"
        self.passages = self.out / "corpus" / "byo" / "passages.tsv"
        self.emb = self.out / "index" / "byo" / "emb-0.npy"
        self.index = self.out / "index" / "byo" / "flat.faiss"
        self.generator = self.out / "generator" / "model"
        self.data = {s: self.out / "data" / "nq" / f"{s}.jsonl" for s in SPLITS}
        self.uri = f"sqlite:///{root / 'results' / 'mlflow.db'}"

    def write_sections(self, cfg: dict, folder: Path) -> dict[str, Path]:
        from rag.config import load_config, sections

        folder.mkdir(parents=True, exist_ok=True)
        out = {}
        for name, value in sections(load_config(cfg, check_files=False)).items():
            out[name] = folder / f"{name}.json"
            out[name].write_text(json.dumps(value))
        return out

    def train_argv(self, sections: dict[str, Path], run: Path, variant: str = "rag_token", fused: bool = True) -> list[str]:
        argv = ["train", "--config", str(sections["train_nq"]), *([str(sections["eval_nq"])] if fused else []),
                "--variant", variant, "--train-data", str(self.data["train"]), "--generator", str(self.generator),
                "--checkpoint-dir", str(run / "checkpoint"), "--out", str(run / "model")]
        if variant != "bart":
            argv += ["--passages", str(self.passages), "--embeddings", str(self.emb), "--index", str(self.index)]
        if fused:
            for split in ("dev", "test"):
                argv += [f"--{split}", str(self.data[split]), f"--{split}-predictions", str(run / split / "predictions.jsonl"),
                         f"--{split}-metrics", str(run / split / "metrics.json")]
        return argv


def _main(argv: list[str]) -> None:
    from rag.cli import main

    assert main(argv) == 0, argv


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Upstream:
    import torch

    torch.set_num_threads(1)
    up = Upstream(tmp_path_factory.mktemp("runs"))
    cfg = _config(up.root)
    sec = up.write_sections(cfg, up.out / "config")
    up.cfg, up.sections = cfg, sec
    _main(["init-store", "--uri", up.uri, "--marker", str(up.out / "mlflow.ready")])
    _main(["corpus", "--config", str(sec["corpus"]), "--input", cfg["corpus"]["path"], "--out", str(up.passages)])
    _main(["tasks", "--config", str(sec["data_nq"]), *[a for s in SPLITS for a in (f"--in-{s}", cfg["tasks"]["nq"]["files"][s])],
           *[a for s in SPLITS for a in (f"--out-{s}", str(up.data[s]))]])
    _main(["encode", "--config", str(sec["encode"]), "--passages", str(up.passages), "--shard", "0", "--num-shards", "1",
           "--out", str(up.emb)])
    _main(["index", "--config", str(sec["index"]), "--embeddings", str(up.emb), "--out", str(up.index),
           "--stats", str(up.index.with_suffix(".stats.json"))])
    _main(["pretrain", "--config", str(sec["generator"]), "--passages", str(up.passages), "--checkpoint-dir",
           str(up.out / "generator" / "checkpoint"), "--out", str(up.generator)])
    assert sum(1 for _ in open(up.passages)) - 1 == 4
    return up


# ------------------------------------------------------------------------------------ resume at the last step
def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


RUN_SPECIFIC = {"meta.json": ("train_seconds", "mlflow_run_id"), "metrics.json": ("decode_seconds", "mlflow_run_id"),
                "pretrain.json": ("seconds",)}


def _comparable(name: str, data: bytes):
    """A file's bytes; for meta.json and metrics.json, their JSON without the timings and the run id."""
    keys = RUN_SPECIFIC.get(Path(name).name)
    if keys is None:
        return data
    obj = json.loads(data)
    return {k: v for k, v in obj.items() if k not in keys}


def test_resume_at_the_last_step_writes_the_same_files(upstream, tmp_path, caplog):
    """An interruption after the last checkpoint, before the model was written: the rerun resumes at
    the last step and writes every file as the uninterrupted run did, tokenizer files included (the
    generator's tokenizer.json had truncation null instead of max_length, the question encoder's
    padding Fixed instead of BatchLongest)."""
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    _main(upstream.train_argv(upstream.sections, full))
    shutil.copytree(full / "checkpoint", resumed / "checkpoint")  # what a kill after the last save leaves
    with caplog.at_level("INFO", logger="rag.train"):
        _main(upstream.train_argv(upstream.sections, resumed))
    assert f"resumed from {resumed / 'checkpoint' / 'checkpoint.pt'} at step 4" in caplog.text
    a, b = _files(full), _files(resumed)
    assert a.keys() == b.keys()
    assert any(name.endswith("tokenizer.json") for name in a) and "model/question_encoder/tokenizer.json" in a
    different = [name for name in a if _comparable(name, a[name]) != _comparable(name, b[name])]
    assert not different, different


def test_pretraining_resumed_at_the_last_step_writes_the_same_files(upstream, tmp_path, caplog):
    """The same for the generator's pretraining (its tokenizer.json too)."""
    shutil.copytree(upstream.out / "generator" / "checkpoint", tmp_path / "checkpoint")
    with caplog.at_level("INFO", logger="rag.train"):
        _main(["pretrain", "--config", str(upstream.sections["generator"]), "--passages", str(upstream.passages),
               "--checkpoint-dir", str(tmp_path / "checkpoint"), "--out", str(tmp_path / "model")])
    assert "at step 2" in caplog.text
    a, b = _files(upstream.generator), _files(tmp_path / "model")
    assert a.keys() == b.keys() and "tokenizer.json" in a
    assert [name for name in a if _comparable(name, a[name]) != _comparable(name, b[name])] == []
