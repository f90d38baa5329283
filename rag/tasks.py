"""What each paper task is: its kind, its metrics, its decoding, as in the paper's appendix."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TaskSpec:
    name: str
    kind: str  # qa | regex | generation | classification
    metrics: tuple[str, ...]
    primary: str  # the metric Tables 1/2/6 report
    # decoding at test time (paper, appendix B): QA -> greedy / thorough, generation -> beam 4 / fast;
    # the test-time K is configuration (schema default: tasks.<task>.decode_*.k)
    decode_sequence: dict = field(default_factory=dict)
    decode_token: dict = field(default_factory=dict)
    labels: tuple[str, ...] = ()


QA_SEQ = {"method": "thorough", "beams": 4, "max_new_tokens": 16}
QA_TOK = {"method": "greedy", "beams": 1, "max_new_tokens": 16}
GEN_SEQ = {"method": "fast", "beams": 4, "max_new_tokens": 40}
GEN_TOK = {"method": "beam", "beams": 4, "max_new_tokens": 40}
CLS = {"method": "greedy", "beams": 1, "max_new_tokens": 1}

FEVER3_LABELS = ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")
FEVER2_LABELS = ("SUPPORTS", "REFUTES")

TASKS: dict[str, TaskSpec] = {
    "nq": TaskSpec("nq", "qa", ("em",), "em", QA_SEQ, QA_TOK),
    "triviaqa": TaskSpec("triviaqa", "qa", ("em",), "em", QA_SEQ, QA_TOK),
    "webquestions": TaskSpec("webquestions", "qa", ("em",), "em", QA_SEQ, QA_TOK),
    "curatedtrec": TaskSpec("curatedtrec", "regex", ("em_regex",), "em_regex", QA_SEQ, QA_TOK),
    "msmarco": TaskSpec("msmarco", "generation", ("rougeL", "bleu1", "trigram_distinct"), "rougeL", GEN_SEQ, GEN_TOK),
    "jeopardy": TaskSpec("jeopardy", "generation", ("bleu1", "qbleu1", "trigram_distinct"), "qbleu1", GEN_SEQ, GEN_TOK),
    "fever3": TaskSpec("fever3", "classification", ("accuracy",), "accuracy", CLS, CLS, FEVER3_LABELS),
    "fever2": TaskSpec("fever2", "classification", ("accuracy",), "accuracy", CLS, CLS, FEVER2_LABELS),
}

VARIANTS = (
    "rag_sequence",
    "rag_token",
    "bart",
    "rag_sequence_frozen",
    "rag_token_frozen",
    "rag_sequence_bm25",
    "rag_token_bm25",
)


@dataclass(frozen=True)
class VariantSpec:
    name: str
    model: str  # sequence | token | bart
    retriever: str | None  # dense | bm25 | None
    train_question_encoder: bool


def variant_spec(name: str) -> VariantSpec:
    if name == "bart":
        return VariantSpec(name, "bart", None, False)
    base, _, suffix = name.partition("_")[2].partition("_")
    model = base  # sequence | token
    if suffix == "frozen":
        return VariantSpec(name, model, "dense", False)
    if suffix == "bm25":
        return VariantSpec(name, model, "bm25", False)
    return VariantSpec(name, model, "dense", True)
