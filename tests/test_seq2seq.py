"""Padding-skipping generator passes (rag.models.seq2seq) equal the plain full-logits pass."""

from __future__ import annotations

import pytest
import torch
from ddp_worker import make_generator, make_tokenizer

from rag.models import seq2seq
from rag.models.marginal import shift_left, token_logprobs
from tests.reference import generator_nll

SOURCES = ["paris is the capital of france", "rome", "who was born in berlin , the city of germany and the river",
           "the river of london is in england", "madrid", "what country is spain in ? the capital of spain is madrid"]
TARGETS = ["paris", "rome is in italy", "germany", "the river of london", "spain and madrid", "a"]


@pytest.fixture(scope="module")
def parts():
    torch.set_num_threads(1)
    tok = make_tokenizer()
    gen = make_generator(len(tok), seed=3)
    src = tok(SOURCES, padding=True, return_tensors="pt")
    tgt = tok(TARGETS, padding=True, return_tensors="pt")["input_ids"]
    assert bool(tgt.eq(1).any()) and len(set(src["attention_mask"].sum(1).tolist())) > 3  # padding on both sides
    return tok, gen, src["input_ids"], src["attention_mask"], tgt


@pytest.mark.parametrize("overhead", [0, 8, 64, 10**9])
def test_target_logprobs_equal_the_full_logits(parts, overhead):
    tok, gen, ids, mask, tgt = parts
    torch.set_grad_enabled(False)
    logits = gen(input_ids=ids, attention_mask=mask, decoder_input_ids=tgt).logits
    nxt = shift_left(tgt, tok.pad_token_id)
    ref_ll, ref_sm = token_logprobs(logits, nxt, True)
    pad = nxt.eq(tok.pad_token_id)
    ll, sm = seq2seq.target_logprobs(gen, ids, mask, tgt, tok.pad_token_id, smooth=True, overhead_tokens=overhead)
    assert ll.shape == tgt.shape and sm.shape == tgt.shape
    assert float((ll - ref_ll.masked_fill(pad, 0)).abs().max()) < 1e-5
    assert float((sm - ref_sm.masked_fill(pad, 0)).abs().max()) < 1e-3  # sums over the vocabulary
    assert bool(ll[pad].eq(0).all())
    # the generic path (any seq2seq model: full logits, then the scored positions) agrees too
    generic = torch.nn.Module()
    generic.forward = lambda **kw: gen(**kw)
    ll2, _ = seq2seq.target_logprobs(generic, ids, mask, tgt, tok.pad_token_id, overhead_tokens=overhead)
    assert float((ll2 - ll).abs().max()) < 1e-5
    torch.set_grad_enabled(True)


def test_target_logprobs_gradients_equal_the_full_logits(parts):
    tok, gen, ids, mask, tgt = parts
    gen.zero_grad(set_to_none=True)
    generator_nll(gen(input_ids=ids, attention_mask=mask, decoder_input_ids=tgt).logits, tgt, tok.pad_token_id).sum().backward()
    ref = {n: p.grad.clone() for n, p in gen.named_parameters() if p.grad is not None}
    gen.zero_grad(set_to_none=True)
    ll, _ = seq2seq.target_logprobs(gen, ids, mask, tgt, tok.pad_token_id, overhead_tokens=4)
    (-ll.sum()).backward()
    for n, g in ref.items():
        got = dict(gen.named_parameters())[n].grad
        assert got is not None, n
        assert float((got - g).abs().max()) <= 1e-5 * max(1.0, float(g.abs().max())), n


@pytest.mark.parametrize("overhead", [0, 16, 10**9])
def test_chunked_encoder_and_logits_equal_one_pass(parts, overhead):
    tok, gen, ids, mask, tgt = parts
    with torch.no_grad():
        ref = gen.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        got = seq2seq.encode(gen, ids, mask, overhead)
        keep = mask.bool()
        assert got.shape == ref.shape
        assert float((got[keep] - ref[keep]).abs().max()) < 1e-5
        full = gen(input_ids=ids, attention_mask=mask, decoder_input_ids=tgt).logits
        assert float((seq2seq.logits(gen, ids, mask, tgt, overhead) - full).abs().max()) < 1e-4


def test_length_chunks_minimise_padding_plus_overhead():
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0]])
    cover = lambda chunks: sorted(int(i) for c in chunks for i in c)  # noqa: E731
    # no overhead: one chunk per length, no padding at all
    assert [c.tolist() for c in seq2seq.length_chunks(mask, 0)] == [[1, 3], [5], [2], [0, 4]]
    # prohibitive overhead: one chunk, longest first
    one = seq2seq.length_chunks(mask, 10**6)
    assert len(one) == 1 and one[0].tolist() == [1, 3, 5, 2, 0, 4]
    # overhead 2: cuts only where they save more than 2 padded tokens: [4,4,3] (1 pad) + [2,1,1] (2 pads)
    mid = seq2seq.length_chunks(mask, 2)
    assert [c.tolist() for c in mid] == [[1, 3, 5], [2, 0, 4]]
    for chunks in (one, mid):
        assert cover(chunks) == list(range(6))


@pytest.fixture(scope="module", params=[0, 3, "exact_match", "copy_next"],
                ids=["copy", "copy+local_context", "copy+local_context+exact_match", "copy+local_context+exact_match+copy_next"])
def copy_parts(parts, request):
    tok, _, ids, mask, tgt = parts
    if request.param in ("exact_match", "copy_next"):  # "?" parts passage and query in one of SOURCES; the other rows have no query
        sep = [tok.convert_tokens_to_ids("?")]
        assert bool(ids.eq(sep[0]).any())
        return tok, make_generator(len(tok), seed=5, copy=True, local_context=3, query_separator=sep,
                                   copy_next=request.param == "copy_next"), ids, mask, tgt
    return tok, make_generator(len(tok), seed=5, copy=True, local_context=request.param), ids, mask, tgt


def test_copy_generator_gives_normalised_logprobs_that_put_mass_on_source_tokens(copy_parts):
    tok, gen, ids, mask, tgt = copy_parts
    with torch.no_grad():
        lp = gen(input_ids=ids, attention_mask=mask, decoder_input_ids=tgt).logits
        assert float(torch.logsumexp(lp, -1).abs().max()) < 1e-4  # a distribution, not unnormalised logits
        plain = torch.log_softmax(gen.lm_head(gen.model(input_ids=ids, attention_mask=mask, decoder_input_ids=tgt)
                                              .last_hidden_state) + gen.final_logits_bias, -1)
        in_source = torch.zeros(ids.shape[0], lp.shape[-1], dtype=torch.bool).scatter_(1, ids * mask, True)
        in_source[:, tok.pad_token_id] = bool(ids.eq(tok.pad_token_id).any())
        gain = (lp - plain).exp().mean(1)  # [N, V] how much the copy distribution moves each token
        assert float(gain[in_source].mean()) > float(gain[~in_source].mean())  # mass moves onto source tokens
        # decoding from given encoder states (how RagSystem decodes) equals the one-pass forward
        enc = gen.get_encoder()(input_ids=ids, attention_mask=mask)
        again = gen(input_ids=ids, encoder_outputs=enc, attention_mask=mask, decoder_input_ids=tgt).logits
        assert float((again - lp).abs().max()) < 1e-5
    with pytest.raises(ValueError, match="input_ids"):
        gen(encoder_outputs=enc, attention_mask=mask, decoder_input_ids=tgt)


@pytest.mark.parametrize("overhead", [0, 10**9])
def test_copy_generator_target_logprobs_and_gradients_equal_the_full_pass(copy_parts, overhead):
    tok, gen, ids, mask, tgt = copy_parts
    gen.zero_grad(set_to_none=True)
    full = gen(input_ids=ids, attention_mask=mask, decoder_input_ids=tgt).logits
    ref_ll, _ = token_logprobs(full, shift_left(tgt, tok.pad_token_id), False)
    pad = shift_left(tgt, tok.pad_token_id).eq(tok.pad_token_id)
    (-ref_ll.masked_fill(pad, 0).sum()).backward()
    ref = {n: p.grad.clone() for n, p in gen.named_parameters() if p.grad is not None}
    assert "copy_query.weight" in ref and "copy_gate.weight" in ref
    if gen.config.local_context:  # trained, and (overhead 0: rows cut to their own length) blind to right padding
        assert "model.encoder.local_context.weight" in ref
    if getattr(gen.config, "query_separator", None):
        assert "model.encoder.match_embed.weight" in ref
    if getattr(gen.config, "copy_next", False):
        assert "next_read.weight" in ref and "next_bias" in ref
    gen.zero_grad(set_to_none=True)
    ll, _ = seq2seq.target_logprobs(gen, ids, mask, tgt, tok.pad_token_id, overhead_tokens=overhead)
    assert float((ll - ref_ll.masked_fill(pad, 0)).detach().abs().max()) < 1e-5
    (-ll.sum()).backward()
    for n, g in ref.items():
        assert float((dict(gen.named_parameters())[n].grad - g).abs().max()) <= 1e-5 * max(1.0, float(g.abs().max())), n


def test_copy_generator_saves_and_loads_as_itself(copy_parts, tmp_path):
    from rag.models.generator import CopyBart, Seq2SeqGenerator

    tok, gen, ids, mask, tgt = copy_parts
    gen.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again, _ = Seq2SeqGenerator.load_model(tmp_path)
    assert isinstance(again, CopyBart)
    assert type(again.model.encoder) is type(gen.model.encoder)  # LocalContextEncoder where configured
    with torch.no_grad():
        a = gen(input_ids=ids, attention_mask=mask, decoder_input_ids=tgt).logits
        b = again.eval()(input_ids=ids, attention_mask=mask, decoder_input_ids=tgt).logits
    assert float((a - b).abs().max()) < 1e-6


def test_a_copy_generator_folder_without_its_settings_is_a_one_line_error(copy_parts, tmp_path):
    import json

    from rag.errors import ConfigError
    from rag.models.generator import Seq2SeqGenerator

    tok, gen, *_ = copy_parts
    gen.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    del cfg["copy_next"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="has copy_mechanism but not copy_next; build it again"):
        Seq2SeqGenerator.load_model(tmp_path)


def test_exact_match_marks_tokens_found_across_the_last_separator():
    from rag.models.generator import exact_match

    sep = (7, 8)
    ids = torch.tensor([[0, 5, 6, 9, 7, 8, 5, 4, 2, 1, 1],    # passage 5 6 9 | query 5 4: 5 matches on both sides
                        [0, 5, 7, 8, 6, 7, 8, 6, 5, 2, 1],    # two separators: the query is "6 5" after the last
                        [0, 5, 6, 5, 6, 2, 1, 1, 1, 1, 1],    # no separator: all passage, nothing matches
                        [0, 4, 7, 8, 1, 2, 1, 1, 1, 1, 1]])   # a pad id in the query matches no padding
    mask = torch.tensor([[1] * 9 + [0] * 2, [1] * 10 + [0], [1] * 6 + [0] * 5, [1] * 6 + [0] * 5])
    got = exact_match(ids, mask, sep).tolist()
    assert got[0] == [0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    assert got[1] == [0, 1, 0, 0, 1, 0, 0, 1, 1, 0, 0]  # the passage holds "7 8 6": 6 matches the query's 6
    assert got[2] == [0] * 11
    assert got[3] == [0] * 11
    assert exact_match(ids[:, :1], mask[:, :1], sep).tolist() == [[0]] * 4  # shorter than the separator


def test_query_separator_finds_doc_sep_in_a_trained_tokenizer(tmp_path):
    from rag.models.generator import exact_match, query_separator
    from rag.models.tokenizer import train_tokenizer
    from rag.models.seq2seq import DOC_SEP, format_input

    texts = ["zorbat is the capital of kelvia . its leader is mira tolen", "the river gled flows through vroux"] * 20
    tok = train_tokenizer(texts, 400, [], tmp_path)
    sep = query_separator(tok)
    assert tok.decode(sep).strip() == DOC_SEP.strip()
    src = [format_input("kelvia", "the capital of kelvia is zorbat", "the capital of kelvia is vroux"),
           format_input("kelvia", "the capital of kelvia is zorbat", "the capital of kelvia is zorbat")]
    batch = tok(src, padding=True, return_tensors="pt")
    m = exact_match(batch["input_ids"], batch["attention_mask"], tuple(sep))
    value = lambda i, word: [m[i, j].item() for j, t in enumerate(batch["input_ids"][i].tolist())  # noqa: E731
                             if word in tok.decode([t])]
    assert set(value(0, "vroux") + value(0, "zorbat")) == {0}  # a refuted claim's value is not in the passage
    assert set(value(1, "zorbat")) == {1}  # a supported one is, on both sides


def test_build_bart_sets_the_exact_match_separator_and_refuses_it_without_local_context(tmp_path):
    from conftest import typed_sections

    from rag.errors import ConfigError
    from rag.models.generator import LocalContextEncoder, build_bart, query_separator
    from rag.models.tokenizer import train_tokenizer

    tok = train_tokenizer(["the capital of kelvia is zorbat"] * 10, 300, [], tmp_path)
    small = {"d_model": 16, "ffn": 32, "heads": 2, "layers": 1}
    g = typed_sections({"generator": small})["generator"].generator  # config.yaml's generator, small
    model = build_bart(tok, g)
    assert isinstance(model.model.encoder, LocalContextEncoder) and model.model.encoder.match_embed is not None
    assert list(model.config.query_separator) == query_separator(tok)
    assert build_bart(tok, g.model_copy(update=dict(exact_match=False))).model.encoder.match_embed is None
    with pytest.raises(ConfigError, match="generator.exact_match"):
        build_bart(tok, g.model_copy(update=dict(local_context=0)))


def test_continuation_marks_the_source_positions_after_the_last_generated_token():
    from rag.models.generator import continuation

    specials = (0, 1, 2)  # bos, pad, eos
    ids = torch.tensor([[0, 5, 6, 9, 5, 7, 2, 1],     # "5 6 9 5 7": 5 is followed by 6 and by 7
                        [0, 4, 2, 2, 4, 1, 1, 1]])    # a pad id after the last 4 continues nothing
    mask = torch.tensor([[1] * 7 + [0], [1] * 5 + [0] * 3])
    dec = torch.tensor([[0, 5, 9, 7],                 # the decoder start continues nothing; 7's next is eos
                        [0, 4, 2, 8]])                # 2 (eos) is special; 8 is not in the source
    got = continuation(ids, mask, dec, specials).long().tolist()
    assert got[0] == [[0] * 8,
                      [0, 0, 1, 0, 0, 1, 0, 0],       # after 5: positions 2 and 5
                      [0, 0, 0, 0, 1, 0, 0, 0],       # after 9: position 4
                      [0, 0, 0, 0, 0, 0, 1, 0]]       # after 7: the eos at 6 (read on to stop)
    assert got[1] == [[0] * 8, [0, 0, 1, 0, 0, 0, 0, 0], [0] * 8, [0] * 8]  # after 4: its eos; the masked pad is not


def test_copy_next_reads_on_from_the_copied_token_and_is_refused_without_copy(tmp_path):
    """generator.copy_next: built as a no-op, so pretraining starts from the generator without it;
    given weights, the state after a token moves the copy attention onto the token that follows
    it in the source; without copy it is a one-line config error."""
    from conftest import typed_sections

    from rag.errors import ConfigError
    from rag.models.generator import build_bart
    from rag.models.tokenizer import train_tokenizer

    tok = train_tokenizer(["the leader of kelvia is mira tolen"] * 10, 300, [], tmp_path)
    small = {"d_model": 16, "ffn": 32, "heads": 2, "layers": 1}
    g = typed_sections({"generator": small})["generator"].generator
    torch.manual_seed(0)
    plain = build_bart(tok, g.model_copy(update=dict(copy_next=False))).eval()
    model = build_bart(tok, g.model_copy(update=dict(copy_next=True))).eval()
    missing = model.load_state_dict(plain.state_dict(), strict=False).missing_keys
    assert sorted(missing) == ["next_bias", "next_read.bias", "next_read.weight"]
    batch = tok(["the leader of kelvia is mira tolen"], return_tensors="pt")
    ids = batch["input_ids"]
    mira, tolen = (tok.convert_tokens_to_ids(t) for t in tok.tokenize(" mira tolen"))
    dec = torch.tensor([[tok.bos_token_id, mira]])
    with torch.no_grad():
        before = model(**batch, decoder_input_ids=dec).logits
        assert float((before - plain(**batch, decoder_input_ids=dec).logits).abs().max()) == 0.0  # a no-op as built
        model.next_bias.fill_(10.0)
        after = model(**batch, decoder_input_ids=dec).logits
    others = [t for t in set(ids[0].tolist()) if t != tolen]
    assert float(after[0, 1, tolen]) > float(after[0, 1, others].max())  # after "mira", "tolen" leads the source
    assert float(before[0, 1, tolen]) < float(before[0, 1, others].max())  # as it did not before
    assert float((after[0, 0] - before[0, 0]).abs().max()) == 0.0  # the decoder start reads nothing on
    with pytest.raises(ConfigError, match="generator.copy_next"):
        build_bart(tok, g.model_copy(update=dict(copy=False, local_context=0, exact_match=False, copy_next=True)))
