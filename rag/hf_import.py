"""Import a released Hugging Face RAG checkpoint (``facebook/rag-sequence-nq``, ``rag-token-nq``, or any
folder saved by ``Rag{Sequence,Token}ForGeneration.save_pretrained``) as the project's model folder, so
``rag evaluate`` / ``experiments`` can score it: ``generator/`` and ``question_encoder/`` (each with its
tokenizer) and ``meta.json``. A RAG checkpoint holds no passage encoder: build the index with the matching
DPR context encoder (``facebook/dpr-ctx_encoder-multiset-base`` for the released models).
"""

from __future__ import annotations

import logging
from pathlib import Path

from rag.errors import ConfigError
from rag.io import atomic_dir, write_json

log = logging.getLogger("rag")


def _tokenizer(checkpoint: Path, sub: str, fallback: str | None):
    from transformers import AutoTokenizer

    for cand in (checkpoint / f"{sub}_tokenizer", checkpoint / sub):
        if (cand / "tokenizer_config.json").is_file() or (cand / "tokenizer.json").is_file():
            return AutoTokenizer.from_pretrained(str(cand))
    if fallback:
        return AutoTokenizer.from_pretrained(fallback)
    raise ConfigError(f"{checkpoint}: no {sub}_tokenizer/ folder (save the checkpoint with RagTokenizer.save_pretrained "
                      "or pass the tokenizer name)")


def import_hf_rag(checkpoint: str | Path, out: str | Path, task: str | None = None, variant: str | None = None,
                  tracking_uri: str | None = None, experiment: str | None = None,
                  question_tokenizer: str | None = None, generator_tokenizer: str | None = None) -> dict:
    """Convert ``checkpoint`` into the project model folder ``out``; return its meta.json content. With
    ``tracking_uri`` an MLflow run is created and its id written to meta.json, as ``rag train`` does."""
    from transformers import RagConfig, RagSequenceForGeneration, RagTokenForGeneration

    checkpoint = Path(checkpoint)
    if not (checkpoint / "config.json").is_file():
        raise ConfigError(f"{checkpoint}: not a Hugging Face checkpoint folder (no config.json)")
    cfg = RagConfig.from_pretrained(str(checkpoint))
    if getattr(cfg, "model_type", None) != "rag":
        raise ConfigError(f"{checkpoint}: config model_type is {cfg.model_type!r}, expected 'rag'")
    archs = cfg.architectures or []
    kind = "token" if any("Token" in a for a in archs) else "sequence"
    cls = RagTokenForGeneration if kind == "token" else RagSequenceForGeneration
    model = cls.from_pretrained(str(checkpoint))
    qenc = model.rag.question_encoder
    gen = model.rag.generator
    q_tok = _tokenizer(checkpoint, "question_encoder", question_tokenizer)
    g_tok = _tokenizer(checkpoint, "generator", generator_tokenizer)
    variant = variant or f"rag_{kind}"
    run_id = experiment_id = None
    if tracking_uri:
        from rag.tracking import Run

        run = Run(tracking_uri, experiment or f"imported/{task or 'any'}", run_name=variant,
                  tags={"task": task or "", "variant": variant, "rule": "import-hf-rag", "source": str(checkpoint)})
        run.params({"source_checkpoint": str(checkpoint), "variant": variant, "rag_kind": kind,
                    "n_docs": cfg.n_docs, "title_sep": cfg.title_sep, "doc_sep": cfg.doc_sep})
        run_id, experiment_id = run.run_id, run.experiment_id
    meta = {"task": task, "variant": variant, "rag_kind": kind, "source_checkpoint": str(checkpoint),
            "mlflow_run_id": run_id, "mlflow_experiment_id": experiment_id, "imported": True,
            "n_docs": cfg.n_docs, "title_sep": cfg.title_sep, "doc_sep": cfg.doc_sep,
            "decoder_start_token_id": gen.config.decoder_start_token_id,
            "forced_bos_token_id": getattr(gen.generation_config, "forced_bos_token_id", None)}
    with atomic_dir(out) as tmp:
        gen.save_pretrained(tmp / "generator")
        g_tok.save_pretrained(tmp / "generator")
        qenc.save_pretrained(tmp / "question_encoder")
        q_tok.save_pretrained(tmp / "question_encoder")
        write_json(tmp / "meta.json", meta)
    log.info("imported %s (RAG-%s) into %s", checkpoint, kind.capitalize(), out)
    return meta
