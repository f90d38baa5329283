"""rag.config_keys: every config key declared once, and everything else derived from it (the
schema file, load_config's schema, the typed sections, config.yaml's values)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from rag import config_keys, keyspec
from rag import sections as S
from rag.config import load_config, schema, sections
from rag.errors import ConfigError
from tests.conftest import ROOT


def _section_classes() -> list[type]:
    out, todo = [], [S.Section]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__ == "rag.sections" and sub not in out:
                out.append(sub)
                todo.append(sub)
    return out


# ------------------------------------------------------------------------------------ one source
def test_the_schema_file_is_generated_from_the_declarations():
    """workflow/schemas/config.schema.yaml is written by `python -m rag.config_keys`; a stale
    copy (a key edited there by hand, or declared here and not regenerated) fails here."""
    path = ROOT / "workflow" / "schemas" / "config.schema.yaml"
    assert not path.is_symlink()
    assert path.read_text(encoding="utf-8") == config_keys.schema_text(), "stale: run python -m rag.config_keys"
    assert yaml.safe_load(path.read_text(encoding="utf-8")) == schema()  # what load_config validates with
    proc = subprocess.run([sys.executable, "-m", "rag.config_keys", "--check"], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr


def test_there_is_one_schema_file():
    found = sorted(str(p.relative_to(ROOT)) for d in ("rag", "workflow", "config")
                   for p in (ROOT / d).rglob("*schema*") if p.is_file() and p.suffix in (".yaml", ".yml", ".json"))
    assert found == ["workflow/schemas/config.schema.yaml"]


def test_section_fields_are_declared_keys_not_types_of_their_own():
    """Each field of a typed section is a declared key (its type the declaration's), a nested
    section, or attached by a reader; none names a type of its own."""
    classes = _section_classes()
    assert {S.TrainSection, S.EvalSection, S.QuestionEncoder, S.Miniworld} <= set(classes)
    for cls in classes:
        hints = cls.__annotations__
        for f in __import__("dataclasses").fields(cls):
            if not f.metadata.get("key", True):
                continue
            if "part" in f.metadata:
                assert issubclass(f.metadata["part"], S.Section), (cls, f.name)
                continue
            r = f.metadata["read"]
            if r.path is None:  # a key only sections have: a definition of config_keys
                assert f.name == "task_name" and keyspec.target(r.node) is keyspec.DEFINITIONS[config_keys.TASK_NAME]
                continue
            assert r.path.rsplit(".", 1)[-1] == f.name, (cls, f.name, r.path)
            assert r.node is config_keys.key(r.path), (cls, f.name)
            declared = keyspec.py_type(r.node)
            if f.name in hints:
                assert hints[f.name] in (declared, declared | None), (cls, f.name)


def test_a_section_cannot_declare_a_type():
    with pytest.raises(TypeError, match="not a type of its own"):
        class Bad(S.Section):
            k: int
    with pytest.raises(KeyError, match="no config key 'train.kk' is declared"):
        class Typo(S.Section):
            kk = S.read("train.kk")
    with pytest.raises(TypeError, match="metrics.qbleu1 is a group of keys"):
        class NoPart(S.Section, every_key_of="metrics"):
            pass


def _leaves(node, path=()):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, path + (key,))
    else:
        yield path, node


def test_config_yaml_sets_the_declared_defaults():
    with open(ROOT / "config.yaml", encoding="utf-8") as fh:
        base = yaml.safe_load(fh)
    leaves = [(p, v) for p, v in _leaves(base) if p[0] not in ("tasks", "generators", "retrievers")]  # the experiment's own: no default
    assert len(leaves) > 40
    for path, value in leaves:
        default = keyspec.resolve(config_keys.key(".".join(path))["default"])  # as declared there (a ref's own)
        assert default == value and type(default) is type(value), ".".join(path)


@pytest.mark.parametrize("section, cls, group, key, bad", [
    ("train_nq", S.TrainSection, "train", "k", 0),
    ("train_nq", S.TrainSection, "generator", "chunk_overhead", -1),
    ("encode", S.EncodeSection, "retriever", "pooling", "max"),
    ("generator", S.GeneratorSection, "generator", "dropout", "0.1"),
])
def test_one_validator_one_message(tmp_path, section, cls, group, key, bad):
    """A value the config refuses, a section file refuses in the same words (after the file name)."""
    with open(ROOT / "config.yaml", encoding="utf-8") as fh:
        base = yaml.safe_load(fh)
    cfg = json.loads(json.dumps(base))
    cfg.setdefault(group, {})[key] = bad
    with pytest.raises(ConfigError) as config_err:
        load_config(cfg, check_files=False)
    data = sections(load_config(base, check_files=False))[section]
    data[group][key] = bad
    path = tmp_path / f"{section}.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as section_err:
        S.read_section(cls, path)
    assert str(section_err.value) == f"{path}: {config_err.value}"


# ------------------------------------------------------------------------------------ adding a key
TOY = textwrap.dedent('''
    import importlib.util, json, sys
    from pathlib import Path

    # rag/config_keys.py with one line added: train.toy, an integer >= 1, default 7
    path = Path("rag/config_keys.py").resolve()
    src = path.read_text(encoding="utf-8")
    anchor = '        "warmup_steps": Int('
    assert src.count(anchor) == 1
    edited = src.replace(anchor, '        "toy": Int(minimum=1, default=7, description="a toy key"),\\n' + anchor)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("rag.config_keys", loader=None))
    mod.__file__ = str(path)
    sys.modules["rag.config_keys"] = mod
    exec(compile(edited, str(path), "exec"), mod.__dict__)

    from rag import sections as S
    from rag.config import load_config, schema, sections
    from rag.errors import ConfigError

    out = {"schema": schema()["properties"]["train"]["properties"]["toy"]}
    cfg = load_config("config.yaml", check_files=False)
    out["default"] = cfg["train"]["toy"]
    try:
        load_config({"tasks": {"nq": {"train": 1, "dev": 1, "test": 1}}, "train": {"toy": "x"}}, check_files=False)
    except ConfigError as exc:
        out["error"] = str(exc)
    parts = sections(cfg)
    out["sections"] = sorted(n for n, p in parts.items() if "toy" in p.get("train", {}))
    out["typed"] = S.TrainSection.from_dict(parts["train_nq"], "train_nq.json").train.toy
    out["type"] = S.TrainOptions.__annotations__["toy"].__name__
    bad = json.loads(json.dumps(parts["train_nq"]))
    bad["train"]["toy"] = 0
    try:
        S.TrainSection.from_dict(bad, "train_nq.json")
    except ConfigError as exc:
        out["section_error"] = str(exc)
    print(json.dumps(out))
''')


def test_adding_a_key_is_one_edit():
    """One line in rag/config_keys.py and the key is in the schema, gets its default, is validated
    with a one-line error, and reaches the sections that read its group, typed."""
    proc = subprocess.run([sys.executable, "-c", TOY], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["schema"] == {"type": "integer", "minimum": 1, "default": 7, "description": "a toy key"}
    assert out["default"] == 7
    assert out["error"] == "config key 'train.toy': expected integer, got str 'x'"
    tasks = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))["tasks"]
    assert out["sections"] == sorted(f"train_{t}" for t in tasks)
    assert out["typed"] == 7 and out["type"] == "int"
    assert out["section_error"] == "train_nq.json: config key 'train.toy': 0 is less than the minimum of 1"
