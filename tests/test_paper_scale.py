"""Paper-scale plumbing: config/paper.yaml, the SLURM localhost script (opt-in), and importing a
Hugging Face RAG checkpoint (rag.hf_import) checked against transformers' own RAG code."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_paper_config_is_valid():
    from rag.config import load_config, sections

    cfg = load_config(ROOT / "config" / "paper.yaml", check_files=False)  # SearchQA is fetched by hand
    assert cfg["corpus"]["source"] == "download" and cfg["corpus"]["format"] == "dpr_tsv"
    assert set(cfg["tasks"]) == {"nq", "triviaqa", "webquestions", "curatedtrec", "msmarco", "jeopardy", "fever3", "fever2"}
    assert cfg["tasks"]["webquestions"]["init_from"] == "nq" and cfg["tasks"]["curatedtrec"]["init_from"] == "nq"
    s = sections(cfg)
    assert s["eval_nq"]["decode"]["token"]["k"] == 15 and s["eval_nq"]["decode"]["sequence"]["method"] == "thorough"
    assert s["eval_msmarco"]["decode"]["sequence"] == {"method": "fast", "beams": 4, "k": 10, "max_new_tokens": 40}
    for rule in ("train", "encode_shard", "evaluate", "pretrain_generator"):
        assert cfg["resources"][rule]["gpu"] == 1


def test_paper_scale_docs_e5_and_reranker_config_is_valid():
    """docs/paper_scale.md's e5 retriever and reranker over config/paper.yaml: a valid config whose reranker runs the
    frozen variants on NQ as <variant>+rerank, reading the dense retriever's files and its cross-encoder."""
    import re

    import yaml

    from rag.config import load_config
    from rag.runs import retriever_runs
    from rag.retrieval import retriever_files

    text = (ROOT / "docs" / "paper_scale.md").read_text()
    block = re.search(r"## Another retriever on the paper's corpus.*?```yaml\n(.*?)```", text, re.S).group(1)
    extra = yaml.safe_load(block)
    base = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    cfg = load_config({**base, "retriever": {**base["retriever"], **extra["retriever"]}, "retrievers": extra["retrievers"]},
                      check_files=False)
    assert cfg["retriever"]["query_prefix"] == "query: " and cfg["retrievers"]["rerank"]["options"]["train_steps"] == 0
    runs = retriever_runs(cfg)
    assert runs and all(task == "nq" and v.endswith("_frozen+rerank") for task, v in runs)
    assert retriever_files("rerank", cfg["retrievers"]) == ("passages", "embeddings", "index", "reranker")


def test_paper_config_formats_are_known_parsers():
    from rag.config import load_config
    from rag.data.formats import PARSERS

    cfg = load_config(ROOT / "config" / "paper.yaml", check_files=False)  # SearchQA is fetched by hand
    for name, task in cfg["tasks"].items():
        assert task["format"] in PARSERS, name
        # per-split overrides (WQ/CT train/dev: dpr_biencoder); tests/test_official_samples.py runs them all
        assert set(task.get("formats", {}).values()) <= set(PARSERS), name


@pytest.mark.skipif(os.environ.get("RAG_SLURM_TEST") != "1",
                    reason="set RAG_SLURM_TEST=1 to install slurm-wlm (apt-get, root) and run a DAG through --executor slurm")
@pytest.mark.runs_last  # with slurm-wlm installed and no controller, each snakemake start waits up to 10 s (conftest.py)
def test_slurm_localhost(tmp_path):
    # output to a file, not a pipe: the daemons the script starts would hold a pipe open
    log = tmp_path / "slurm_localhost.log"
    running_before = {d for d in ("munged", "slurmctld", "slurmd")
                      if subprocess.run(["pgrep", "-x", d], capture_output=True).returncode == 0}
    try:
        with open(log, "w") as fh:
            proc = subprocess.run(["bash", str(ROOT / "scripts" / "slurm_localhost.sh"), str(tmp_path / "work")],
                                  stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=1800)
    finally:
        for daemon in ("slurmd", "slurmctld", "munged"):  # stop what this test started
            if daemon not in running_before:
                subprocess.run(["pkill", "-x", daemon], capture_output=True)
    assert proc.returncode == 0, log.read_text()[-5000:]
    assert (tmp_path / "work" / "reports" / "slurmtiny" / "report.html").is_file()


# ------------------------------------------------------------------------- HF checkpoint import
WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
         "upsilon phi chi psi omega who what where is the of / // capital river born city").split()


def _generator_tokenizer(path: Path):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    vocab = {t: i for i, t in enumerate(special + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>", mask_token="<mask>")


def _question_tokenizer():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate(special + WORDS)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    return PreTrainedTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                                   unk_token="[UNK]", mask_token="[MASK]")


def _tiny_rag_checkpoint(path: Path, kind: str, n_docs: int):
    import torch
    from transformers import (BartConfig, BartForConditionalGeneration, DPRConfig, DPRQuestionEncoder, RagConfig,
                              RagSequenceForGeneration, RagTokenForGeneration)

    torch.manual_seed(0)
    g_tok, q_tok = _generator_tokenizer(path), _question_tokenizer()
    g_cfg = BartConfig(vocab_size=len(g_tok), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                       decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=128,
                       pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=0, forced_bos_token_id=None,
                       forced_eos_token_id=None, init_std=0.5, dropout=0.0, attention_dropout=0.0, scale_embedding=False)
    q_cfg = DPRConfig(vocab_size=len(q_tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=64, projection_dim=0, initializer_range=0.5)
    rag_cfg = RagConfig.from_question_encoder_generator_configs(q_cfg, g_cfg, n_docs=n_docs)
    cls = RagTokenForGeneration if kind == "token" else RagSequenceForGeneration
    model = cls(config=rag_cfg, question_encoder=DPRQuestionEncoder(q_cfg), generator=BartForConditionalGeneration(g_cfg))
    model.eval()
    model.save_pretrained(path)
    g_tok.save_pretrained(path / "generator_tokenizer")
    q_tok.save_pretrained(path / "question_encoder_tokenizer")
    return model, g_tok, q_tok


def _system(model_dir: Path, kind: str, n_docs: int):
    import faiss
    import torch

    from rag.data.corpus import Passages
    from rag.models.generator import Seq2SeqGenerator
    from rag.models.rag import RagSystem
    from rag.retrieval.dense import DenseRetriever
    from rag.retrieval.encoders import Encoder, EncoderText

    rng = np.random.default_rng(1)
    titles = [f"{WORDS[i]}" for i in range(n_docs)]
    texts = [" ".join(rng.choice(WORDS[:24], size=6)) for _ in range(n_docs)]
    passages = Passages([f"d{i}" for i in range(n_docs)], titles, texts)
    emb = rng.normal(size=(n_docs, 16)).astype(np.float32)
    index = faiss.IndexFlatIP(16)
    index.add(emb)
    gen, tok = Seq2SeqGenerator.load_model(model_dir / "generator")
    qenc = Encoder.load(str(model_dir / "question_encoder"), EncoderText("pooler", False, 32))
    torch.manual_seed(0)
    system = RagSystem(gen, tok, kind, DenseRetriever(passages, qenc, emb, index, 1.0), 64, 16).eval()
    return system, passages, emb


def _hf_context(model, g_tok, q_tok, questions, passages, emb):
    """context_input_ids / doc_scores as transformers' RagRetriever would pass them (docs by score)."""
    import torch

    from rag.models.seq2seq import format_input

    with torch.no_grad():
        q = model.rag.question_encoder(**q_tok(questions, return_tensors="pt", padding=True)).pooler_output
    scores = q @ torch.from_numpy(emb).T  # [B, n]
    order = scores.argsort(dim=1, descending=True)
    doc_scores = torch.gather(scores, 1, order)
    texts = [format_input(passages.titles[j], passages.texts[j], qq) for qq, row in zip(questions, order.tolist()) for j in row]
    enc = g_tok(texts, return_tensors="pt", padding=True)
    return enc["input_ids"], enc["attention_mask"], doc_scores, order


QUESTIONS = ["who is the capital of alpha", "where is the river of sigma born"]


def _strip(seq, g_tok):
    return [t for t in seq if t not in (g_tok.bos_token_id, g_tok.eos_token_id, g_tok.pad_token_id)]


def test_import_hf_rag_token_matches_transformers_greedy(tmp_path):
    import torch

    from rag.hf_import import import_hf_rag
    from rag.io import read_json

    n = 4
    model, g_tok, q_tok = _tiny_rag_checkpoint(tmp_path / "ckpt", "token", n)
    meta = import_hf_rag(tmp_path / "ckpt", tmp_path / "model", task="nq", tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    assert meta["rag_kind"] == "token" and meta["variant"] == "rag_token" and meta["mlflow_run_id"]
    assert read_json(tmp_path / "model" / "meta.json")["mlflow_run_id"] == meta["mlflow_run_id"]
    system, passages, emb = _system(tmp_path / "model", "token", n)
    ids, mask, doc_scores, order = _hf_context(model, g_tok, q_tok, QUESTIONS, passages, emb)

    # the imported question encoder retrieves the same documents with the same scores
    ret = system.retrieve(QUESTIONS, n)
    assert ret.ids.tolist() == order.tolist()
    torch.testing.assert_close(ret.scores.float(), doc_scores, rtol=1e-4, atol=1e-4)

    preds = system.generate(QUESTIONS, n, "greedy", 1, 8)
    with torch.no_grad():
        out = model.generate(context_input_ids=ids, context_attention_mask=mask, doc_scores=doc_scores, n_docs=n,
                             num_beams=1, do_sample=False, max_length=1 + 8, min_length=0)  # start token + 8
    for p, seq in zip(preds, out.tolist()):
        ours = _strip(g_tok(p.text, add_special_tokens=False)["input_ids"], g_tok)
        assert ours == _strip(seq, g_tok), (p.text, g_tok.decode(seq))
        assert len(ours) > 0


def test_import_hf_rag_sequence_matches_transformers_nll(tmp_path):
    import torch

    from rag.hf_import import import_hf_rag
    from tests.reference import sequence_logprobs

    n = 3
    model, g_tok, q_tok = _tiny_rag_checkpoint(tmp_path / "ckpt", "sequence", n)
    meta = import_hf_rag(tmp_path / "ckpt", tmp_path / "model")
    assert meta["rag_kind"] == "sequence" and meta["mlflow_run_id"] is None
    system, passages, emb = _system(tmp_path / "model", "sequence", n)
    ids, mask, doc_scores, _ = _hf_context(model, g_tok, q_tok, QUESTIONS, passages, emb)
    targets = ["alpha beta", "gamma delta epsilon"]
    enc = system.encode(QUESTIONS, n)
    for i, t in enumerate(targets):
        toks = tuple(g_tok(t, add_special_tokens=False)["input_ids"]) + (g_tok.eos_token_id,)
        ours = torch.logsumexp(sequence_logprobs(system, enc, i, [toks])[0] + enc.doc_lp[i].cpu(), dim=0)
        labels = torch.tensor([[g_tok.bos_token_id, *toks]])
        with torch.no_grad():
            out = model(context_input_ids=ids[i * n:(i + 1) * n], context_attention_mask=mask[i * n:(i + 1) * n],
                        doc_scores=doc_scores[i:i + 1], labels=labels, reduce_loss=False, n_docs=n)
        torch.testing.assert_close(-ours, out.loss.reshape(()).float(), rtol=1e-4, atol=1e-4)


def test_import_hf_rag_rejects_non_rag(tmp_path):
    from rag.errors import ConfigError
    from rag.hf_import import import_hf_rag

    (tmp_path / "x").mkdir()
    with pytest.raises(ConfigError, match="no config.json"):
        import_hf_rag(tmp_path / "x", tmp_path / "out")
    shutil.rmtree(tmp_path / "x")
