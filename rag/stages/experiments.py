"""The experiments of one trained model (rule ``experiments``): Figure 3's top-K sweep, the reader
given the gold passage and the index hot-swap."""

from __future__ import annotations

import collections
from pathlib import Path

from rag.predictions import answer_hits, predict, predict_sweep, score_predictions, scorer
from rag.io import read_jsonl, write_json
from rag.retrieval import RetrievalFiles
from rag.sections import ExperimentsSection, TrainSection
from rag.stages.model_loading import check_k_in_passages, load_trained, model_meta, model_run
from rag.tasks import TASKS


def run_experiments(cfg: TrainSection, exp: ExperimentsSection, device: str, variant: str, *, model_dir: str | Path,
                    files: RetrievalFiles, test: str | Path, decoded: str | Path | None, topk_out: str | Path,
                    oracle_out: str | Path | None = None, hotswap_out: str | Path | None = None,
                    questions: str | Path | None = None, snapshot_b: RetrievalFiles | None = None) -> None:
    """The experiments of one model in one process, each from torch's seed as a process of its own
    would start it: the K sweep (``topk_out``), the oracle (``oracle_out``, from ``files``' passages) and
    the hot-swap (``hotswap_out``: the ``questions`` with ``files`` and ``snapshot_b``)."""
    import torch

    topk_sweep(cfg, exp, device, variant, model_dir=model_dir, files=files, test=test, out=topk_out, decoded=decoded)
    if oracle_out is not None:
        torch.manual_seed(cfg.seed)
        oracle(cfg, device, variant, model_dir=model_dir, passages=files.passages, test=test, out=oracle_out)
    if hotswap_out is not None:
        torch.manual_seed(cfg.seed)
        hotswap(cfg, device, variant, model_dir=model_dir, questions=questions, snapshots={"a": files, "b": snapshot_b},
                out=hotswap_out)


def topk_sweep(cfg: TrainSection, exp: ExperimentsSection, device: str, variant: str, *, model_dir: str | Path,
               files: RetrievalFiles, test: str | Path, out: str | Path, decoded: str | Path | None = None) -> None:
    """Figure 3: decode ``test`` at each K of the sweep with the saved model; write the task metric,
    answer recall and per-question results. ``decoded``: the run's own test predictions, read for
    the task's test-time K."""
    ev = cfg.decoding()
    check_k_in_passages(files, [(f"experiments.topk_sweep[{i}]", k) for i, k in enumerate(exp.experiments.topk_sweep)])
    meta = model_meta(model_dir)
    system = load_trained(cfg, variant, model_dir, device, files)
    passages = system.passages
    rows = read_jsonl(test, required=("id", "input", "targets"))
    spec = TASKS[cfg.task_name]
    primary, ks = spec.primary, sorted(exp.experiments.topk_sweep)
    res = {"task": cfg.task_name, "variant": variant, "seed": cfg.seed, "k": ks, "em": [], "answer_recall": [],
           "metric": primary, "per_example": {}}
    run = model_run(cfg, variant, meta, "topk_sweep")
    sc = scorer(ev)
    reuse = _decoded_at(decoded, ev, variant, rows) if decoded is not None else None
    to_decode = [k for k in ks if reuse is None or reuse[0] != k]
    decoded_at = predict_sweep(ev, system, variant, rows, to_decode) if to_decode else {}
    if reuse is not None and reuse[0] in ks:
        decoded_at[reuse[0]] = reuse[1]
    for k in ks:
        preds = decoded_at.pop(k)
        scores, rec = score_predictions(ev, preds, passages)
        # per question, in id order: the claims checklist bootstraps over them
        preds = sorted(preds, key=lambda x: x["id"])
        res["per_example"][str(k)] = {
            "id": [x["id"] for x in preds],
            "correct": [sc.compute(primary, [x["prediction"]], [x["targets"]]) for x in preds],
            "hit": answer_hits(preds, passages, spec.regex_targets),
        }
        res["em"].append(scores[primary])
        res["answer_recall"].append(rec.get(f"answer_recall@{k}", float("nan")))
        run.metrics({"topk_" + primary: scores[primary], "topk_answer_recall": res["answer_recall"][-1]}, step=k)
    write_json(out, res)


def _decoded_at(path: str | Path, ev, variant: str, rows: list[dict]) -> tuple[int, list[dict]]:
    """(the task's test-time K, the predictions of ``path``), checked to answer ``rows`` in their order
    with that many documents each."""
    from rag.errors import DataError
    from rag.tasks import variant_spec

    k = ev.decode.of(variant_spec(variant).model).k
    preds = read_jsonl(path, required=("id", "prediction", "targets", "doc_ids", "gold_docs"))
    if [p["id"] for p in preds] != [r["id"] for r in rows]:
        raise DataError(f"{path}: its questions are not those of the test set the sweep decodes "
                        f"(predictions of another test file?)")
    bad = next((i for i, p in enumerate(preds) if len(p["doc_ids"]) != k), None)
    if bad is not None:
        raise DataError(f"{path}:{bad + 1}: {len(preds[bad]['doc_ids'])} documents, the task's test-time K is {k} "
                        f"(predictions of another decoding?)")
    return k, preds


def hotswap(cfg: TrainSection, device: str, variant: str, *, model_dir: str | Path, questions: str | Path,
            snapshots: dict[str, RetrievalFiles], out: str | Path) -> None:
    """Section 4.5: answer the leader ``questions`` with the index of each world snapshot ("a", "b");
    write the 2 x 2 table of questions answered right for either snapshot's answers."""
    from rag.scoring.answer_match import exact_match

    ev = cfg.decoding()
    rows = read_jsonl(questions, required=("id", "input", "targets"))
    cells = {}
    detail = []
    for snap, files in snapshots.items():
        system = load_trained(cfg, variant, model_dir, device, files)
        preds = predict(ev, system, variant, [{**r, "targets": r["targets"]["a"]} for r in rows])
        for qs in ("a", "b"):
            cells[f"{qs}|{snap}"] = sum(exact_match(p["prediction"], r["targets"][qs]) for p, r in zip(preds, rows))
        detail += [{"id": r["id"], "index": snap, "prediction": p["prediction"], "answer_a": r["targets"]["a"][0],
                    "answer_b": r["targets"]["b"][0], "changed": bool(r["meta"]["changed"]),
                    "correct_a": exact_match(p["prediction"], r["targets"]["a"]),
                    "correct_b": exact_match(p["prediction"], r["targets"]["b"])} for p, r in zip(preds, rows)]
    write_json(out, {"variant": variant, "seed": cfg.seed, "n": len(rows), "cells": cells,
                     "changed": sum(r["meta"]["changed"] for r in rows), "detail": detail})


def oracle(cfg: TrainSection, device: str, variant: str, *, model_dir: str | Path, passages: str | Path, test: str | Path,
           out: str | Path) -> None:
    """The trained model's answers to the ``test`` questions with the gold passage (from ``passages``)
    as its only document (K = 1): reader quality apart from retrieval, per example and per attribute."""
    from rag.data.corpus import PassageStore
    from rag.retrieval.gold import GoldRetriever

    ev = cfg.decoding()
    rows = read_jsonl(Path(test), required=("id", "input", "targets"))
    system = load_trained(cfg, variant, model_dir, device, retriever=GoldRetriever(PassageStore(passages), rows))
    primary = TASKS[cfg.task_name].primary
    preds = sorted(predict(ev, system, variant, rows, k=1), key=lambda x: x["id"])
    by_id = {r["id"]: r for r in rows}
    sc = scorer(ev)
    correct = [bool(sc.compute(primary, [p["prediction"]], [p["targets"]])) for p in preds]
    attrs: dict[str, list[bool]] = collections.defaultdict(list)
    for p, c in zip(preds, correct):
        attrs[(by_id[p["id"]].get("meta") or {}).get("attribute", "all")].append(c)
    by_attribute = {a: {"name": a, "n": len(v), "em": 100.0 * sum(v) / len(v)} for a, v in sorted(attrs.items())}
    write_json(out, {"task": cfg.task_name, "variant": variant, "seed": cfg.seed, "k": 1, "metric": primary,
                     "n": len(preds), "em": 100.0 * sum(correct) / max(1, len(correct)), "id": [p["id"] for p in preds],
                     "correct": correct, "by_attribute": by_attribute, "predictions": preds})
