"""The causal-LM generator family against an independent reference, on tiny random Llama and GPT-2
architectures: a plain forward of each prompt + target (no padding, no cache, no chunks), the
target's log-probabilities summed (RAG-Sequence) or per token (RAG-Token), combined with the
document scores by logsumexp; decoding against the exhaustive search of a tiny vocabulary; LoRA
adapters; and a toy third family registered in one entry (tests/toy_family.py)."""

from __future__ import annotations

import itertools

import pytest
import torch
from ddp_worker import ExactIndex, make_tokenizer, make_world

from rag.models.causal_lm import CausalLMGenerator
from rag.models.rag import RagSystem

ARCHS = ("llama", "gpt2", "copy_llama")  # copy_llama: a Llama with a copy distribution over its prompt
QUESTIONS = ["what is the capital of france", "where is rome", "who was born in berlin"]
ANSWERS = ["paris", "the river city of italy", "germany"]
K = 3


def tiny_lm(arch: str, vocab: int, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from rag.models.causal_lm import CopyLlama

    torch.manual_seed(seed)
    if arch in ("llama", "copy_llama"):
        copy = arch == "copy_llama"
        cfg = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                          num_key_value_heads=1, max_position_embeddings=256, initializer_range=0.3,
                          pad_token_id=1, bos_token_id=0, eos_token_id=2, **({"copy_mechanism": True} if copy else {}))
        return (CopyLlama if copy else LlamaForCausalLM)(cfg).eval()
    cfg = GPT2Config(vocab_size=vocab, n_embd=16, n_layer=2, n_head=2, n_positions=256, initializer_range=0.3,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    return GPT2LMHeadModel(cfg).eval()


def make_system(world, arch: str, kind: str, words=None, seed: int = 0, **options) -> RagSystem:
    from rag.retrieval.dense import DenseRetriever

    tok = make_tokenizer(words) if words else make_tokenizer()  # the generator's own (left padding)
    gen = CausalLMGenerator(tiny_lm(arch, len(tok), seed), tok, 96, 12, **options)
    retriever = DenseRetriever(world.passages, world.encoder, world.doc_emb, ExactIndex(world.doc_emb))
    return RagSystem(gen, tok, kind, retriever)


@pytest.fixture(scope="module")
def world():
    torch.set_num_threads(1)
    return make_world(seed=2, n_docs=6)


# ---------------------------------------------------------------- the reference
def prompts(system, questions, k):
    """The retrieval (scores with their gradient) and each (question, document)'s prompt ids."""
    if system.model_kind == "closed_book":
        return None, [[system.tokenizer(system.gen.question_text(q))["input_ids"]] for q in questions]
    got = system.retrieve(questions, k)
    p = system.passages
    return got, [[system.tokenizer(system.gen.source_text(p.titles[j], p.texts[j], q))["input_ids"] for j in row]
                 for q, row in zip(questions, got.ids.tolist())]


def copy_args(model, prompt: list[int]) -> dict:
    """What a copying model (CopyLlama) is told of its prompt: how long it is."""
    return {"prompt_len": len(prompt)} if getattr(model.config, "copy_mechanism", False) else {}


def forward_lp(model, prompt: list[int], body: list[int]) -> torch.Tensor:
    """log p(. | prompt, body[:t]) [T, V]: a plain forward of prompt + body."""
    logits = model(input_ids=torch.tensor([prompt + body]), **copy_args(model, prompt)).logits[0].float()
    return torch.log_softmax(logits, -1)[len(prompt) - 1 : len(prompt) - 1 + len(body)]


def reference_nll(system, questions, answers, k, epsilon=0.0) -> torch.Tensor:
    got, ids = prompts(system, questions, k)
    tok, out = system.tokenizer, []
    for i, answer in enumerate(answers):
        body = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        lp = torch.stack([forward_lp(system.generator, pr, body) for pr in ids[i]])  # [K, T, V]
        doc_lp = torch.log_softmax(got.scores[i].float(), 0) if got is not None else torch.zeros(1)
        per_tok = lp.gather(-1, torch.tensor(body)[None, :, None].expand(len(lp), -1, 1))[..., 0]  # [K, T]
        v = lp.shape[-1]
        if system.model_kind == "token":
            marg = torch.logsumexp(lp + doc_lp[:, None, None], 0)  # [T, V]
            nll = -marg.gather(-1, torch.tensor(body)[:, None]).sum()
            smooth = -marg.sum()
        else:
            nll = -torch.logsumexp(per_tok.sum(1) + doc_lp, 0)
            smooth = -torch.logsumexp(lp.sum((1, 2)) + doc_lp * v, 0)
        out.append((1 - epsilon) * nll + epsilon / v * smooth if epsilon else nll)
    return torch.stack(out)


def system_nll(system, questions, answers, k, epsilon=0.0) -> torch.Tensor:
    got = None if system.model_kind == "closed_book" else system.retrieve(questions, k)
    src, mask = system.gen.tokenize_sources(system.source_texts(questions, got))
    return system.marginal_nll(src, mask, None if got is None else got.scores, system.tokenize_targets(answers), epsilon)


# ---------------------------------------------------------------- training
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kind", ["sequence", "token", "closed_book"])
@pytest.mark.parametrize("chunks", ["one", "per_row"])
def test_nll_equals_a_plain_forward_of_each_prompt_and_target(world, arch, kind, chunks):
    system = make_system(world, arch, kind)
    system.chunk_overhead = 0 if chunks == "per_row" else None  # 0: every prompt length a chunk of its own
    got = system_nll(system, QUESTIONS, ANSWERS, K)
    ref = reference_nll(system, QUESTIONS, ANSWERS, K)
    assert torch.allclose(got, ref, atol=1e-5, rtol=0), (got, ref)
    assert torch.allclose(system.loss(QUESTIONS, system.tokenize_targets(ANSWERS), K), ref.mean(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kind", ["sequence", "token"])
def test_label_smoothed_nll_equals_the_reference(world, arch, kind):
    system = make_system(world, arch, kind)
    got = system_nll(system, QUESTIONS, ANSWERS, K, epsilon=0.1)
    assert torch.allclose(got, reference_nll(system, QUESTIONS, ANSWERS, K, epsilon=0.1), atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kind", ["sequence", "token"])
def test_gradients_reach_the_question_encoder_as_the_reference_s(world, arch, kind):
    system = make_system(world, arch, kind)
    qenc = system.question_encoder.model
    grads = []
    for nll in (system_nll, reference_nll):
        system.zero_grad(set_to_none=True)
        nll(system, QUESTIONS, ANSWERS, K).sum().backward()
        grads.append({n: p.grad.clone() for n, p in list(qenc.named_parameters()) + list(system.generator.named_parameters())
                      if p.grad is not None})
    mine, ref = grads
    assert set(mine) == set(ref)
    assert any(n.startswith("model.") or n.startswith("transformer.") for n in mine)  # the generator's
    assert any(float(g.abs().sum()) > 0 for n, g in mine.items() if n in dict(qenc.named_parameters()))
    for n in mine:  # fp32 sums in another order: within 1e-5 of the gradient's scale
        assert float((mine[n] - ref[n]).abs().max()) <= 1e-5 * max(1.0, float(ref[n].abs().max())), n


@pytest.mark.parametrize("arch", ["llama", "copy_llama"])
@pytest.mark.parametrize("kind", ["sequence", "token"])
@pytest.mark.parametrize("objective", ["emdr2", "pdist", "lsr"])
def test_a_retriever_objective_reads_the_causal_lm_s_likelihood_of_each_passage(world, arch, kind, objective):
    """Under EMDR², PDist or LSR a causal LM's system loss is the reference NLL plus the objective on the doc scores
    and log p(y|x,z) of each (question, passage) prompt from a plain forward; the generator's gradient is the NLL's,
    the question encoder's the objective's alone (rag.models.objectives: their closed forms, tests/test_passage_encoder.py)."""
    from rag.models.objectives import retriever_loss

    system = make_system(world, arch, kind)
    system.objective, system.objective_temperature = objective, 0.5
    qenc, gen = dict(system.question_encoder.model.named_parameters()), dict(system.generator.named_parameters())

    def grads_of(loss, params):
        system.zero_grad(set_to_none=True)
        loss.backward()
        return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in params.items()}

    mine_loss = system_nll(system, QUESTIONS, ANSWERS, K)
    mine = grads_of(mine_loss.sum(), {**{f"q.{n}": p for n, p in qenc.items()}, **{f"g.{n}": p for n, p in gen.items()}})
    got, ids = prompts(system, QUESTIONS, K)
    tok, doc_ll = system.tokenizer, []
    for i, answer in enumerate(ANSWERS):
        body = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        lp = torch.stack([forward_lp(system.generator, pr, body) for pr in ids[i]])  # [K, T, V]
        doc_ll.append(lp.gather(-1, torch.tensor(body)[None, :, None].expand(len(lp), -1, 1))[..., 0].sum(1).detach())
    objective_loss = retriever_loss(objective, got.scores.float(), torch.stack(doc_ll), 0.5)
    nll = reference_nll(system, QUESTIONS, ANSWERS, K)
    assert float((mine_loss - nll - objective_loss).detach().abs().max()) < 1e-4
    ref = {**{f"q.{n}": g for n, g in grads_of(objective_loss.sum(), qenc).items()},
           **{f"g.{n}": g for n, g in grads_of(nll.sum(), gen).items()}}
    assert any(float(g.abs().sum()) > 0 for n, g in mine.items() if n.startswith("q."))
    for n in mine:
        assert float((mine[n] - ref[n]).abs().max()) <= 1e-4 * max(1.0, float(ref[n].abs().max())), n


# ---------------------------------------------------------------- decoding
MAX_LEN = 3
WORDS = ("a", "b")  # a vocabulary of 10 tokens


@pytest.fixture(scope="module")
def small_world():
    return make_world(seed=1, n_docs=5, words=WORDS)


def candidates(vocab: int, eos: int) -> list[tuple[int, ...]]:
    """Every answer of at most MAX_LEN tokens: finished by EOS, or cut at the limit."""
    out = []
    for n in range(1, MAX_LEN + 1):
        for seq in itertools.product(range(vocab), repeat=n):
            if eos not in seq[:-1] and (seq[-1] == eos or n == MAX_LEN):
                out.append(seq)
    return out


@torch.no_grad()
def candidate_logprobs(system, question, seqs) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(seq_t | prompt_j, seq_<t) [S, K, MAX_LEN] (0 past a sequence's end) and log p(z_j|x) [K]:
    per document, one forward of its prompt + every sequence (padded after its end, which a
    causal model's earlier positions never see)."""
    got, ids = prompts(system, [question], K)
    width = max(map(len, seqs))
    tgt = torch.full((len(seqs), width), system.pad_id)
    for s, seq in enumerate(seqs):
        tgt[s, : len(seq)] = torch.tensor(seq)
    valid = torch.arange(width)[None] < torch.tensor([len(q) for q in seqs])[:, None]
    out = torch.zeros(len(seqs), len(ids[0]), width)
    for j, prompt in enumerate(ids[0]):
        inp = torch.cat([torch.tensor(prompt).expand(len(seqs), -1), tgt], 1)
        lp = torch.log_softmax(system.generator(input_ids=inp, **copy_args(system.generator, prompt)).logits.float(),
                               -1)[:, len(prompt) - 1 : -1]
        out[:, j] = lp.gather(-1, tgt[..., None])[..., 0].masked_fill(~valid, 0.0)
    doc_lp = torch.log_softmax(got.scores[0].float(), 0) if got is not None else torch.zeros(1)
    return out, doc_lp


def exhaustive_best(system, question, seqs, kind):
    lp, doc_lp = candidate_logprobs(system, question, seqs)
    if kind == "token":
        lengths = torch.tensor([len(s) for s in seqs])
        total = torch.logsumexp(lp + doc_lp[None, :, None], 1).masked_fill(
            torch.arange(lp.shape[2])[None] >= lengths[:, None], 0.0).sum(1)
    else:
        total = torch.logsumexp(lp.sum(2) + doc_lp[None], 1)
    best = int(total.argmax())
    return seqs[best], float(total[best])


def text(system, toks):
    from rag.models.decoding import decode_ids

    return decode_ids(system.tokenizer, [t for t in toks if t not in (system.eos_id, system.pad_id)]).strip()


@pytest.fixture(scope="module")
def seqs():
    return candidates(10, 2)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kind,method", [("token", "beam"), ("sequence", "thorough"), ("sequence", "fast"), ("closed_book", "beam")])
def test_beam_wide_enough_is_the_exhaustive_argmax(small_world, seqs, arch, kind, method):
    # (the candidate scoring reads the prompt one token sequence at a time: two questions suffice)
    system = make_system(small_world, arch, kind, words=WORDS, seed=5)
    assert len(system.tokenizer) == 10
    questions = ["a b a", "b b"]
    preds = system.generate(questions, K, method=method, beams=len(seqs), max_new_tokens=MAX_LEN)
    for q, pred in zip(questions, preds):
        toks, score = exhaustive_best(system, q, seqs, "token" if kind == "token" else "sequence")
        assert abs(pred.score - score) < 1e-4, (pred.score, score)
        assert pred.text == text(system, toks)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kind", ["token", "sequence", "closed_book"])
def test_greedy_follows_the_argmax_of_the_plain_forwards(small_world, arch, kind):
    # RAG-Token: the marginal next-token distribution; RAG-Sequence greedy: the top document alone
    system = make_system(small_world, arch, kind, words=WORDS, seed=5)
    for q in ["a b a", "b b", "a"]:
        pred = system.generate([q], K, method="greedy", max_new_tokens=6)[0]
        got, ids = prompts(system, [q], K)
        doc_lp = torch.log_softmax(got.scores[0].float(), 0) if got is not None else torch.zeros(1)
        if kind == "sequence":
            ids, doc_lp = [ids[0][:1]], torch.zeros(1)
        seq, score = [], 0.0
        with torch.no_grad():
            while len(seq) < 6 and (not seq or seq[-1] != system.eos_id):
                nxt = torch.stack([forward_lp(system.generator, pr, seq + [0])[-1] for pr in ids[0]])  # [K, V]
                marg = torch.logsumexp(nxt + doc_lp[:, None], 0)
                seq.append(int(marg.argmax()))
                score += float(marg.max())
        assert pred.text == text(system, seq)
        assert abs(pred.score - score) < 1e-4


@pytest.mark.parametrize("arch", ARCHS)
def test_label_scores_are_the_first_answer_token_s(small_world, arch):
    system = make_system(small_world, arch, "sequence", words=WORDS, seed=5)
    scores, _ = system.score_labels(["a b a"], [4, 5], K)
    lp, doc_lp = candidate_logprobs(system, "a b a", [(4,), (5,)])
    assert torch.allclose(scores[0], torch.logsumexp(lp[:, :, 0] + doc_lp[None], 1), atol=1e-5)


# ---------------------------------------------------------------- LoRA, saving
@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("arch", ["llama", "copy_llama"])
def test_lora_trains_the_adapters_and_the_question_encoder_only(world, tmp_path, checkpointing, arch):
    from rag.models.interface import load_generator, saved_family
    from rag.config_keys import Train
    from rag.training import make_optimizer

    system = make_system(world, arch, "token", lora={"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj"]},
                         gradient_checkpointing=checkpointing)
    system.prepare_training()
    assert system.generator.get_base_model().is_activation_checkpointing == checkpointing
    system.train()
    before = {n: p.detach().clone() for n, p in system.named_parameters()}
    opt, _ = make_optimizer(system, Train(lr=1e-2, question_encoder_lr=1e-2, warmup_steps=0, steps=1), True)
    for _ in range(2):  # LoRA's B starts at 0: A moves from the second step on
        opt.zero_grad()
        system.loss(QUESTIONS, system.tokenize_targets(ANSWERS), K).backward()
        opt.step()
    changed = {n for n, p in system.named_parameters() if not torch.equal(p, before[n])}
    adapters = {n for n in before if "lora_" in n}
    qenc = {n for n in before if n.startswith("retriever.")}
    assert adapters and adapters <= changed, adapters - changed
    assert changed - adapters <= qenc and changed & qenc
    system.eval()
    with torch.no_grad():
        trained = system_nll(system, QUESTIONS, ANSWERS, K)
    system.gen.save(tmp_path)  # the adapters merged into the weights
    system.tokenizer.save_pretrained(tmp_path)
    assert saved_family(tmp_path) == "causal_lm"
    loaded = load_generator(tmp_path, "cpu", 96, 12)
    assert loaded.lora == system.gen.lora and loaded.template == system.gen.template
    again = RagSystem(loaded, loaded.tokenizer, "token", system.retriever)
    with torch.no_grad():
        assert torch.allclose(system_nll(again, QUESTIONS, ANSWERS, K), trained, atol=1e-5)


def test_a_causal_lm_folder_without_its_settings_is_a_one_line_error(tmp_path):
    from rag.errors import ConfigError
    from rag.models.interface import load_generator

    tok = make_tokenizer()
    tiny_lm("gpt2", len(tok)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="lacks rag_generator.template, lora, gradient_checkpointing"):
        load_generator(tmp_path, "cpu", 96, 12)


def test_prompts_of_the_default_template(world):
    gen = make_system(world, "llama", "sequence").gen
    assert gen.source_text("Paris", "the capital of france", "where is paris") == \
        "Title: Paris Passage: the capital of france Question: where is paris Answer:"
    assert gen.question_text("where is paris") == "Question: where is paris Answer:"


def test_a_causal_lm_is_pretrained_from_scratch_or_loaded():
    from pathlib import Path

    import yaml

    from rag.config import load_config
    from rag.runs import scale_summary

    base = yaml.safe_load((Path(__file__).parents[1] / "tests" / "data" / "e2e.yaml").read_text())
    causal = {**base.get("generator", {}), "family": "causal_lm", "local_context": 0, "exact_match": False}
    cfg = load_config({**base, "generator": causal}, check_files=False)
    assert cfg["generator"]["init"] == "scratch"
    assert scale_summary(cfg)["generator"] == "decoder-only Llama from scratch (d_model 32, 1 layer)"
    assert scale_summary(load_config(base, check_files=False))["generator"] == "BART from scratch (d_model 32, 1+1 layers)"
    cfg = load_config({**base, "generator": {**base.get("generator", {}), "family": "causal_lm", "init": "pretrained",
                                             "name_or_path": "some/lm"}}, check_files=False)
    assert cfg["generator"]["lora_rank"] == 0 and cfg["generator"]["family"] == "causal_lm"
    assert scale_summary(cfg)["generator"] == "some/lm"


def test_a_prompt_template_without_the_question_is_refused():
    from rag.errors import ConfigError
    from rag.models.causal_lm import check_template

    with pytest.raises(ConfigError, match="generator.prompt_template"):
        check_template("{title} {text}")
    with pytest.raises(ConfigError, match="generator.prompt_template"):
        check_template("{title} {question} {answer}")


@pytest.mark.parametrize("template, message", [
    ("{title!r:>99999999} {question}", "'{title!r:>99999999}' has a conversion or format spec"),
    ("{question:>99999999999999}", "'{question:>99999999999999}' has a conversion or format spec"),
    ("{text:{title}} {question}", "'{text:{title}}' has a conversion or format spec"),
    ("{question.__class__}", "'{question.__class__}' is no field of the prompt"),
    ("{0} {question}", "'{0}' is no field of the prompt"),
    ("{title {question}", "unexpected '{' in field name"),
])
def test_a_prompt_template_takes_plain_fields_only_checked_with_the_config(template, message):
    """A conversion or format spec pads a prompt to any size (an allocation of gigabytes in training):
    refused when the config loads, for generator and a further generator, in one line naming the key."""
    from pathlib import Path

    import yaml

    from rag.config import load_config
    from rag.errors import ConfigError

    base = yaml.safe_load((Path(__file__).parents[1] / "tests" / "data" / "e2e_causal.yaml").read_text())
    for where, cfg in [("generator", {**base, "generator": {**base["generator"], "prompt_template": template}}),
                       ("generators.s2s.generator", {**base, "generators": {"s2s": {**base["generators"]["s2s"], "generator": {
                           **base["generators"]["s2s"]["generator"], "prompt_template": template}}}})]:
        with pytest.raises(ConfigError) as exc:
            load_config(cfg, check_files=False)
        assert str(exc.value).startswith(f"config key '{where}.prompt_template': {message}") and "\n" not in str(exc.value)
    ok = "{text} ({title}) {{braces}} Q: {question} A:"
    assert load_config({**base, "generator": {**base["generator"], "prompt_template": ok}}, check_files=False)


# ---------------------------------------------------------------- a third family
def test_a_third_family_is_one_file_and_a_registry_entry(small_world, seqs, monkeypatch):
    from toy_family import ToyModel

    from rag.models.interface import generator_class
    from rag.retrieval.dense import DenseRetriever
    from rag.tasks import GENERATOR_FAMILIES, FamilySpec

    monkeypatch.setitem(GENERATOR_FAMILIES, "toy", FamilySpec("toy", "toy_family:ToyGenerator"))
    tok = make_tokenizer(WORDS)
    model = ToyModel(len(tok))
    retriever = DenseRetriever(small_world.passages, small_world.encoder, small_world.doc_emb, ExactIndex(small_world.doc_emb))
    for kind in ("sequence", "token"):
        system = RagSystem(generator_class("toy")(model, tok, 64, 8), tok, kind, retriever)
        q = "a b a"
        got = system.retrieve([q], K)
        doc_lp = torch.log_softmax(got.scores[0], 0)
        p = small_world.passages
        ctx = torch.stack([model.context(*(lambda e: (e["input_ids"], e["attention_mask"]))(
            tok([f"{p.titles[j]} {p.texts[j]} {q}"], return_tensors="pt")))[0] for j in got.ids[0].tolist()])  # [K, d]

        def lp_of(seq):  # [K, T]: log p(seq_t | doc, seq_{t-1}) straight from the toy's definition
            prev = torch.tensor([[tok.bos_token_id] + list(seq[:-1])] * K)
            return torch.log_softmax(model.logits(ctx, prev), -1).gather(-1, torch.tensor([list(seq)] * K)[..., None])[..., 0]

        body = tuple(tok("b a", add_special_tokens=False)["input_ids"]) + (tok.eos_token_id,)
        ref = (-torch.logsumexp(lp_of(body).sum(1) + doc_lp, 0) if kind == "sequence"
               else -torch.logsumexp(lp_of(body) + doc_lp[:, None], 0).sum())
        assert torch.allclose(system.loss([q], system.tokenize_targets(["b a"]), K), ref, atol=1e-5)
        method = "thorough" if kind == "sequence" else "beam"
        pred = system.generate([q], K, method=method, beams=len(seqs), max_new_tokens=MAX_LEN)[0]
        with torch.no_grad():
            totals = torch.stack([torch.logsumexp(lp_of(s).sum(1) + doc_lp, 0) if kind == "sequence"
                                  else torch.logsumexp(lp_of(s) + doc_lp[:, None], 0).sum() for s in seqs])
        best = int(totals.argmax())
        assert abs(pred.score - float(totals[best])) < 1e-4 and pred.text == text(system, seqs[best])


# ---------------------------------------------------------------- the stages
def test_a_saved_causal_lm_becomes_the_pipeline_s_generator(world, tmp_path):
    """generator.family causal_lm, init pretrained: the generator stage saves the LM with its
    settings; a variant's system is built from that folder, and fine-tuning adds the adapters."""
    from rag.models.causal_lm import CausalLMGenerator
    from rag.retrieval.dense import DenseRetriever
    from rag.stages.model_loading import build_system
    from rag.stages.pretraining import copy_pretrained_generator
    from tests.conftest import typed_sections

    tok = make_tokenizer()
    tiny_lm("gpt2", len(tok)).save_pretrained(tmp_path / "lm")
    tok.save_pretrained(tmp_path / "lm")
    template = "{text} ({title}) Q: {question} A:"
    sections = typed_sections({"generator": {"family": "causal_lm", "init": "pretrained", "name_or_path": str(tmp_path / "lm"),
                                             "prompt_template": template, "lora_rank": 2, "lora_alpha": 4.0,
                                             "lora_target_modules": ["c_attn"]}})
    copy_pretrained_generator(sections["generator"], tmp_path / "generator")
    retriever = DenseRetriever(world.passages, world.encoder, world.doc_emb, ExactIndex(world.doc_emb))
    system = build_system(sections["train_nq"], "rag_token", str(tmp_path / "generator"), "cpu", retriever=retriever)
    assert isinstance(system.gen, CausalLMGenerator) and system.gen.template == template
    assert system.gen.lora == {"rank": 2, "alpha": 4.0, "target_modules": ["c_attn"]}
    assert system.source_texts(["q"], system.retrieve(["q"], 1))[0].endswith(" Q: q A:")
    system.prepare_training()
    trainable = {n for n, p in system.generator.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)


# ---------------------------------------------------------------- the copy distribution (CopyLlama)
def test_copy_llama_s_logits_are_the_log_of_its_mixture(world):
    """log(g p_vocab + (1 - g) sum_{i: x_i = v} a_i) written out position by position from the
    model's hidden states and its heads; position t attends to the prompt positions up to t."""
    model = tiny_lm("copy_llama", 30, seed=3)
    x = torch.tensor([[5, 9, 5, 12, 7, 20, 9, 3, 11]])
    p = 6
    with torch.no_grad():
        got = model(input_ids=x, prompt_len=p).logits[0]
        h = model.model(input_ids=x).last_hidden_state[0]
        for t in range(x.shape[1]):
            seen = min(t + 1, p)
            a = torch.softmax(model.copy_query(h[t]) @ h[:seen].T / h.shape[-1] ** 0.5, -1)
            g = torch.sigmoid(model.copy_gate(h[t]))
            mix = g * torch.softmax(model.lm_head(h[t]), -1)
            for i in range(seen):
                mix[x[0, i]] += (1 - g[0]) * a[i]
            assert torch.allclose(got[t], mix.log(), atol=1e-5), t
            if t < p:  # what a prompt position sees is the prompt up to it
                assert torch.allclose(got[t], model(input_ids=x[:, : t + 1], prompt_len=t + 1).logits[0, -1], atol=1e-5)


def test_copy_llama_s_cached_steps_on_left_padded_prompts_equal_a_plain_forward(world):
    """encode, step (whole prefixes, then the cache extended token by token) and the thorough
    rescoring on a batch of prompts of very different lengths: each row as a plain forward of its
    prompt alone."""
    gen = make_system(world, "copy_llama", "token").gen
    model = gen.model
    src, mask = gen.tokenize_sources(["who", "what is the capital of france and where is rome and who was born in berlin"])
    assert int(mask[0].sum()) + 5 < int(mask[1].sum())  # the first prompt is left-padded
    prompt = [src[r][mask[r].bool()].tolist() for r in range(2)]
    body = torch.tensor([[5, 7, 9, 4], [6, 6, 8, 3]])
    ref = torch.stack([forward_lp(model, prompt[r], body[r].tolist()) for r in range(2)]).detach()  # [2, T, V]
    bos = torch.full((2, 1), gen.tokenizer.bos_token_id)
    with torch.no_grad():
        states = gen.encode(src, mask, 0)
        logits, past = gen.step(states, bos, None)
        steps = [logits]
        for t in range(body.shape[1] - 1):
            logits, past = gen.step(states, body[:, t : t + 1], past)
            steps.append(logits)
        assert torch.allclose(torch.log_softmax(torch.stack(steps, 1), -1), ref, atol=1e-5)
        whole, _ = gen.step(states.select(torch.tensor([1, 0])), torch.cat([bos, body[:, :2]], 1).flip(0), None)
        assert torch.allclose(torch.log_softmax(whole, -1), ref[[1, 0], 2], atol=1e-5)
        expand = torch.tensor([0, 1, 1])
        tgt = body[[0, 1, 0]]
        got = gen.hypothesis_logprobs(states, torch.tensor([0, 1]), expand, tgt)
    for r, (row, doc) in enumerate(zip(tgt, expand.tolist())):
        want = forward_lp(model, prompt[doc], row.tolist()).gather(-1, row[:, None])[:, 0]
        assert torch.allclose(got[r], want.detach(), atol=1e-5), r


def test_a_saved_copy_llama_loads_as_one_with_the_same_logprobs(world, tmp_path):
    from rag.models.causal_lm import CopyLlama
    from rag.models.interface import load_generator, saved_family

    system = make_system(world, "copy_llama", "sequence")
    system.gen.save(tmp_path)
    system.tokenizer.save_pretrained(tmp_path)
    assert saved_family(tmp_path) == "causal_lm"
    loaded = load_generator(tmp_path, "cpu", 96, 12)
    assert isinstance(loaded.model, CopyLlama) and loaded.copies
    again = RagSystem(loaded, loaded.tokenizer, "sequence", system.retriever)
    with torch.no_grad():
        assert torch.equal(system_nll(again, QUESTIONS, ANSWERS, K), system_nll(system, QUESTIONS, ANSWERS, K))
        a, b = (s.generate(QUESTIONS, K, method="thorough", beams=2, max_new_tokens=3) for s in (system, again))
    assert [(p.text, p.score) for p in a] == [(p.text, p.score) for p in b]


@pytest.mark.parametrize("key,value", [("local_context", 3), ("exact_match", True), ("copy_next", True)])
def test_seq2seq_only_generator_features_are_refused_for_a_scratch_causal_lm(key, value):
    from pathlib import Path

    import yaml

    from rag.config import load_config
    from rag.errors import ConfigError

    base = yaml.safe_load((Path(__file__).parents[1] / "tests" / "data" / "e2e_causal.yaml").read_text())
    assert load_config(base, check_files=False)["generator"]["copy"]
    with pytest.raises(ConfigError, match=rf"^config key 'generator.{key}': .*set generator.{key}: "):
        load_config({**base, "generator": {**base["generator"], key: value}}, check_files=False)
