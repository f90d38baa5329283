"""The evaluation stage: decode dev and test with a saved model, score, write, log (rule
``evaluate``, or the end of a ``train`` job). Predicting and scoring are :mod:`rag.predictions`'s."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from rag.predictions import metric_options, predict, score_predictions
from rag.io import read_jsonl, write_json, write_jsonl
from rag.retrieval import RetrievalFiles
from rag.sections import TrainSection
from rag.stages.model_loading import check_k_in_passages, load_trained, model_meta, model_run
from rag.tasks import variant_spec

log = logging.getLogger("rag")


def evaluate_model(cfg: TrainSection, variant: str, io: dict[str, tuple[str, str, str]], model_dir: str, device: str,
                   files: RetrievalFiles | None = None, retriever=None) -> None:
    """Decode dev and test with the saved model folder, score, write predictions + metrics, log to its
    run. ``io``: split -> (data, predictions, metrics files); ``retriever`` or the variant's over ``files``."""
    from rag.retrieval.end2end import read_refresh

    name, ev = cfg.task_name, cfg.decoding()
    model = variant_spec(variant).model
    if retriever is None and variant_spec(variant).retriever is not None:
        check_k_in_passages(files, [(f"tasks.{name}.decode_{model}.k", ev.decode.of(model).k)])
    meta = model_meta(model_dir)
    system = load_trained(cfg, variant, model_dir, device, files, retriever)
    run = model_run(cfg, variant, meta, "evaluate", {"evaluated": "yes"})
    dec = ev.decode.of(model).to_dict()
    manifest = _manifest(Path(model_dir), io)
    index_refresh = read_refresh(model_dir)  # a passage encoder trained: how its index was kept, at what cost
    for split, (data_path, pred_path, metrics_path) in io.items():
        rows = read_jsonl(data_path, required=("id", "input", "targets"))
        t = time.time()
        preds = predict(ev, system, variant, rows)
        seconds = time.time() - t
        scores, rec = score_predictions(ev, preds, system.passages)
        write_jsonl(pred_path, preds)
        result = {"task": name, "variant": variant, "split": split, "seed": cfg.seed, "n": len(preds), "metrics": scores, "retrieval": rec,
                  "metric_options": metric_options(ev),
                  "decode": dec, "decode_seconds": seconds, "mlflow_run_id": run.run_id,
                  "mlflow_experiment_id": run.experiment_id}
        if index_refresh is not None:  # the end-to-end report's strategies and objectives tables read it
            result["index_refresh"] = index_refresh
        if manifest is not None:  # what produced these numbers (rag.manifest), read by the report
            result["manifest"] = manifest
        write_json(metrics_path, result)
        run.metrics({f"{split}_{k}": v for k, v in {**scores, **rec}.items()})
        run.artifact(Path(metrics_path), f"eval/{split}")
        run.artifact(Path(pred_path), f"eval/{split}")
        log.info("%s/%s %s: %s %s", name, variant, split, scores, rec)
    run.finish()


def _manifest(model_dir: Path, io: dict[str, tuple[str, str, str]]) -> dict | None:
    """The run's manifest (its model folder's; none for a model imported without one), with the
    dev/test files decoded here hashed into it where the train job did not read them."""
    from rag.manifest import file_entry, read_manifest

    if not (model_dir / "manifest.json").is_file():
        return None
    manifest, _ = read_manifest(model_dir / "manifest.json")
    splits = manifest["data"].setdefault("splits", {})
    for split, (data_path, _, _) in io.items():
        if (splits.get(split) or {}).get("path") != str(data_path):
            splits[split] = file_entry(data_path)
    return manifest
