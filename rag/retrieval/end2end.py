"""The end-to-end dense retriever (family ``end2end``): DPR's bi-encoder with its passage encoder trained too.

In training, the index the run starts from (the experiment's, built by the configured passage encoder) proposes
passages, the current passage encoder
encodes them again, so the doc scores carry gradients to both encoders (:class:`rag.retrieval.dense.
DenseRetriever` ``context_encoder``); the index is kept as the declaration's ``index_refresh`` says
(:mod:`rag.retrieval.refresh`). The question and passage encoders may be one model (``share_encoders``).

A trained model folder holds what its retriever is: ``question_encoder/``, ``context_encoder/`` (unless shared)
and ``index/`` (the corpus encoded by the final passage encoder: ``emb-0.npy``, ``flat.faiss`` and its shard
record), so its evaluation retrieves from the index its own encoders make, checked as every index is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rag.retrieval.dense import DenseRetriever

INDEX_DIR = "index"
CONTEXT_DIR = "context_encoder"
SHARD = "emb-0.npy"
INDEX = "flat.faiss"
REFRESH_FILE = "refresh.json"  # the index's refreshes, their staleness and cost (rag.stages.fine_tuning)


class End2EndRetriever(DenseRetriever):
    """A dense retriever whose passage encoder trains (``context_encoder``), made from its declaration."""

    @classmethod
    def from_declaration(cls, files, options, device: str, question_encoder_dir=None, *, declaration: dict, build=None):
        """The retriever of a declaration of family end2end (rag/tasks.py End2EndOptions) over ``files`` (the
        experiment's passages, embeddings and index), its question encoder ``question_encoder_dir`` or the configured
        one (``options``); where that folder is a trained end-to-end model's, its passage encoder and index."""
        from rag.config_keys import ContextEncoder
        from rag.retrieval import RetrievalFiles
        from rag.retrieval.encoders import Encoder

        ctx = ContextEncoder.model_validate(declaration["context_encoder"])
        model_dir = Path(question_encoder_dir).parent if question_encoder_dir else None
        trained = model_dir is not None and (model_dir / INDEX_DIR).is_dir()
        if trained:
            index_dir = model_dir / INDEX_DIR
            files = RetrievalFiles(passages=files.passages, embeddings=[str(index_dir / SHARD)], index=str(index_dir / INDEX))
        retriever = cls.from_files(files, options, device, question_encoder_dir)
        qenc = retriever.question_encoder
        if declaration["share_encoders"]:
            from dataclasses import replace

            from rag.retrieval.encoders import folder_prompt, resolve_model_path

            text = ctx.encoder_text()
            if text.prefix is None:  # the passage prompt of the folder the shared model came from
                text = replace(text, prefix=folder_prompt(resolve_model_path(options.question_encoder), "passage"))
            cenc = Encoder(qenc.model, qenc.tokenizer, text)
        else:
            path = model_dir / CONTEXT_DIR if trained else ctx.context_encoder
            cenc = Encoder.load(str(path), ctx.encoder_text(), side="passage", prompts_of=ctx.context_encoder).to(device)
        retriever.context_encoder = cenc
        retriever.rescore_depth = declaration["rerank_depth"] if declaration["index_refresh"] == "rerank" else None
        return retriever


def save_trained(retriever, folder: str | Path, batch_size: int = 32) -> np.ndarray:
    """Into the model folder ``folder``: the passage encoder (``context_encoder/``, unless it is the question
    encoder's model) and ``index/``, the corpus encoded by it with the flat index over it; the embeddings."""
    from rag.io import atomic_path
    from rag.models.tokenizer import save_tokenizer
    from rag.retrieval.index import EmbeddingShards, build_index, save_index, write_shard_record
    from rag.retrieval.refresh import encode_corpus

    folder = Path(folder)
    cenc = retriever.context_encoder
    if cenc.model is not retriever.question_encoder.model:
        cenc.model.save_pretrained(folder / CONTEXT_DIR)
        save_tokenizer(cenc.tokenizer, folder / CONTEXT_DIR, cenc.max_length)
    emb = np.ascontiguousarray(encode_corpus(cenc, retriever.passages, batch_size=batch_size), dtype=np.float32)
    index_dir = folder / INDEX_DIR
    index_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(index_dir / SHARD) as tmp, open(tmp, "wb") as fh:
        np.save(fh, emb)
    save_index(build_index(emb, "flat"), index_dir / INDEX)
    write_shard_record(index_dir / INDEX, EmbeddingShards([index_dir / SHARD]))
    return emb


def refresh_summary(record: dict) -> dict:
    """The run's index keeping in numbers, from its ``refresh.json`` (``record``): its refreshes (the records but the
    last, the final index's), their CPU seconds (an async run's: its encoder processes'), the mean overlap of the
    stale and fresh top K over them (absent without refreshes), the final index's cost and overlap, and the training
    process' CPU seconds (a synchronous refresh's included)."""
    records = record["records"]
    refreshes = records[:-1]
    return {"index_refreshes": len(refreshes), "refresh_cpu_seconds": sum(r["cpu_seconds"] for r in refreshes),
            "final_index_cpu_seconds": records[-1]["cpu_seconds"], "final_index_overlap": records[-1]["overlap"],
            **({"mean_refresh_overlap": sum(r["overlap"] for r in refreshes) / len(refreshes)} if refreshes else {}),
            "train_cpu_seconds": record["train_cpu_seconds"]}


def read_refresh(model_dir: str | Path) -> dict | None:
    """The index keeping of a trained model folder (:func:`refresh_summary` with its strategy and objective), None
    for a model whose passage encoder did not train."""
    from rag.io import read_json

    path = Path(model_dir) / REFRESH_FILE
    if not path.is_file():
        return None
    record = read_json(path)
    return {"strategy": record["strategy"], "objective": record["objective"], **refresh_summary(record)}
