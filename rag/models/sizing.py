"""What a fine-tune's models hold in memory, before any weight is loaded: ``rag plan``'s generator need.

Parameters are counted by transformers on the meta device, from each model's ``config.json`` or, for
the public models the paper configs name, their published sizes (:data:`KNOWN_ARCHITECTURES`); LoRA
adapters are added by peft. A fine-tuning process holds fp32 weights (4 bytes a parameter), gradients
and AdamW's two moments (12 bytes a trained parameter), the activations of one step's K x batch
sources (:func:`activation_bytes`, measured on small copies of the architecture), and 12 bytes a
target token and vocabulary entry for the logits.
"""

from __future__ import annotations

from pathlib import Path

# The sizes of public models' config.json, for a plan made on a machine without them: the generators,
# question and context encoders that config/paper*.yaml name.
_DPR = {"model_type": "dpr", "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 3072}
KNOWN_ARCHITECTURES = {
    "facebook/bart-large": {"model_type": "bart", "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
                            "encoder_attention_heads": 16, "decoder_attention_heads": 16, "encoder_ffn_dim": 4096,
                            "decoder_ffn_dim": 4096, "vocab_size": 50265, "max_position_embeddings": 1024},
    "Qwen/Qwen2.5-1.5B": {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                          "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
                          "tie_word_embeddings": True, "max_position_embeddings": 131072},
    **{f"facebook/dpr-{kind}-{data}-base": _DPR for kind in ("question_encoder", "ctx_encoder")
       for data in ("single-nq", "multiset")},
}
LOGIT_BYTES = 12  # a kept logit: fp32 log-softmax, its gradient, and the logit itself
PROBE_VOCAB = 256  # the probes' vocabulary: the logits are counted apart
PROBE_SOURCES, PROBE_SOURCE_LEN, PROBE_TARGET_LEN = 4, 48, 12


def architecture(name: str):
    """(transformers config of model ``name``, where it was read: a local or package folder, the Hugging
    Face cache, the published sizes), or (None, why not)."""
    from huggingface_hub import try_to_load_from_cache
    from transformers import AutoConfig

    from rag.retrieval.encoders import resolve_model_path

    path = Path(resolve_model_path(name)) / "config.json"
    if not path.is_file() and not Path(name).is_dir():
        try:
            cached = try_to_load_from_cache(name, "config.json")
        except ValueError:  # not a repository id
            cached = None
        path = Path(cached) if isinstance(cached, str) else path
    if path.is_file():
        try:
            return AutoConfig.from_pretrained(path.parent), str(path)
        except (OSError, ValueError, KeyError) as exc:  # not JSON, no model_type, an unknown one
            return None, f"{path} is no readable model configuration ({str(exc).splitlines()[0][:200]})"
    if name in KNOWN_ARCHITECTURES:
        spec = dict(KNOWN_ARCHITECTURES[name])
        return AutoConfig.for_model(spec.pop("model_type"), **spec), "its published sizes (rag/models/sizing.py)"
    return None, f"no config.json for {name!r} on this machine (name a local folder to size it)"


def generator_architecture(g: dict):
    """(config, where from) of the generator section ``g``: a named model's, the scratch causal
    LM's, or the scratch BART's sizes (its copy generator's extra layers, a few d_model x d_model
    matrices, not counted)."""
    from rag.models.interface import generator_class

    if g["init"] == "pretrained":
        return architecture(g["name_or_path"])
    family = generator_class(g["family"])
    sizes = (g[k] for k in ("vocab_size", "d_model", "layers", "heads", "ffn", "max_source_len", "max_target_len"))
    config = family.scratch_config(*sizes)
    if config is None:
        return None, f"generator family {g['family']} builds no model from scratch"
    return config, f"generator.d_model, layers, heads, ffn and vocab_size ({family.scratch_what})"


def parameters(config, head: bool = True, lora: dict | None = None) -> tuple[int, int]:
    """(parameters, trained parameters) of the model ``config`` describes, built on the meta device:
    with its language-model ``head`` (a generator) or without (an encoder); with ``lora`` (rank,
    alpha, target_modules) only peft's adapters train."""
    import torch
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    auto = (AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM) if head else AutoModel
    with torch.device("meta"):
        model = auto.from_config(config)
        total = sum(p.numel() for p in model.parameters())
        if not lora:
            return total, total
        from rag.models.causal_lm import add_lora

        model = add_lora(model, lora["rank"], lora["alpha"], lora["target_modules"])
        return total, sum(p.numel() for p in model.parameters() if p.requires_grad)


def saved_bytes(model, run) -> int:
    """Bytes of the tensors autograd saves for the backward pass while ``run()`` computes (each storage
    once; ``model``'s parameters and views of them, which are no activation, left out)."""
    import torch

    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor):
        ptr = t.untyped_storage().data_ptr()
        saved[ptr] = 0 if ptr in weights else t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(saved.values())


def _probe(config, layers: int, scale: int) -> tuple[int, int]:
    """Saved bytes (encoder's, decoder's: the decoder's alone for a causal LM) of one training forward,
    in fp32, of a copy of ``config`` with ``layers`` layers and a small vocabulary, on PROBE_SOURCES
    sources of ``scale`` times the probe's lengths."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    spec = {k: v for k, v in config.to_dict().items() if k != "layer_types"}  # a per-layer list follows the count
    probe = config.__class__.from_dict({**spec, "vocab_size": PROBE_VOCAB, "pad_token_id": 0, "bos_token_id": 1,
                                        "eos_token_id": 2, "decoder_start_token_id": 1, "forced_bos_token_id": None,
                                        **({"encoder_layers": layers, "decoder_layers": layers}
                                           if config.is_encoder_decoder else {"num_hidden_layers": layers}),
                                        **({"n_layer": layers} if hasattr(config, "n_layer") else {})})
    torch.manual_seed(0)
    model = (AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM).from_config(probe).train()
    src = torch.randint(3, PROBE_VOCAB, (PROBE_SOURCES, PROBE_SOURCE_LEN * scale))
    tgt = torch.randint(3, PROBE_VOCAB, (PROBE_SOURCES, PROBE_TARGET_LEN * scale))
    if not config.is_encoder_decoder:
        return 0, saved_bytes(model, lambda: model(input_ids=torch.cat([src, tgt], 1), logits_to_keep=1))
    encoded = []
    enc = saved_bytes(model, lambda: encoded.append(model.get_encoder()(input_ids=src)))
    dec = saved_bytes(model, lambda: model(encoder_outputs=encoded[0], decoder_input_ids=tgt))
    return enc, dec - tgt.numel() * PROBE_VOCAB * 4  # its logits are counted apart


def activation_bytes(config, precision: str, sources: int, source_len: int, target_len: int, checkpointing: bool) -> int:
    """Activations saved by one training forward of ``config`` on ``sources`` sources of
    ``source_len`` (+ ``target_len``) tokens. From probes with one and two layers (a layer's bytes, and
    the rest's) at the probe's lengths and twice them, a source's bytes at length x (in probe lengths)
    are fitted as a x + b x^2 (attention that keeps its scores grows with the square) and scaled to
    the model's layers and ``sources``; with ``checkpointing`` each layer keeps its input (fp32) and one
    layer the rest. Halved at 16-bit precision."""
    probes = {(n, x): _probe(config, n, x) for n in (1, 2) for x in (1, 2)}
    if config.is_encoder_decoder:
        stacks = [(0, source_len / PROBE_SOURCE_LEN, source_len, config.encoder_layers),
                  (1, target_len / PROBE_TARGET_LEN, target_len, config.decoder_layers)]
    else:
        stacks = [(1, (source_len + target_len) / (PROBE_SOURCE_LEN + PROBE_TARGET_LEN), source_len + target_len,
                   config.num_hidden_layers)]
    hidden = getattr(config, "d_model", None) or config.hidden_size

    def fit(b1: float, b2: float, x: float) -> float:  # a x + b x^2 through (1, b1) and (2, b2)
        b = (b2 - 2 * b1) / 2
        return (b1 - b) * x + b * x * x

    total = 0.0
    for i, x, length, count in stacks:
        layer = fit(*((probes[2, s][i] - probes[1, s][i]) / PROBE_SOURCES for s in (1, 2)), x)
        rest = max(0.0, fit(*((2 * probes[1, s][i] - probes[2, s][i]) / PROBE_SOURCES for s in (1, 2)), x))
        layers = count * length * hidden * 4 + layer if checkpointing else count * layer
        total += sources * (layers + rest)
    return int(total / 2 if precision in ("fp16", "bf16") else total)


def fine_tune_memory(cfg: dict) -> dict:
    """A fine-tuning process' memory for the models of ``cfg`` (the resolved config): bytes per
    part, how each was counted, or ``why`` it could not be (a model whose sizes are not here)."""
    g, t, r = cfg["generator"], cfg["train"], cfg["retriever"]
    gen, gen_from = generator_architecture(g)
    qenc, qenc_from = architecture(r["question_encoder"])
    if gen is None or qenc is None:
        return {"why": gen_from if gen is None else qenc_from}
    from rag.tasks import family_spec

    adapted = family_spec(g["family"]).lora
    lora = ({"rank": g["lora_rank"], "alpha": g["lora_alpha"], "target_modules": g["lora_target_modules"]}
            if adapted and g["lora_rank"] else None)
    gen_params, gen_trained = parameters(gen, lora=lora)
    q_params, _ = parameters(qenc, head=False)
    per_process = max(1, t["batch_size"] // t["ddp_processes"])
    sources, src, tgt = per_process * t["k"], g["max_source_len"], g["max_target_len"]
    checkpointing = adapted and g["gradient_checkpointing"]
    trained = gen_trained + q_params
    parts = {"weights": 4 * (gen_params + q_params), "gradients": 4 * trained, "optimizer": 8 * trained,
             "activations": activation_bytes(gen, cfg["precision"], sources, src, tgt, checkpointing),
             "logits": sources * tgt * gen.vocab_size * LOGIT_BYTES}
    return {"bytes": sum(parts.values()), "parts": parts, "generator_parameters": gen_params,
            "generator_trained": gen_trained, "question_encoder_parameters": q_params, "sources": sources,
            "how": (f"generator {gen_params / 1e6:,.0f}M parameters ({gen_from}; "
                    + (f"LoRA rank {g['lora_rank']}: {gen_trained / 1e6:,.1f}M trained" if lora else "all trained")
                    + f"), question encoder {q_params / 1e6:,.0f}M ({qenc_from}; trained); {sources} sources a step "
                    f"({per_process} questions x K={t['k']}) of {src}+{tgt} tokens at {cfg['precision']}"
                    + (", gradient checkpointing" if checkpointing else ""))}


def check_lora(cfg: dict) -> None:
    """Each causal LM generator of the resolved config with LoRA (``lora_rank``): peft adapts its
    ``lora_target_modules`` (none: peft's default for the architecture), tried on the model built from
    its configuration on the meta device (:func:`parameters`; no weight is read); else a ConfigError
    naming the key and the model's linear modules. A pretrained model this machine has no
    configuration of is left to the job that loads it. Seconds (torch, transformers, peft imported)
    where LoRA is configured: the workflow checks it in the process that plans the DAG."""
    from rag.runs import generator_groups
    from rag.errors import ConfigError
    from rag.tasks import family_spec

    for where, g in generator_groups(cfg):
        if not family_spec(g["family"]).lora or not g["lora_rank"]:
            continue
        config, _ = generator_architecture(g)
        if config is None:
            continue
        try:
            parameters(config, lora={"rank": g["lora_rank"], "alpha": g["lora_alpha"],
                                     "target_modules": g["lora_target_modules"]})
        except ConfigError as exc:  # add_lora's, naming generator's key
            import torch
            from transformers import AutoModelForCausalLM

            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(config)
            linear = sorted({name.rpartition(".")[2] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
            model_name = g["name_or_path"] if g["init"] == "pretrained" else "the scratch Llama"
            raise ConfigError(f"config key '{where}.lora_target_modules': {str(exc).partition(': ')[2]} (the linear "
                              f"modules of {model_name}: {', '.join(linear)})") from None
