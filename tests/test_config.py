import copy
import re
import shutil

import pytest
import yaml

from rag.config import load_config, sections
from rag.errors import ConfigError


@pytest.fixture
def base(root):
    with open(root / "config.yaml") as fh:
        return yaml.safe_load(fh)


def test_default_config_is_valid_and_filled(base):
    cfg = load_config(base)
    assert cfg["retriever"]["index"] == "flat"
    assert cfg["train"]["label_smoothing"] == 0.0  # a default from the schema
    assert set(cfg["tasks"]) == {"nq", "triviaqa", "webquestions", "curatedtrec", "msmarco", "jeopardy", "fever3", "fever2"}
    assert len(cfg["variants"]) == 7


def test_paper_config_is_valid(root, tmp_path, monkeypatch):
    load_config(root / "config" / "paper.yaml", check_files=False)
    # its Jeopardy files (SearchQA) are fetched by hand: until then loading it names the first one
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^config key 'tasks\.jeopardy\.files\.\w+': input file "
                                          r"resources/tasks/jeopardy/\w+ not found"):
        load_config(root / "config" / "paper.yaml")
    for split in ("train", "val", "test"):  # directories of SearchQA json files
        (tmp_path / "resources" / "tasks" / "jeopardy" / split).mkdir(parents=True)
    load_config(root / "config" / "paper.yaml")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c.update(bogus=1), "unknown config key 'bogus'"),
        (lambda c: c["train"].update(stepz=3), "unknown config key 'train.stepz'"),
        (lambda c: c["train"].update(steps="many"), "config key 'train.steps': expected integer"),
        (lambda c: c["tasks"].update(squad={"train": 1, "dev": 1, "test": 1}), "config key 'tasks': 'squad' is not one of"),
        (lambda c: c.update(variants=["rag_sequence", "rag_fusion"]), "config key 'variants.1': 'rag_fusion' is not one of"),
        (lambda c: c["train"].update(k=0), "config key 'train.k'"),
        (lambda c: c["train"].update(k=10_000), "config key 'train.k'"),  # impossible K
        (lambda c: c["tasks"]["webquestions"].update(init_from="fever2"), None),  # valid: fever2 is configured
        (lambda c: c["tasks"].pop("nq"), "tasks.webquestions.init_from"),
        (lambda c: c["tasks"]["nq"].pop("train"), "tasks.nq.train"),
        (lambda c: c["corpus"].update(name="../../etc"), "config key 'corpus.name'"),
        (lambda c: c.update(name="a b; rm -rf /"), "config key 'name'"),
        (lambda c: c["experiments"].update(topk_sweep=[1, 5000]), "experiments.topk_sweep[1]"),
        (lambda c: c.update(metrics={"qbleu1": {"delta": 2}}), "config key 'metrics.qbleu1.delta'"),
        (lambda c: c.update(metrics={"qbleu1": {"w_ner": 0.7, "w_qt": 0.2, "w_re": 0.2}}),
         "config key 'metrics.qbleu1': w_ner + w_qt + w_re = 1.1 > 1"),
        (lambda c: c.update(metrics={"tokenizer": "spacy"}), "config key 'metrics.tokenizer'"),
    ],
)
def test_schema_errors_name_the_key(base, mutate, message):
    cfg = copy.deepcopy(base)
    mutate(cfg)
    if message is None:
        load_config(cfg)
        return
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert message in str(err.value)


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("tasks:\n  nq: {train: 1\n")
    with pytest.raises(ConfigError, match=r"c.yaml:\d+: invalid YAML"):
        load_config(p)


def test_sections_isolate_tasks(base):
    a = sections(load_config(base))
    changed = copy.deepcopy(base)
    changed["tasks"]["fever2"]["train"] = 123
    b = sections(load_config(changed))
    differing = {k for k in a if a[k] != b[k]}
    assert differing == {"task_fever2"}


def test_metric_options_default_and_recorded(base):
    from rag.pipeline import metric_options

    cfg = load_config(base)
    assert cfg["metrics"] == {"tokenizer": "python", "qbleu1": {"w_ner": 0.41, "w_qt": 0.2, "w_re": 0.2, "delta": 0.66}}
    parts = sections(cfg)
    assert "metrics" in parts["task_jeopardy"] and "metrics" in parts["task_msmarco"]
    assert "metrics" not in parts["task_nq"]  # EM tasks do not re-run when the Q-BLEU weights change
    assert metric_options(parts["task_jeopardy"]) == {
        "tokenizer": "python", "qbleu1": {"w_ner": 0.41, "w_qt": 0.2, "w_re": 0.2, "delta": 0.66}}
    assert metric_options(parts["task_msmarco"]) == {"tokenizer": "python"}
    assert metric_options(parts["task_nq"]) == {}


def _byo(root) -> dict:
    with open(root / "examples" / "byo" / "config.yaml") as fh:
        return yaml.safe_load(fh)


def test_input_files_lists_local_inputs(root, base):
    from rag.config import input_files

    assert input_files(load_config(base)) == []  # miniworld: nothing to read
    assert input_files(load_config(_byo(root), check_files=False)) == [
        ("corpus.path", "examples/byo/documents.jsonl"),
        ("tasks.nq.files.train", "examples/byo/qa-train.jsonl"),
        ("tasks.nq.files.dev", "examples/byo/qa-dev.jsonl"),
        ("tasks.nq.files.test", "examples/byo/qa-test.jsonl"),
    ]


@pytest.mark.parametrize("missing, key", [
    ("documents.jsonl", "corpus.path"),
    ("qa-train.jsonl", "tasks.nq.files.train"),
    ("qa-test.jsonl", "tasks.nq.files.test"),
])
def test_missing_input_file_names_key_and_path(root, tmp_path, monkeypatch, missing, key):
    from rag.config import check_input_files

    cfg = _byo(root)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError):
        load_config(cfg)  # none of the files exist here
    shutil.copytree(root / "examples" / "byo", tmp_path / "examples" / "byo")
    load_config(cfg)  # all present
    (tmp_path / "examples" / "byo" / missing).unlink()
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    msg = str(err.value)
    assert msg == f"config key '{key}': input file examples/byo/{missing} not found (relative to {tmp_path})"
    assert "\n" not in msg
    load_config(cfg, check_files=False)  # the configuration itself is valid
    # relative paths from another base; absolute paths as they are
    check_input_files(load_config(cfg, check_files=False), base=root)
    absolute = copy.deepcopy(cfg)
    absolute["tasks"]["nq"]["files"]["dev"] = str(tmp_path / "nowhere" / "dev.jsonl")
    want = f"config key 'tasks.nq.files.dev': input file {tmp_path}/nowhere/dev.jsonl not found"
    with pytest.raises(ConfigError, match=f"^{re.escape(want)}$"):
        check_input_files(load_config(absolute, check_files=False), base=root)
