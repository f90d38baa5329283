"""Keeping the index fresh while the passage encoder trains (rag.retrieval.refresh): a synchronous refresh
builds the index a plain forward of the passage encoder gives at that step, its staleness record is a brute-force
overlap, a resumed run rebuilds the index it held and ends where an uninterrupted one ends; the async strategy
through torch.distributed (gloo, two CPU processes) swaps indexes in while training goes on and resumes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ddp_worker import QUESTIONS, make_world, run_training

from rag.retrieval.refresh import IndexKeeper, RefreshOptions
from rag.training import CKPT

HERE = Path(__file__).resolve().parent


def pooled(model, tok, *texts) -> np.ndarray:
    batch = tok(*texts, return_tensors="pt")
    with torch.no_grad():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).pooler_output[0].numpy()


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def test_a_refresh_builds_the_index_of_the_passage_encoder_at_that_step_and_records_its_staleness(tmp_path):
    """Stopped right after the refresh at step 2: the index holds each passage as a plain forward of the passage
    encoder (as trained to that step) gives it; the record's overlap is the share of the probe questions' top 2
    that the world's (stale) embeddings and the fresh ones have in common, computed by brute force."""
    keepers = []
    run_training(tmp_path, steps=5, passage_encoder="separate", refresh=RefreshOptions("refresh", every=2),
                 keepers=keepers, stop_after=2)
    keeper = keepers[0]
    r, w = keeper.retriever, make_world(seed=3)
    tok, p = w.tokenizer, w.passages
    fresh = np.stack([pooled(r.context_encoder.model, tok, p.titles[j], p.texts[j]) for j in range(len(p))])
    np.testing.assert_allclose(r.index.reconstruct_n(0, len(p)), fresh, rtol=1e-5, atol=1e-5)
    assert [rec["step"] for rec in keeper.records] == [2]
    overlaps = []
    for q in QUESTIONS[:4]:
        v = pooled(r.question_encoder.model, tok, q)
        stale, new = np.argsort(-(w.doc_emb @ v), kind="stable")[:2], np.argsort(-(fresh @ v), kind="stable")[:2]
        overlaps.append(len(set(stale) & set(new)) / 2)
    assert keeper.records[0]["overlap"] == pytest.approx(np.mean(overlaps))
    assert keeper.records[0]["cpu_seconds"] > 0 and keeper.records[0]["wait_seconds"] > 0


def test_a_resumed_refresh_run_rebuilds_its_index_and_ends_as_an_uninterrupted_one(tmp_path):
    """Refreshes at steps 2 and 4, checkpoints at 3 and 6: stopped at 3 and resumed in a fresh system, the run
    retrieves from the index of step 2 again and ends with the uninterrupted run's weights, losses and records."""
    kw = dict(steps=6, checkpoint_every=3, passage_encoder="separate", refresh=RefreshOptions("refresh", every=2))
    full_keeper, keepers = [], []
    full, full_losses = run_training(tmp_path / "full", keepers=full_keeper, **kw)
    run_training(tmp_path / "stopped", stop_after=3, **kw)
    midway = torch.load(tmp_path / "stopped" / CKPT, map_location="cpu", weights_only=True)
    assert midway["extra"]["index"]["built_from"] and [r["step"] for r in midway["extra"]["index"]["records"]] == [2]
    params, losses = run_training(tmp_path / "stopped", keepers=keepers, **kw)
    assert losses == full_losses and max(float((params[n] - full[n]).abs().max()) for n in full) == 0.0
    steady = [(r["step"], r["overlap"]) for r in full_keeper[0].records]
    assert [(r["step"], r["overlap"]) for r in keepers[0].records] == steady == [(2, steady[0][1]), (4, steady[1][1])]


@pytest.mark.parametrize("strategy, depth", [("none", None), ("rerank", 5)])
def test_none_and_rerank_keep_the_index_they_start_with(tmp_path, strategy, depth):
    keepers = []
    run_training(tmp_path, steps=3, passage_encoder="separate", refresh=RefreshOptions(strategy, depth=5),
                 keepers=keepers)
    keeper = keepers[0]
    assert keeper.retriever.rescore_depth == depth and keeper.records == [] and keeper.built_from is None
    assert isinstance(keeper.retriever.doc_emb, np.ndarray) and keeper.retriever.index.emb is keeper.retriever.doc_emb


def test_the_options_and_the_keeper_refuse_what_cannot_run():
    with pytest.raises(ValueError, match="unknown index refresh strategy 'sometimes'"):
        RefreshOptions("sometimes")
    from ddp_worker import make_system

    system = make_system(make_world(seed=3), "token")
    with pytest.raises(ValueError, match="trained passage encoder"):
        IndexKeeper(system.retriever, RefreshOptions("refresh"), QUESTIONS, 2)
    system = make_system(make_world(seed=3), "token", passage_encoder="separate")
    with pytest.raises(ValueError, match="encoder processes"):
        IndexKeeper(system.retriever, RefreshOptions("async"), QUESTIONS, 2)


def torchrun(tmp_path, out, ckpt, *args):
    exe = shutil.which("torchrun")
    cmd = [exe] if exe else [sys.executable, "-m", "torch.distributed.run"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(HERE.parent), str(HERE)]))
    proc = subprocess.run(cmd + ["--standalone", "--nproc-per-node", "2", str(HERE / "refresh_worker.py"), str(out),
                                 str(ckpt), *map(str, args)], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(out, map_location="cpu", weights_only=True)


def test_async_refresh_through_torch_distributed_swaps_indexes_in_and_resumes(tmp_path):
    """Two CPU processes (gloo): the encoder rank encodes each snapshot it is sent while rank 0 trains; each
    index comes back and is swapped in at a later step than it was asked for, over every passage. Stopped after
    4 steps and resumed: the run ends, its records go on from the checkpoint's, its weights load into a fresh
    system, and its index is again over every passage."""
    full = torchrun(tmp_path, tmp_path / "full.pt", tmp_path / "full", 8)
    steps = [r["step"] for r in full["records"]]
    assert steps and all(s > 2 for s in steps) and steps == sorted(set(steps)), steps
    assert full["ntotal"] == full["n"] and len(full["losses"]) == 8
    assert all(r["cpu_seconds"] > 0 and 0 <= r["overlap"] <= 1 for r in full["records"])

    first = torchrun(tmp_path, tmp_path / "first.pt", tmp_path / "stopped", 8, 4)
    assert len(first["losses"]) == 4
    midway = torch.load(tmp_path / "stopped" / CKPT, map_location="cpu", weights_only=True)
    saved = midway["extra"]["index"]
    resumed = torchrun(tmp_path, tmp_path / "resumed.pt", tmp_path / "stopped", 8)
    assert len(resumed["losses"]) == 8 and resumed["losses"][:4].tolist() == first["losses"].tolist()
    assert [r["step"] for r in resumed["records"]][: len(saved["records"])] == [r["step"] for r in saved["records"]]
    assert resumed["ntotal"] == resumed["n"] or not resumed["records"]
    from ddp_worker import make_system

    fresh = make_system(make_world(seed=3), "token", passage_encoder="separate")
    assert {n for n, _ in fresh.named_parameters()} == resumed["params"].keys()
    assert not fresh.load_state_dict(resumed["params"], strict=False).unexpected_keys
    assert all(torch.isfinite(v).all() for v in resumed["params"].values())
