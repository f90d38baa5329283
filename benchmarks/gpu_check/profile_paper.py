"""Where the project's paper-size steps spend their time, beside transformers': torch.profiler on both
sides of the bf16 train step (RAG-Sequence, B=8, K=5) and of RAG-Token greedy decoding (B=16, K=10,
20 new tokens), the inputs and models of ``benchmarks.run --paper-size``.

Prints per side: wall ms per call, device (kernel) ms per call, kernels per call, and the ops with the
most self time. Wall well above device time means the step waits on the host (launches), not the GPU.

    python -m benchmarks.gpu_check.profile_paper            # on the GPU machine
    python -m benchmarks.gpu_check.profile_paper --quick    # CPU smoke at tiny sizes
"""

from __future__ import annotations

import argparse

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from benchmarks import bench_paper as bp
from benchmarks.common import sync


def measure(name: str, fn, zero, calls: int, device: str, rows: int) -> dict:
    zero()
    fn()  # a first warm-up call; timed_blocks makes the second, then times one block of `calls`
    wall = bp.timed_blocks({name: fn}, zero, calls, 1, device)[name]
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(calls):
            zero()
            fn()
        sync(device)
    events = prof.key_averages()
    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    dev_ms = sum(e.self_device_time_total for e in kernels) / calls / 1e3
    n_kernels = sum(e.count for e in kernels) / calls
    print(f"\n##### {name}: wall {wall * 1e3:.1f} ms/call, device {dev_ms:.1f} ms/call, {n_kernels:.0f} kernels/call")
    key = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    print(events.table(sort_by=key, row_limit=rows, max_name_column_width=60))
    return {"name": name, "wall_ms": wall * 1e3, "device_ms": dev_ms, "kernels": n_kernels}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (a CPU smoke test)")
    p.add_argument("--rows", type=int, default=18, help="ops listed per side")
    a = p.parse_args(argv)
    from transformers import DPRQuestionEncoder

    from benchmarks.bench_decode import gen_config
    from benchmarks.rag_setup import hf_rag
    from rag.models import seq2seq
    from rag.models.generator import Seq2SeqStates
    from rag.models.rag import Encoded, RagSystem
    from rag.retrieval.encoders import Encoder, EncoderText

    device = "cuda" if torch.cuda.is_available() and not a.quick else "cpu"
    s = bp.SIZES["quick" if a.quick else "paper"]
    gen, tok = bp.build_generator(s).to(device), bp.word_tokenizer(s["vocab"], bert=False)
    cfg = bp.dpr_config(s)
    torch.manual_seed(2)
    qenc = Encoder(DPRQuestionEncoder(cfg), bp.word_tokenizer(cfg.vocab_size, bert=True), EncoderText("pooler", False)).to(device)
    params = torch.nn.ModuleList([gen, qenc.model])
    zero = lambda: params.zero_grad(set_to_none=True)  # noqa: E731
    out = []

    b, k = (2, 2) if a.quick else (8, 5)
    x = bp.make_inputs(s, b, k, cfg.hidden_size, seed=k, device=device)
    gen.train()
    qenc.train()
    system = RagSystem(gen, tok, "sequence", precision="bf16")
    model = hf_rag("sequence", gen, k).to(device)
    out.append(measure(f"train project RAG-Sequence bf16 B={b} K={k}", lambda: bp.project_step(system, qenc, x), zero, 3,
                       device, a.rows))
    out.append(measure(f"train transformers RAG-Sequence bf16 B={b} K={k}", lambda: bp.hf_step(model, qenc, x, k, "bf16"),
                       zero, 3, device, a.rows))
    del model

    gen.eval()
    b, k, new = (2, 2, 3) if a.quick else (16, 10, 20)
    g = torch.Generator().manual_seed(7)
    src, mask = bp.random_rows(b * k, *s["src"], s["vocab"], g, 0, 2, 1)
    src, mask = src.to(device), mask.to(device)
    scores = (torch.randn(b, k, generator=g) * 2.0).sort(dim=1, descending=True).values.to(device)
    system = RagSystem(gen, tok, "token", precision="bf16")

    def encode(questions, kk):  # the fixed documents, as the decode section of the benchmark
        with torch.inference_mode(), system.autocast():
            hidden = seq2seq.encode(gen, src, mask, system.chunk_overhead)
        return Encoded(Seq2SeqStates(hidden, mask, src), torch.log_softmax(scores.float(), dim=1), None, k)

    system.encode = encode
    questions = [f"q{i}" for i in range(b)]
    out.append(measure(f"decode project RAG-Token greedy bf16 B={b} K={k}",
                       lambda: system.generate(questions, k, method="greedy", beams=1, max_new_tokens=new), zero, 2,
                       device, a.rows))
    hf, gc = hf_rag("token", gen, k).eval().to(device), gen_config(tok, 1, new)

    def hf_decode():
        with torch.no_grad(), bp.autocast(device, "bf16"):
            hf.generate(context_input_ids=src, context_attention_mask=mask, doc_scores=scores, n_docs=k, generation_config=gc)

    out.append(measure(f"decode transformers RAG-Token greedy bf16 B={b} K={k}", hf_decode, zero, 2, device, a.rows))
    print("\n" + "\n".join(f"{r['name']}: wall {r['wall_ms']:.1f} ms, device {r['device_ms']:.1f} ms, "
                           f"{r['kernels']:.0f} kernels" for r in out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
