"""Paper size: the project's train step, decoding and passage encoding at the paper's model
sizes, against transformers' Rag classes and a plain encoder loop, on --device (cpu | cuda).

Random weights (nothing is downloaded): a bart-large-sized generator (d_model 1024, 12+12 layers,
16 heads, ffn 4096, vocabulary 50,265) and bert-base-sized DPR question and context encoders
(``BertConfig()``: 768 wide, 12 layers, 12 heads, ffn 3072, vocabulary 30,522), the DPR pooler as
the vector. Inputs are random token ids: B questions of 8-24 tokens, K generator inputs per question
of 100-300 tokens (uniform, padded to the longest), targets of 8-24 tokens; the passages encoded are
100-150 random words with a two-word title (max_length 256, as config/paper.yaml).

Train step, both sides: the question encoder on the B questions, doc scores q.d in fp32 against fixed
document vectors, the generator on the B*K inputs, the marginal NLL, backward through the generator,
the doc scores and the question encoder; no optimizer step (the same on both sides). The project side
is ``RagSystem.marginal_nll`` with ``precision`` (its autocast); transformers'
``RagSequenceForGeneration`` / ``RagTokenForGeneration`` wrap the same generator module and run under
``torch.autocast`` of the same dtype. ``--quick``: a tiny model and tiny inputs, only to check the
section runs (its numbers mean nothing).
"""

from __future__ import annotations

import contextlib
import time

import torch

from benchmarks.common import best_of as common_best_of
from benchmarks.common import cuda_peak_gib, cuda_peak_reset, device_name, sync

SIZES = {
    "paper": {"vocab": 50265, "d_model": 1024, "layers": 12, "heads": 16, "ffn": 4096,
              "bert": {}, "src": (100, 300), "tgt": (8, 24), "question": (8, 24), "words": (100, 150), "max_length": 256},
    "quick": {"vocab": 1000, "d_model": 64, "layers": 2, "heads": 4, "ffn": 128,
              "bert": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
                       "vocab_size": 1000},
              "src": (10, 30), "tgt": (3, 8), "question": (4, 8), "words": (10, 20), "max_length": 64},
}
SPECIAL = 4  # <s> <pad> </s> <unk> / [PAD] [UNK] [CLS] [SEP]
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def word_tokenizer(n: int, bert: bool):
    """A word-level tokenizer over the words w4 .. w{n-1} (BART's or BERT's special tokens first)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    names = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] if bert else ["<s>", "<pad>", "</s>", "<unk>"]
    vocab = {t: i for i, t in enumerate(names)}
    vocab.update({f"w{i}": i for i in range(SPECIAL, n)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token=names[1] if bert else "<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if bert:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
        return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                       sep_token="[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def build_generator(s: dict):
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(vocab_size=s["vocab"], d_model=s["d_model"], encoder_layers=s["layers"], decoder_layers=s["layers"],
                     encoder_attention_heads=s["heads"], decoder_attention_heads=s["heads"], encoder_ffn_dim=s["ffn"],
                     decoder_ffn_dim=s["ffn"], max_position_embeddings=1024, dropout=0.1, attention_dropout=0.0,
                     pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=0, forced_bos_token_id=None,
                     forced_eos_token_id=None)
    torch.manual_seed(0)
    return BartForConditionalGeneration(cfg)


def dpr_config(s: dict):
    """A DPR config with a BertConfig's sizes (bert-base unless --quick)."""
    from transformers import BertConfig, DPRConfig

    bert = BertConfig(**s["bert"])
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "max_position_embeddings", "type_vocab_size", "hidden_act", "hidden_dropout_prob",
            "attention_probs_dropout_prob", "layer_norm_eps", "initializer_range")
    return DPRConfig(**{k: getattr(bert, k) for k in keys}, projection_dim=0, pad_token_id=0)


def random_rows(n: int, lo: int, hi: int, vocab: int, g: torch.Generator, bos: int, eos: int, pad: int):
    """n rows of random token ids, lengths uniform in [lo, hi] (BOS ... EOS), padded: (ids, mask)."""
    lengths = torch.randint(lo, hi + 1, (n,), generator=g)
    width = int(lengths.max())
    ids = torch.randint(SPECIAL, vocab, (n, width), generator=g)
    ids[:, 0] = bos
    mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    ids[torch.arange(n), lengths - 1] = eos
    return ids.masked_fill(mask == 0, pad), mask


def make_inputs(s: dict, b: int, k: int, d: int, seed: int, device: str) -> dict:
    g = torch.Generator().manual_seed(seed)
    q_ids, q_mask = random_rows(b, *s["question"], s["bert"].get("vocab_size", 30522), g, 2, 3, 0)
    src, mask = random_rows(b * k, *s["src"], s["vocab"], g, 0, 2, 1)
    tgt, _ = random_rows(b, *s["tgt"], s["vocab"], g, 0, 2, 1)
    doc_vec = torch.randn(b, k, d, generator=g) * 0.1  # fixed document vectors d(z)
    out = {"q_ids": q_ids, "q_mask": q_mask, "src": src, "mask": mask, "target": tgt, "doc_vec": doc_vec}
    return {key: v.to(device) for key, v in out.items()}


def autocast(device: str, precision: str):
    return contextlib.nullcontext() if precision == "fp32" else torch.autocast(device, dtype=DTYPES[precision])


def doc_scores(qenc, x: dict, ctx) -> torch.Tensor:
    """d(z).q(x) in fp32, the question encoder under ``ctx`` (as RagSystem.retrieve)."""
    with ctx:
        q = qenc(x["q_ids"], x["q_mask"]).float()
    with torch.autocast(q.device.type, enabled=False):
        return torch.bmm(q.unsqueeze(1), x["doc_vec"].transpose(1, 2)).squeeze(1)


def project_step(system, qenc, x, backward=True):
    nll = system.marginal_nll(x["src"], x["mask"], doc_scores(qenc, x, system.autocast()), x["target"])
    if backward:
        nll.mean().backward()
    return nll.detach()


def hf_step(model, qenc, x, k, precision, backward=True):
    dev = x["src"].device.type
    with autocast(dev, precision):
        scores = doc_scores(qenc, x, contextlib.nullcontext())
        out = model(context_input_ids=x["src"], context_attention_mask=x["mask"], doc_scores=scores, labels=x["target"], n_docs=k)
    if backward:
        out.loss.mean().backward()
    return out.loss.detach().float()


def timed_blocks(fns: dict, zero, steps: int, rounds: int, device: str) -> dict:
    """Seconds per call of each fn: best of ``rounds`` blocks of ``steps`` calls, the fns alternating."""
    for fn in fns.values():
        zero()
        fn()
    best = {}
    for _ in range(rounds):
        for name, fn in fns.items():
            sync(device)
            t = time.perf_counter()
            for _ in range(steps):
                zero()
                fn()
            sync(device)
            best[name] = min(best.get(name, float("inf")), (time.perf_counter() - t) / steps)
    return best


def peak_of(fn, zero, device: str):
    zero()
    if device == "cuda":
        torch.cuda.empty_cache()
    cuda_peak_reset(device)
    fn()
    return cuda_peak_gib(device)


def part_train(args, s, device, gen, tok, qenc, rows, summary, checks):
    from benchmarks.rag_setup import hf_rag
    from rag.models.rag import RagSystem

    b = 2 if args.quick else args.paper_batch
    ks = [2, 3] if args.quick else args.paper_ks
    steps, rounds = (1, 1) if args.quick else (args.paper_steps, args.paper_rounds)
    d = qenc.model.config.hidden_size
    params = torch.nn.ModuleList([gen, qenc.model])
    zero = lambda: params.zero_grad(set_to_none=True)  # noqa: E731
    for k in ks:
        x = make_inputs(s, b, k, d, seed=k, device=device)
        pad = 1.0 - float(x["mask"].float().mean())
        for kind in ("sequence", "token"):
            name = f"RAG-{kind.capitalize()}"
            model = hf_rag(kind, gen, k).to(device)
            loss_fp32 = None
            for prec in args.paper_precisions:
                system = RagSystem(gen, tok, kind, precision=prec)
                gen.eval()
                qenc.eval()
                with torch.no_grad():
                    lp = project_step(system, qenc, x, backward=False)
                    lh = hf_step(model, qenc, x, k, prec, backward=False)
                diff = float((lp - lh).abs().max())
                if prec == "fp32":
                    loss_fp32 = lp
                gap = None if loss_fp32 is None or prec == "fp32" else float(((lp - loss_fp32).abs() / loss_fp32.abs()).max())
                checks[f"{name} K={k} {prec}"] = {"project_loss": lp.tolist(), "hf_loss": lh.tolist(), "max_abs_diff": diff,
                                                  "max_rel_diff_vs_fp32": gap}
                gen.train()
                qenc.train()
                fns = {"project": lambda: project_step(system, qenc, x), "hf": lambda model=model: hf_step(model, qenc, x, k, prec)}
                best = timed_blocks(fns, zero, steps, rounds, device)
                mem_p, mem_h = peak_of(fns["project"], zero, device), peak_of(fns["hf"], zero, device)
                zero()
                ratio = best["hf"] / best["project"]
                rows.append([name, k, prec, b / best["project"], b / best["hf"], ratio, mem_p, mem_h, diff, gap])
                real = device == "cuda" and not args.quick
                summary.append({"section": "paper", "metric": f"train examples/s {name} {prec} vs transformers (B={b}, K={k}, {device})",
                                "value": b / best["project"], "baseline": b / best["hf"], "ratio": ratio,
                                "target": ">= 1.3 (bf16, K=10), >= 1.0 otherwise",
                                "met": (ratio >= (1.3 if prec == "bf16" and k == 10 else 1.0)) if real else None})
                if mem_p is not None:
                    summary.append({"section": "paper", "metric": f"train peak GiB {name} {prec} (B={b}, K={k})",
                                    "value": mem_p, "baseline": mem_h, "ratio": mem_h / mem_p, "target": "project <= transformers",
                                    "met": (mem_p <= mem_h) if real else None})
                if prec == "fp32":
                    summary.append({"section": "paper", "metric": f"max |loss diff| {name} fp32 (K={k})", "value": diff,
                                    "baseline": None, "ratio": None, "target": "<= 1e-4", "met": diff <= 1e-4})
            del model
            gen.eval()
            qenc.eval()
    return {"title": f"Train step (loss + backward), B={b}, sources {s['src'][0]}-{s['src'][1]} tokens "
                     f"({pad:.0%} padding at K={ks[-1]}), {device_name(device)}",
            "headers": ["model", "K", "precision", "project ex/s", "transformers ex/s", "speed-up", "project peak GiB",
                        "transformers peak GiB", "max |loss diff|", "max rel. loss change vs fp32"], "rows": rows}


def part_decode(args, s, device, gen, tok, rows, summary):
    from benchmarks.bench_decode import decode_texts, gen_config
    from benchmarks.rag_setup import hf_rag
    from rag.models import seq2seq
    from rag.models.generator import Seq2SeqStates
    from rag.models.rag import Encoded, RagSystem

    b = 2 if args.quick else args.paper_decode_n
    k = 2 if args.quick else args.paper_decode_k
    mnt = 3 if args.quick else args.paper_new_tokens
    beams = 2 if args.quick else args.beams
    reps = 1 if args.quick else 2
    gen.eval()
    g = torch.Generator().manual_seed(7)
    src, mask = random_rows(b * k, *s["src"], s["vocab"], g, 0, 2, 1)
    src, mask = src.to(device), mask.to(device)
    scores = (torch.randn(b, k, generator=g) * 2.0).sort(dim=1, descending=True).values.to(device)
    models = {"token": hf_rag("token", gen, k).eval().to(device), "sequence": hf_rag("sequence", gen, k).eval().to(device)}
    questions = [f"q{i}" for i in range(b)]
    cases = [("RAG-Token greedy", "token", "greedy", 1), ("RAG-Token beam", "token", "beam", beams),
             ("RAG-Sequence thorough", "sequence", "thorough", beams), ("RAG-Sequence fast", "sequence", "fast", beams)]

    def best_of(fn):  # best of `reps` timed calls (after the warm-up), and the last call's output
        return common_best_of(fn, reps, device)

    for prec in args.paper_precisions:
        for name, kind, method, nb in cases:
            system = RagSystem(gen, tok, kind, precision=prec)

            def encode(qs, kk, system=system):  # the fixed documents: RagSystem.encode after retrieval and tokenization
                with torch.inference_mode(), system.autocast():
                    hidden = seq2seq.encode(gen, src, mask, system.chunk_overhead)
                return Encoded(Seq2SeqStates(hidden, mask, src), torch.log_softmax(scores.float(), dim=1), None, k)

            system.encode = encode
            system.generate(questions[:1], k, method=method, beams=nb, max_new_tokens=2)  # warm-up
            tp, out = best_of(lambda: system.generate(questions, k, method=method, beams=nb, max_new_tokens=mnt))
            preds = [p.text for p in out]
            th, hf_preds = None, None
            if method != "fast":
                gc = gen_config(tok, nb, mnt)
                extra = {"do_deduplication": True, "num_return_sequences": 1, "num_beams": nb} if kind == "sequence" else {}
                with torch.no_grad(), autocast(device, prec):
                    th, out = best_of(lambda: models[kind].generate(context_input_ids=src, context_attention_mask=mask,
                                                                    doc_scores=scores, n_docs=k, generation_config=gc, **extra))
                hf_preds = decode_texts(tok, out)
            agree = None if hf_preds is None else sum(a == c for a, c in zip(preds, hf_preds)) / len(preds)
            ratio = None if th is None else th / tp
            rows.append([name, nb, prec, b / tp, None if th is None else b / th, ratio, agree])
            real = device == "cuda" and not args.quick
            target = ">= 1.3" if name == "RAG-Token greedy" else ">= 1.0"
            summary.append({"section": "paper", "metric": f"decode questions/s {name} {prec} (beams {nb}, B={b}, K={k}, "
                                                          f"{mnt} tokens, {device})",
                            "value": b / tp, "baseline": None if th is None else b / th, "ratio": ratio,
                            "target": target if th is not None else "-",
                            "met": (ratio >= float(target[3:])) if (real and ratio is not None) else None, "agreement": agree})
    return {"title": f"Decoding B={b}, K={k}, {mnt} new tokens, sources {s['src'][0]}-{s['src'][1]} tokens, {device_name(device)}",
            "headers": ["decoder", "beams", "precision", "project q/s", "transformers q/s", "speed-up", "answer agreement"],
            "rows": rows}


def part_encoding(args, s, device, rows, summary):
    from transformers import DPRContextEncoder

    from rag.retrieval.encoders import Encoder, EncoderText, encode_passages

    n = 16 if args.quick else args.paper_enc_n
    bs = 8 if args.quick else args.paper_enc_batch
    precs = ["fp32"] if device == "cpu" else ["fp16", "bf16"]  # the pipeline casts the context encoder on GPUs only
    cfg = dpr_config(s)
    ctok = word_tokenizer(cfg.vocab_size, bert=True)
    torch.manual_seed(1)
    model = DPRContextEncoder(cfg).eval()
    state = {key: v.clone() for key, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(3)
    words = lambda m: " ".join(f"w{int(i)}" for i in torch.randint(SPECIAL, cfg.vocab_size, (m,), generator=g))  # noqa: E731
    titles = [words(2) for _ in range(n)]
    texts = [words(int(torch.randint(s["words"][0], s["words"][1] + 1, (1,), generator=g))) for _ in range(n)]

    def plain_loop(enc, dtype):
        out = []
        with torch.inference_mode():
            for a in range(0, n, bs):
                batch = ctok(titles[a:a + bs], texts[a:a + bs], padding=True, truncation="only_second",
                             max_length=s["max_length"], return_tensors="pt").to(device)
                out.append(enc.model(**batch).pooler_output.float().cpu())
        return torch.cat(out).numpy()

    for prec in precs:
        model.float().load_state_dict(state)
        enc = Encoder(model, ctok, EncoderText("pooler", False, s["max_length"])).to(device)
        dtype = DTYPES[prec]
        if dtype is not None:
            enc.to(dtype)
        fns = {"project": lambda: encode_passages(enc, titles, texts, bs, device, dtype=dtype, progress=False),
               "plain": lambda: plain_loop(enc, dtype)}
        for fn in fns.values():  # warm-up
            fn()
        best, outs = {}, {}
        for _ in range(1 if args.quick else 3):
            for name, fn in fns.items():
                sync(device)
                t = time.perf_counter()
                outs[name] = fn()
                sync(device)
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - t)
        mems = {}
        for name, fn in fns.items():
            cuda_peak_reset(device)
            fn()
            mems[name] = cuda_peak_gib(device)
        a, c = torch.from_numpy(outs["project"]), torch.from_numpy(outs["plain"])
        cos = float(torch.nn.functional.cosine_similarity(a, c, dim=1).min())
        ratio = best["plain"] / best["project"]
        rows.append([prec, bs, n / best["project"], n / best["plain"], ratio, mems["project"], mems["plain"], cos])
        summary.append({"section": "paper", "metric": f"passages/s bert-base DPR {prec}, batch {bs}, vs a plain loop ({device})",
                        "value": n / best["project"], "baseline": n / best["plain"], "ratio": ratio, "target": ">= 1.0",
                        "met": (ratio >= 1.0) if (device == "cuda" and not args.quick) else None})
    model.float().load_state_dict(state)
    return {"title": f"Passage encoding, {n} passages of {s['words'][0]}-{s['words'][1]} random words + a 2-word title, "
                     f"max_length {s['max_length']}, {device_name(device)}",
            "headers": ["precision", "batch", "project passages/s", "plain loop passages/s", "speed-up", "project peak GiB",
                        "plain peak GiB", "min cosine"], "rows": rows}


def run(args) -> dict:
    from transformers import DPRQuestionEncoder

    from rag.retrieval.encoders import Encoder, EncoderText

    device = args.device
    s = SIZES["quick" if args.quick else "paper"]
    summary, checks, tables = [], {}, []
    gen, tok = None, None
    if "train" in args.paper_parts or "decode" in args.paper_parts:
        gen = build_generator(s).to(device)
        tok = word_tokenizer(s["vocab"], bert=False)
    if "train" in args.paper_parts:
        cfg = dpr_config(s)
        torch.manual_seed(2)
        qenc = Encoder(DPRQuestionEncoder(cfg), word_tokenizer(cfg.vocab_size, bert=True), EncoderText("pooler", False)).to(device)
        tables.append(part_train(args, s, device, gen, tok, qenc, [], summary, checks))
        del qenc
    if "decode" in args.paper_parts:
        tables.append(part_decode(args, s, device, gen, tok, [], summary))
    if "encoding" in args.paper_parts:
        gen = None
        if device == "cuda":
            torch.cuda.empty_cache()
        tables.append(part_encoding(args, s, device, [], summary))
    sizes = {key: v for key, v in s.items()}
    return {"device": device, "device_name": device_name(device), "sizes": sizes, "parts": args.paper_parts,
            "precisions": args.paper_precisions, "checks": checks, "summary": summary, "tables": tables,
            "notes": [
                ("QUICK: a tiny model and tiny inputs, only to check that the section runs; its numbers mean nothing. "
                 if args.quick else "") +
                "Random weights and random token ids (nothing downloaded): a bart-large-sized generator (d_model 1024, "
                "12+12 layers, 16 heads, ffn 4096, vocabulary 50,265), bert-base-sized DPR encoders (BertConfig()).",
                "Train: question encoder + fp32 doc scores + generator + marginal NLL + backward on both sides, no "
                "optimizer step; the project's RagSystem.marginal_nll under its precision autocast, transformers' "
                "RagSequenceForGeneration / RagTokenForGeneration (same generator module) under torch.autocast of the "
                "same dtype; best of the timed blocks, the two sides alternating; peak memory: "
                "torch.cuda.max_memory_allocated of one step (weights and gradients included; CUDA only). Losses "
                "compared per example with dropout off.",
                "Decode: the same fixed generator inputs and doc scores on both sides (RagSystem.encode replaced by "
                "the fixed batch, as the decode section); RagSequenceForGeneration.generate runs its per-document "
                "search with attention_mask=None (it attends to padding), so thorough answers can differ; in bf16 "
                "near-ties among random-weight logits also change answers.",
                "Encoding: rag.retrieval.encoders.encode_passages (length-sorted batches, tokenization in a "
                "background thread) vs a plain loop in input order, the DPR context encoder's weights cast to the "
                "precision (as `rag encode` does on GPUs).",
            ]}
