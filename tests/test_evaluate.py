"""rag.predictions: predict (decoding per the task's kind) and score_predictions (metrics and recall),
on a stand-in system and hand-made passages."""

from types import SimpleNamespace

import pytest

from rag.data.corpus import Passages
from rag.predictions import answer_hits, metric_options, predict, score_predictions
from rag.models.rag import Prediction
from tests.conftest import typed_sections

PASSAGES = Passages(["p0", "p1", "p2"], ["Avalor", "Brenn", "Cymra"],
                    ["Avalor is governed by Mira Tal.", "Brenn lies on the river Oss.", "Cymra trades salt."])
DECODE = {"decode_sequence": {"k": 2, "method": "thorough", "beams": 4, "max_new_tokens": 16},
          "decode_token": {"k": 2, "method": "greedy", "beams": 1, "max_new_tokens": 16}}
SECTIONS = typed_sections({"tasks": {"nq": DECODE, "fever2": DECODE}})


class StandIn:
    """Answers every question with ``answer``; retrieves passages p0, p1."""

    def __init__(self, answer):
        self.answer, self.calls = answer, []
        self.tokenizer = SimpleNamespace(convert_tokens_to_ids=lambda tok: {"a": 0})

    def _pred(self, text):
        return Prediction(text, ["p0", "p1"], ["Avalor", "Brenn"], [0.75, 0.25])

    def generate(self, qs, k, method, beams, max_new_tokens):
        self.calls.append(("generate", k, method, beams, max_new_tokens))
        return [self._pred(self.answer) for _ in qs]

    def classify(self, qs, label_ids, labels, k):
        self.calls.append(("classify", k, tuple(labels)))
        return [self._pred(labels[1]) for _ in qs]


ROWS = [{"id": "q1", "input": "who governs Avalor", "targets": ["Mira Tal"], "meta": {"gold_docs": ["p0"]}},
        {"id": "q2", "input": "who rules Avalor", "targets": ["Mira Tal", "Tal"]}]


def test_predict_decodes_with_the_task_and_model_settings():
    system = StandIn("Mira Tal")
    cfg = SECTIONS["eval_nq"]
    preds = predict(cfg, system, "rag_sequence", ROWS)
    assert system.calls == [("generate", 2, "thorough", 4, 16)]
    assert [p["prediction"] for p in preds] == ["Mira Tal", "Mira Tal"]
    assert preds[0]["doc_ids"] == ["p0", "p1"] and preds[0]["gold_docs"] == ["p0"] and preds[1]["gold_docs"] == []
    predict(cfg, system, "rag_token", ROWS, k=1)
    assert system.calls[-1] == ("generate", 1, "greedy", 1, 16)


def test_predict_classifies_label_tasks():
    system = StandIn(None)
    rows = [{"id": "c1", "input": "Avalor is governed by Mira Tal.", "targets": ["REFUTES"]}]
    preds = predict(SECTIONS["eval_fever2"], system, "rag_token_bm25", rows)
    assert system.calls == [("classify", 2, ("SUPPORTS", "REFUTES"))] and preds[0]["prediction"] == "REFUTES"


def test_score_predictions_metrics_and_recall():
    preds = predict(SECTIONS["eval_nq"], StandIn("Mira Tal"), "rag_sequence", ROWS)
    preds[1]["prediction"] = "Brenn"
    scores, recall = score_predictions(SECTIONS["eval_nq"], preds, PASSAGES)
    assert scores == {"em": 50.0}
    assert recall == {"answer_recall@2": 100.0, "passage_recall@2": 100.0}
    assert answer_hits(preds, PASSAGES) == [100.0, 100.0]
    # closed book: no passages, no recall
    assert score_predictions(SECTIONS["eval_nq"], preds, None) == ({"em": 50.0}, {})


def test_metric_options_only_for_text_metrics():
    assert metric_options(SECTIONS["eval_nq"]) == {}
    opts = metric_options(SECTIONS["eval_jeopardy"])
    assert opts["tokenizer"] == "python" and set(opts["qbleu1"]) == {"w_ner", "w_qt", "w_re", "delta"}
    with pytest.raises(Exception):
        predict(SECTIONS["eval_nq"], StandIn("x"), "rag_hybrid", ROWS)
