"""A causal-LM generator from scratch (generator.family causal_lm, init scratch): a Llama of the
configured sizes on the corpus-trained tokenizer, pretrained with BART's cloze and restatement
objective through the generator interface; resumable bit-identically; the saved folder loads as a
CausalLMGenerator and computes a RAG loss."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rag.data import miniworld
from rag.models.causal_lm import CausalLMGenerator, build_causal_lm
from rag.models.pretraining_data import Restatements
from rag.models.tokenizer import label_token, train_tokenizer
from rag.tasks import FEVER3_LABELS
from rag.training import TrainRun, pretrain

ROOT = Path(__file__).resolve().parents[1]
E2E = ROOT / "tests" / "data" / "e2e.yaml"
# copy (the default): a CopyLlama; local_context and exact_match are the seq2seq generator's
CAUSAL = {"family": "causal_lm", "d_model": 32, "layers": 2, "heads": 2, "ffn": 64, "local_context": 0, "exact_match": False}
STEPS = 12


def causal_section(**generator):
    from tests.conftest import typed_sections

    return typed_sections({"generator": {**CAUSAL, **generator}}, config=E2E)["generator"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from rag.config import load_config

    torch.set_num_threads(1)
    cfg = load_config(E2E)
    world = miniworld.build_world(cfg["miniworld"], cfg["seed"])["a"]
    words = cfg["corpus"]["passage_words"]
    ids, titles, texts = map(list, zip(*miniworld.passages(world, words)))
    restated = Restatements(miniworld.restatements(world, words), ids)
    g = causal_section().generator
    tok = train_tokenizer([f"{a} {b}" for a, b in zip(titles, texts)], g.vocab_size,
                          [label_token(lb) for lb in FEVER3_LABELS], tmp_path_factory.mktemp("tok"))
    return tok, g, ids, titles, texts, restated


def _pretrain(setup, ckpt_dir=None, stop_after=None, steps=STEPS, lr=1e-3):
    tok, g, _, titles, texts, restated = setup
    torch.manual_seed(0)
    gen = CausalLMGenerator.from_options(build_causal_lm(tok, g), tok, g)
    g = g.model_copy(update={"pretrain_steps": steps, "pretrain_batch_size": 4, "pretrain_lr": lr, "chunk_overhead": None,
                             "pretrain_restatements": 0.5, "pretrain_claims": 0.3, "pretrain_sentences": 0.0,
                             "pretrain_absent": 0.0})
    losses = pretrain(gen, titles, texts, g, TrainRun(ckpt_dir, 3, progress=False, stop_after=stop_after), restated,
                      checkpoint_every=4)
    return gen, {k: v.detach().clone() for k, v in gen.model.state_dict().items()}, losses


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("copy", [True, False])
def test_scratch_causal_lm_is_a_llama_of_the_configured_sizes_on_the_corpus_tokenizer(setup, copy):
    from transformers import LlamaForCausalLM

    from rag.models.causal_lm import CopyLlama

    tok, g, *_ = setup
    model = build_causal_lm(tok, g.model_copy(update={"copy": copy}))
    assert type(model) is (CopyLlama if copy else LlamaForCausalLM)
    c = model.config
    assert (c.model_type, c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size) == \
        ("llama", 32, 2, 2, 64)
    assert model.get_input_embeddings().weight.shape[0] == len(tok)
    assert (c.pad_token_id, c.bos_token_id, c.eos_token_id) == (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id)
    assert c.max_position_embeddings >= g.max_source_len + g.max_target_len


def _cloze_nll(gen, setup) -> float:
    """The mean NLL of 16 fixed cloze spans under their prompts."""
    import random

    from rag.models.pretraining_data import cloze_example

    tok, _, _, titles, texts, _ = setup
    rng = random.Random(0)
    pairs = [ex for i in range(40) if (ex := cloze_example(titles[i], texts[i], rng, tok.mask_token))][:16]
    src, mask = gen.tokenize_sources([a for a, _ in pairs])
    with torch.no_grad():
        ll, _ = gen.target_logprobs(src, mask, gen.tokenize_targets([b for _, b in pairs]), tok.pad_token_id, False, 512)
    return float(-ll.sum(1).mean())


def test_pretraining_scores_the_span_after_the_cloze_prompt_and_learns(setup):
    tok, g, *_ = setup
    torch.manual_seed(0)
    before = _cloze_nll(CausalLMGenerator.from_options(build_causal_lm(tok, g), tok, g), setup)
    gen, _, losses = _pretrain(setup, steps=30, lr=3e-2)
    assert len(losses) == 30 and all(map(torch.isfinite, torch.tensor(losses)))
    gen.model.eval()
    assert _cloze_nll(gen, setup) < 0.85 * before  # 20.6 -> 15.5 nats a span


def test_interrupted_causal_pretraining_resumes_bit_identical(setup, tmp_path, caplog):
    _, plain_state, plain_losses = _pretrain(setup)
    _, state, losses = _pretrain(setup, tmp_path / "full")
    assert losses == plain_losses and _equal(state, plain_state)  # checkpointing changes nothing
    _, _, first = _pretrain(setup, tmp_path / "cut", stop_after=6)  # the checkpoint holds step 4
    assert len(first) == 6
    with caplog.at_level("INFO", logger="rag.training"):
        _, state, losses = _pretrain(setup, tmp_path / "cut")
    assert "at step 4" in caplog.text
    assert losses == plain_losses and _equal(state, plain_state)


def test_the_generator_stage_pretrains_a_causal_lm_that_loads_and_fine_tunes(setup, tmp_path):
    """rule pretrain_generator with family causal_lm, init scratch: the folder loads as a
    CausalLMGenerator (its tokenizer the corpus-trained one) and a RAG loss on it backpropagates."""
    from ddp_worker import ExactIndex, make_world

    from rag.data.corpus import write_passages
    from rag.io import read_json
    from rag.models.interface import load_generator, saved_family
    from rag.models.rag import RagSystem
    from rag.retrieval.dense import DenseRetriever
    from rag.stages.pretraining import pretrain_generator

    _, _, ids, titles, texts, _ = setup
    write_passages(tmp_path / "passages.tsv", zip(ids, titles, texts))
    section = causal_section(pretrain_steps=3, pretrain_restatements=0.0)
    pretrain_generator(section, "cpu", [tmp_path / "passages.tsv"], tmp_path / "generator", checkpoint_dir=tmp_path / "ckpt")
    folder = tmp_path / "generator"
    assert read_json(folder / "pretrain.json")["steps"] == 3 and (tmp_path / "ckpt" / "checkpoint.pt").is_file()
    assert saved_family(folder) == "causal_lm"
    gen = load_generator(folder, "cpu", 96, 24)
    assert isinstance(gen, CausalLMGenerator) and gen.template == section.generator.prompt_template
    assert gen.model.config.model_type == "llama" and gen.vocab_size == len(gen.tokenizer)
    assert gen.copies and type(gen.model).__name__ == "CopyLlama"
    assert gen.tokenizer.mask_token == "<mask>" and gen.tokenizer.convert_tokens_to_ids(label_token("SUPPORTS")) != \
        gen.tokenizer.unk_token_id
    world = make_world(seed=2, n_docs=6)
    retriever = DenseRetriever(world.passages, world.encoder, world.doc_emb, ExactIndex(world.doc_emb))
    system = RagSystem(gen, gen.tokenizer, "sequence", retriever)
    system.prepare_training()
    system.train()
    loss = system.loss(["what is the capital of france"], system.tokenize_targets(["paris"]), 2)
    assert torch.isfinite(loss) and float(loss.detach()) > 0
    loss.backward()
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in gen.model.parameters())


@pytest.mark.slow
def test_e2e_causal_lm_from_scratch(tmp_path):
    """tests/data/e2e_causal.yaml through Snakemake: the scratch causal LM pretrained, fine-tuned
    (RAG-Sequence, RAG-Token, closed book), decoded, swept over K, hot-swapped and reported."""
    import json
    import shutil

    from rag.models.interface import saved_family
    from tests.test_dag import smk

    cfg = tmp_path / "config.yaml"
    shutil.copy(ROOT / "tests" / "data" / "e2e_causal.yaml", cfg)
    res = smk(tmp_path, "all", "generators", configfile=cfg)
    assert res.returncode == 0, (res.stdout[-3000:], res.stderr[-5000:])
    out = tmp_path / "results" / "e2e_causal"
    assert saved_family(out / "generator" / "model") == "causal_lm"
    assert json.loads((out / "generator" / "model" / "pretrain.json").read_text())["init"] == "scratch"
    for variant in ("rag_sequence", "rag_token", "closed_book"):
        assert saved_family(out / "runs" / "nq" / variant / "seed1" / "model" / "generator") == "causal_lm"
        for split in ("dev", "test"):
            m = json.loads((out / "runs" / "nq" / variant / "seed1" / split / "metrics.json").read_text())
            assert m["n"] == 4 and m["metrics"], (variant, split)
    report = (tmp_path / "reports" / "e2e_causal" / "report.html").read_text()
    assert "decoder-only Llama from scratch" in report and "Generators side by side" not in report
    # the further generator (config key generators): a seq2seq BART pretrained beside the causal LM, fine-tuned
    # as <variant>@s2s; generator's runs are those of the default target, the report sets both side by side
    assert saved_family(out / "generators" / "s2s" / "model") == "seq2seq"
    for variant in ("rag_token@s2s", "rag_token_frozen@s2s", "closed_book@s2s"):
        assert saved_family(out / "runs" / "nq" / variant / "seed1" / "model" / "generator") == "seq2seq"
        m = json.loads((out / "runs" / "nq" / variant / "seed1" / "test" / "metrics.json").read_text())
        assert m["variant"] == variant and m["n"] == 4
    both = (tmp_path / "reports" / "e2e_causal" / "generators.html").read_text()
    assert "Generators side by side" in both and "NQ exact match (s2s)" in both and "NQ exact match (generator)" in both
    assert "BART from scratch" in both and "RAG-Token-Frozen (s2s)" in both
    assert "… and the answers (RAG-Token (s2s), NQ)" in both and "RAG beats closed-book s2s on open-domain QA" in both
    assert "(RAG-Token (s2s), TQA)" not in both and "RAG-Sequence (s2s)" not in both  # the rows of the runs it has
    assert (out / "tables" / "generators" / "table1.csv").read_text() == (out / "tables" / "table1.csv").read_text()
