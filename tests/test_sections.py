"""rag.sections: the typed config sections the stages take, parsed from the files Snakemake writes."""

from __future__ import annotations

import pydantic
import json

import pytest
import yaml

from rag import sections as S
from rag.cli import main
from rag.config import load_config, sections
from rag.manifest import canonical_hash
from rag.errors import ConfigError
from tests.conftest import ROOT, section_type, typed_sections

# every whole config (an overlay such as tests/data/e2e_retrievers.yaml, given after e2e.yaml, declares no tasks)
CONFIGS = ["config.yaml", "config/paper.yaml", "examples/byo/config.yaml",
           *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "data").glob("*.yaml")
                   if "tasks" in yaml.safe_load(p.read_text()))]


def _file_text(obj) -> str:
    """A section as rule config_section writes it (rag.io.write_json)."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("config", CONFIGS)
def test_every_section_parses_and_writes_back_byte_identical(config):
    parts = sections(load_config(ROOT / config, check_files=False))
    for name, data in parts.items():
        cls = section_type(name)
        if cls is None:  # the report's: read by `rag report --scale-json`, no stage
            continue
        typed = cls.from_dict(data, f"{name}.json")
        assert _file_text(typed.to_dict()) == _file_text(data), (config, name)


def test_every_section_kind_is_parsed_from_the_real_configs():
    kinds = set()
    for config in CONFIGS:
        kinds |= {type(s) for s in typed_sections(config=ROOT / config).values()}
    assert kinds == {S.CorpusSection, S.EncodeSection, S.IndexSection, S.GeneratorSection, S.DataSection,
                     S.TrainSection, S.EvalSection, S.ExperimentsSection}


def test_typed_sections_read_as_attributes():
    typed = typed_sections({"retriever": {"index": "hnsw"}, "tasks": {"msmarco": {"well_formed_only": ["train"]}}})
    tr = typed["train_webquestions"]
    assert tr.task_name == "webquestions" and tr.task.init_from == "nq" and tr.train.steps == 20
    assert tr.retriever.score_scale == 15.0 and tr.generator.chunk_overhead is None
    assert tr.decoding().decode.of("token").method == "greedy"
    assert typed["index"].retriever.build_params() == {"hnsw_m": 128, "ef_search": 128}
    data = typed["data_msmarco"]
    assert data.task.keeps_well_formed_only("train") and not data.task.keeps_well_formed_only("test")
    assert typed["corpus"].world().countries == typed["data_nq"].miniworld.countries
    assert typed["experiments"].experiments.topk_sweep == (1, 2, 3, 5, 8)
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        tr.seed = 1


def test_the_train_section_hashes_as_its_file_whatever_eval_section_it_carries():
    """A fused train job's checkpoint identity is the train_<task> section alone."""
    parts = sections(load_config(ROOT / "config.yaml", check_files=False))
    tr = typed_sections()["train_nq"]
    assert tr.evaluation is not None
    assert canonical_hash(tr.to_dict()) == canonical_hash(parts["train_nq"])


def _write(tmp_path, name: str, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def _parts() -> dict:
    return sections(load_config(ROOT / "config.yaml", check_files=False))


def _edit(data: dict, dotted: str, value=None, delete: bool = False) -> dict:
    data = json.loads(json.dumps(data))
    *path, last = dotted.split(".")
    node = data
    for key in path:
        node = node[key]
    if delete:
        del node[last]
    else:
        node[last] = value
    return data


@pytest.mark.parametrize("section, dotted, value, delete, message", [
    ("train_nq", "train.steps", None, True, "config key 'train.steps' is missing"),
    ("train_nq", "tracking", None, True, "config key 'tracking' is missing"),
    ("encode", "retriever.fast", True, False, "unknown config key 'retriever.fast'"),
    ("eval_jeopardy", "metrics.qbleu1.w_x", 0.1, False, "unknown config key 'metrics.qbleu1.w_x'"),
    ("train_nq", "train.k", "3", False, "config key 'train.k': expected integer, got str '3'"),
    ("generator", "seed", True, False, "config key 'seed': expected integer, got bool True"),
    ("generator", "generator.dropout", "0.1", False, "config key 'generator.dropout': expected number, got str '0.1'"),
    ("train_nq", "task.well_formed_only", "yes", False,
     "config key 'task.well_formed_only': expected boolean or a list of string, got str 'yes'"),
    ("train_nq", "retriever.question_encoder", None, False,
     "config key 'retriever.question_encoder': expected string, got NoneType"),
    ("data_nq", "miniworld.cities", 1.5, False, "config key 'miniworld.cities': expected integer, got float 1.5"),
    # list items as in load_config's messages (tests/test_reliability.py pins "variants.1")
    ("experiments", "experiments.topk_sweep", [1, "2"], False, "config key 'experiments.topk_sweep.1': expected integer, got str '2'"),
    ("eval_nq", "decode.token", [], False, "config key 'decode.token': expected an object, got list []"),
    ("index", "retriever.index", "hnsw", False, "config key 'retriever.hnsw_m' is missing"),
    # a section file is held to the same declarations as the config: choices, bounds, keys only sections have
    ("index", "retriever.index", "annoy", False, "config key 'retriever.index': 'annoy' is not one of ['flat', 'hnsw', 'ivfpq']"),
    ("encode", "precision", "fp64", False, "config key 'precision': 'fp64' is not one of ['fp32', 'fp16', 'bf16']"),
    ("train_nq", "train.k", 0, False, "config key 'train.k': 0 is less than the minimum of 1"),
    ("train_nq", "generator.chunk_overhead", "x", False,
     "config key 'generator.chunk_overhead': expected integer or null, got str 'x'"),
    ("data_nq", "task_name", None, True, "config key 'task_name' is missing"),
    ("data_msmarco", "task.well_formed_only", ["train", "val"], False,
     "config key 'task.well_formed_only.1': 'val' is not one of ['train', 'dev', 'test']"),
])
def test_errors_name_the_file_and_the_key(tmp_path, section, dotted, value, delete, message):
    path = _write(tmp_path, f"{section}.json", _edit(_parts()[section], dotted, value, delete))
    with pytest.raises(ConfigError) as err:
        S.read_section(section_type(section), path)
    text = str(err.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text


def test_a_command_reports_a_bad_section_in_one_line(tmp_path, capsys):
    path = _write(tmp_path, "index.json", _edit(_parts()["index"], "retriever.extra", 1))
    assert main(["index", "--config", path, "--embeddings", "e.npy", "--out", "i.faiss", "--stats", "s.json"]) == 2
    assert capsys.readouterr().err == f"error: {path}: unknown config key 'retriever.extra'\n"


def test_train_and_eval_files_make_one_typed_section(tmp_path):
    parts = _parts()
    train = _write(tmp_path, "train_nq.json", parts["train_nq"])
    ev = _write(tmp_path, "eval_nq.json", parts["eval_nq"])
    both = S.read_task_sections([train, ev])
    assert both.evaluation == S.EvalSection.from_dict(parts["eval_nq"], ev)
    assert S.read_task_sections([ev, train]) == both
    alone = S.read_task_sections([train])
    assert alone.evaluation is None and alone.to_dict() == both.to_dict() == parts["train_nq"]
    with pytest.raises(ConfigError, match=r"^task nq: decoding needs its eval_nq section"):
        alone.decoding()
    other = _write(tmp_path, "eval_fever3.json", parts["eval_fever3"])
    with pytest.raises(ConfigError, match=r"eval_fever3\.json: task_name 'fever3' differs from the train section's 'nq'"):
        S.read_task_sections([train, other])
    with pytest.raises(ConfigError, match=r"eval_nq\.json: no train_<task> section among the --config files"):
        S.read_task_sections([ev])
    with pytest.raises(ConfigError, match=r"train_nq\.json: a second train_<task> section"):
        S.read_task_sections([train, train])
    listed = _write(tmp_path, "list.json", [1])
    with pytest.raises(ConfigError, match=r"list\.json: a config section must be a JSON object"):
        S.read_task_sections([listed])


def test_merged_files_of_one_section_must_agree(tmp_path):
    parts = _parts()
    a = _write(tmp_path, "a.json", {"device": "cpu", "retriever": parts["index"]["retriever"]})
    b = _write(tmp_path, "b.json", {"device": "cpu"})
    assert S.read_section(S.IndexSection, [a, b]).to_dict() == parts["index"]
    c = _write(tmp_path, "c.json", {"device": "cuda"})
    with pytest.raises(ConfigError, match=r"c\.json: key 'device' differs from an earlier --config file"):
        S.read_section(S.IndexSection, [a, c])
