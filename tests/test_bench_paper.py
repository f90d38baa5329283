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


def test_profile_runs_on_cpu_quick(capsys):
    from benchmarks.gpu_check import profile_paper

    assert profile_paper.main(["--quick", "--rows", "3"]) == 0
    out = capsys.readouterr().out
    for side in ("train project", "train transformers", "decode project", "decode transformers"):
        assert f"##### {side}" in out


def _metrics(folder, split, device, precision, seed, em, answers=None):
    folder.mkdir(exist_ok=True)
    (folder / f"{split}-{device}-{precision}-{seed}.json").write_text(json.dumps({"metrics": {"em": em}}))
    if answers is not None:
        lines = "".join(json.dumps({"prediction": a}) + "\n" for a in answers)
        (folder / f"test-pred-{device}-{precision}-{seed}.jsonl").write_text(lines)


def test_gpu_check_compare_flags_a_run_outside_the_cpu_seeds_spread(tmp_path, capsys):
    from benchmarks.gpu_check import compare

    cpu, gpu = tmp_path / "cpu", tmp_path / "gpu"
    for seed, em in enumerate([50.0, 52.0, 54.0, 56.0, 58.0], 1):  # mean 54, SD 3.16: one more run in [44.4, 63.6]
        _metrics(cpu, "dev", "cpu", "fp32", seed, em)
        _metrics(cpu, "test", "cpu", "fp32", seed, em, answers=["a", "b", "c", "d"])
    _metrics(gpu, "dev", "cuda", "bf16", 1, 60.0)
    _metrics(gpu, "test", "cuda", "bf16", 1, 63.0, answers=["a", "b", "x", "y"])
    assert compare.main([str(cpu), str(gpu), "--json", str(tmp_path / "c.json")]) == 0
    res = json.loads((tmp_path / "c.json").read_text())
    low, high = res["splits"]["test"]["interval"]
    assert abs(low - 44.4) < 0.1 and abs(high - 63.6) < 0.1
    run = next(r for r in res["runs"] if r["split"] == "test")
    assert run["inside"] and run["cpu_same_seed"] == 50.0 and run["answers_equal_to_cpu_same_seed"] == 0.5
    _metrics(gpu, "test", "cuda", "bf16", 1, 64.0)
    assert compare.main([str(cpu), str(gpu)]) == 1
    assert "cuda bf16 seed 1: 64.00 OUTSIDE" in capsys.readouterr().out
