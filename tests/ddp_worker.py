"""Tiny deterministic RAG worlds for the model tests, and the torchrun worker of test_ddp.

Run as ``torchrun --nproc-per-node 2 tests/ddp_worker.py OUT.pt CKPT_DIR`` it trains a tiny
RAG-Token system with DistributedDataParallel (gloo, CPU) and saves the final parameters and
losses; ``run_training(world=1)`` is the single-process reference the test compares against.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

WORDS = ("paris london rome berlin madrid france england italy germany spain capital city river the of is "
         "what where who which country born in a an and to").split()
PUNCT = ["/", "//", "?", ","]


def make_tokenizer(words=WORDS):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for w in list(words) + PUNCT:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>")


def make_generator(vocab_size: int, seed: int, d: int = 16, copy: bool = False, local_context: int = 0,
                   query_separator: list[int] | None = None, copy_next: bool = False):
    from transformers import BartConfig, BartForConditionalGeneration

    from rag.models.generator import CopyBart

    cfg = BartConfig(copy_mechanism=copy, copy_next=copy_next, local_context=local_context, query_separator=query_separator, vocab_size=vocab_size, d_model=d, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=2 * d, decoder_ffn_dim=2 * d,
                     max_position_embeddings=64, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                     init_std=0.3, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                     forced_bos_token_id=None, forced_eos_token_id=None)
    torch.manual_seed(seed)
    model = (CopyBart if copy else BartForConditionalGeneration)(cfg).eval()
    if copy_next:  # built as a no-op (zero read, zero bias): give it weights, so tests see what it adds
        with torch.no_grad():
            torch.nn.init.normal_(model.next_read.weight, std=0.3)
            model.next_bias.fill_(2.0)
    return model


def make_question_encoder(vocab_size: int, seed: int, d: int = 16):
    from transformers import DPRConfig, DPRQuestionEncoder

    cfg = DPRConfig(vocab_size=vocab_size, hidden_size=d, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=2 * d, max_position_embeddings=64, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, initializer_range=0.3, projection_dim=0, pad_token_id=1)
    torch.manual_seed(seed)
    return DPRQuestionEncoder(cfg).eval()


class ExactIndex:
    """Inner-product search over fixed document embeddings (what faiss.IndexFlatIP does)."""

    def __init__(self, emb: np.ndarray):
        self.emb = emb

    def search(self, q: np.ndarray, k: int):
        s = q @ self.emb.T
        ids = np.argsort(-s, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(s, ids, 1), ids


@dataclass
class World:
    tokenizer: object
    generator: object
    qenc: object  # DPRQuestionEncoder
    encoder: object  # rag Encoder around qenc
    passages: object
    doc_emb: np.ndarray


def make_world(seed: int = 0, n_docs: int = 6, words=WORDS, d: int = 16) -> World:
    from rag.data.corpus import Passages
    from rag.retrieval.encoders import Encoder, EncoderText

    tok = make_tokenizer(words)
    v = len(tok)
    gen = make_generator(v, seed, d)
    qenc = make_question_encoder(v, seed + 1, d)
    rng = np.random.default_rng(seed)
    ws = [w for w in words]
    titles = [" ".join(rng.choice(ws, 2)) for _ in range(n_docs)]
    texts = [" ".join(rng.choice(ws, 5)) for _ in range(n_docs)]
    passages = Passages([f"d{i}" for i in range(n_docs)], titles, texts)
    doc_emb = (rng.standard_normal((n_docs, d)) * 0.5).astype(np.float32)
    enc = Encoder(qenc, tok, EncoderText("pooler", False))
    return World(tok, gen, qenc, enc, passages, doc_emb)


def make_system(world: World, kind: str, generator=None, question_encoder=None, passage_encoder: str | None = None,
                objective: str = "marginal"):
    """``passage_encoder``: None (the index's embeddings score), ``separate`` (a passage encoder of its own
    re-encodes the retrieved passages) or ``shared`` (the question encoder's weights do)."""
    from rag.models.rag import RagSystem
    from rag.retrieval.dense import DenseRetriever
    from rag.retrieval.encoders import Encoder, EncoderText

    qe = world.encoder
    if question_encoder is not None:
        qe = Encoder(question_encoder, world.tokenizer, EncoderText("pooler", False))
    ce = None
    if passage_encoder is not None:
        model = qe.model if passage_encoder == "shared" else make_question_encoder(len(world.tokenizer), seed=11)
        ce = Encoder(model, world.tokenizer, EncoderText("pooler", False))
    retriever = DenseRetriever(world.passages, qe, world.doc_emb, ExactIndex(world.doc_emb), context_encoder=ce)
    return RagSystem(generator if generator is not None else world.generator, world.tokenizer, kind, retriever,
                     objective=objective)


QUESTIONS = ["what is the capital of france", "where is rome", "who was born in berlin", "which river is in london",
             "what country is madrid in", "the city of paris", "capital of italy", "where is spain"]
ANSWERS = ["paris", "italy", "germany", "the river", "spain", "france", "rome", "madrid"]


def run_training(ckpt_dir, rank: int = 0, world: int = 1, ddp: bool = False, steps: int = 3,
                 passage_encoder: str | None = None, objective: str = "marginal", refresh=None, channel=None,
                 keepers: list | None = None, **kw):
    """Train the tiny RAG-Token system; (its parameters, the losses). ``refresh``: a RefreshOptions, the index
    kept by an IndexKeeper (over ``channel`` for async; appended to ``keepers``)."""
    from rag.config_keys import Train
    from rag.training import TrainRun, train

    w = make_world(seed=3)
    system = make_system(w, "token", passage_encoder=passage_encoder, objective=objective)
    kw.setdefault("train_passage_encoder", passage_encoder is not None)
    if refresh is not None:
        from rag.retrieval.refresh import IndexKeeper

        kw["keeper"] = IndexKeeper(system.retriever, refresh, QUESTIONS[:4], 2, channel=channel)
        if keepers is not None:
            keepers.append(kw["keeper"])
    module = None
    if ddp:
        module = torch.nn.parallel.DistributedDataParallel(system)
    section = {"steps": steps, "batch_size": 4, "k": 2, "lr": 1e-2, "question_encoder_lr": 1e-2, "warmup_steps": 1,
               "label_smoothing": 0.1, "checkpoint_every": 100, "log_every": 1}
    section.update({key: kw.pop(key) for key in list(kw) if key in Train.model_fields})
    how = {"progress": False, **{key: kw.pop(key) for key in list(kw) if key in TrainRun.__dataclass_fields__}}
    kw.setdefault("train_question_encoder", True)
    losses = train(system, QUESTIONS, ANSWERS, Train(**section),
                   TrainRun(Path(ckpt_dir), 5, rank=rank, world=world, ddp_module=module, **how), **kw)
    params = {n: p.detach().clone() for n, p in system.named_parameters()}
    return params, losses


def main() -> None:
    from rag.training import ddp_setup

    torch.set_num_threads(1)
    out, ckpt_dir = sys.argv[1], sys.argv[2]
    rank, world = ddp_setup()
    assert world == int(os.environ["WORLD_SIZE"]) == 2, world
    params, losses = run_training(ckpt_dir, rank=rank, world=world, ddp=True)
    if rank == 0:
        torch.save({"params": params, "losses": torch.tensor(losses, dtype=torch.float64)}, out)
    sys.stdout.flush()
    sys.stderr.flush()
    # gloo teardown can hang at interpreter exit on some machines; the result is on disk
    os._exit(0)


if __name__ == "__main__":
    main()
