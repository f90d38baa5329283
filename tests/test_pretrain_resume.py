"""Generator pretraining runs the fine-tuning loop (rag.training.optimize) and its checkpoint rule: an
interrupted pretraining resumed in a fresh model ends bit-identical to an uninterrupted one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rag.config import load_config, sections
from rag.data import miniworld
from rag.models.generator import Seq2SeqGenerator
from rag.models.pretraining_data import Restatements
from rag.models.tokenizer import label_token, train_tokenizer
from rag.sections import GeneratorSection
from rag.tasks import FEVER3_LABELS
from rag.training import TrainRun, loss_curve, pretrain

ROOT = Path(__file__).resolve().parents[1]
STEPS = 12


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.set_num_threads(1)
    cfg = load_config(ROOT / "tests" / "data" / "e2e.yaml")
    world = miniworld.build_world(cfg["miniworld"], cfg["seed"])["a"]
    words = cfg["corpus"]["passage_words"]
    ids, titles, texts = map(list, zip(*miniworld.passages(world, words)))
    restated = Restatements(miniworld.restatements(world, words), ids)
    g = GeneratorSection.from_dict(sections(cfg)["generator"], "generator.json").generator  # copy and local_context on
    tok = train_tokenizer([f"{a} {b}" for a, b in zip(titles, texts)], g.vocab_size,
                            [label_token(lb) for lb in FEVER3_LABELS], tmp_path_factory.mktemp("tok"))
    return tok, g, titles, texts, restated


def _pretrain(setup, ckpt_dir=None, stop_after=None, identity=None):
    tok, g, titles, texts, restated = setup
    torch.manual_seed(0)
    gen = Seq2SeqGenerator.from_scratch(tok, g, "cpu")
    g = g.model_copy(update={"pretrain_steps": STEPS, "pretrain_batch_size": 4, "pretrain_lr": 1e-3, "chunk_overhead": None,
                             "pretrain_restatements": 0.5, "pretrain_claims": 0.3, "pretrain_sentences": 0.0,
                             "pretrain_absent": 0.3})
    losses = pretrain(gen, titles, texts, g, TrainRun(ckpt_dir, 3, identity, progress=False, stop_after=stop_after),
                      restated, checkpoint_every=4)
    return {k: v.detach().clone() for k, v in gen.model.state_dict().items()}, losses


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_interrupted_pretraining_resumes_bit_identical(setup, tmp_path, caplog, monkeypatch):
    drawn = []  # the loop draws every kind of restated-fact example, absent facts included
    for kind in ("example", "claim", "absent"):
        real = getattr(Restatements, kind)
        monkeypatch.setattr(Restatements, kind, lambda self, *a, _k=kind, _f=real, **kw: drawn.append(_k) or _f(self, *a, **kw))
    plain_state, plain_losses = _pretrain(setup)  # no checkpoint: the loop as the pretrain rule runs it
    assert set(drawn) == {"example", "claim", "absent"}
    monkeypatch.undo()
    state, losses = _pretrain(setup, tmp_path / "full")
    assert losses == plain_losses and _equal(state, plain_state)  # checkpointing changes nothing
    # stopped after 6 steps (the checkpoint holds step 4); a fresh model resumes at step 4
    _, first = _pretrain(setup, tmp_path / "cut", stop_after=6)
    assert len(first) == 6
    with caplog.at_level("INFO", logger="rag.training"):
        state, losses = _pretrain(setup, tmp_path / "cut")
    assert "at step 4" in caplog.text
    assert losses == plain_losses and _equal(state, plain_state)
    assert loss_curve(losses, 4) == [(s, sum(losses[s - 4 : s]) / 4) for s in (4, 8, 12)]


def test_pretraining_checkpoint_of_other_inputs_is_not_resumed(setup, tmp_path, caplog):
    plain_state, plain_losses = _pretrain(setup)
    _pretrain(setup, tmp_path / "c", stop_after=4, identity={"config_hash": "old"})
    with caplog.at_level("INFO", logger="rag.training"):
        state, losses = _pretrain(setup, tmp_path / "c", identity={"config_hash": "new"})
    assert "another configuration" in caplog.text and "resumed" not in caplog.text
    assert losses == plain_losses and _equal(state, plain_state)
