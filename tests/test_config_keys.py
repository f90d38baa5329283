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
from rag.config import load_config, sections
from rag.config_keys import json_schema as schema
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
    """Each field of a typed section is a top-level config key of its declared type (the same object), a part of
    the group it names (the config's group is made of it), a nested section, or attached by a reader."""
    classes = _section_classes()
    assert {S.TrainSection, S.EvalSection, S.DataSection, S.IndexSection} <= set(classes)
    for cls in classes:
        for name, f in cls.model_fields.items():
            part = S._model(f.annotation)
            if f.exclude or (part is not None and issubclass(part, S.Section)):
                continue
            if part is not None and name not in config_keys.Config.model_fields and name != "task":
                assert part is config_keys.DecodeOptions, (cls, name)  # Decode's model kinds: a task's decode_* group
            elif part is not None:
                group = config_keys.Task if name == "task" else S._model(config_keys.Config.model_fields[name].annotation)
                assert issubclass(group, part) or part is config_keys.MiniworldCut, (cls, name)
            elif name == "task_name":
                assert keyspec.leaf_of(f) is keyspec.leaf(config_keys.TaskName)
            else:
                assert keyspec.leaf_of(f) is keyspec.leaf_of(config_keys.Config.model_fields[name]), (cls, name)
    # the retriever group is made of what its stages read, declared once
    assert all(issubclass(config_keys.Retriever, part) for part in (config_keys.ContextEncoder, config_keys.QuestionEncoder,
                                                                    config_keys.IndexOptions))


def _leaves(node, path=()):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, path + (key,))
    else:
        yield path, node


def _default(path: tuple):
    """The declared default of the config key at ``path``."""
    f = config_keys.Config.model_fields[path[0]]
    value = f.default_factory() if f.default_factory else f.default
    for part in path[1:]:
        value = getattr(value, part)
    return keyspec.plain(value)


def test_config_yaml_sets_the_declared_defaults():
    with open(ROOT / "config.yaml", encoding="utf-8") as fh:
        base = yaml.safe_load(fh)
    leaves = [(p, v) for p, v in _leaves(base) if p[0] not in ("tasks", "generators", "retrievers")]  # the experiment's own: no default
    assert len(leaves) > 40
    for path, value in leaves:
        default = _default(path)
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
    anchor = '    warmup_steps: Int('
    assert src.count(anchor) == 1
    edited = src.replace(anchor, '    toy: Int(ge=1) = Field(7, description="a toy key")\\n' + anchor)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("rag.config_keys", loader=None))
    mod.__file__ = str(path)
    sys.modules["rag.config_keys"] = mod
    exec(compile(edited, str(path), "exec"), mod.__dict__)

    from rag import sections as S
    from rag.config import load_config, sections
    from rag.config_keys import json_schema as schema
    from rag.errors import ConfigError

    out = {"schema": schema()["$defs"]["Train"]["properties"]["toy"]}
    cfg = load_config("config.yaml", check_files=False)
    out["default"] = cfg["train"]["toy"]
    try:
        load_config({"tasks": {"nq": {"train": 1, "dev": 1, "test": 1}}, "train": {"toy": "x"}}, check_files=False)
    except ConfigError as exc:
        out["error"] = str(exc)
    parts = sections(cfg)
    out["sections"] = sorted(n for n, p in parts.items() if "toy" in p.get("train", {}))
    out["typed"] = S.TrainSection.from_dict(parts["train_nq"], "train_nq.json").train.toy
    out["type"] = S.Train.model_fields["toy"].annotation.__name__
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
