"""Evaluation: decode a task's questions with a RAG system (``predict``) and score the predictions
(``score_predictions``: the task's metrics plus retrieval recall), under a task's eval_<task>
section. The train, evaluate and experiment stages (rag.stages) call these."""

from __future__ import annotations

from rag.sections import EvalSection
from rag.tasks import TASKS, variant_spec


def predict(cfg: EvalSection, system, variant: str, rows: list[dict], k: int | None = None, batch_size: int = 32) -> list[dict]:
    """Predictions (with retrieved passages and p(z|x)) for ``rows`` under the task's decoding."""
    k = k or cfg.decode.of(variant_spec(variant).model).k
    return predict_sweep(cfg, system, variant, rows, [k], batch_size)[k]


def predict_sweep(cfg: EvalSection, system, variant: str, rows: list[dict], ks: list[int],
                  batch_size: int = 32) -> dict[int, list[dict]]:
    """:func:`predict` at each number of documents in ``ks`` (K -> predictions). RAG-Sequence's
    thorough and fast decoding search and score the largest K once for all of them
    (``RagSystem.generate_sweep``); other decodings run once per K."""
    from tqdm.auto import tqdm

    name = cfg.task_name
    spec = TASKS[name]
    dec = cfg.decode.of(variant_spec(variant).model)
    out: dict[int, list[dict]] = {k: [] for k in ks}
    label_ids = None
    if spec.classifies:
        from rag.models.tokenizer import label_token

        label_ids = [system.tokenizer.convert_tokens_to_ids(label_token(lb)) for lb in spec.labels]
    at = "" if len(ks) == 1 else " K=" + ",".join(map(str, ks))
    for i in tqdm(range(0, len(rows), batch_size), desc=f"decode {name}/{variant}{at}", unit="batch"):
        chunk = rows[i : i + batch_size]
        qs = [r["input"] for r in chunk]
        if label_ids is not None:
            by_k = {k: system.classify(qs, label_ids, list(spec.labels), k) for k in ks}
        elif len(ks) == 1:
            by_k = {ks[0]: system.generate(qs, ks[0], dec.method, dec.beams, dec.max_new_tokens)}
        else:
            by_k = system.generate_sweep(qs, ks, dec.method, dec.beams, dec.max_new_tokens)
        for k, preds in by_k.items():
            out[k] += [{"id": r["id"], "input": r["input"], "targets": r["targets"], "prediction": p.text,
                        "doc_ids": p.doc_ids, "doc_titles": p.doc_titles, "doc_scores": [round(x, 6) for x in p.doc_probs],
                        "gold_docs": r.get("meta", {}).get("gold_docs", [])} for r, p in zip(chunk, preds)]
    return out


def metric_options(cfg: EvalSection) -> dict:
    """The scorer options this task's metrics use (recorded in metrics.json, shown by the report)."""
    from rag import metrics as M

    from rag.scoring.qbleu import QBleuWeights

    specs = [M.metric_spec(m) for m in TASKS[cfg.task_name].metrics]
    given = cfg.metrics
    opts = {}
    if any(s.reads_tokenizer for s in specs):
        opts["tokenizer"] = given.tokenizer if given else "python"
    if any(s.reads_weights for s in specs):
        opts["qbleu1"] = (given.qbleu1 if given else QBleuWeights()).weights()
    for s in specs:
        if s.options:
            opts[s.name] = s.checked_options(dict((given.options or {}).get(s.name, {})) if given else {})
    return opts


def scorer(cfg: EvalSection):
    """The task's metrics with its :func:`metric_options` (a ``rag.metrics.Scorer``)."""
    from rag.metrics import Scorer

    return Scorer.of(metric_options(cfg))


def answer_hits(preds: list[dict], passages, regex: bool = False, row_of=None) -> list[float]:
    """100 for each prediction whose retrieved passages contain an answer, else 0 (``row_of``: the passages'
    ``index_of()``, for a caller that scores several lists)."""
    from rag.scoring.answer_match import answer_in_text

    row_of = passages.index_of() if row_of is None else row_of
    return [100.0 * any(answer_in_text(passages.texts[row_of[d]], x["targets"], regex=regex) for d in x["doc_ids"])
            for x in preds]


def score_predictions(cfg: EvalSection, preds: list[dict], passages) -> tuple[dict, dict]:
    spec = TASKS[cfg.task_name]
    p = [x["prediction"] for x in preds]
    t = [x["targets"] for x in preds]
    sc = scorer(cfg)
    scores = {m: sc.compute(m, p, t) for m in spec.metrics}
    retrieval = {}
    if passages is not None and preds and preds[0]["doc_ids"]:
        k = len(preds[0]["doc_ids"])
        if spec.answers_in_passages:
            hits = answer_hits(preds, passages, regex=spec.regex_targets)
            retrieval[f"answer_recall@{k}"] = sum(hits) / len(hits)
        hits = passage_hits(preds, passages)
        if hits:
            retrieval[f"passage_recall@{k}"] = sum(hits) / len(hits)
    return scores, retrieval


def passage_hits(preds: list[dict], passages, row_of=None) -> list[float]:
    """100 for each prediction with gold passages whose retrieved passages hold one, else 0 (none for one
    without gold passages): gold_docs name passages (miniworld) or whole articles (an entity id). ``row_of``:
    as :func:`answer_hits`'."""
    row_of = passages.index_of() if row_of is None else row_of
    return [100.0 * any(d in x["gold_docs"] or passages.doc_entity(row_of[d]) in x["gold_docs"] for d in x["doc_ids"])
            for x in preds if x["gold_docs"]]
