"""A generator, a transformers RAG wrapper around the same weights, and fixed retrieved documents."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from benchmarks.common import DEFAULT_RESULTS, ROOT, load_corpus, load_questions
from rag.tasks import ROLES

# a plain BART (transformers' Rag classes run BART, not the copy generator)
GEN_CFG = {"d_model": 128, "layers": 2, "heads": 4, "ffn": 512, "max_source_len": 128, "max_target_len": 32, "dropout": 0.1,
           "copy": False, "copy_next": False, "local_context": 0, "exact_match": False}


def load_generator(prefer_pretrained: bool = True):
    """(generator, tokenizer, source): the pipeline's pretrained generator if present and a plain
    BART (transformers' Rag classes, the reference, run BART; a copy generator is not theirs), else
    a fresh small BART of the default size (config.yaml: d_model 128, 2+2 layers) on a corpus BPE."""
    import json

    path = DEFAULT_RESULTS / "generator/model"
    plain = (path / "config.json").is_file() and not json.loads((path / "config.json").read_text()).get("copy_mechanism")
    if prefer_pretrained and plain and (path / "model.safetensors").is_file():
        from rag.models.generator import Seq2SeqGenerator

        gen, tok = Seq2SeqGenerator.load_model(path)
        return gen, tok, str(path.relative_to(ROOT))
    import tempfile
    from pathlib import Path

    from rag.config import load_config, sections
    from rag.models.generator import build_bart
    from rag.models.tokenizer import train_tokenizer
    from rag.sections import GeneratorSection

    _, titles, texts = load_corpus()
    torch.manual_seed(0)
    tok = train_tokenizer([t + " " + x for t, x in zip(titles, texts)], 4000, [], Path(tempfile.mkdtemp()))
    cfg = load_config(ROOT / "config.yaml", check_files=False)
    cfg["generator"].update(GEN_CFG)
    g = GeneratorSection.from_dict(sections(cfg)["generator"], "generator.json").generator
    return build_bart(tok, g), tok, "fresh (random init)"


def tiny_dpr_question_encoder():
    """A DPR-style question encoder (unused in the timed path: both sides receive the same doc_scores)."""
    from transformers import DPRConfig, DPRQuestionEncoder

    return DPRQuestionEncoder(DPRConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                                        intermediate_size=128))


def hf_rag(kind: str, generator, k: int):
    from transformers import RagConfig, RagSequenceForGeneration, RagTokenForGeneration

    qe = tiny_dpr_question_encoder()
    cfg = RagConfig.from_question_encoder_generator_configs(qe.config, generator.config, n_docs=k)
    cls = RagSequenceForGeneration if kind == "sequence" else RagTokenForGeneration
    return cls(config=cfg, question_encoder=qe, generator=generator)


@dataclass
class Batch:
    questions: list[str]
    answers: list[str]
    src: torch.Tensor  # [B*K, L]
    mask: torch.Tensor  # [B*K, L]
    scores: torch.Tensor  # [B, K]
    target: torch.Tensor  # [B, T] BOS first

    def to(self, device: str) -> "Batch":
        return Batch(self.questions, self.answers, self.src.to(device), self.mask.to(device), self.scores.to(device),
                     self.target.to(device))


def make_batch(tok, b: int, k: int, seed: int = 0, split: str = "train", max_source_len: int = 128, source=None) -> Batch:
    """B questions of the nq task; their K documents are the gold passage and K-1 random others
    (fixed, so both implementations see the same retrieved documents); doc scores are fixed random
    logits (x 20 like the project's score_scale on cosines). ``source(title, text, question)``: the
    generator input (default: the seq2seq family's, ``format_input``)."""
    from rag.models.seq2seq import format_input

    source = source or format_input

    ids, titles, texts = load_corpus()
    by_entity = {}
    for i, pid in enumerate(ids):
        by_entity.setdefault(pid.rsplit("_", 1)[0] if pid.rsplit("_", 1)[-1].isdigit() else pid, []).append(i)
    rng = random.Random(seed)
    qs = load_questions(ROLES.qa, split)
    rows = [qs[(seed * b + i) % len(qs)] for i in range(b)]
    src_texts = []
    for r in rows:
        # gold_docs name passages (miniworld) or whole articles
        row_of = {pid: i for i, pid in enumerate(ids)}
        gold = [j for g in r.get("meta", {}).get("gold_docs", []) for j in ([row_of[g]] if g in row_of else by_entity.get(g, []))][:1]
        docs = gold + rng.sample(range(len(texts)), k - len(gold))
        src_texts += [source(titles[j], texts[j], r["input"]) for j in docs[:k]]
    enc = tok(src_texts, padding=True, truncation=True, max_length=max_source_len, return_tensors="pt")
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(b, k, generator=g) * 2.0
    scores = scores.sort(dim=1, descending=True).values
    answers = [r["targets"][0] for r in rows]
    tgt = tok(answers, padding=True, truncation=True, max_length=32, return_tensors="pt")["input_ids"]
    if tok.bos_token_id is not None and not bool((tgt[:, 0] == tok.bos_token_id).all()):
        tgt = torch.cat([tgt.new_full((tgt.shape[0], 1), tok.bos_token_id), tgt], 1)
    return Batch([r["input"] for r in rows], answers, enc["input_ids"], enc["attention_mask"], scores, tgt)
