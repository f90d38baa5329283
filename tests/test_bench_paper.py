"""The paper-size benchmark section runs on CPU at --quick size, and --device is checked."""

from __future__ import annotations

import json

import pytest

from benchmarks import run


def test_paper_section_runs_on_cpu_quick(tmp_path):
    assert run.main(["--paper-size", "--quick", "--threads", "1", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "paper.json").read_text())
    assert res["device"] == "cpu" and res["env"]["quick"]
    titles = [t["title"] for t in res["tables"]]
    assert [t.split(" ")[0] for t in titles] == ["Train", "Decoding", "Passage"]
    train = res["tables"][0]["rows"]
    assert {(r[0], r[1], r[2]) for r in train} == {(m, k, p) for m in ("RAG-Sequence", "RAG-Token") for k in (2, 3)
                                                   for p in ("fp32", "bf16")}
    diffs = [row for row in res["summary"] if row["metric"].startswith("max |loss diff|")]
    assert diffs and all(row["met"] for row in diffs)  # fp32 losses equal transformers' within 1e-4
    # CPU quick numbers say nothing about the GPU targets: no row claims met or missed
    assert all(row["met"] is None for row in res["summary"] if not row["metric"].startswith("max |loss diff|"))
    assert "paper" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("argv, message", [
    (["--device", "cuda", "--only", "index"], "measure the CPU only"),
    (["--paper-size", "--paper-precisions", "fp16"], "fp16 needs --device cuda"),
    (["--paper-size", "--paper-parts", "train,bogus"], "unknown part"),
])
def test_device_arguments_are_checked(argv, message, capsys):
    with pytest.raises(SystemExit):
        run.parse(argv)
    assert message in capsys.readouterr().err


def test_default_run_leaves_the_paper_section_out():
    assert "paper" not in run.parse([]).only
    assert run.parse(["--paper-size"]).only == ["paper"]
    assert run.parse(["--only", "train", "--paper-size"]).only == ["train", "paper"]
