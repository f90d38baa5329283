"""The claims checklist's statistics, and the default world's retrieval difficulty (no training)."""

import numpy as np
import pytest

from rag.io import read_jsonl
from rag.report.claims import verdict


def test_a_claim_without_examples_is_reported_not_raised(tmp_path):
    from rag.report.claims import build_claims

    (tmp_path / "experiments" / "hotswap").mkdir(parents=True)
    (tmp_path / "experiments" / "hotswap" / "rag_token.json").write_text(
        '{"variant": "rag_token", "detail": [{"id": "q", "index": "a", "changed": false, "correct_a": true, "correct_b": false}]}')
    from rag.report.inputs import ReportInputs

    inputs = ReportInputs.from_files(hotswap=[tmp_path / "experiments" / "hotswap" / "rag_token.json"])
    claims = build_claims(inputs, {})
    swap = [c for c in claims if c.claim.startswith("Swapping the index") and "RAG-Token" in c.claim][0]
    assert swap.verdict == "missing" and "no examples" in swap.measured
    assert all(c.verdict == "missing" for c in claims)


def test_the_nq_em_bar_also_asks_for_an_interval_above_zero():
    """Fine-tuned > frozen by >= 3 EM on NQ *and* the interval above 0; TQA only >= 3."""
    from rag.report.claims import _diff_claim, build_claims
    from rag.report.inputs import ReportInputs

    rng = np.random.default_rng(0)
    base = 100.0 * (rng.random(300) < 0.5)
    gain = base.copy()  # +4 points from 36 questions gained and 24 lost: the interval holds 0
    gain[rng.choice(np.flatnonzero(base == 0), 36, replace=False)] = 100.0
    gain[rng.choice(np.flatnonzero(base == 100), 24, replace=False)] = 0.0
    clean = base.copy()  # +4 points from 12 questions gained and none lost: the interval is above 0
    clean[rng.choice(np.flatnonzero(base == 0), 12, replace=False)] = 100.0
    args = ("claim", "paper", "EM", gain, base, "≥ +3 points", lambda d: d >= 3)
    loose, strict = _diff_claim(*args), _diff_claim(*args, ci_above_zero=True)
    assert loose.diff == strict.diff == pytest.approx(4.0) and strict.lo < 0
    assert loose.bar_met is True and strict.bar_met is False
    assert strict.bar == "≥ +3 points, CI above 0" and loose.bar == "≥ +3 points"
    clear = _diff_claim("claim", "paper", "EM", clean, base, "≥ +3 points", lambda d: d >= 3, ci_above_zero=True)
    assert clear.lo > 0 and clear.bar_met is True
    bars = {c.claim: c.bar for c in build_claims(ReportInputs.from_files(), {})}
    assert bars["… and the answers (RAG-Token, NQ)"] == bars["… and the answers (RAG-Sequence, NQ)"] == "≥ +3 points, CI above 0"
    assert bars["… and the answers (RAG-Token, TQA)"] == "≥ +3 points"
    # dense over BM25 too: a mean of +5 with an interval that holds 0 is inconclusive, not a met bar
    assert bars["Dense retrieval beats BM25 on QA"] == "≥ +5 points, CI above 0"


def test_verdicts():
    assert verdict(0.5, 3.0) == "reproduced"
    assert verdict(-3.0, -0.5) == "not reproduced"
    assert verdict(-1.0, 2.0) == "inconclusive"
    assert verdict(-3.0, -0.5, direction=-1) == "reproduced"


def test_default_world_makes_retrieval_a_real_problem():
    """The default config's world, the frozen MiniLM bi-encoder and BM25, no training: NQ test
    answer recall@1 in the band where fine-tuning and K can show (35-80 %), recall@5 >= 85 %,
    and dense ahead of BM25 on the paraphrased questions."""
    from pathlib import Path

    import bm25s
    import faiss
    import yaml

    from rag.scoring.answer_match import answer_in_text
    from rag.config import load_config
    from rag.data import miniworld
    from rag.retrieval.encoders import Encoder, EncoderText, encode_passages

    cfg = load_config(yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text()))
    words = cfg["corpus"]["passage_words"]
    world = miniworld.build_world(cfg["miniworld"], cfg["seed"])["a"]
    ps = miniworld.passages(world, words)
    rows = miniworld.make_task(world, "nq", "test", cfg["tasks"]["nq"]["test"], cfg["seed"], words)
    r = cfg["retriever"]
    enc = Encoder.load(r["context_encoder"], EncoderText(r["pooling"], r["normalize"], r["max_length"]))
    emb = encode_passages(enc, [p[1] for p in ps], [p[2] for p in ps], 64, "cpu")
    q = enc.encode_texts([x["input"] for x in rows]).detach().numpy()
    index = faiss.IndexFlatIP(emb.shape[1])
    index.add(emb)
    _, dense = index.search(q, 5)
    bm = bm25s.BM25()
    bm.index(bm25s.tokenize([f"{p[1]} {p[2]}" for p in ps], stopwords="en", show_progress=False), show_progress=False)
    sparse, _ = bm.retrieve(bm25s.tokenize([x["input"] for x in rows], stopwords="en", show_progress=False), k=1,
                            show_progress=False)

    def recall(ids, k):
        return 100.0 * np.mean([any(answer_in_text(ps[j][2], x["targets"]) for j in ids[i][:k]) for i, x in enumerate(rows)])

    r1, r5, b1 = recall(dense, 1), recall(dense, 5), recall(sparse, 1)
    assert 35 <= r1 <= 80, r1
    assert r5 >= 85, r5
    assert r1 >= b1 + 5, (r1, b1)


def _fake_experiment(root, seeds=(1, 2, 3), n=30, generators=(), end2end=None):
    """Every file the checklist reads, several fine-tune seeds each: predictions with retrieved
    passages, the K sweep, the hot-swap and the oracle, as the DAG writes them; with ``generators``,
    the runs of further generators of those names (<variant>@<name>) on NQ and TriviaQA; with ``end2end``
    (name -> (strategy, objective, training CPU-s, refresh CPU-s, share right)), RAG-Sequence runs of end-to-end
    retrievers on NQ (rag_sequence+<name>), their metrics' index_refresh as the DAG writes it."""
    import json

    from rag.report.inputs import ReportInputs

    passages = {f"p{i}": ("answer" if i % 2 == 0 else "nothing") for i in range(8)}
    metrics, preds, topk, hotswap, oracle = [], [], [], [], []
    rng = np.random.default_rng(0)

    def write(path, obj):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(obj) if not isinstance(obj, list) else "".join(json.dumps(r) + "\n" for r in obj))
        return path

    runs = {"nq": ["rag_token", "rag_sequence", "rag_token_frozen", "rag_sequence_frozen", "rag_token_bm25", "closed_book"],
            "triviaqa": ["rag_token", "rag_sequence", "rag_token_frozen", "rag_sequence_frozen"],
            "fever3": ["rag_token", "closed_book"], "fever2": ["rag_token", "closed_book"], "jeopardy": ["rag_token", "closed_book"]}
    end2end = end2end or {}
    runs["nq"] += [f"rag_sequence+{name}" for name in end2end]
    for task in ("nq", "triviaqa"):
        runs[task] += [f"{v}@{g}" for g in generators for v in ("rag_token", "rag_sequence", "rag_token_frozen",
                                                                   "rag_sequence_frozen", "closed_book")]
    for task, variants in runs.items():
        for variant in variants:
            base = variant.partition("@")[0]
            for seed in (seeds if base != "closed_book" else seeds[:1]):
                rows = []
                for j in range(n):
                    label = task.startswith("fever")
                    target = ["SUPPORTS"] if label else ([f"clue {j}"] if task == "jeopardy" else ["answer"])
                    e2e = end2end.get(variant.partition("+")[2])
                    right = rng.random() < (e2e[4] if e2e else 0.8 if "frozen" not in variant and base != "closed_book" else 0.4)
                    rows.append({"id": f"{task}-{j:03d}", "input": "q", "targets": target,
                                 "prediction": target[0] if right else ("REFUTES" if label else f"word {j} {seed}"),
                                 "doc_ids": [] if base == "closed_book" else [f"p{(j + k + (0 if right else 1)) % 8}" for k in range(5)]})
                d = root / "runs" / task / variant / f"seed{seed}" / "test"
                e2e = end2end.get(variant.partition("+")[2])
                kept = {"index_refresh": {"strategy": e2e[0], "objective": e2e[1], "index_refreshes": 3 * (e2e[0] in ("refresh", "async")),
                                          "refresh_cpu_seconds": e2e[3] + seed, "train_cpu_seconds": e2e[2] + seed,
                                          "final_index_cpu_seconds": 5.0, "final_index_overlap": 0.5,
                                          **({"mean_refresh_overlap": 0.8} if e2e[0] in ("refresh", "async") else {})}} if e2e else {}
                metrics.append(write(d / "metrics.json", {"task": task, "variant": variant, "split": "test", "seed": seed,
                                                           "n": n, "metrics": {}, **kept}))
                preds.append(write(d / "predictions.jsonl", rows))
            if task == "nq" and variant in ("rag_token", "rag_sequence"):
                for seed in seeds:
                    pe = {str(k): {"id": [f"nq-{j:03d}" for j in range(n)],
                                   "correct": [float(rng.random() < 0.6 + 0.04 * k) for _ in range(n)],
                                   "hit": [100.0 * (rng.random() < 0.6 + 0.05 * k) for _ in range(n)]} for k in (1, 2, 8)}
                    topk.append(write(root / "topk" / variant / f"seed{seed}.json",
                                      {"task": "nq", "variant": variant, "seed": seed, "k": [1, 2, 8], "per_example": pe}))
                    detail = [{"id": f"h{q}", "index": idx, "changed": True, "correct_a": (idx == "a") == (q % 3 > 0),
                               "correct_b": (idx == "b") == (q % 3 > 0)} for q in range(24) for idx in "ab"]
                    hotswap.append(write(root / "hotswap" / variant / f"seed{seed}.json",
                                         {"variant": variant, "seed": seed, "n": 24, "cells": {}, "detail": detail}))
                    oracle.append(write(root / "oracle" / variant / f"seed{seed}.json", {
                        "task": "nq", "variant": variant, "seed": seed, "n": n, "correct": [j % 10 > 0 for j in range(n)],
                        "by_attribute": {"leader": {"name": "leader", "n": n, "em": 90.0}}}))
    train = {}
    for task in ("fever3", "fever2"):
        train[task] = write(root / "data" / task / "train.jsonl", [{"id": "t", "input": "c", "targets": ["REFUTES"]}])
    inputs = ReportInputs.from_files(metrics=metrics, predictions=preds, topk=topk, hotswap=hotswap, oracle=oracle,
                                     train_data=[f"{t}={p}" for t, p in train.items()])
    return inputs, passages


def test_every_claim_is_decided_across_seeds(tmp_path):
    """Three seeds of every run the checklist reads: no row is missing, each says its seeds."""
    from rag.report.claims import build_claims

    inputs, passages = _fake_experiment(tmp_path)
    claims = build_claims(inputs, passages)
    assert len(claims) == 21
    assert all(c.verdict in ("reproduced", "not reproduced", "inconclusive") for c in claims), \
        [(c.claim, c.measured) for c in claims if c.verdict == "missing"]
    by = {c.claim: c for c in claims}
    assert by["… and the answers (RAG-Token, NQ)"].spread.startswith("3 seeds, sd ")
    assert by["RAG beats closed-book BART on open-domain QA"].spread.startswith("3 vs 1 seeds")
    assert by["… and RAG-Sequence answers better with more documents"].seeds == 3


def test_a_further_generator_is_held_to_the_generators_bars(tmp_path):
    """The runs of a further generator (config key generators) add its rows: fine-tuned over frozen on
    NQ and TriviaQA and RAG over its closed book, scored on its own runs with the bars of BART's rows."""
    from rag.report.claims import Evidence, build_claims

    inputs, passages = _fake_experiment(tmp_path, generators=("llama",))
    claims = build_claims(inputs, passages)
    assert len(claims) == 21 + 9 and [c.claim for c in claims[:21]] == [c.claim for c in build_claims(
        _fake_experiment(tmp_path / "alone")[0], passages)]
    by = {c.claim: c for c in claims}
    ev = Evidence(inputs, passages)
    row = by["… and the answers (RAG-Token (llama), NQ)"]
    paired = ev.correct("nq", "rag_token@llama", "em") - ev.correct("nq", "rag_token_frozen@llama", "em")
    assert row.diff == pytest.approx(paired.mean()) and row.bar == by["… and the answers (RAG-Token, NQ)"].bar
    assert row.diff != by["… and the answers (RAG-Token, NQ)"].diff  # its own runs, not BART's
    assert by["Fine-tuning the question encoder helps (RAG-Sequence (llama), TQA)"].bar == "≥ +5 points"
    closed = by["RAG beats closed-book llama on open-domain QA"]
    assert closed.measured.startswith("NQ EM, RAG-Token (llama) vs Closed book (llama)") and closed.bar == "≥ +25 points"
    assert all(c.verdict != "missing" for c in claims[21:]), [(c.claim, c.measured) for c in claims[21:]]


def test_fine_tuned_and_frozen_twins_are_paired_by_seed(tmp_path):
    """A fine-tuned run and its frozen twin trained with the same seeds: the interval is that of the
    per-seed differences (one side, its spread theirs); a twin with other seeds stays two sides."""
    from rag.report.claims import Evidence, build_claims
    from rag.report.stats import mean_interval

    inputs, passages = _fake_experiment(tmp_path)
    ev = Evidence(inputs, passages)
    a, b = ev.correct("nq", "rag_token", "em"), ev.correct("nq", "rag_token_frozen", "em")
    by = {c.claim: c for c in build_claims(inputs, passages)}
    row = by["… and the answers (RAG-Token, NQ)"]
    iv = mean_interval([(1, a - b)])
    assert (row.diff, row.lo, row.hi, row.seed_sd) == (iv.estimate, iv.lo, iv.hi, iv.seed_sd)
    assert row.side_seeds == (3,) and row.spread == f"3 seeds, sd {iv.seed_sd:.1f}"
    assert (row.lo, row.hi) != (lambda u: (u.lo, u.hi))(mean_interval([(1, a), (-1, b)]))

    del inputs.predictions[("nq", "rag_token_frozen", "test")][3]  # the frozen twin ran seeds 1 and 2 only
    del inputs.metrics[("nq", "rag_token_frozen", "test")][3]
    ev = Evidence(inputs, passages)
    b = ev.correct("nq", "rag_token_frozen", "em")
    row = {c.claim: c for c in build_claims(inputs, passages)}["… and the answers (RAG-Token, NQ)"]
    iv = mean_interval([(1, a), (-1, b)])
    assert (row.diff, row.lo, row.hi) == (iv.estimate, iv.lo, iv.hi) and row.spread.startswith("3 vs 2 seeds")


E2E = {"none": ("none", "marginal", 100.0, 0.0, 0.8), "rr": ("rerank", "marginal", 160.0, 0.0, 0.85),
       "rf": ("refresh", "marginal", 140.0, 40.0, 0.95), "as": ("async", "marginal", 110.0, 45.0, 0.9),
       "em": ("refresh", "emdr2", 140.0, 40.0, 0.9), "ls": ("refresh", "lsr", 140.0, 40.0, 0.5)}


def test_end_to_end_runs_add_their_rows_read_from_their_index_keeping(tmp_path):
    """Runs whose passage encoder trained (metrics.json index_refresh) add their rows: the refreshed one over the
    question encoder alone at recall@1 and EM, rerank against refresh with the CPU each costs over none, and each
    objective of the strategy that several objectives ran against the frozen retriever; the rows read these runs."""
    from rag.report.claims import END2END_BARS, Evidence, build_claims

    inputs, passages = _fake_experiment(tmp_path, end2end=E2E)
    claims = build_claims(inputs, passages)
    assert [c.claim for c in claims[:21]] == [c.claim for c in build_claims(*_fake_experiment(tmp_path / "alone"))]
    rows = {c.claim: c for c in claims[21:]}
    assert len(rows) == 2 + 1 + 3, list(rows)
    ev = Evidence(inputs, passages)
    both = rows["Training the passage encoder too beats the question encoder alone (NQ)"]
    diff = ev.hits("nq", "rag_sequence+rf", 1).mean() - ev.hits("nq", "rag_sequence", 1).mean()
    assert both.diff == pytest.approx(diff) and "RAG-Sequence (rf) vs RAG-Sequence" in both.measured
    assert both.bar_met == (diff >= END2END_BARS["passage_recall"] and both.lo > 0)
    rerank = rows["Re-ranking the stale index's top L comes within a point of refreshing it, at half the cost"]
    # over none (100 + seed): rerank 60, refresh 40 (its refresh is in its training process): ratio 1.5, bar not met
    assert "60 vs 40 (ratio 1.50)" in rerank.measured and rerank.bar_met is False
    objectives = [c for c in claims[21:] if c.claim.startswith("The ")]
    assert [c.claim for c in objectives] == [f"The {o} objective trains the retriever (NQ)" for o in ("marginal", "emdr2", "lsr")]
    lsr = ev.hits("nq", "rag_sequence+ls", 1).mean() - ev.hits("nq", "rag_sequence_frozen", 1).mean()
    assert objectives[2].diff == pytest.approx(lsr)


def test_end_to_end_tables_set_the_strategies_and_the_objectives_side_by_side(tmp_path):
    """The strategies table: the frozen retriever, the question encoder alone, then each marginal run by strategy
    with its refreshes, staleness and CPU; the objectives table: the refresh runs by objective (recall, CPU)."""
    from rag.data.corpus import Passages
    from rag.report.build import Runs, end2end_tables

    inputs, texts = _fake_experiment(tmp_path, end2end=E2E)
    passages = Passages(list(texts), list(texts), list(texts.values()))
    strategies, objectives = end2end_tables(Runs(inputs, "http://x", None, None), passages)
    labels = [label for label, _, _ in strategies.rows]
    assert labels == ["Natural Questions: RAG-Sequence-Frozen", "Natural Questions: RAG-Sequence"] + [
        f"Natural Questions: RAG-Sequence ({n}): {s}" for n, s in (("none", "none"), ("rr", "rerank"), ("rf", "refresh"), ("as", "async"))]
    cells = dict((label, cells) for label, cells, _ in strategies.rows)
    async_ = cells["Natural Questions: RAG-Sequence (as): async"]
    assert [c.value for c in async_[3:]] == [3.0, pytest.approx(80.0), 47.0, 112.0]  # seeds 1-3: 45 + 2, 110 + 2 (their mean)
    assert [label.rpartition(": ")[2] for label, _, _ in objectives.rows][2:] == ["marginal", "emdr2", "lsr"]
    hits = [[any(texts[d] == "answer" for d in r["doc_ids"][:1]) for r in read_jsonl(p)]
            for _, p in sorted(inputs.predictions[("nq", "rag_sequence+ls", "test")].items())]
    assert objectives.rows[-1][1][0].value == pytest.approx(100 * np.mean([np.mean(h) for h in hits]))
