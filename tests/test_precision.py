"""The config key ``precision``: bf16 autocast in training, scoring and decoding with the
loss and the marginalisation in fp32; fp16 on CPU is one config error; the generator's chunking
per device (``generator.chunk_overhead``)."""

from __future__ import annotations

import copy

import pytest
import torch
import yaml
from ddp_worker import ANSWERS, QUESTIONS, make_system, make_world, run_training

from rag import precision as P
from rag.config import load_config, sections
from rag.errors import ConfigError
from rag.models import seq2seq

# bf16 keeps 8 significand bits (relative rounding 2^-8 = 0.4% per operation). Measured on the tiny
# test worlds (make_world, d_model 16, seeds 0-4, RAG-Sequence / RAG-Token / BART, label smoothing 0
# and 0.1, B = 8, K = 3): the mean loss under bf16 autocast differs from fp32 by at most 0.011
# absolute, 0.11% relative (d_model 64: at most 0.46%). The tests allow 1% relative.
BF16_LOSS_RTOL = 1e-2


@pytest.fixture(scope="module")
def world():
    torch.set_num_threads(1)
    return make_world(seed=3)


def _record_dtypes(module: torch.nn.Module) -> tuple[list[torch.dtype], object]:
    """Output dtypes of ``module`` (a Linear inside the generator) each time it runs."""
    seen: list[torch.dtype] = []
    handle = module.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
    return seen, handle


@pytest.mark.parametrize("kind", ["sequence", "token", "closed_book"])
@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_bf16_loss_is_fp32_and_close_to_the_fp32_loss(world, kind, epsilon):
    system = make_system(world, kind)
    tgt = system.tokenize_targets(ANSWERS)
    out = {}
    for prec in ("fp32", "bf16"):
        system.precision = prec
        enc_dtypes, h1 = _record_dtypes(system.generator.model.encoder.layers[0].fc1)
        dec_dtypes, h2 = _record_dtypes(system.generator.model.decoder.layers[0].fc1)
        try:
            with torch.no_grad():
                out[prec] = system.loss(QUESTIONS, tgt, 3, epsilon)
        finally:
            h1.remove()
            h2.remove()
        want = torch.bfloat16 if prec == "bf16" else torch.float32
        assert enc_dtypes and set(enc_dtypes) == {want}, (prec, enc_dtypes)  # the generator computes in bf16
        assert dec_dtypes and set(dec_dtypes) == {want}, (prec, dec_dtypes)
        assert out[prec].dtype == torch.float32  # ... the loss does not
    assert float(out["bf16"]) == pytest.approx(float(out["fp32"]), rel=BF16_LOSS_RTOL)
    assert float(out["bf16"]) != float(out["fp32"])  # bf16 really ran


def test_bf16_doc_scores_and_marginal_stay_fp32(world):
    system = make_system(world, "token")
    system.precision = "bf16"
    qenc_dtypes, h = _record_dtypes(system.question_encoder.model.question_encoder.bert_model.encoder.layer[0].intermediate.dense)
    try:
        with torch.no_grad():
            ret = system.retrieve(QUESTIONS, 3)
    finally:
        h.remove()
    assert set(qenc_dtypes) == {torch.bfloat16}  # the question encoder runs under autocast
    assert ret.scores.dtype == torch.float32
    system.precision = "fp32"
    with torch.no_grad():
        ref = system.retrieve(QUESTIONS, 3)
    assert torch.allclose(ret.scores, ref.scores, rtol=0.05, atol=0.05)


def test_bf16_train_step_runs_the_generator_in_bf16_and_resumes_exactly(tmp_path):
    """train(precision='bf16'): the generator's forward computes in bf16, weights and gradients
    stay fp32, and an interrupted bf16 run resumed from its checkpoint ends where an uninterrupted one does."""
    seen = []
    orig = torch.nn.Linear.forward

    def spy(self, x):
        y = orig(self, x)
        seen.append(y.dtype)
        return y

    torch.nn.Linear.forward = spy
    try:
        full_params, full_losses = run_training(tmp_path / "full", steps=4, checkpoint_every=2, precision="bf16")
    finally:
        torch.nn.Linear.forward = orig
    assert seen and set(seen) == {torch.bfloat16}, set(seen)
    assert all(p.dtype == torch.float32 for p in full_params.values())
    ref_params, ref_losses = run_training(tmp_path / "fp32", steps=4, checkpoint_every=2)
    assert full_losses != ref_losses
    assert full_losses == pytest.approx(ref_losses, rel=BF16_LOSS_RTOL)
    run_training(tmp_path / "resumed", steps=4, checkpoint_every=2, stop_after=2, precision="bf16")
    params, losses = run_training(tmp_path / "resumed", steps=4, checkpoint_every=2, precision="bf16")
    assert losses == pytest.approx(full_losses, abs=1e-6)
    assert max(float((params[n] - full_params[n]).abs().max()) for n in params) < 1e-6


@pytest.mark.parametrize("kind, method", [("token", "greedy"), ("token", "beam"), ("sequence", "thorough"),
                                          ("sequence", "fast"), ("closed_book", "greedy")])
def test_bf16_decoding_runs_the_generator_in_bf16(world, kind, method):
    system = make_system(world, kind).eval()
    preds = {}
    for prec in ("fp32", "bf16"):
        system.precision = prec
        dtypes, h = _record_dtypes(system.generator.model.decoder.layers[0].fc1)
        try:
            preds[prec] = system.generate(QUESTIONS[:4], 3, method=method, beams=2, max_new_tokens=4)
        finally:
            h.remove()
        assert set(dtypes) == {torch.bfloat16 if prec == "bf16" else torch.float32}
    for p in preds["bf16"]:
        assert p.score == p.score and all(0.0 <= x <= 1.0 for x in p.doc_probs)


def test_bf16_label_scores_are_fp32(world):
    system = make_system(world, "token").eval()
    system.precision = "bf16"
    scores, _ = system.score_labels(QUESTIONS, [4, 5, 6], 3)
    system.precision = "fp32"
    ref, _ = system.score_labels(QUESTIONS, [4, 5, 6], 3)
    assert scores.dtype == torch.float32
    assert torch.allclose(scores, ref, rtol=BF16_LOSS_RTOL, atol=0.05)


# ------------------------------------------------------------------------------ fp16 on CPU
@pytest.fixture
def base(root):
    with open(root / "config.yaml") as fh:
        return yaml.safe_load(fh)


def test_fp16_on_cpu_is_one_config_error(base):
    cfg = copy.deepcopy(base)
    cfg["precision"] = "fp16"  # config.yaml: device cpu
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    msg = str(err.value)
    assert msg.startswith("config key 'precision': fp16 needs device: cuda") and "\n" not in msg
    cfg.update(device="cuda")
    load_config(cfg)  # fp16 on cuda is valid (config load does not look for a GPU)
    cfg.update(device="cpu", precision="bf16")
    load_config(cfg)


def test_fp16_on_cpu_is_refused_at_run_time_too(world):
    with pytest.raises(ConfigError, match="config key 'precision': fp16 needs device: cuda"):
        P.check("fp16", "cpu")
    system = make_system(world, "token")
    system.precision = "fp16"
    with pytest.raises(ConfigError, match="config key 'precision'"):
        system.loss(QUESTIONS[:2], system.tokenize_targets(ANSWERS[:2]), 2)
    assert P.grad_scaler("cpu", "bf16") is None and P.grad_scaler("cpu", "fp32") is None


# ------------------------------------------------------------------------------ chunking per device
def test_chunk_overhead_default_differs_per_device():
    assert seq2seq.chunk_overhead_for("cpu") == seq2seq.DEFAULT_CHUNK_OVERHEAD == 512  # measured on CPU
    assert seq2seq.chunk_overhead_for("cuda") == seq2seq.ONE_CHUNK  # measured on one H100: one chunk
    assert seq2seq.chunk_overhead_for("cuda") != seq2seq.chunk_overhead_for("cpu")
    assert seq2seq.chunk_overhead_for("cuda", 64) == 64 and seq2seq.chunk_overhead_for("cpu", 0) == 0  # the config key wins
    with pytest.raises(ValueError, match="chunk_overhead"):
        seq2seq.chunk_overhead_for("mps")
    # the CUDA default keeps a whole batch in one chunk, however uneven its lengths
    mask = (torch.arange(300)[None, :] < torch.randint(100, 301, (80, 1))).long()
    assert len(seq2seq.length_chunks(mask, seq2seq.chunk_overhead_for("cuda"))) == 1
    assert len(seq2seq.length_chunks(mask, seq2seq.chunk_overhead_for("cpu"))) > 1


def test_rag_system_takes_the_chunk_overhead_from_config_or_device(world):
    system = make_system(world, "token")
    assert system.configured_chunk_overhead is None and system.chunk_overhead == 512  # CPU default
    system.chunk_overhead = 7
    assert system.chunk_overhead == 7


def test_chunk_overhead_config_key(base):
    cfg = load_config(base)
    assert cfg["generator"]["chunk_overhead"] is None
    assert sections(cfg)["train_nq"]["generator"]["chunk_overhead"] is None
    cfg2 = copy.deepcopy(base)
    cfg2.setdefault("generator", {})["chunk_overhead"] = -1
    with pytest.raises(ConfigError, match="generator.chunk_overhead"):
        load_config(cfg2)


def test_pipeline_builds_the_system_with_the_configured_precision_and_chunking(world, tmp_path):
    from rag.stages.model_loading import build_system
    from tests.conftest import typed_sections

    world.generator.save_pretrained(tmp_path / "generator")
    world.tokenizer.save_pretrained(tmp_path / "generator")
    cfg = typed_sections({"precision": "bf16", "generator": {"max_source_len": 64, "max_target_len": 16}})["train_nq"]
    system = build_system(cfg, "closed_book", str(tmp_path), "cpu")
    assert system.precision == "bf16" and system.chunk_overhead == 512
    cfg = typed_sections({"generator": {"max_source_len": 64, "max_target_len": 16, "chunk_overhead": 10**9}})["train_nq"]
    system = build_system(cfg, "closed_book", str(tmp_path), "cpu")
    assert system.precision == "fp32" and system.chunk_overhead == 10**9


def test_generator_pretraining_honours_precision(tmp_path):
    from rag.models.generator import Seq2SeqGenerator
    from tests.conftest import typed_sections
    from rag.models.tokenizer import train_tokenizer
    from rag.training import TrainRun, pretrain

    titles = ["Paris", "Rome", "Berlin", "Madrid"]
    texts = ["Paris is the capital of France. It lies on the Seine.", "Rome is the capital of Italy. It has 7 hills.",
             "Berlin is the capital of Germany. It lies on the Spree.", "Madrid is the capital of Spain. It is in Castile."]
    tok = train_tokenizer([f"{a} {b}" for a, b in zip(titles, texts)], 300, [], tmp_path)
    g = typed_sections({"generator": {"d_model": 16, "layers": 1, "heads": 2, "ffn": 32, "max_source_len": 64, "max_target_len": 16,
                                      "copy": False, "local_context": 0, "exact_match": False, "pretrain_steps": 2,
                                      "pretrain_batch_size": 4, "pretrain_restatements": 0.0}})["generator"].generator
    losses = {}
    for prec in ("fp32", "bf16"):
        torch.manual_seed(0)
        gen = Seq2SeqGenerator.from_scratch(tok, g, "cpu")
        model = gen.model
        dtypes, h = _record_dtypes(model.model.encoder.layers[0].fc1)
        try:
            losses[prec] = pretrain(gen, titles, texts, g, TrainRun(None, 1, progress=False, precision=prec))
        finally:
            h.remove()
        assert set(dtypes) == {torch.bfloat16 if prec == "bf16" else torch.float32}
        assert all(p.dtype == torch.float32 for p in model.parameters())
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=BF16_LOSS_RTOL)
    with pytest.raises(ConfigError, match="config key 'precision'"):
        pretrain(Seq2SeqGenerator.from_scratch(tok, g, "cpu"), titles, texts, g, TrainRun(None, 1, progress=False,
                                                                                          precision="fp16"))
