"""Training step with a causal-LM generator: RagSystem.marginal_nll (CausalLMGenerator) vs a plain
transformers loop computing the same RAG-Sequence / RAG-Token loss."""

from __future__ import annotations

import torch

from benchmarks.bench_train import interleaved_best
from benchmarks.rag_setup import make_batch

# miniworld size: the default BART generator's width and depth (config.yaml generator.*), as a Llama
LM_CFG = {"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 4, "intermediate_size": 512, "max_position_embeddings": 256}


def causal_generator():
    """A corpus BPE (as the pipeline's) and a Llama of the miniworld size, random weights."""
    import tempfile
    from pathlib import Path

    from transformers import AutoConfig, AutoModelForCausalLM

    from benchmarks.common import load_corpus
    from rag.models.causal_lm import CausalLMGenerator
    from rag.models.tokenizer import train_tokenizer

    _, titles, texts = load_corpus()
    torch.manual_seed(0)
    tok = train_tokenizer([t + " " + x for t, x in zip(titles, texts)], 4000, [], Path(tempfile.mkdtemp()))
    spec = dict(LM_CFG)
    cfg = AutoConfig.for_model(spec.pop("model_type"), vocab_size=len(tok), pad_token_id=tok.pad_token_id,
                               bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, **spec)
    return CausalLMGenerator(AutoModelForCausalLM.from_config(cfg), tok, 128, 32)


def plain_nll(model, ids, mask, target, scores, kind: str, pad_id: int) -> torch.Tensor:
    """What a transformers user writes: one forward of the left-padded prompts + answers (position
    ids from the mask, as ``generate`` makes them), log-softmax over every position, the answer
    tokens' log-probabilities gathered, marginalised over the K documents with log p(z|x)."""
    b, k = scores.shape
    length = ids.shape[1] - (target.shape[1] - 1)  # prompt columns
    out = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp_min(0))
    lp = torch.log_softmax(out.logits.float(), -1)[:, length - 1 : -1]  # predictions of target[1:]
    nxt = target[:, 1:].repeat_interleave(k, 0)
    tok_lp = lp.gather(-1, nxt[..., None])[..., 0].masked_fill(nxt.eq(pad_id), 0.0).view(b, k, -1)
    doc_lp = torch.log_softmax(scores.float(), 1)
    if kind == "sequence":
        return -torch.logsumexp(tok_lp.sum(2) + doc_lp, 1)
    return -torch.logsumexp(tok_lp + doc_lp[:, :, None], 1).masked_fill(target[:, 1:].eq(pad_id), 0.0).sum(1)


def run(args) -> dict:
    from benchmarks.common import set_threads
    from rag.models.rag import RagSystem

    device = args.device
    gen = causal_generator()
    gen.model.to(device)
    tok = gen.tokenizer
    b = 4 if args.quick else args.train_batch
    k = args.k
    steps = 2 if args.quick else max(1, args.train_steps // 2)
    rounds = 1 if args.quick else 6
    threads = sorted({1, args.threads}) if device == "cpu" else [args.threads]
    prompts = make_batch(tok, b, k, seed=0, source=gen.source_text).to(device)  # left-padded prompts
    target = gen.tokenize_targets(prompts.answers).to(device)
    joined = torch.cat([prompts.src, target[:, 1:].repeat_interleave(k, 0)], 1)
    joined_mask = torch.cat([prompts.mask, target[:, 1:].ne(tok.pad_token_id).long().repeat_interleave(k, 0)], 1)
    rows, summary, checks = [], [], {}
    on = "" if device == "cpu" else f", {device}"
    for kind in ("sequence", "token"):
        system = RagSystem(gen, tok, kind)

        def project(backward=True):
            scores = prompts.scores.clone().requires_grad_(backward)
            nll = system.marginal_nll(prompts.src, prompts.mask, scores, target)
            if backward:
                nll.mean().backward()
            return nll.detach()

        def plain(backward=True):
            scores = prompts.scores.clone().requires_grad_(backward)
            nll = plain_nll(gen.model, joined, joined_mask, target, scores, kind, tok.pad_token_id)
            if backward:
                nll.mean().backward()
            return nll.detach()

        gen.model.eval()
        with torch.no_grad():
            lp, lh = project(False), plain(False)
        diff = float((lp - lh).abs().max())
        checks[kind] = {"project_loss": lp.tolist(), "plain_loss": lh.tolist(), "max_abs_diff": diff}
        gen.model.train()
        name = f"RAG-{kind.capitalize()}"
        for th in threads:
            set_threads(th)
            best = interleaved_best({"project": project, "plain": plain}, {"project": gen.model, "plain": gen.model},
                                    steps, rounds, device)
            ratio = best["plain"] / best["project"]
            rows.append([name, th, b / best["project"], b / best["plain"], ratio, diff])
            summary.append({"section": "train_causal",
                            "metric": f"examples/s causal-LM {name} loss+backward vs a plain transformers loop (B={b}, K={k}, "
                                      f"{th} thread{'s' if th > 1 else ''}{on})",
                            "value": b / best["project"], "baseline": b / best["plain"], "ratio": ratio, "target": ">= 1.0",
                            "met": ratio >= 1.0})
        summary.append({"section": "train_causal", "metric": f"max |loss diff| causal-LM {name}", "value": diff,
                        "baseline": None, "ratio": None, "target": "<= 1e-4", "met": diff <= 1e-4})
    set_threads(args.threads)
    nparams = sum(p.numel() for p in gen.model.parameters())
    return {"generator": "llama, random init", "device": device, "params": nparams, "batch": b, "k": k,
            "src_len": int(prompts.src.shape[1]), "tgt_len": int(target.shape[1]), "threads": threads, "checks": checks,
            "summary": summary,
            "tables": [{"title": f"Training step, causal-LM generator (Llama, {nparams / 1e6:.1f}M params), B={b}, K={k}, "
                                 f"prompts {prompts.src.shape[1]} tokens, answers {target.shape[1]} tokens",
                        "headers": ["model", "threads", "project ex/s", "plain loop ex/s", "speed-up", "max |loss diff|"],
                        "rows": rows}],
            "notes": ["Timed: the generator on the B*K prompts + answers, the marginal NLL, backward through the generator and "
                      "into doc_scores, zero_grad; no optimizer step. Both sides share one model and get the same left-padded "
                      "prompts, answers and doc_scores; the project side is RagSystem.marginal_nll with CausalLMGenerator.",
                      "The plain loop: one forward of prompt + answer with position ids from the mask, log-softmax over every "
                      "position, the answer tokens gathered. The project runs the prompts in length-sorted chunks "
                      "(rag.models.seq2seq.length_chunks) and computes logits at the answer's positions only "
                      "(logits_to_keep), the output projection and the log-softmax at scored positions only."]}
