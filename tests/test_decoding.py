"""Decoding and scoring: exact on vocabularies small enough to enumerate.

* RAG-Sequence and RAG-Token give the same probability to single-token targets (paper 2.4);
* beam_search with a beam wide enough is exhaustive: it returns the brute-force argmax;
* RAG-Token beam decoding of RagSystem returns argmax_y prod_i sum_z p(z|x) p(y_i|x,z,y_<i);
* thorough and fast RAG-Sequence decoding agree when every hypothesis is in every beam, and
  both return argmax_y sum_z p(z|x) p(y|x,z);
* the number of documents at test time is independent of the one used in training.
"""

from __future__ import annotations

import copy
import itertools
import zlib

import pytest
import torch
from ddp_worker import make_system, make_world

from rag.models.decoding import beam_search
from rag.models.marginal import rag_token_logprobs, rag_token_nll
from tests.reference import rag_sequence_nll, sequence_logprobs

BOS, PAD, EOS = 0, 1, 2
QUESTIONS = ["a b a", "b b"]


@pytest.fixture(scope="module")
def world():
    torch.set_num_threads(1)
    return make_world(seed=1, n_docs=5, words=("a", "b"))  # vocabulary of 10 tokens


# ---------------------------------------------------------------- (a) length-1 targets
def test_sequence_and_token_agree_on_single_token_targets_nll():
    torch.manual_seed(0)
    b, k, v = 3, 4, 7
    logits = torch.randn(b * k, 2, v) * 2
    doc_scores = torch.randn(b, k) * 2
    for y in range(3, v):
        target = torch.tensor([[BOS, y]] * b)
        seq = rag_sequence_nll(logits, doc_scores, target, PAD)
        tok = rag_token_nll(logits, doc_scores, target, PAD)
        lp = torch.log_softmax(logits[:, 0], -1).view(b, k, v)[:, :, y]
        exact = -torch.logsumexp(lp + torch.log_softmax(doc_scores, 1), 1)
        assert torch.allclose(seq, exact, atol=1e-6), (seq, exact)
        assert torch.allclose(tok, exact, atol=1e-6), (tok, exact)
    # a longer target ([BOS, y, EOS]) is where the two models differ
    target = torch.tensor([[BOS, 4, EOS]] * b)
    logits3 = torch.randn(b * k, 3, v) * 2
    assert not torch.allclose(rag_sequence_nll(logits3, doc_scores, target, PAD),
                              rag_token_nll(logits3, doc_scores, target, PAD), atol=1e-3)


def test_score_labels_agree_for_both_models_and_with_the_losses(world):
    seq_sys, tok_sys = make_system(world, "sequence"), make_system(world, "token")
    labels = [4, 5, 3]
    k = 3
    s_seq, enc = seq_sys.score_labels(QUESTIONS, labels, k)
    s_tok, _ = tok_sys.score_labels(QUESTIONS, labels, k)
    assert s_seq.shape == (len(QUESTIONS), len(labels)) and enc.k == k
    assert torch.allclose(s_seq, s_tok, atol=1e-6)
    with torch.no_grad():
        for i, q in enumerate(QUESTIONS):
            for j, y in enumerate(labels):
                tgt = torch.tensor([[BOS, y]])
                for system in (seq_sys, tok_sys):
                    nll = float(system.loss([q], tgt, k))
                    assert abs(-nll - float(s_seq[i, j])) < 1e-5, (system.model_kind, nll, float(s_seq[i, j]))


# ---------------------------------------------------------------- (b) beam search is exact when wide
def _enumerate(vocab: int, max_len: int):
    """Every output: tokens ending at EOS, or max_len tokens without EOS (cut at the length limit)."""
    body = [t for t in range(vocab) if t != EOS]
    out = []
    for n in range(max_len):
        out += [seq + (EOS,) for seq in itertools.product(body, repeat=n)]
    out += list(itertools.product(body, repeat=max_len))
    return out


def _hashed_step(vocab: int, salt: int):
    def logprobs(owner: int, prefix: tuple[int, ...]) -> torch.Tensor:
        seed = zlib.crc32(repr((salt, owner, prefix)).encode())
        g = torch.Generator().manual_seed(seed)
        return torch.log_softmax(torch.randn(vocab, generator=g) * 2.0, -1)

    def step(prefix_ids, owner):
        return torch.stack([logprobs(int(o), tuple(p.tolist())) for p, o in zip(prefix_ids, owner)])

    return step, logprobs


@pytest.mark.parametrize("vocab,max_len", [(4, 4), (5, 3)])
def test_beam_search_wide_beam_is_exact_argmax(vocab, max_len):
    step, logprobs = _hashed_step(vocab, salt=vocab)
    seqs = _enumerate(vocab, max_len)
    beams = len(seqs)  # at least the number of candidates at any step
    found = beam_search(step, 2, beams, max_len, BOS, EOS)
    every = beam_search(step, 2, beams, max_len, BOS, EOS, return_all=True)
    for owner in range(2):
        scores = {}
        for s in seqs:
            prefix = (BOS,)
            tot = 0.0
            for t in s:
                tot += float(logprobs(owner, prefix)[t])
                prefix += (t,)
            scores[s] = tot
        best = max(scores, key=scores.get)
        assert found[owner][0].tokens == best
        assert abs(found[owner][0].score - scores[best]) < 1e-5
        # return_all: exactly the enumerated outputs, with their exact scores
        got = {h.tokens: h.score for h in every[owner]}
        assert set(got) == set(scores)
        assert max(abs(got[s] - scores[s]) for s in scores) < 1e-5
        # greedy (beam 1) follows the per-step argmax
        g = beam_search(step, 2, 1, max_len, BOS, EOS)[owner][0]
        prefix = (BOS,)
        while len(prefix) - 1 < max_len and prefix[-1] != EOS:
            prefix += (int(logprobs(owner, prefix).argmax()),)
        assert g.tokens == prefix[1:]


def _teacher_forced(system, questions, k, seqs):
    """Per (question, sequence): log-probs of every output token under each document -> [B, S, K, T] and lengths."""
    retrieved = system.retrieve(questions, k)
    src = system.tokenizer(system.source_texts(questions, retrieved), padding=True, return_tensors="pt")
    width = max(len(s) for s in seqs) + 1
    dec = torch.full((len(seqs), width), PAD, dtype=torch.long)
    for r, s in enumerate(seqs):
        dec[r, : len(s) + 1] = torch.tensor((BOS,) + s)
    out = []
    with torch.no_grad():
        for i in range(len(questions)):
            rows = torch.arange(i * k, (i + 1) * k).repeat(len(seqs))  # sequence-major, doc-minor
            logits = system.generator(input_ids=src["input_ids"][rows], attention_mask=src["attention_mask"][rows],
                                      decoder_input_ids=dec.repeat_interleave(k, 0)).logits
            out.append((logits.view(len(seqs), k, width, -1), retrieved.scores[i].detach()))
    return out, dec


def _brute_force(system, questions, k, max_len, kind):
    v = len(system.tokenizer)
    seqs = _enumerate(v, max_len)
    per_q, dec = _teacher_forced(system, questions, k, seqs)
    lengths = torch.tensor([len(s) for s in seqs])
    pos = torch.arange(dec.shape[1])
    valid = pos[None, :] < lengths[:, None]  # [S, T]
    tgt = torch.cat([dec[:, 1:], dec.new_full((len(seqs), 1), PAD)], 1)
    best = []
    for logits, scores in per_q:
        s, kk, t, _ = logits.shape
        doc_lp = torch.log_softmax(scores, 0)
        if kind == "token":
            lp = rag_token_logprobs(logits.reshape(s * kk, t, -1), doc_lp.expand(s, kk))  # [S, T, V]
            tok = lp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1).masked_fill(~valid, 0.0)
            total = tok.sum(1)
        else:
            lp = torch.log_softmax(logits, -1).gather(-1, tgt[:, None, :, None].expand(s, kk, t, 1)).squeeze(-1)
            per_doc = lp.masked_fill(~valid[:, None, :], 0.0).sum(2)  # [S, K]
            total = torch.logsumexp(per_doc + doc_lp[None], 1)
        j = int(total.argmax())
        best.append((seqs[j], float(total[j])))
    return best


def _text(system, toks):
    return system.tokenizer.decode([t for t in toks if t not in (EOS, PAD)], skip_special_tokens=True).strip()


MAX_LEN = 3


def _generator(world, copy):
    """None (the world's plain BART), or a copy generator: plain, with local context, or with
    local context and the exact-match feature."""
    from ddp_worker import make_generator

    from rag.models.generator import query_separator

    if not copy:
        return None
    sep = query_separator(world.tokenizer) if copy in ("exact_match", "copy_next") else None
    return make_generator(len(world.tokenizer), seed=7, copy=True, local_context=0 if copy is True else 3, query_separator=sep,
                          copy_next=copy == "copy_next")


@pytest.mark.parametrize("copy", [False, True, "local_context", "exact_match", "copy_next"])
def test_rag_token_beam_is_exact_argmax(world, copy):
    # the cached steps pass the source too; the local-context encoder runs once, before decoding
    gen = _generator(world, copy)
    system = make_system(world, "token", generator=gen)
    k = 3
    beams = len(_enumerate(len(system.tokenizer), MAX_LEN))
    preds = system.generate(QUESTIONS, k, method="beam", beams=beams, max_new_tokens=MAX_LEN)
    for pred, (toks, score) in zip(preds, _brute_force(system, QUESTIONS, k, MAX_LEN, "token")):
        assert abs(pred.score - score) < 1e-4, (pred.score, score)
        assert pred.text == _text(system, toks)


def test_rag_sequence_fast_with_beams_holding_everything_is_exact_argmax(world):
    system = make_system(world, "sequence")
    k = 3
    beams = len(_enumerate(len(system.tokenizer), MAX_LEN))
    fast = system.generate(QUESTIONS, k, method="fast", beams=beams, max_new_tokens=MAX_LEN)
    for f, (toks, score) in zip(fast, _brute_force(system, QUESTIONS, k, MAX_LEN, "sequence")):
        assert f.text == _text(system, toks)
        assert abs(f.score - score) < 1e-4, (f.score, score)


@pytest.mark.parametrize("copy", [False, True, "local_context", "exact_match", "copy_next"])
def test_rag_sequence_thorough_and_fast_agree_when_beams_hold_everything(world, copy):
    gen = _generator(world, copy)
    system = make_system(world, "sequence", generator=gen)
    k = 3
    beams = len(_enumerate(len(system.tokenizer), MAX_LEN))
    thorough = system.generate(QUESTIONS, k, method="thorough", beams=beams, max_new_tokens=MAX_LEN)
    fast = system.generate(QUESTIONS, k, method="fast", beams=beams, max_new_tokens=MAX_LEN)
    for t, f, (toks, score) in zip(thorough, fast, _brute_force(system, QUESTIONS, k, MAX_LEN, "sequence")):
        assert t.text == f.text == _text(system, toks)
        assert abs(t.score - f.score) < 1e-4 and abs(t.score - score) < 1e-4, (t.score, f.score, score)
        assert len(t.doc_ids) == k and abs(sum(t.doc_probs) - 1) < 1e-5


def test_fast_decoding_never_scores_above_thorough(world):
    """With narrow beams, fast gives a missing (hypothesis, document) pair probability 0: a lower bound."""
    system = make_system(world, "sequence")
    with torch.inference_mode():
        enc = system.encode(QUESTIONS, 3)
        thorough = system._rag_sequence_decode(enc, 2, MAX_LEN, thorough=True)
        fast = system._rag_sequence_decode(enc, 2, MAX_LEN, thorough=False)
    for i, (t, f) in enumerate(zip(thorough, fast)):
        with torch.inference_mode():
            exact = torch.logsumexp(sequence_logprobs(system, enc, i, [f.tokens])[0] + enc.doc_lp[i], 0)
        assert f.score <= float(exact) + 1e-5
        assert t.score >= float(exact) - 1e-5  # thorough maximises the exact marginal over the same pool


@pytest.mark.parametrize("copy", [False, "exact_match", "copy_next"])
def test_thorough_rescoring_equals_teacher_forcing(world, copy, monkeypatch):
    """sequence_logprobs_batch (cached document states, the copy generator's target-only scores,
    calls of a few rows) gives every (question, hypothesis, document) the log-probability one
    full teacher-forced pass gives: hypotheses of 1-3 tokens, finished or not, a generated pad
    token inside one, and a question without hypotheses."""
    system = make_system(world, "sequence", generator=_generator(world, copy))
    k = 3
    hyps = [[(EOS,), (3, EOS), (4, PAD, EOS), (5, 3, 4)], [], [(3,), (4, 4, EOS)]]
    questions = QUESTIONS + ["a a b"]
    monkeypatch.setattr(type(system), "SCORE_ROWS", 5)  # calls of 1 pair x 3 documents: cut inside a question
    with torch.inference_mode():
        enc = system.encode(questions, k)
        got = system.sequence_logprobs_batch(enc, hyps)
    for i, hs in enumerate(hyps):
        assert got[i].shape == (len(hs), k)
        if not hs:
            continue
        (logits, _), = _teacher_forced(system, [questions[i]], k, hs)[0]
        lp = torch.log_softmax(logits, -1)  # [H, K, T, V]
        for h, toks in enumerate(hs):
            want = [sum(float(lp[h, j, t, tok]) for t, tok in enumerate(toks)) for j in range(k)]
            assert torch.allclose(got[i][h], torch.tensor(want), atol=1e-4), (i, toks, got[i][h], want)


# ---------------------------------------------------------------- (d) test-time K
def test_test_time_k_is_independent_of_training_k(world):
    torch.manual_seed(0)
    system = make_system(world, "token")
    opt = torch.optim.SGD(system.parameters(), lr=0.05)
    tgt = system.tokenize_targets(["a", "b"])
    system.train()
    for _ in range(2):  # train with K=2
        opt.zero_grad()
        system.loss(QUESTIONS, tgt, 2).backward()
        opt.step()
    system.eval()
    beams = len(_enumerate(len(system.tokenizer), MAX_LEN))
    for k in (1, 3, 5):
        preds = system.generate(QUESTIONS, k, method="beam", beams=beams, max_new_tokens=MAX_LEN)
        for pred, (toks, score) in zip(preds, _brute_force(system, QUESTIONS, k, MAX_LEN, "token")):
            assert len(pred.doc_ids) == k and abs(sum(pred.doc_probs) - 1) < 1e-5
            assert abs(pred.score - score) < 1e-4
            assert pred.text == _text(system, toks)
    # with one document, RAG-Token and RAG-Sequence are the same model
    seq = make_system(world, "sequence", generator=system.generator)
    a = system.generate(QUESTIONS, 1, method="beam", beams=beams, max_new_tokens=MAX_LEN)
    b = seq.generate(QUESTIONS, 1, method="fast", beams=beams, max_new_tokens=MAX_LEN)
    assert [p.text for p in a] == [p.text for p in b]
    assert all(abs(x.score - y.score) < 1e-4 for x, y in zip(a, b))


@pytest.mark.parametrize("method", ["thorough", "fast"])
@pytest.mark.parametrize("copy", [False, "exact_match"])
def test_rag_sequence_sweep_shares_the_largest_k_and_equals_decoding_each_k(world, copy, method):
    """generate_sweep searches and scores the top max(K) documents once; at each K it gives what
    decoding that K alone gives: the same answer, documents and p(z|x), and its score. Beams of 2
    leave hypotheses out of some documents' beams, so fast and thorough pools differ by K."""
    system = make_system(world, "sequence", generator=_generator(world, copy))
    questions = QUESTIONS + ["a a b", "b a"]
    ks = [1, 2, 3, 5]
    swept = system.generate_sweep(questions, ks, method=method, beams=2, max_new_tokens=MAX_LEN)
    assert sorted(swept) == ks
    for k in ks:
        alone = system.generate(questions, k, method=method, beams=2, max_new_tokens=MAX_LEN)
        for s, a in zip(swept[k], alone):
            assert (s.text, s.doc_ids, s.doc_titles) == (a.text, a.doc_ids, a.doc_titles)
            assert s.doc_probs == pytest.approx(a.doc_probs, abs=1e-6) and len(s.doc_ids) == k
            assert abs(s.score - a.score) < 1e-5, (k, s.score, a.score)
    # the search ran once, over the largest K's documents
    calls = []
    real = type(system).encode
    system.encode = lambda qs, k: calls.append(k) or real(system, qs, k)
    system.generate_sweep(questions, ks, method=method, beams=2, max_new_tokens=MAX_LEN)
    assert calls == [max(ks)]


def test_sweep_decodes_each_k_where_a_larger_search_would_rank_other_passages(world, monkeypatch):
    """An HNSW index searched with an efSearch below the largest K finds more candidates for a
    larger K: its first K passages may not be a search for K. The sweep then decodes each K."""
    import faiss
    import numpy as np

    from rag.retrieval.index import build_index

    emb = np.asarray(world.doc_emb, dtype=np.float32)
    system = make_system(world, "sequence")
    assert system.retriever.nested_top_k(5)  # exact search
    for kind, params, nested in (("flat", {}, True), ("hnsw", {"hnsw_m": 4, "ef_search": 3}, False),
                                 ("hnsw", {"hnsw_m": 4, "ef_search": 16}, True)):
        system.retriever.index = build_index(emb, kind, **params)
        with_file = faiss.deserialize_index(faiss.serialize_index(system.retriever.index))  # as read_index gives it
        for index in (system.retriever.index, with_file):
            system.retriever.index = index
            assert system.retriever.nested_top_k(5) is nested and system.retriever.nested_top_k(3)
    calls = []
    real = type(system).encode
    system.encode = lambda qs, k: calls.append(k) or real(system, qs, k)
    monkeypatch.setattr(system.retriever, "nested_top_k", lambda k: False)
    swept = system.generate_sweep(QUESTIONS, [1, 3], method="thorough", beams=2, max_new_tokens=MAX_LEN)
    assert calls == [1, 3] and [len(p.doc_ids) for p in swept[3]] == [3, 3]


def test_sweep_of_other_decodings_decodes_each_k(world):
    """RAG-Token's beam is a mixture over all K documents: no sharing, each K decoded alone."""
    system = make_system(world, "token")
    swept = system.generate_sweep(QUESTIONS, [1, 3], method="beam", beams=2, max_new_tokens=MAX_LEN)
    for k in (1, 3):
        alone = system.generate(QUESTIONS, k, method="beam", beams=2, max_new_tokens=MAX_LEN)
        assert [(p.text, p.score, p.doc_ids) for p in swept[k]] == [(p.text, p.score, p.doc_ids) for p in alone]


# ---------------------------------------------------------------- ids -> text (byte-level BPE)
MULTIBYTE_TEXTS = [
    "Zürich is a city on a lake. The bird Ñandú runs fast.",
    "東京 is the capital; 東京 has many trains.",
    "A café in Zürich sells café au lait.",
    "The mayor of Ñandú is Jürgen Müller.",
]
MULTIBYTE_ANSWERS = ["Zürich", "Ñandú", "東京", "café", "the café of 東京 and Ñandú"]


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """The project's tokenizer: byte-level BPE trained as rag/models/tokenizer.py does."""
    from rag.models.tokenizer import label_token, train_tokenizer
    from rag.tasks import FEVER3_LABELS

    # a small vocabulary: some characters are one token, some are split over two or three
    return train_tokenizer(MULTIBYTE_TEXTS * 3, 280, [label_token(lb) for lb in FEVER3_LABELS],
                           tmp_path_factory.mktemp("bpe"))


def _body(tok, text: str) -> list[int]:
    """The ids of ``text`` without <s> and </s>."""
    return tok(text)["input_ids"][1:-1]


def _predict(tok, ids: list[int]) -> str:
    """The project's decode path for a generated sequence: RagSystem._predictions."""
    from types import SimpleNamespace

    from rag.models.decoding import Hypothesis
    from rag.models.rag import RagSystem

    me = SimpleNamespace(tokenizer=tok, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id)
    [pred] = RagSystem._predictions(me, SimpleNamespace(retrieved=None),
                                    [Hypothesis(tuple(ids) + (tok.eos_token_id,), -1.0)])
    return pred.text


def test_multibyte_answers_decode_whole(bpe):
    from rag.models.decoding import decode_ids

    split = 0
    for answer in MULTIBYTE_ANSWERS:
        ids = _body(bpe, answer)
        # tokens holding part of a character: decoded one at a time they give U+FFFD
        split += sum("\ufffd" in bpe.decode([i]) for i in ids)
        text = _predict(bpe, ids)
        assert text == answer.lower() and "\ufffd" not in text
        full = bpe(answer)["input_ids"]  # with <s> ... </s>, as the library decodes it
        assert decode_ids(bpe, full) == bpe.decode(full, skip_special_tokens=True)
    assert split > 0, "no answer has a character split over tokens: the test shows nothing"


def test_sequences_cut_inside_a_character_drop_the_partial_bytes(bpe):
    """A sequence cut by the length limit, or one that starts inside a character (a model
    emitting a continuation byte first), decodes to the whole characters it holds, no U+FFFD."""
    from rag.models.decoding import decode_ids

    answer = "the café of 東京 and Ñandú"
    ids = _body(bpe, answer)
    whole = decode_ids(bpe, ids)
    assert whole == " " + answer.lower()
    inside = 0
    for cut in range(len(ids) + 1):
        head, tail = decode_ids(bpe, ids[:cut]), decode_ids(bpe, ids[cut:])
        assert "\ufffd" not in head + tail
        assert whole.startswith(head) and whole.endswith(tail), (cut, head, tail)
        if head + tail != whole:  # the cut falls inside a character: that one character is lost
            inside += 1
            assert len(head) + len(tail) == len(whole) - 1, (cut, head, tail)
            assert "\ufffd" in bpe.decode(ids[:cut]) + bpe.decode(ids[cut:])  # the library's U+FFFD
        assert "\ufffd" not in _predict(bpe, ids[:cut]) + _predict(bpe, ids[cut:])
    assert inside >= 4, "too few cuts inside a character: the test shows little"
    # stray bytes in the middle are dropped too; the characters around them stay whole
    stray = [t for t in _body(bpe, "東京") if "\ufffd" in bpe.decode([t])][-1:]
    assert stray and _predict(bpe, _body(bpe, "café") + stray + _body(bpe, "Ñandú")) == "café ñandú"


def test_added_and_special_tokens(bpe):
    from rag.models.decoding import decode_ids

    tok = copy.deepcopy(bpe)
    tok.add_tokens(["ñx"])
    ids = tok("ñx Zürich")["input_ids"]
    assert decode_ids(tok, ids).strip() == "ñx zürich"  # an added token stands for its own text
    label = tok.convert_tokens_to_ids("<SUPPORTS>")
    assert decode_ids(tok, [label] + _body(tok, "café")).strip() == "café"  # special tokens left out


def test_other_tokenizers_decode_as_the_library(world):
    from rag.models.decoding import decode_ids

    tok = world.tokenizer
    ids = tok("a b a")["input_ids"]
    assert decode_ids(tok, ids) == tok.decode(ids, skip_special_tokens=True)


class _AlwaysCopying:
    """CachedStep as before its two skips: the cache reordered at every step, the encoder rows
    indexed at every step."""

    @staticmethod
    def make():
        import rag.models.rag as R

        class Always(R.CachedStep):
            def _encoder_rows(self, flat):
                return self.enc.states.select(flat)

            def _reorder(self, order):
                self.cache = self.system.gen.reorder(self.cache, order.to(self.system.device))

        return Always


@pytest.mark.parametrize("kind,method", [("token", "greedy"), ("token", "beam"), ("sequence", "thorough"),
                                         ("sequence", "greedy")])
@pytest.mark.parametrize("copy", [False, "exact_match"])
def test_cached_steps_skip_copies_without_changing_a_bit(world, monkeypatch, kind, method, copy):
    # greedy search keeps every row in place until a question finishes: no reorder of the cache
    # there, and the encoder rows are indexed once per set of live rows; answers and scores the same
    import rag.models.rag as R
    from transformers.cache_utils import EncoderDecoderCache

    reorders = []
    original = EncoderDecoderCache.reorder_cache
    monkeypatch.setattr(EncoderDecoderCache, "reorder_cache", lambda self, idx: (reorders.append(len(idx)), original(self, idx))[1])
    from ddp_worker import make_generator

    # a generator of its own (other tests train the world's): seed 7 decodes several steps before EOS
    gen = _generator(world, copy) if copy else make_generator(len(world.tokenizer), seed=7)
    system = make_system(world, kind, generator=gen)
    questions = QUESTIONS + ["a a b", "b a", "a"]

    def run():
        reorders.clear()
        preds = system.generate(questions, 3, method=method, beams=3, max_new_tokens=8)
        return [(p.text, p.score) for p in preds], len(reorders)

    skipping, n_skipping = run()
    monkeypatch.setattr(R, "CachedStep", _AlwaysCopying.make())
    always, n_always = run()
    assert skipping == always
    assert n_always > 0
    if method == "greedy":
        assert n_skipping < n_always, (n_skipping, n_always)
