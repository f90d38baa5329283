"""Run manifests (rag.manifest) and `rag diff-runs`: what produced a run's numbers, and what differs
between two runs, the most likely cause first (data, config, code, packages, hardware, seed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rag import manifest as M
from rag.cli import main
from rag.errors import DataError
from rag.io import write_json
from tests.conftest import ROOT

CONFIG = {"train_nq": {"name": "e", "seed": 13, "device": "cpu", "precision": "fp32", "tracking": {"uri": "sqlite:///x.db"},
                       "train": {"k": 3, "lr": 0.0005, "steps": 80}},
          "eval_nq": {"task_name": "nq", "decode": {"token": {"k": 5}}}}


@pytest.fixture
def files(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    for name, text in (("passages.tsv", "id\ttitle\ttext\n1\tA\talpha\n"), ("passages2.tsv", "id\ttitle\ttext\n1\tA\tbeta\n"),
                       ("train.jsonl", '{"id": "1"}\n'), ("test.jsonl", '{"id": "2"}\n'), ("flat.faiss", "index bytes")):
        (d / name).write_text(text)
    (d / "bm25").mkdir()
    (d / "bm25" / "a.npy").write_bytes(b"x")
    (d / "gen").mkdir()
    (d / "gen" / "model.safetensors").write_bytes(b"weights")
    return d


def _manifest(files, seed=13, passages="passages.tsv", config=CONFIG, **kw):
    data = dict(passages=files / passages if passages else None,
                splits={"train": files / "train.jsonl", "test": files / "test.jsonl"}, index=files / "flat.faiss",
                init=files / "gen")
    data.update((k, kw.pop(k)) for k in list(kw) if k in data)
    args = dict(run={"experiment": "e", "task": "nq", "variant": "rag_token"}, config=config, seed=seed, device="cpu",
                threads=1, precision="fp32", data=M.data_entries(**data))
    args.update(kw)
    return M.build_manifest(**args)


def test_manifest_holds_hashes_versions_code_and_hardware(files):
    import hashlib

    m = _manifest(files)
    assert m["data"]["passages"]["sha256"] == hashlib.sha256((files / "passages.tsv").read_bytes()).hexdigest()
    assert set(m["data"]["splits"]) == {"train", "test"} and m["data"]["index"]["bytes"] == len("index bytes")
    assert m["data"]["init"]["folder"] is True and len(m["data"]["init"]["sha256"]) == 64
    assert m["seed"] == 13 and "seed" not in json.dumps(m["config"]["section"])  # the seed is its own field
    assert {"python", "torch", "transformers", "faiss", "snakemake", "mlflow"} <= set(m["packages"])
    assert m["packages"]["faiss"] and m["packages"]["torch"] and m["packages"]["snakemake"]
    assert len(m["code"]["git_commit"]) == 40 and isinstance(m["code"]["git_dirty"], bool)  # the tests run in a checkout
    assert m["hardware"]["device"] == "cpu" and m["hardware"]["cpu_model"] and m["hardware"]["threads"] == 1
    assert m["hardware"]["precision"] == "fp32" and m["hardware"]["gpu_model"] is None
    # a BM25 index is a folder: hashed file by file
    assert _manifest(files, index=files / "bm25")["data"]["index"]["folder"] is True
    with pytest.raises(DataError, match="nope.faiss: not found"):
        _manifest(files, index=files / "nope.faiss")


def test_runs_that_differ_only_by_seed_say_so(files, tmp_path, capsys):
    a, b = _manifest(files, seed=13), _manifest(files, seed=14, config={**CONFIG, "train_nq": {**CONFIG["train_nq"], "seed": 14}})
    diffs = M.diff_manifests(a, b)
    assert [(d.category, d.a, d.b) for d in diffs] == [("seed", 13, 14)]
    (tmp_path / "A").mkdir()
    (tmp_path / "B" / "model").mkdir(parents=True)
    write_json(tmp_path / "A" / "manifest.json", a)
    write_json(tmp_path / "B" / "model" / "manifest.json", b)  # a run folder: its model/manifest.json
    assert main(["diff-runs", str(tmp_path / "A" / "manifest.json"), str(tmp_path / "B")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "The runs differ only by seed: 13 vs 14 (same data, config, code, packages and hardware)."
    assert len(out) == 3
    # the experiment's name is a label: it changes no number
    c = _manifest(files, seed=14, config={**CONFIG, "train_nq": {**CONFIG["train_nq"], "name": "other"}})
    lines = M.describe(M.diff_manifests(a, c))
    assert lines[0].startswith("The runs differ only by seed") and lines[1].startswith("Labels (no effect on the numbers): ")
    assert M.describe(M.diff_manifests(a, a)) == ["No difference: same data, config, code, packages, hardware and seed."]


def test_different_passages_come_first(files, capsys, tmp_path):
    a = _manifest(files)
    b = _manifest(files, seed=14, passages="passages2.tsv",
                  config={**CONFIG, "train_nq": {**CONFIG["train_nq"], "train": {"k": 5, "lr": 0.001, "steps": 80}}})
    b["packages"]["torch"] = "0.0-other"
    b["hardware"]["cpu_model"] = "Another CPU"
    b["code"]["git_commit"] = "f" * 40
    diffs = M.diff_manifests(a, b)
    assert [d.category for d in diffs] == ["data", "config", "config", "code", "packages", "hardware", "seed"]
    assert diffs[0].key.startswith("passages file differs")
    assert [d.key for d in diffs if d.category == "config"] == ["train_nq.train.k", "train_nq.train.lr"]
    write_json(tmp_path / "a.json", a)
    write_json(tmp_path / "b.json", b)
    res = subprocess.run([sys.executable, "-m", "rag", "diff-runs", str(tmp_path / "a.json"), str(tmp_path / "b.json")],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[2] == "7 difference(s), the most likely cause first: data."
    assert out[3].startswith("1. data: passages file differs (") and "sha256 " in out[3]
    assert out[-1] == "7. seed: seed: 13 vs 14"
    assert main(["diff-runs", "--json", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert json.loads(capsys.readouterr().out)["differences"][0]["category"] == "data"


def test_split_and_index_differences_and_closed_book_runs(files):
    a = _manifest(files)
    (files / "test2.jsonl").write_text('{"id": "3"}\n')
    b = _manifest(files, splits={"train": files / "train.jsonl", "test": files / "test2.jsonl"}, index=files / "bm25")
    assert [d.key.split(" (")[0] for d in M.diff_manifests(a, b)] == ["test split file differs", "index differs"]
    closed_book = _manifest(files, passages=None, index=None, run={"experiment": "e", "task": "nq", "variant": "closed_book"})
    keys = [d.key.split(" (")[0] for d in M.diff_manifests(a, closed_book)]
    assert keys == ["passages file read by one run only", "index read by one run only", "variant"]


def test_read_manifest_errors(tmp_path):
    with pytest.raises(DataError, match="no such file or folder"):
        M.read_manifest(tmp_path / "missing")
    (tmp_path / "run").mkdir()
    with pytest.raises(DataError, match="no manifest found"):
        M.read_manifest(tmp_path / "run")
    (tmp_path / "m.json").write_text('{"metrics": {}}')
    with pytest.raises(DataError, match="m.json: not a run manifest"):
        M.read_manifest(tmp_path / "m.json")
    assert main(["diff-runs", str(tmp_path / "m.json"), str(tmp_path / "m.json")]) == 2


def test_a_metrics_file_carries_the_manifest(files, tmp_path):
    m = _manifest(files)
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "metrics.json").write_text(json.dumps({"task": "nq", "manifest": m}))
    got, path = M.read_manifest(tmp_path)
    assert got == m and path.name == "metrics.json"


def test_report_lists_the_manifests(files, tmp_path):
    from rag.report import ReportInputs
    from rag.report.build import Runs, manifest_table

    paths = []
    for variant, seed in (("rag_token", 13), ("closed_book", 14)):
        m = _manifest(files, seed=seed, run={"experiment": "e", "task": "nq", "variant": variant})
        p = tmp_path / f"{variant}.json"
        p.write_text(json.dumps({"task": "nq", "variant": variant, "split": "test", "metrics": {"em": 1.0}, "manifest": m}))
        paths.append(p)
    table = manifest_table(Runs(ReportInputs.from_files(metrics=paths), "http://x", None, None))
    assert [r[:2] for r in table["rows"]] == [["nq/rag_token", "13"], ["nq/closed_book", "14"]]
    assert table["rows"][0][4] == m["data"]["passages"]["sha256"][:12]
    assert "commit " in table["common"] and "seed" not in table["common"]
