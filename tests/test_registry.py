"""The registry (rag/tasks.py) against everything generated from or checked by it: every task,
variant, retriever and metric entry is walked."""

import importlib
import re

import pytest

from rag import metrics as M
from rag.config import schema
from rag.data import paper_results
from rag.data.formats import PARSERS, table7, table7_rows
from rag.report import build
from rag.retrieval import FILE_ROLES, Retriever
from rag.tasks import RETRIEVERS, TASKS, VARIANTS, paper_column, variant_spec
from tests.conftest import ROOT

DECODE_METHODS = {"sequence": {"thorough", "fast", "greedy", "beam"}, "token": {"greedy", "beam"}}


@pytest.mark.parametrize("name", list(TASKS))
def test_task_entry(name):
    spec = TASKS[name]
    assert spec.name == name
    assert spec.kind in ("qa", "regex", "generation", "classification")
    assert spec.metrics and all(m in M.METRICS for m in spec.metrics) and spec.primary in spec.metrics
    assert spec.display and build._task_name(name) == spec.display
    assert spec.format in PARSERS
    assert (spec.kind == "classification") == bool(spec.labels)
    assert spec.decode_sequence["method"] in DECODE_METHODS["sequence"]
    assert spec.decode_token["method"] in DECODE_METHODS["token"]
    # its Table 7 row exists in paper_results.yaml, with a count per split
    assert spec.table7_row in paper_results()["table7"]["rows"] and table7_rows()[name] == spec.table7_row
    assert set(table7()[name]) == {"train", "dev", "test"}


@pytest.mark.parametrize("name", list(TASKS))
def test_every_task_has_a_miniworld_generator(name):
    from rag.data import miniworld

    cfg = {"countries": 10, "people": 24, "cities": 12, "changed_fraction": 0.5, "test_fraction": 0.25}
    world = miniworld.build_world(cfg, 5)["a"]
    rows = miniworld.make_task(world, name, "train", 3, 5)
    assert len(rows) == 3 and all({"id", "input", "targets"} <= set(r) for r in rows)
    if TASKS[name].labels:
        assert {r["targets"][0] for r in rows} <= set(TASKS[name].labels)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_entry(name):
    spec = variant_spec(name)
    assert spec.name == name and spec.model in ("sequence", "token", "bart")
    assert (spec.model == "bart") == (spec.retriever is None)
    assert spec.retriever is None or spec.retriever in RETRIEVERS
    assert not spec.train_question_encoder or spec.retriever == "dense"  # only a dense retriever has one
    assert spec.display and build.VARIANT_NAMES[name] == spec.display


@pytest.mark.parametrize("name", list(RETRIEVERS))
def test_retriever_entry(name):
    spec = RETRIEVERS[name]
    assert spec.name == name and "passages" in spec.files and set(spec.files) <= set(FILE_ROLES)
    module, _, attr = spec.factory.partition(":")
    cls_name, _, method = attr.partition(".")
    cls = getattr(importlib.import_module(module), cls_name)
    assert issubclass(cls, Retriever) and callable(getattr(cls, method))


@pytest.mark.parametrize("name", list(M.METRICS))
def test_metric_entry(name):
    assert M.compute(name, ["a b c d"], [["a b c d"]]) == pytest.approx(100.0) or name == "trigram_distinct"


def test_schema_enums_are_the_registry():
    defs = schema()["definitions"]
    assert defs["variant"]["enum"] == list(VARIANTS)
    assert defs["task_name"]["enum"] == list(TASKS)
    assert schema()["properties"]["variants"]["default"] == list(VARIANTS)
    # the names the schema file lists for its readers are the registry's
    for key, names in (("variant", VARIANTS), ("task_name", TASKS)):
        listed = defs[key]["description"].split(": ", 1)[1].split(", ")
        assert listed == list(names)


def test_unknown_variant_and_task_are_config_errors():
    from rag.config import load_config
    from rag.errors import ConfigError

    with pytest.raises(ConfigError, match="rag_hybrid"):
        variant_spec("rag_hybrid")
    with pytest.raises(ConfigError, match="variants"):
        load_config({"tasks": {"nq": {}}, "variants": ["rag_hybrid"]}, check_files=False)
    with pytest.raises(ConfigError, match="squad"):
        load_config({"tasks": {"squad": {}}}, check_files=False)


def test_cli_choices_and_wildcards_come_from_the_registry():
    from rag.cli import build_parser

    parser = build_parser()
    for cmd in ("train", "evaluate", "topk-sweep", "oracle", "hotswap"):
        sub = parser._subparsers._group_actions[0].choices[cmd]
        [variant] = [a for a in sub._actions if a.dest == "variant"]
        assert list(variant.choices) == list(VARIANTS)
    common = (ROOT / "workflow" / "rules" / "common.smk").read_text()
    assert 'task="|".join(TASKS)' in common and 'variant="|".join(VARIANTS)' in common


def test_report_rows_name_registered_variants_and_paper_rows():
    paper = paper_results()
    for table, rows in build.ROW_VARIANTS.items():
        for label, variant in rows.items():
            assert variant in VARIANTS and label in paper[table]["rows"], (table, label)
    # every column of the paper's tables is filled by one registered task, with one of its metrics
    for table in ("table1", "table2", "table5", "table6"):
        for column in paper[table]["columns"]:
            task, metric = paper_column(table, column)
            assert metric in TASKS[task].metrics, (table, column)
    for name, spec in TASKS.items():
        for col in spec.paper_columns:
            assert all(col.label in paper[t]["columns"] for t in col.tables), (name, col)


def test_a_toy_retriever_is_one_class_and_one_registry_entry(monkeypatch, tmp_path):
    """Adding a retriever: a Retriever subclass and a RETRIEVERS entry (its variants in VARIANTS);
    the rules' inputs, the CLI flags and the system follow from them."""
    import numpy as np
    import torch

    from rag.data.corpus import Passages
    from rag.retrieval import RetrievalFiles, Retrieved, build_retriever
    from rag.tasks import RetrieverSpec, VariantSpec

    class FirstK(Retriever):  # the toy: always the first k passages, equal scores
        def __init__(self, passages):
            super().__init__()
            self.passages = passages

        @classmethod
        def from_files(cls, files, options, device, question_encoder_dir=None):
            return cls(Passages(["a", "b", "c"], ["A", "B", "C"], ["x", "y", "z"]))

        def retrieve(self, questions, k):
            return Retrieved(np.tile(np.arange(k), (len(questions), 1)), torch.zeros(len(questions), k))

    mod = type(re)("toy_retriever")
    mod.FirstK = FirstK
    monkeypatch.setitem(__import__("sys").modules, "toy_retriever", mod)
    monkeypatch.setitem(RETRIEVERS, "firstk", RetrieverSpec("firstk", ("passages",), "toy_retriever:FirstK.from_files"))
    monkeypatch.setitem(VARIANTS, "rag_token_firstk", VariantSpec("rag_token_firstk", "token", "firstk", False, "RAG-Token-FirstK"))
    r = build_retriever(variant_spec("rag_token_firstk").retriever, RetrievalFiles(passages="p.tsv"), None, "cpu")
    got = r.retrieve(["q1", "q2"], 2)
    assert got.ids.tolist() == [[0, 1], [0, 1]] and tuple(got.scores.shape) == (2, 2)
