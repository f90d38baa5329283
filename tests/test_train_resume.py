"""A run stopped after a checkpoint and resumed in a fresh process ends where an uninterrupted run ends."""

from __future__ import annotations

import pytest
import torch
from ddp_worker import run_training

from rag.training import CKPT

N = 4


def _same(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[n] - b[n]).abs().max()) for n in a)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    torch.set_num_threads(1)
    return run_training(tmp_path_factory.mktemp("full"), steps=N, checkpoint_every=2)


def test_resume_after_interruption_matches_uninterrupted_run(tmp_path, uninterrupted):
    full_params, full_losses = uninterrupted
    first_params, first_losses = run_training(tmp_path, steps=N, checkpoint_every=2, stop_after=N // 2)
    assert len(first_losses) == N // 2
    assert _same(first_params, full_params) > 1e-4  # stopped early: the weights really differ
    midway = torch.load(tmp_path / CKPT, map_location="cpu", weights_only=True)
    assert midway["step"] == N // 2 and midway["optimizer"]["state"] and midway["scheduler"]  # what a resume needs
    # a fresh system object (fresh weights), the same checkpoint folder: it must pick up at step N/2
    params, losses = run_training(tmp_path, steps=N, checkpoint_every=2)
    assert len(losses) == N
    assert max(abs(a - b) for a, b in zip(losses, full_losses)) < 1e-6, (losses, full_losses)
    assert _same(params, full_params) < 1e-6
    state = torch.load(tmp_path / CKPT, map_location="cpu", weights_only=True)
    assert state["step"] == N and len(state["losses"]) == N
    # after the last step nothing is left to optimise: the optimizer's and scheduler's states are left out
    assert state["optimizer"] is None and state["scheduler"] is None
    assert state["generator"] and state["question_encoder"]


def test_frozen_question_encoder_is_left_out_of_the_checkpoint_and_a_resume_ends_the_same(tmp_path):
    """A frozen twin's question encoder is the one it was given: its checkpoint leaves it out (in the
    default a frozen twin's checkpoint was 109 MB, 87 of them MiniLM's weights), and a run stopped
    midway, resumed in a fresh process, still ends where an uninterrupted run ends."""
    full_params, full_losses = run_training(tmp_path / "full", steps=N, checkpoint_every=2, train_question_encoder=False)
    run_training(tmp_path / "stopped", steps=N, checkpoint_every=2, train_question_encoder=False, stop_after=N // 2)
    midway = torch.load(tmp_path / "stopped" / CKPT, map_location="cpu", weights_only=True)
    assert midway["question_encoder"] == {} and midway["generator"] and midway["optimizer"]["state"]
    params, losses = run_training(tmp_path / "stopped", steps=N, checkpoint_every=2, train_question_encoder=False)
    assert losses == full_losses and _same(params, full_params) == 0.0
    assert any(n.startswith("retriever.question_encoder.") for n in params)  # the encoder is there, just not saved


def test_finished_run_is_not_retrained(tmp_path, uninterrupted):
    run_training(tmp_path, steps=N, checkpoint_every=2)
    params, losses = run_training(tmp_path, steps=N, checkpoint_every=2)  # resumes at step N: nothing to do
    assert len(losses) == N
    assert _same(params, uninterrupted[0]) < 1e-6


def test_checkpoint_of_other_settings_is_not_reused(tmp_path, caplog):
    """One rule (rag.training.Checkpoint): a checkpoint written under other settings is not resumed; the
    run starts over, ends where a fresh run of the new settings ends, and replaces the checkpoint."""
    run_training(tmp_path / "old", steps=2, checkpoint_every=1, stop_after=1)
    fresh_params, fresh_losses = run_training(tmp_path / "fresh", steps=2, checkpoint_every=1, lr=5e-3)
    with caplog.at_level("WARNING", logger="rag.training"):
        params, losses = run_training(tmp_path / "old", steps=2, checkpoint_every=1, lr=5e-3)
    assert "another configuration" in caplog.text and "lr: 0.01 in the checkpoint, 0.005 now" in caplog.text
    assert losses == fresh_losses and _same(params, fresh_params) == 0.0
    state = torch.load(tmp_path / "old" / CKPT, map_location="cpu", weights_only=True)
    assert state["step"] == 2 and state["run"]["lr"] == 5e-3


def test_checkpoint_identity_is_part_of_the_rule(tmp_path, caplog):
    """The CLI's configuration hash (train(identity=...)) decides like any training setting."""
    run_training(tmp_path, steps=2, checkpoint_every=1, stop_after=1, identity={"config_hash": "a"})
    with caplog.at_level("INFO", logger="rag.training"):
        _, losses = run_training(tmp_path, steps=2, checkpoint_every=1, identity={"config_hash": "a"})
    assert "resumed from" in caplog.text and len(losses) == 2
    caplog.clear()
    with caplog.at_level("INFO", logger="rag.training"):
        run_training(tmp_path, steps=2, checkpoint_every=1, identity={"config_hash": "b"})
    assert "resumed from" not in caplog.text and "config_hash: 'a' in the checkpoint, 'b' now" in caplog.text


@pytest.mark.reliability
@pytest.mark.parametrize("damage", ["truncated", "empty", "not a checkpoint"])
def test_unreadable_checkpoint_is_set_aside_and_the_run_starts_over(tmp_path, caplog, uninterrupted, damage):
    """A truncated checkpoint made torch say "PytorchStreamReader failed reading zip archive" (an
    empty one: EOFError, no message) on every rerun, naming no file. Now one warning names the file,
    says it is unreadable and where it was set aside; the run starts over and ends as a fresh one."""
    run_training(tmp_path, steps=N, checkpoint_every=1, stop_after=2)
    ckpt = tmp_path / CKPT
    data = ckpt.read_bytes()
    ckpt.write_bytes({"truncated": data[: len(data) // 2], "empty": b""}.get(damage, b""))
    if damage == "not a checkpoint":
        torch.save({"weights": torch.zeros(2)}, ckpt)
    (tmp_path / f"{CKPT}.corrupt-1").write_bytes(b"an earlier one")  # the first free number is taken
    damaged = ckpt.read_bytes()
    with caplog.at_level("WARNING", logger="rag.training"):
        params, losses = run_training(tmp_path, steps=N, checkpoint_every=1)
    aside = tmp_path / f"{CKPT}.corrupt-2"
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    why = {"truncated": "RuntimeError: PytorchStreamReader failed", "empty": "an empty file",
           "not a checkpoint": "ValueError: no step, run, optimizer"}[damage]
    assert warnings[0].startswith(f"checkpoint {ckpt} is unreadable ({why}"), warnings[0]
    assert warnings[0].endswith(f"truncated or corrupt); set it aside as {aside} and starting this run over from step 0")
    assert aside.read_bytes() == damaged
    assert losses == uninterrupted[1] and _same(params, uninterrupted[0]) == 0.0  # as an uninterrupted run
    assert torch.load(ckpt, map_location="cpu", weights_only=True)["step"] == N


def test_a_fine_tune_s_checkpoint_identity_holds_every_retrieval_file_it_reads(tmp_path):
    """A hybrid's BM25 and a reranker's cross-encoder count in the identity a checkpoint resumes under; a
    run that reads only the passages and one index keeps the identity of those files alone."""
    from conftest import typed_sections

    from rag.manifest import canonical_hash, data_entries
    from rag.retrieval import RetrievalFiles
    from rag.stages.fine_tuning import checkpoint_identity

    cfg = typed_sections()["train_nq"]
    for name, text in (("passages.tsv", "p"), ("flat.faiss", "i"), ("train.jsonl", "t")):
        (tmp_path / name).write_text(text)
    for folder in ("bm25", "rr"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "w.bin").write_text(folder)
    p, index, bm25, rr = (str(tmp_path / n) for n in ("passages.tsv", "flat.faiss", "bm25", "rr"))

    def identity(files):
        data = data_entries(passages=p, index=files.index or files.bm25, splits={"train": str(tmp_path / "train.jsonl")}, init=None)
        return checkpoint_identity(cfg, "rag_token", "gen", 4, data, files)

    dense = identity(RetrievalFiles(passages=p, index=index))
    data = data_entries(passages=p, index=index, splits={"train": str(tmp_path / "train.jsonl")}, init=None)
    assert dense["inputs"] == canonical_hash({"passages": data["passages"], "index": data["index"], "init": None,
                                              "train": data["splits"]["train"]})[:16]
    bm25_alone = identity(RetrievalFiles(passages=p, bm25=bm25))
    hybrid, rerank = identity(RetrievalFiles(passages=p, index=index, bm25=bm25)), identity(RetrievalFiles(passages=p, index=index, reranker=rr))
    assert len({dense["inputs"], bm25_alone["inputs"], hybrid["inputs"], rerank["inputs"]}) == 4
    assert len({dense["config_hash"], hybrid["config_hash"], rerank["config_hash"]}) == 1
    (tmp_path / "rr" / "w.bin").write_text("retrained")  # a retrained cross-encoder: its runs' checkpoints are not resumed
    assert identity(RetrievalFiles(passages=p, index=index, reranker=rr))["inputs"] != rerank["inputs"]
    (tmp_path / "bm25" / "w.bin").write_text("rebuilt")
    assert identity(RetrievalFiles(passages=p, index=index, bm25=bm25))["inputs"] != hybrid["inputs"]
    assert identity(RetrievalFiles(passages=p, index=index))["inputs"] == dense["inputs"]
