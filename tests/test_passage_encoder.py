"""The passage encoder trained with RAG, and the retriever objectives, against brute-force references.

A tiny random BART generator, a tiny DPR question encoder and a tiny passage encoder (separate, or the question
encoder's own weights); a stale index (random embeddings no encoder made) proposes each question's top L. The
reference encodes every question and every passage alone with a plain forward, searches the stale embeddings
in numpy, rescores the proposed passages with the fresh ones, scores each (question, passage) pair with a plain
generator forward and marginalises with the reference NLLs of tests/reference.py (themselves checked against
transformers' Rag* models); autograd through it gives the gradients the project's RagSystem must give every
encoder and the generator. The objectives (EMDR², PDist, LSR) are checked against their formulas written out,
with their gradients in closed form.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from ddp_worker import ExactIndex, make_question_encoder, make_world

from rag.models.marginal import rag_token_nll, shift_left
from rag.models.objectives import OBJECTIVES, document_loglik, retriever_loss
from rag.models.rag import RagSystem
from rag.models.seq2seq import format_input
from rag.retrieval.dense import DenseRetriever
from rag.retrieval.encoders import Encoder, EncoderText
from tests.reference import rag_sequence_nll

QUESTIONS = ["what is the capital of france", "where is rome ?", "who was born in berlin"]
ANSWERS = ["paris", "the river of italy", "germany and spain"]  # unequal lengths: exercises padding
TOL = 1e-4
POOLER = EncoderText("pooler", False)


@pytest.fixture(scope="module")
def world():
    torch.set_num_threads(1)
    return make_world(seed=0, n_docs=7)


def parts(world, shared: bool):
    """Fresh copies of (generator, question encoder model, passage encoder model; the same model when shared)."""
    gen, qenc = copy.deepcopy(world.generator), copy.deepcopy(world.qenc)
    cenc = qenc if shared else make_question_encoder(len(world.tokenizer), seed=11)
    return gen, qenc, cenc


def project_system(world, gen, qenc, cenc, kind, depth, objective="marginal", temperature=1.0, scale=1.0):
    q = Encoder(qenc, world.tokenizer, POOLER)
    c = Encoder(cenc, world.tokenizer, POOLER)
    retriever = DenseRetriever(world.passages, q, world.doc_emb, ExactIndex(world.doc_emb), score_scale=scale,
                               context_encoder=c, rescore_depth=depth)
    return RagSystem(gen, world.tokenizer, kind, retriever, objective=objective, objective_temperature=temperature)


def vector(model, tok, *texts):
    """One text (or a (title, text) pair) alone through a plain forward: DPR's pooler output [d]."""
    batch = tok(*texts, return_tensors="pt")
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).pooler_output[0]


def brute_force(world, gen, qenc, cenc, kind, k, depth, target, epsilon=0.0, scale=1.0):
    """(per-question NLL [B], doc scores [B, K] with their graph, the rows [B, K], per-pair log p(y|x,z) [B, K]):
    every passage encoded again alone, the stale top ``depth`` from the stale embeddings, the best k of them by
    the fresh scores, each (question, passage) pair through the generator alone."""
    tok, p = world.tokenizer, world.passages
    fresh = torch.stack([vector(cenc, tok, p.titles[j], p.texts[j]) for j in range(len(p.ids))])  # [N, d]
    rows, scores, logits = [], [], []
    for i, question in enumerate(QUESTIONS):
        q = vector(qenc, tok, question)
        stale = world.doc_emb @ q.detach().numpy()
        proposed = sorted(range(len(stale)), key=lambda j: -stale[j])[:depth]
        s = fresh[proposed] @ q * scale
        best = sorted(range(depth), key=lambda n: -float(s[n].detach()))[:k]
        rows.append([proposed[n] for n in best])
        scores.append(s[best])
        for j in rows[-1]:
            src = tok(format_input(p.titles[j], p.texts[j], question), return_tensors="pt")
            logits.append(gen(input_ids=src["input_ids"], attention_mask=src["attention_mask"],
                              decoder_input_ids=target[i : i + 1]).logits[0])
    doc_scores, seq_logits = torch.stack(scores), torch.stack(logits)
    fn = rag_sequence_nll if kind == "sequence" else rag_token_nll
    nll = fn(seq_logits, doc_scores, target, world.tokenizer.pad_token_id, epsilon)
    tgt = shift_left(target, world.tokenizer.pad_token_id).repeat_interleave(k, 0)
    lp = torch.log_softmax(seq_logits.float(), -1).gather(-1, tgt[..., None])[..., 0]
    doc_ll = lp.masked_fill(tgt.eq(world.tokenizer.pad_token_id), 0.0).sum(1).view(len(QUESTIONS), k)
    return nll, doc_scores, np.array(rows), doc_ll


def grads(*models):
    out = {}
    for name, model in zip(("generator", "question", "passage"), models):
        for n, prm in model.named_parameters():
            out[f"{name}.{n}"] = prm.grad.clone() if prm.grad is not None else torch.zeros_like(prm)
    return out


def rel_diff(a: dict, b: dict, prefix: str) -> float:
    keys = [n for n in a if n.startswith(prefix)]
    num = max(float((a[n] - b[n]).abs().max()) for n in keys)
    den = max(float(a[n].abs().max()) for n in keys)
    assert den > 0, f"no gradient reached the {prefix}"
    return num / den


@pytest.mark.parametrize("kind", ["sequence", "token"])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("k, depth, epsilon", [(3, None, 0.0), (2, 5, 0.1)])
def test_both_encoders_gradients_equal_autograd_through_a_brute_force_re_encoding(world, kind, shared, k, depth, epsilon):
    """The passage encoder trained: the loss and the gradients of the generator, the question encoder and the
    passage encoder (separate or shared weights) equal autograd through the brute force; with a proposal depth
    L = 5 above K = 2, the K retrieved are the fresh top K of the stale top L."""
    gen, qenc, cenc = parts(world, shared)
    system = project_system(world, gen, qenc, cenc, kind, depth, scale=2.0)
    system.train()  # the passage encoder re-encodes in training mode (the tiny models have no dropout)
    target = system.tokenize_targets(ANSWERS)
    loss = system.loss(QUESTIONS, target, k, epsilon)
    loss.backward()
    ours = grads(gen, qenc, cenc)
    retrieved = system.retrieve(QUESTIONS, k)

    gen.zero_grad(set_to_none=True), qenc.zero_grad(set_to_none=True), cenc.zero_grad(set_to_none=True)
    nll, doc_scores, rows, _ = brute_force(world, gen, qenc, cenc, kind, k, depth or k, target, epsilon, scale=2.0)
    nll.mean().backward()
    ref = grads(gen, qenc, cenc)

    np.testing.assert_array_equal(retrieved.ids, rows)
    torch.testing.assert_close(retrieved.scores.detach(), doc_scores.detach(), atol=1e-5, rtol=1e-5)
    assert abs(float(loss) - float(nll.mean())) < TOL
    for part in ("generator", "question", "passage"):
        assert rel_diff(ref, ours, part) < TOL, part
    if shared:  # one model: the question and passage gradients are its one gradient, both sides summed
        assert all(torch.equal(ours[f"question.{n}"], ours[f"passage.{n}"]) for n, _ in qenc.named_parameters())


def test_the_stale_index_only_proposes_the_fresh_scores_rank(world):
    """The top K of a proposal depth L is a fresh exact search's top K over the passages the stale index ranks in
    its top L (each encoded now), whatever the stale scores were; L = the corpus is a fresh exact search."""
    gen, qenc, cenc = parts(world, shared=False)
    tok, p = world.tokenizer, world.passages
    with torch.no_grad():
        fresh = torch.stack([vector(cenc, tok, p.titles[j], p.texts[j]) for j in range(len(p.ids))]).numpy()
        for depth in (2, 4, len(p.ids)):
            system = project_system(world, gen, qenc, cenc, "sequence", depth)
            got = system.retrieve(QUESTIONS, 2)  # a module is made in training mode
            for i, question in enumerate(QUESTIONS):
                q = vector(qenc, tok, question).numpy()
                stale_top = np.argsort(-(world.doc_emb @ q), kind="stable")[:depth]
                restricted = [int(j) for j in np.argsort(-(fresh @ q), kind="stable") if j in set(stale_top)][:2]
                assert got.ids[i].tolist() == restricted
                np.testing.assert_allclose(got.scores[i].numpy(), fresh[restricted] @ q, rtol=1e-5, atol=1e-5)
            assert not system.retriever.nested_top_k(2)
            system.eval()  # in eval mode the index's own embeddings score
            stale = system.retrieve(QUESTIONS, 2)
            want = np.argsort(-(np.stack([vector(qenc, tok, q).numpy() for q in QUESTIONS]) @ world.doc_emb.T), 1,
                              kind="stable")[:, :2]
            np.testing.assert_array_equal(stale.ids, want)
            assert system.retriever.nested_top_k(2)


def closed_form(objective: str, s: list[float], ll: list[float], t: float) -> tuple[float, list[float]]:
    """One question's loss and its gradient in the doc scores, written out: p = softmax(s), q = softmax(ll / t)."""
    p = [math.exp(x - max(s)) for x in s]
    p = [x / sum(p) for x in p]
    q = [math.exp(x / t - max(ll) / t) for x in ll]
    q = [x / sum(q) for x in q]
    if objective == "emdr2":  # -log sum p e^ll; d/ds_j = p_j - posterior_j
        z = sum(pj * math.exp(lj) for pj, lj in zip(p, ll))
        return -math.log(z), [pj - pj * math.exp(lj) / z for pj, lj in zip(p, ll)]
    if objective == "pdist":  # KL(q || p); d/ds_j = p_j - q_j
        return sum(qj * (math.log(qj) - math.log(pj)) for pj, qj in zip(p, q)), [pj - qj for pj, qj in zip(p, q)]
    kl = sum(pj * (math.log(pj) - math.log(qj)) for pj, qj in zip(p, q))  # KL(p || q); d/ds_j = p_j (log p_j/q_j - KL)
    return kl, [pj * (math.log(pj) - math.log(qj) - kl) for pj, qj in zip(p, q)]


@pytest.mark.parametrize("objective", OBJECTIVES[1:])
@pytest.mark.parametrize("temperature", [1.0, 0.3])
def test_each_objective_and_its_gradient_equal_the_formula(objective, temperature):
    """Random doc scores and log-likelihoods (4 questions x 5 documents): the loss per question and its gradient
    in the doc scores equal the closed forms; no gradient reaches the log-likelihoods (the generator's part)."""
    gen = torch.Generator().manual_seed(3)
    s = (torch.randn(4, 5, generator=gen, dtype=torch.float64) * 2).requires_grad_(True)
    ll = (torch.randn(4, 5, generator=gen, dtype=torch.float64) * 3 - 4).requires_grad_(True)
    loss = retriever_loss(objective, s, ll, temperature)
    loss.sum().backward()
    for i in range(4):
        want, want_grad = closed_form(objective, s[i].tolist(), ll[i].tolist(), temperature)
        assert abs(float(loss[i]) - want) < 1e-5
        np.testing.assert_allclose(s.grad[i].numpy(), want_grad, rtol=1e-4, atol=1e-6)
    assert ll.grad is None
    with pytest.raises(ValueError, match="unknown retriever objective"):
        retriever_loss("marginal", s, ll)


def test_the_document_loglik_sums_each_pair_target_tokens():
    """log p(y|x,z) per (question, document): the target tokens' log-probabilities summed, padding left out."""
    ll = torch.arange(2 * 3 * 4, dtype=torch.float32).view(6, 4) * -0.1
    target = torch.tensor([[0, 5, 6, 1], [0, 7, 1, 1]])  # BOS first; shifted: [5 6 pad pad], [7 pad pad pad]
    got = document_loglik(ll, target, pad_id=1, k=3)
    want = torch.tensor([[ll[r, :2].sum() for r in range(3)], [ll[r, :1].sum() for r in range(3, 6)]])
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("kind", ["sequence", "token"])
@pytest.mark.parametrize("objective", OBJECTIVES[1:])
def test_an_objective_trains_the_retriever_and_the_marginal_the_generator(world, kind, objective):
    """Under EMDR², PDist or LSR the system's loss is the brute force's generator NLL (doc scores held constant)
    plus the objective's loss on the brute force's scores and per-pair log-likelihoods: the generator's gradient
    is the NLL's alone, both encoders' the objective's alone."""
    gen, qenc, cenc = parts(world, shared=False)
    system = project_system(world, gen, qenc, cenc, kind, None, objective=objective, temperature=0.5)
    system.train()
    target = system.tokenize_targets(ANSWERS)
    loss = system.loss(QUESTIONS, target, 3)
    loss.backward()
    ours = grads(gen, qenc, cenc)

    gen.zero_grad(set_to_none=True), qenc.zero_grad(set_to_none=True), cenc.zero_grad(set_to_none=True)
    nll, doc_scores, _, doc_ll = brute_force(world, gen, qenc, cenc, kind, 3, 3, target)
    forms = [closed_form(objective, doc_scores[i].tolist(), doc_ll[i].tolist(), 0.5) for i in range(len(QUESTIONS))]
    assert abs(float(loss) - float(nll.mean()) - sum(f[0] for f in forms) / len(forms)) < TOL
    # the generator's gradient: the NLL's (the doc scores do not depend on it)
    names = [n for n, _ in gen.named_parameters()]
    got = torch.autograd.grad(nll.mean(), list(gen.parameters()), retain_graph=True, allow_unused=True)
    ref = {f"generator.{n}": (g if g is not None else torch.zeros_like(prm))
           for n, g, prm in zip(names, got, gen.parameters())}
    # the encoders': the objective's closed-form gradient in the scores, pushed through the brute force's score graph
    score_grad = torch.tensor([f[1] for f in forms], dtype=doc_scores.dtype) / len(forms)
    doc_scores.backward(score_grad)
    ref.update({n: g for n, g in grads(gen, qenc, cenc).items() if not n.startswith("generator")})
    for part in ("generator", "question", "passage"):
        assert rel_diff(ref, ours, part) < TOL, part


@pytest.mark.parametrize("kind, same", [("sequence", True), ("token", False)])
def test_emdr2_trains_as_rag_sequence_s_marginal_and_not_as_rag_token_s(world, kind, same):
    """EMDR² (-log sum_z p(z|x) p(y|x,z), the generator's part constant) beside the generator's NLL on constant
    doc scores: under RAG-Sequence every gradient is the marginal's (so the default's end2end target runs no EMDR²
    beside its marginal run); under RAG-Token, whose marginal is per token, the encoders' differ."""
    out = {}
    for objective in ("marginal", "emdr2"):
        gen, qenc, cenc = parts(world, shared=False)
        system = project_system(world, gen, qenc, cenc, kind, None, objective=objective, temperature=1.0)
        system.train()
        system.loss(QUESTIONS, system.tokenize_targets(ANSWERS), 3).backward()
        out[objective] = grads(gen, qenc, cenc)
    for part in ("generator", "question", "passage"):
        diff = rel_diff(out["marginal"], out["emdr2"], part)
        assert (diff < TOL) if (same or part == "generator") else (diff > 1e-3), (part, diff)


@pytest.mark.parametrize("passage_encoder, objective", [("separate", "marginal"), ("shared", "pdist")])
def test_a_run_training_the_passage_encoder_resumes_where_an_uninterrupted_one_ends(tmp_path, passage_encoder, objective):
    """The passage encoder trains (its weights move, at the question encoder's rate), its state is in the
    checkpoint, and a run stopped midway and resumed in a fresh system ends with an uninterrupted run's weights;
    a checkpoint of the question encoder alone is not resumed by a run training both."""
    from ddp_worker import run_training

    from rag.training import CKPT

    torch.set_num_threads(1)
    kw = dict(steps=4, checkpoint_every=2, passage_encoder=passage_encoder, objective=objective)
    untrained, _ = run_training(tmp_path / "none", steps=0, passage_encoder=passage_encoder, objective=objective)
    full, full_losses = run_training(tmp_path / "full", **kw)
    # shared weights are named once, as the question encoder's
    side = "context_encoder" if passage_encoder == "separate" else "question_encoder"
    passage = [n for n in full if n.startswith(f"retriever.{side}.")]
    assert passage and max(float((full[n] - untrained[n]).abs().max()) for n in passage) > 1e-4
    run_training(tmp_path / "stopped", stop_after=2, **kw)
    midway = torch.load(tmp_path / "stopped" / CKPT, map_location="cpu", weights_only=True)
    assert midway["context_encoder"] and midway["run"]["train_passage_encoder"] is True
    params, losses = run_training(tmp_path / "stopped", **kw)
    assert losses == full_losses and max(float((params[n] - full[n]).abs().max()) for n in full) == 0.0
    run_training(tmp_path / "question", steps=4, checkpoint_every=2, stop_after=2)  # the question encoder alone
    params, losses = run_training(tmp_path / "question", **kw)
    assert losses == full_losses
