"""6. Scaling: encoding time vs corpus size, index build time vs size, training step time vs K."""

from __future__ import annotations

import json
import time
from pathlib import Path


from benchmarks.common import ENCODER, fit_line, fit_power, make_passages, set_threads


def run(args) -> dict:
    from rag.retrieval.encoders import Encoder, encode_passages
    from rag.retrieval.index import build_index

    from benchmarks.bench_index import clustered
    from benchmarks.bench_train import interleaved_best, project_step
    from rag.models.rag import RagSystem
    from benchmarks.rag_setup import load_generator, make_batch

    tables, notes, summary, data = [], [], [], {}
    # encoding vs corpus size
    sizes = [50, 200] if args.quick else args.scale_enc_sizes
    enc = Encoder.load(ENCODER)
    encode_passages(enc, ["a"] * 8, ["b c"] * 8, progress=False)
    titles, texts = make_passages(max(sizes), seed=2)
    enc_t = []
    for n in sizes:
        t = time.perf_counter()
        encode_passages(enc, titles[:n], texts[:n], batch_size=args.enc_batch, progress=False)
        enc_t.append(time.perf_counter() - t)
    a, bexp = fit_power(sizes, enc_t)
    rate = sizes[-1] / enc_t[-1]
    rows = [[n, t, n / t, "measured"] for n, t in zip(sizes, enc_t)]
    for n in (100_000, 1_000_000, 21_000_000):
        t = n / rate
        rows.append([n, t, rate, f"extrapolated (linear at {rate:.0f}/s)"])
    data["encoding"] = {"sizes": sizes, "seconds": enc_t, "fit_a": a, "fit_exponent": bexp}
    tables.append({"title": f"Encoding time vs corpus size (batch {args.enc_batch}, {args.threads} threads)",
                   "headers": ["passages", "seconds", "passages/s", "how"], "rows": rows})
    notes.append(f"Encoding: fitted t = {a:.3g} * n^{bexp:.2f} over the measured sizes, i.e. linear in n (each passage is encoded once, "
                 f"fixed 128-token cap); 100k and 1M are extrapolated at the measured {rate:.0f} passages/s "
                 f"(~{100_000 / rate / 60:.0f} min and ~{1e6 / rate / 3600:.1f} h on this machine; the paper's 21M passages: "
                 f"~{21e6 / rate / 86400:.1f} days on these 2 cores) rather than measured, to fit the time available.")
    # index build time vs size
    isizes = [2_000, 10_000] if args.quick else args.scale_index_sizes
    x_all, centers = clustered(max(isizes), 384, 50 if args.quick else 1000, seed=3)
    set_threads(args.threads)
    rows, builds = [], {}
    index_json = Path(args.out) / "index.json"  # the index section's 1M builds, same data model and settings
    big = {}
    if not args.quick and index_json.is_file():
        sec = json.loads(index_json.read_text())
        for r in sec.get("rows", []):
            if r["data"].startswith("clustered"):
                kind = r["index"].split()[0]
                if kind == "hnsw" and f"efC={args.ef_construction}" not in r["index"]:
                    continue
                if kind == "ivfpq" and "project default" not in r["index"]:
                    continue
                big.setdefault(kind, (sec["n"], r["build_s"]))
    for kind, kw in (("flat", {}), ("hnsw", {"hnsw_m": 32, "ef_construction": args.ef_construction}), ("ivfpq", {})):
        ts, ns = [], []
        for n in isizes:
            t = time.perf_counter()
            idx = build_index(x_all[:n], kind, **kw)
            ts.append(time.perf_counter() - t)
            ns.append(n)
            del idx
            rows.append([kind, n, ts[-1], "measured here"])
        if kind in big and big[kind][0] > max(isizes):
            ns.append(big[kind][0])
            ts.append(big[kind][1])
            rows.append([kind, big[kind][0], ts[-1], "the index section's build (index.json)"])
        fa, fb = fit_power(ns, ts)
        builds[kind] = {"sizes": ns, "seconds": ts, "fit_exponent": fb}
        rows.append([kind, "fit", f"t ~ n^{fb:.2f}", None])
    del x_all
    data["index_build"] = builds
    tables.append({"title": f"Index build time vs size (clustered 384-d, HNSW M=32 efC={args.ef_construction}, {args.threads} threads)",
                   "headers": ["index", "vectors", "build s", "how"], "rows": rows})
    # training step time vs K
    gen, tok, source = load_generator()
    gen.train()
    ks = [1, 2, 4] if args.quick else [1, 2, 4, 8]
    b = 4 if args.quick else args.train_batch
    steps = 2 if args.quick else max(3, args.train_steps // 2)
    rows, per_k = [], []
    for kind in ("sequence", "token"):
        ts = []
        system = RagSystem(gen, tok, kind)
        for k in ks:
            batch = make_batch(tok, b, k, seed=0)
            ts.append(interleaved_best({"p": lambda: project_step(system, batch)}, {"p": gen}, steps, 2)["p"])
            rows.append([f"RAG-{kind.capitalize()}", k, ts[-1], b / ts[-1]])
        slope, icpt = fit_line(ks, ts)
        per_k.append({"kind": kind, "ks": ks, "seconds": ts, "slope_s_per_doc": slope, "intercept_s": icpt})
        rows.append([f"RAG-{kind.capitalize()}", "fit", f"{icpt:.3f} s + {slope:.3f} s x K", None])
    data["train_vs_k"] = per_k
    tables.append({"title": f"Training step (loss+backward) time vs K, B={b}, generator {source}",
                   "headers": ["model", "K", "s/step", "examples/s"], "rows": rows})
    notes.append("Training step time is linear in K: the generator runs on B*K (document, question) inputs; fitted slopes: "
                 + "; ".join(f"RAG-{p['kind'].capitalize()} {p['slope_s_per_doc'] * 1000:.0f} ms per extra document "
                             f"(intercept {p['intercept_s'] * 1000:.0f} ms)" for p in per_k) + ".")
    summary.append({"section": "scaling", "metric": f"encoding growth exponent (t ~ n^b), rate {rate:.0f} passages/s", "value": bexp,
                    "baseline": None, "ratio": None, "target": "-", "met": None})
    for p in per_k:
        summary.append({"section": "scaling", "metric": f"train s/step per extra document, RAG-{p['kind'].capitalize()} (B={b})",
                        "value": p["slope_s_per_doc"], "baseline": None, "ratio": None, "target": "-", "met": None})
    return {**data, "summary": summary, "tables": tables, "notes": notes}
