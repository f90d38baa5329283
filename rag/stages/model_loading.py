"""A variant's RAG system built from a model folder: the generator and the variant's retriever."""

from __future__ import annotations

from pathlib import Path

from rag.retrieval import RetrievalFiles
from rag.sections import TrainSection
from rag.tasks import variant_spec


def model_meta(model_dir: str | Path) -> dict:
    """The ``meta.json`` of a trained model folder (its run: task, variant, seed, MLflow run id); one that
    is not a JSON object is a DataError naming it."""
    from rag.errors import DataError
    from rag.io import read_json

    path = Path(model_dir) / "meta.json"
    meta = read_json(path)
    if not isinstance(meta, dict):
        raise DataError(f"{path}: a model folder's meta.json is an object (its run's task, variant, seed and MLflow "
                        f"run id), got a JSON {type(meta).__name__}")
    return meta


def model_run(cfg, variant: str, meta: dict, rule: str, tags: dict | None = None):
    """The MLflow run (rag.tracking.Run) a job on a trained model logs to: the model's own (its meta.json's
    ``mlflow_run_id``), else, for a model imported without one (rag import-hf-rag), a new run of the
    cell tagged ``imported`` and ``rule``. ``cfg``: the task's train section."""
    from rag.tracking import Run

    if meta.get("mlflow_run_id"):
        return Run(cfg.tracking.uri, "", run_id=meta["mlflow_run_id"], tags=tags)
    name = cfg.task_name
    return Run(cfg.tracking.uri, f"{cfg.name}/{name}", run_name=f"{variant} seed {cfg.seed}",
               tags={"task": name, "variant": variant, "seed": cfg.seed, "cell": f"{name}/{variant}", "rule": rule,
                     "imported": "yes", **(tags or {})})


def trained_question_encoder(model_dir: str | Path | None, task: str | None, variant: str) -> str | None:
    """The fine-tuned question encoder the model folder ``model_dir`` holds (``question_encoder/``), else
    None (also for no folder). The folder must be a model of ``variant`` (and of ``task``, where its
    meta.json names one: an imported model may name none), and hold ``question_encoder/`` where
    ``variant`` fine-tunes its question encoder: otherwise a DataError naming the file or folder."""
    from rag.errors import DataError

    if not model_dir:
        return None
    meta_path = Path(model_dir) / "meta.json"
    meta = model_meta(model_dir)
    for key, want in (("variant", variant), ("task", task)):
        held = meta.get(key)
        if held != want and (key == "variant" or held is not None):
            raise DataError(f"{meta_path}: a model of {key} {held!r}, not {want!r} as the command's; give the model "
                            f"folder of {want}")
    q_dir = Path(model_dir) / "question_encoder"
    if q_dir.is_dir():
        return str(q_dir)
    if variant_spec(variant).train_question_encoder:
        raise DataError(f"{model_dir}: no question_encoder/ folder, which a fine-tuned {variant} model holds (its "
                        f"question encoder is trained); the folder is incomplete: train it again")
    return None


def check_k_in_passages(files: RetrievalFiles | None, ks: list[tuple[str, int]]) -> None:
    """ConfigError naming the first config key of ``ks`` ((key, K) pairs) whose K exceeds the
    passages of ``files.passages`` (counted only as far as the largest K)."""
    if not ks or files is None or not files.passages:
        return
    from itertools import islice

    from rag.config_files import check_k
    from rag.data.corpus import iter_passages

    n = sum(1 for _ in islice(iter_passages(files.passages), max(k for _, k in ks)))
    check_k(ks, n, f"of {files.passages}")


def build_system(cfg: TrainSection, variant: str, model_dir: str, device: str, files: RetrievalFiles | None = None,
                 question_encoder_dir: str | None = None, retriever=None):
    """The variant's RAG system: the generator of ``model_dir`` and ``retriever``, or (None) the variant's
    retriever over ``files`` (its question encoder from ``question_encoder_dir`` or the configured one)."""
    from rag.models.interface import load_generator
    from rag.models.rag import RagSystem
    from rag.retrieval import build_retriever

    spec = variant_spec(variant)
    gen_dir = Path(model_dir) / "generator" if (Path(model_dir) / "generator").is_dir() else Path(model_dir)
    g = cfg.generator
    generator = load_generator(gen_dir, device, g.max_source_len, g.max_target_len)
    if retriever is None:
        retriever = build_retriever(spec.retriever, files or RetrievalFiles(), cfg.retriever, device, question_encoder_dir,
                                    cfg.retrievers)
    return RagSystem(generator, generator.tokenizer, spec.model, retriever, g.max_source_len, g.max_target_len,
                     chunk_overhead=g.chunk_overhead, precision=cfg.precision)


def load_trained(cfg: TrainSection, variant: str, model_dir: str, device: str, files: RetrievalFiles | None = None,
                 retriever=None):
    """A trained model folder (generator/, question_encoder/ when fine-tuned) ready for inference,
    with ``retriever`` or the variant's retriever over ``files``."""
    q_dir = trained_question_encoder(model_dir, cfg.task_name, variant)
    system = build_system(cfg, variant, model_dir, device, files, q_dir, retriever)
    system.eval()
    return system
