"""3. Training step: project RAG-Sequence / RAG-Token loss+backward vs transformers' RagSequence/RagTokenForGeneration."""

from __future__ import annotations

import time

import torch

from benchmarks.common import sync
from benchmarks.rag_setup import Batch, hf_rag, load_generator, make_batch


def project_step(system, batch: Batch, backward: bool = True):
    """RagSystem.loss after retrieval and tokenization (RagSystem.marginal_nll) on the batch's fixed inputs."""
    scores = batch.scores.clone().requires_grad_(backward)
    nll = system.marginal_nll(batch.src, batch.mask, scores, batch.target)
    if backward:
        nll.mean().backward()
    return nll.detach()


def hf_step(model, batch: Batch, k: int, backward: bool = True):
    scores = batch.scores.clone().requires_grad_(backward)
    out = model(context_input_ids=batch.src, context_attention_mask=batch.mask, doc_scores=scores, labels=batch.target, n_docs=k)
    if backward:
        out.loss.mean().backward()
    return out.loss.detach()


def interleaved_best(fns: dict, models: dict, steps: int, rounds: int, device: str = "cpu") -> dict:
    """Seconds per step of each fn: ``rounds`` rounds, each timing a block of ``steps`` steps of
    every fn in turn (so a busy spell on the machine hits both sides alike); best block per fn.
    On CUDA each block ends with a synchronize (wall time of the GPU work)."""
    for name, fn in fns.items():  # warm-up
        for _ in range(2):
            models[name].zero_grad(set_to_none=True)
            fn()
    best = {}
    for _ in range(rounds):
        for name, fn in fns.items():
            sync(device)
            t = time.perf_counter()
            for _ in range(steps):
                models[name].zero_grad(set_to_none=True)
                fn()
            sync(device)
            dt = (time.perf_counter() - t) / steps
            best[name] = min(best.get(name, dt), dt)
    return best


def run(args) -> dict:
    from benchmarks.common import set_threads
    from rag.models.rag import RagSystem

    gen, tok, source = load_generator()
    device = args.device
    gen.to(device)
    b = 4 if args.quick else args.train_batch
    k = args.k
    steps = 2 if args.quick else max(1, args.train_steps // 2)
    rounds = 1 if args.quick else 6
    threads = sorted({1, args.threads}) if device == "cpu" else [args.threads]
    batch = make_batch(tok, b, k, seed=0).to(device)
    rows, summary, checks = [], [], {}
    on = "" if device == "cpu" else f", {device}"
    for kind in ("sequence", "token"):
        model = hf_rag(kind, gen, k).to(device)
        system = RagSystem(gen, tok, kind)
        gen.eval()
        with torch.no_grad():
            lp = project_step(system, batch, backward=False)
            lh = hf_step(model, batch, k, backward=False)
        diff = float((lp - lh).abs().max())
        checks[kind] = {"project_loss": lp.tolist(), "hf_loss": lh.tolist(), "max_abs_diff": diff}
        gen.train()
        name = f"RAG-{kind.capitalize()}"
        for th in threads:
            set_threads(th)
            best = interleaved_best({"project": lambda: project_step(system, batch), "hf": lambda: hf_step(model, batch, k)},
                                    {"project": gen, "hf": model}, steps, rounds, device)
            tp, th_hf = best["project"], best["hf"]
            ratio = th_hf / tp
            rows.append([name, th, b / tp, b / th_hf, ratio, diff])
            summary.append({"section": "train", "metric": f"examples/s {name} loss+backward vs transformers (B={b}, K={k}, {th} thread{'s' if th > 1 else ''}{on})",
                            "value": b / tp, "baseline": b / th_hf, "ratio": ratio, "target": ">= 1.3", "met": ratio >= 1.3})
        summary.append({"section": "train", "metric": f"max |loss diff| {name}", "value": diff, "baseline": None,
                        "ratio": None, "target": "<= 1e-4", "met": diff <= 1e-4})
    set_threads(args.threads)
    nparams = sum(p.numel() for p in gen.parameters())
    pad_share = 1.0 - float(batch.mask.float().mean())
    return {"generator": source, "device": device, "params": nparams, "batch": b, "k": k, "src_len": int(batch.src.shape[1]),
            "tgt_len": int(batch.target.shape[1]), "threads": threads, "checks": checks, "summary": summary,
            "tables": [{"title": f"Training step, generator {source} ({nparams / 1e6:.1f}M params), B={b}, K={k}, "
                                 f"source {batch.src.shape[1]} tokens ({pad_share:.0%} padding), target {batch.target.shape[1]} tokens",
                        "headers": ["model", "threads", "project ex/s", "transformers ex/s", "speed-up", "max |loss diff|"], "rows": rows}],
            "notes": ["Timed: generator forward on the B*K (document, question) inputs, marginal NLL, backward through the "
                      "generator and into doc_scores (the question-encoder path), zero_grad; no optimizer step (identical on both "
                      "sides). Both sides get the same context_input_ids, attention mask, doc_scores and targets and share one "
                      "generator module; the project side is RagSystem.marginal_nll, what RagSystem.loss runs after retrieval. "
                      "Losses compared per example with dropout off.",
                      f"Best block of {steps} steps out of {rounds} rounds, the two sides timed alternately in each round. "
                      "1 thread is how the default DAG runs its jobs (2 side by side on 2 cores).",
                      "Where the project saves: the B*K generator inputs run in length-sorted chunks, each cut to its own "
                      "longest row, a cut made where it saves more than 512 padded tokens (rag.models.seq2seq), the decoder skips the last position (it predicts the padding after the "
                      "target) and the output projection runs only at scored positions; transformers pads every row to the "
                      "longest and computes [B*K, T, V] log-softmax."]}
