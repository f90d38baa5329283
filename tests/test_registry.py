"""The registry (rag/tasks.py) against everything generated from or checked by it: every task,
variant, retriever and metric entry is walked."""

import argparse
import importlib
import re

import pytest

from rag import metrics as M
from rag.config_keys import json_schema as schema
from rag.data import paper_results
from rag.data.formats import PARSERS
from rag.data.table7 import table7, table7_rows
from rag.report import build
from rag.retrieval import FILE_ROLES
from rag.retrieval.base import Retriever
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
    assert spec.name == name and spec.model in ("sequence", "token", "closed_book")
    assert (spec.model == "closed_book") == (spec.retriever is None)
    assert spec.retriever is None or spec.retriever in RETRIEVERS
    assert not spec.train_question_encoder or spec.retriever == "dense"  # only a dense retriever has one
    assert spec.display and build.VARIANT_NAMES[name] == spec.display


@pytest.mark.parametrize("name", list(RETRIEVERS))
def test_retriever_entry(name):
    spec = RETRIEVERS[name]
    assert spec.name == name and set(spec.files) <= set(FILE_ROLES)
    # a family reads the passages, or names the retrievers that do (a hybrid's parts)
    assert "passages" in spec.files or (spec.refs and set(spec.refs) <= set(spec.options.model_fields))
    module, _, attr = spec.factory.partition(":")
    cls_name, _, method = attr.partition(".")
    cls = getattr(importlib.import_module(module), cls_name)
    assert issubclass(cls, Retriever) and callable(getattr(cls, method))


@pytest.mark.parametrize("name", list(M.METRICS))
def test_metric_entry(name):
    assert M.Scorer().compute(name, ["a b c d"], [["a b c d"]]) == pytest.approx(100.0) or name == "trigram_distinct"


def test_schema_enums_are_the_registry():
    defs = {"variant": schema()["properties"]["variants"]["items"], "task_name": schema()["properties"]["tasks"]["propertyNames"]}
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



def test_the_closed_book_variant_s_old_name_is_one_line_naming_the_new(capsys):
    """The closed-book generator was the variant ``bart`` (a closed-book Llama was ``bart@llama``): a config,
    a command or a band file (tests/test_reliability_faults.py) naming it is told the name it has now."""
    from rag.cli import main
    from rag.config import load_config
    from rag.errors import ConfigError

    new = "'bart' is renamed 'closed_book': write closed_book"
    for given, key in (({"variants": ["rag_token", "bart"]}, "variants.1"), ({"one_seed_variants": ["bart"]}, "one_seed_variants.0"),
                       ({"tasks": {"nq": {"variant_seeds": {"bart": [1]}}}}, "tasks.nq.variant_seeds")):
        cfg = {"tasks": {"nq": {"train": 4, "dev": 2, "test": 2}}, **given}
        cfg["tasks"]["nq"] = {"train": 4, "dev": 2, "test": 2, **cfg["tasks"]["nq"]}
        with pytest.raises(ConfigError, match=f"^config key '{key}': {new}$"):
            load_config(cfg, check_files=False)
    for name in ("bart", "bart@llama"):
        with pytest.raises(ConfigError, match=f"^variant {new}$"):
            variant_spec(name)
    with pytest.raises(SystemExit):
        main(["evaluate", "--seed", "1", "--config", "x.json", "--variant", "bart", "--model-dir", "m", "--dev", "d", "--test", "t"])
    assert f"variant {new}" in capsys.readouterr().err

def test_cli_choices_and_wildcards_come_from_the_registry():
    from rag.cli import build_parser

    parser = build_parser()
    for cmd in ("train", "evaluate", "experiments"):
        sub = parser._subparsers._group_actions[0].choices[cmd]
        [variant] = [a for a in sub._actions if a.dest == "variant"]
        for name in VARIANTS:  # each registered variant, and each as a further generator's run
            assert variant.type(name) == name and variant.type(f"{name}@llama") == f"{name}@llama"
            if VARIANTS[name].retriever:  # ... and a retrieving one as a further retriever's
                assert variant.type(f"{name}+hy") == f"{name}+hy"
        for bad in ("rag_tokens", "rag_token@", "closed@llama", "rag_token+", "closed_book+hy"):
            with pytest.raises(argparse.ArgumentTypeError, match="variant"):
                variant.type(bad)
    common = (ROOT / "workflow" / "rules" / "common.smk").read_text()
    assert 'task="|".join(TASKS)' in common
    assert 'variant=f"(?:{\'|\'.join(VARIANTS)})(?:{re.escape(RETRIEVER_SEP)}[a-z0-9_]+)?(?:{GENERATOR_SEP}[a-z0-9_]+)?"' in common


def test_a_further_generators_variant_is_the_registered_one_under_its_name():
    spec = variant_spec("rag_sequence_frozen@llama")
    assert (spec.model, spec.retriever, spec.train_question_encoder) == ("sequence", "dense", False)
    assert spec.name == "rag_sequence_frozen@llama" and spec.display == "RAG-Sequence-Frozen (llama)"
    assert variant_spec("closed_book@llama").display == "Closed book (llama)" and variant_spec("closed_book").display == "BART"


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
    from rag.retrieval import RetrievalFiles, build_retriever
    from rag.retrieval.base import Retrieved
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


def test_retriever_missing_file_role_is_named(monkeypatch):
    """The toy retriever's registry entry names the files it reads: the factory refuses a missing one."""
    from rag.errors import ConfigError
    from rag.retrieval import RetrievalFiles, build_retriever
    from rag.tasks import RetrieverSpec

    monkeypatch.setitem(RETRIEVERS, "needs_bm25", RetrieverSpec("needs_bm25", ("passages", "bm25"), "nowhere:Nothing"))
    with pytest.raises(ConfigError, match="retriever needs_bm25 needs --bm25"):
        build_retriever("needs_bm25", RetrievalFiles(passages="p.tsv"), None, "cpu")


# ------------------------------------------------------------------ extending the registry


def test_a_toy_task_with_its_own_format_is_three_files(tmp_path):
    """A task of the user's with its own file format: a config that declares it, a parser module and
    its data; no code of the package edited or patched. The config goes through load_config, the
    real conversion (rag.stages.datasets.build_task), scoring and the report, where its scores have
    a table of their own (it fills no paper column)."""
    import json

    import yaml

    from rag.config import load_config, sections
    from rag.predictions import score_predictions
    from rag.report.build import build_report
    from rag.report.inputs import ReportInputs
    from rag.sections import DataSection, EvalSection
    from rag.stages.datasets import build_task

    user = tmp_path / "user"
    user.mkdir()
    # 1. the parser of the toy format, arrow_lines: "question => answer | answer" lines
    (user / "arrow_lines.py").write_text(
        "def parse(path, id_prefix=None):\n"
        "    for n, line in enumerate(open(path, encoding='utf-8').read().splitlines()):\n"
        "        question, answers = line.split(' => ')\n"
        "        yield {'id': f'{id_prefix}-{n}', 'input': question, 'targets': answers.split(' | ')}\n", encoding="utf-8")
    # 2. its data, one file for every split
    (user / "toy.txt").write_text("capital of Ziglal => Morvan | Morvan City\nwho wrote Velora => Ada\n", encoding="utf-8")
    # 3. the config that declares the task
    files = {split: str(user / "toy.txt") for split in ("train", "dev", "test")}
    (user / "config.yaml").write_text(yaml.safe_dump({
        "tasks": {"toy": {"kind": "qa", "metrics": ["em"], "display": "Toy QA", "format": f"{user}/arrow_lines.py:parse",
                          "source": "local", "files": files}},
        "variants": ["rag_token", "closed_book"], "experiments": {"topk_task": "toy", "hotswap": False, "oracle": False}}))
    assert len(list(user.iterdir())) == 3

    cfg = load_config(user / "config.yaml")
    assert TASKS["toy"].display == "Toy QA" and "toy" in schema()["properties"]["tasks"]["propertyNames"]["enum"]
    data = sections(cfg)["data_toy"]
    outs = {split: tmp_path / "data" / f"{split}.jsonl" for split in files}
    build_task(DataSection.from_dict(data, "data_toy"), outs, files)
    rows = [json.loads(x) for x in outs["test"].read_text().splitlines()]
    assert rows[0] == {"id": "toy-test-0", "input": "capital of Ziglal", "targets": ["Morvan", "Morvan City"], "meta": {}}

    preds = [{**r, "prediction": answer, "doc_ids": []} for r, answer in zip(rows, ["Morvan City", "Bob"])]
    scores, _ = score_predictions(EvalSection.from_dict(sections(cfg)["eval_toy"], "eval_toy"), preds, None)
    assert scores == {"em": 50.0}
    run = tmp_path / "runs" / "metrics.json"
    run.parent.mkdir()
    run.write_text(json.dumps({"task": "toy", "variant": "rag_token", "split": "test", "metrics": scores}))
    out = tmp_path / "report.html"
    build_report(ReportInputs.from_files(metrics=[run]), None, {}, out, {})
    own = out.read_text(encoding="utf-8").split(">Tasks of this experiment<", 1)[1].split("</table>", 1)[0]
    assert "Toy QA em" in own and "RAG-Token" in own and "50.0" in own


def test_a_declared_task_in_every_process(tmp_path):
    """A job reads sections, not the config: a task's sections carry its declaration and reading
    one declares the task there (a fresh process knows only the registry's tasks)."""
    import json
    import subprocess
    import sys

    from rag.config import load_config, sections

    cfg = load_config({"tasks": {"mine": {"kind": "classification", "labels": ["yes", "no"], "metrics": ["accuracy"],
                                          "format": "jsonl", "source": "local",
                                          "files": {s: "x.jsonl" for s in ("train", "dev", "test")}}}}, check_files=False)
    pieces = sections(cfg)
    for name in ("data_mine", "train_mine", "eval_mine"):
        (tmp_path / f"{name}.json").write_text(json.dumps(pieces[name]))
    # data and training read its kind, labels and format; scoring and the report the whole declaration
    assert "metrics" not in pieces["data_mine"]["task"] and "metrics" not in pieces["train_mine"]["task"]
    assert pieces["eval_mine"]["task"]["metrics"] == ["accuracy"] == pieces["report"]["declared_tasks"]["mine"]["metrics"]
    code = ("import sys; from rag.sections import read_section, read_task_sections, DataSection; from rag.tasks import TASKS\n"
            "assert 'mine' not in TASKS\n"
            "if sys.argv[1] == 'data':\n"
            "    read_section(DataSection, 'data_mine.json')\n"
            "else:\n"
            "    t = read_task_sections(['eval_mine.json', 'train_mine.json'])\n"
            "    read_section(DataSection, 'data_mine.json')  # a part never replaces the whole\n"
            "    assert t.decoding().task.kind == 'classification'\n"
            "print(TASKS['mine'].labels, TASKS['mine'].decode_token['max_new_tokens'], TASKS['mine'].metrics)")
    for job, metrics in (("data", "()"), ("train", "('accuracy',)")):
        res = subprocess.run([sys.executable, "-c", code, job], cwd=tmp_path, capture_output=True, text=True,
                             env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
        assert res.returncode == 0, res.stderr
        assert res.stdout.split() == ["('yes',", "'no')", "1", metrics]


def test_rag_check_knows_the_tasks_the_experiment_declares(tmp_path):
    """`rag check` of a declared task's runs: the experiment's report section names the task (no
    miniworld generator, Table 7 row or paper column needed)."""
    import json

    import yaml

    from rag.cli import main
    from rag.config import load_config, sections

    cfg = load_config({"tasks": {"mine": {"kind": "qa", "metrics": ["em"], "format": "jsonl", "source": "local",
                                          "files": {s: "x.jsonl" for s in ("train", "dev", "test")}}}}, check_files=False)
    root = tmp_path / "results" / "mine_exp"
    (root / "config").mkdir(parents=True)
    (root / "config" / "report.json").write_text(json.dumps(sections(cfg)["report"]))
    run = root / "runs" / "mine" / "rag_token" / "seed1" / "test"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"task": "mine", "variant": "rag_token", "split": "test", "seed": 1,
                                                  "metrics": {"em": 50.0}}))
    (run / "predictions.jsonl").write_text("".join(json.dumps({"id": str(i), "prediction": p, "targets": ["Ada"]}) + "\n"
                                                   for i, p in enumerate(["Ada", "Bob"])))
    bands = tmp_path / "bands.yaml"
    bands.write_text(yaml.safe_dump({"version": 2, "cells": [{"task": "mine", "variant": "rag_token", "split": "test", "metric": "em",
                                                "expected": 50.0, "tolerance": 1.0}]}))
    from rag.declared_tasks import declare_tasks

    declare_tasks(None)  # a fresh process: the registry's own tasks only
    assert main(["check", "--bands", str(bands), "--experiment", str(root)]) == 0
    given = ["check", "--bands", str(bands), "--metrics", str(run / "metrics.json"), "--predictions", str(run / "predictions.jsonl")]
    declare_tasks(None)
    assert main(given) != 0  # without the report section the task is unknown here
    declare_tasks(None)
    assert main([*given, "--report-config", str(root / "config" / "report.json")]) == 0


@pytest.mark.parametrize("decl, key, words", [
    ({"kind": "qa", "metrics": ["em"], "format": "jsonl"}, "tasks.nq.kind", "a name of its own"),
    ({"kind": "summary"}, "tasks.mine.kind", "'summary' is not one of ['qa', 'regex', 'generation', 'classification']"),
    ({"metrics": ["em"]}, "tasks.mine.kind", "a declared task needs one of qa, regex, generation, classification"),
    ({"kind": "qa", "metrics": "em"}, "tasks.mine.metrics", "expected a list of string, got str 'em'"),
    ({"kind": "classification", "metrics": ["accuracy"], "labels": ["yes", ""]}, "tasks.mine.labels", "an empty string"),
    ({"kind": "qa", "metrics": ["f1"]}, "tasks.mine.metrics", "unknown metric 'f1'"),
    ({"kind": "qa", "metrics": ["em"], "primary": "rougeL"}, "tasks.mine.primary", "not one of the task's metrics"),
    ({"kind": "classification", "metrics": ["accuracy"]}, "tasks.mine.labels", "lists its labels"),
    ({"kind": "qa", "metrics": ["em"], "labels": ["a", "b"]}, "tasks.mine.labels", "only a classification task"),
    ({"kind": "qa", "metrics": ["em"], "format": "csvish"}, "tasks.mine.format", "unknown format 'csvish'"),
    ({"kind": "qa", "metrics": ["em"], "format": "nowhere.py:parse"}, "tasks.mine.format", "nowhere.py not found"),
    ({"kind": "qa", "metrics": ["em"], "format": "json:nothing_here"}, "tasks.mine.format", "has no 'nothing_here'"),
    ({"kind": "qa", "metrics": ["em"], "format": "jsonl", "source": "miniworld"}, "tasks.mine.source", "own files"),
    ({"kind": "qa", "metrics": ["nowhere.py:Metric"]}, "tasks.mine.metrics", "nowhere.py not found"),
])
def test_a_bad_task_declaration_is_one_line_naming_the_key(tmp_path, monkeypatch, decl, key, words):
    from rag.config import load_config
    from rag.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.jsonl").write_text("")
    name = key.split(".")[1]
    task = {"source": "local", "format": "jsonl", "files": {s: "x.jsonl" for s in ("train", "dev", "test")}, **decl}
    with pytest.raises(ConfigError) as err:
        load_config({"tasks": {name: task}, "corpus": {"source": "local", "path": "x.jsonl", "format": "jsonl"}})
    msg = str(err.value)
    assert "\n" not in msg and f"'{key}'" in msg and words in msg, msg


def test_a_toy_metric_with_its_own_option_is_one_file_and_its_config_key(tmp_path):
    """A metric of the user's with an option of its own: one file (a Metric class) named by a
    declared task's ``metrics``, and its option under config key ``metrics.options.<name>``; no code
    of the package edited or patched. compute, the per-example scores, the bootstrap's subset scorer,
    a report cell's interval and the task's scoring use it with the run's value of the option."""
    from rag.config import load_config, sections
    from rag.config_files import input_files
    from rag.predictions import metric_options, score_predictions
    from rag.report.claims import cell_interval
    from rag.report.stats import mean_interval
    from rag.sections import EvalSection

    metric_file = tmp_path / "first_words.py"  # the toy: the first `words` words of the prediction are a gold's
    metric_file.write_text(
        "from rag.metrics import HitMetric\n\n\n"
        "class FirstWords(HitMetric):\n"
        "    name, display = 'first_words', 'first-words match'\n"
        "    options = {'words': 1}\n\n"
        "    def hit(self, prediction, golds):\n"
        "        n = self.options['words']\n"
        "        return prediction.split()[:n] in [g.split()[:n] for g in golds]\n", encoding="utf-8")
    task = {"kind": "qa", "metrics": [f"{metric_file}:FirstWords", "em"], "format": "jsonl", "source": "local",
            "files": {s: "x.jsonl" for s in ("train", "dev", "test")}}

    def config(metrics: dict) -> dict:
        return load_config({"tasks": {"toy": task}, "metrics": metrics}, check_files=False)

    preds, golds = ["Paris France", "cat dog", "Rome"], [["Paris"], ["cat dog"], ["Rome", "Roma"]]
    rows = [{"prediction": p, "targets": g, "doc_ids": []} for p, g in zip(preds, golds)]
    for words, hits in ((None, [True, True, True]), (2, [False, True, True])):
        cfg = config({"options": {"first_words": {"words": words}}} if words else {})
        assert TASKS["toy"].metrics == ("first_words", "em") and TASKS["toy"].primary == "first_words"
        ev = EvalSection.from_dict(sections(cfg)["eval_toy"], "eval_toy")
        assert metric_options(ev) == {"first_words": {"words": words or 1}}
        sc = M.Scorer.of(metric_options(ev))
        assert sc.metric("first_words").each(preds, golds) == hits
        assert sc.compute("first_words", preds, golds) == pytest.approx(100 * sum(hits) / 3)
        scorer = sc.subset("first_words", preds, golds)
        for ix in ([0, 0, 1], [2], [1, 1]):
            assert scorer(ix) == sc.compute("first_words", [preds[i] for i in ix], [golds[i] for i in ix])
        assert score_predictions(ev, rows, None)[0] == {"first_words": pytest.approx(100 * sum(hits) / 3),
                                                       "em": pytest.approx(200 / 3)}
        # not bootstrapped (HitMetric.bootstrap is False): a report cell's interval is the mean's of 0/100 scores
        iv = cell_interval("first_words", [[{"prediction": p, "targets": g} for p, g in zip(preds, golds)]],
                           metric_options(ev))
        assert iv == mean_interval([(1, __import__("numpy").array([[100.0 * h for h in hits]]))])
    # the metric's file is a local input (its sha256 a param of the rules that score: an edit scores again)
    assert ("tasks.toy.metrics.0", str(metric_file)) in input_files(cfg)
    # the eval section of a task carries the options of its own metrics only, and a built-in task's none
    both = load_config({"tasks": {"toy": task, "nq": {"train": 4, "dev": 2, "test": 2}},
                        "metrics": {"options": {"first_words": {"words": 2}}}}, check_files=False)
    assert sections(both)["eval_toy"]["metrics"]["options"] == {"first_words": {"words": 2}}
    assert "metrics" not in sections(both)["eval_nq"]

    for metrics, line in (({"options": {"first_words": {"word": 2}}}, "unknown config key 'metrics.options.first_words.word'"),
                          ({"options": {"first_words": {"words": "2"}}},
                           "config key 'metrics.options.first_words.words': expected integer, got str '2' (write 2)"),
                          ({"options": {"first_words": {"words": 2.0}}},
                           "config key 'metrics.options.first_words.words': expected integer, got float 2.0 (write 2)"),
                          ({"options": {"bleu1": {"n": 2}}}, "config key 'metrics.options.bleu1': ")):
        with pytest.raises(__import__("rag.errors").errors.ConfigError, match=f"^{re.escape(line)}"):
            config(metrics)


def test_roles_name_registered_tasks_and_the_schema_default():
    from rag.tasks import ROLES

    for role in ("hotswap", "topk", "qa", "diversity"):
        assert getattr(ROLES, role) in TASKS, role
    for role in ("fine_tuning", "fine_tuning_strict", "classification"):
        assert set(getattr(ROLES, role)) <= set(TASKS), role
    assert set(ROLES.fine_tuning_strict) <= set(ROLES.fine_tuning)
    # Figure 3's task is the default of config key experiments.topk_task
    assert schema()["$defs"]["Experiments"]["properties"]["topk_task"]["default"] == ROLES.topk
    # the claims' labels and columns: every role task has them
    for task in (ROLES.qa, ROLES.topk, *ROLES.fine_tuning):
        assert TASKS[task].short and TASKS[task].column("table6")
    for task in ROLES.classification:
        assert TASKS[task].labels and TASKS[task].column("table2")
    assert M.metric_spec(TASKS[ROLES.diversity].column("table5").metric).needs_targets is False


def _task_names_in_strings(path):
    """(line, string) of each string literal in ``path`` that names a task: the whole string, a path
    segment of it ("runs/<task>/...") or a config section's suffix ("train_<task>")."""
    import io
    import tokenize

    names = set(TASKS)
    suffixes = tuple(f"_{n}" for n in names)
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if tok.type != tokenize.STRING:
            continue
        body = re.sub(r"^[rbfuRBFU]*('''|\"\"\"|'|\")", "", tok.string)[:-1].strip("'\"")
        if body in names or any(seg in names or seg.endswith(suffixes) for seg in body.split("/")):
            found.append((tok.start[0], tok.string))
    return found


def test_no_task_names_outside_the_registry_and_miniworld(tmp_path):
    """Logic asks the registry; outside rag/tasks.py (the registry) and rag/data/miniworld.py (the
    generators of each task's miniworld data), no file of the package or the workflow names a task."""
    allowed = {"rag/tasks.py", "rag/data/miniworld.py"}
    files = [*ROOT.glob("rag/**/*.py"), *ROOT.glob("workflow/**/*.smk"), *ROOT.glob("workflow/**/*.py"), ROOT / "Snakefile",
             *ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("scripts/**/*.py")]
    assert len(files) > 40
    found = {f"{p.relative_to(ROOT).as_posix()}:{line}": s for p in files if p.relative_to(ROOT).as_posix() not in allowed
             for line, s in _task_names_in_strings(p)}
    assert found == {}
    # the scan finds what it looks for
    probe = tmp_path / "probe.py"
    probe.write_text('a = "nq"\nb = f"{R}/runs/fever2/x"\nc = section("train_jeopardy")\nd = "nq-base model"\n')
    assert [line for line, _ in _task_names_in_strings(probe)] == [1, 2, 3]


def _family_names_in_strings(path):
    """(line, string) of each string literal in ``path`` that is a generator family's name."""
    import io
    import tokenize

    from rag.tasks import GENERATOR_FAMILIES

    return [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
            if tok.type == tokenize.STRING and re.sub(r"^[rbfuRBFU]*('''|\"\"\"|'|\")", "", tok.string)[:-1].strip("'\"")
            in GENERATOR_FAMILIES]


def test_no_generator_family_named_outside_its_files_and_the_registry(tmp_path):
    """What differs between generator families (building, copying, checking, sizing, summarising) is asked of the
    family (rag/tasks.py FamilySpec, its Generator class): no `family == "..."` outside the family files and the
    registry. Besides them, the config key's default (rag/config_keys.py) and the throughputs rag plan scales
    (rag/plan.py: each measured row names the model it was measured on) name one."""
    allowed = {"rag/tasks.py", "rag/models/generator.py", "rag/models/causal_lm.py", "rag/config_keys.py"}
    files = [*ROOT.glob("rag/**/*.py"), *ROOT.glob("workflow/**/*.smk"), *ROOT.glob("workflow/**/*.py"), ROOT / "Snakefile",
             *ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("scripts/**/*.py")]
    found = {f"{p.relative_to(ROOT).as_posix()}:{line}": s for p in files if p.relative_to(ROOT).as_posix() not in allowed
             for line, s in _family_names_in_strings(p)}
    measured = {k for k in found if k.startswith("rag/plan.py:")}
    rows = (ROOT / "rag/plan.py").read_text().splitlines()
    assert len(measured) == 2 and all('"family": "seq2seq"' in rows[int(k.split(":")[1]) - 1] for k in measured)
    assert {k: v for k, v in found.items() if k not in measured} == {}
    probe = tmp_path / "probe.py"
    probe.write_text('if g["family"] == "causal_lm":\n    x = "seq2seq model"\ny = ("seq2seq",)\n')
    assert [line for line, _ in _family_names_in_strings(probe)] == [1, 3]
