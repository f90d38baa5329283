"""The README's bring-your-own-data example: a local document corpus and a jsonl QA task."""

import json
import shutil

import pytest

from tests.conftest import ROOT, job_counts, smk


@pytest.mark.slow  # the session's e2e run and the example's beside it
def test_byo_example_runs_its_own_task_end_to_end(tmp_path, byo_beside_e2e):
    """The example's task is declared in its config alone (tasks.byo_qa: kind, metrics, format): the
    whole DAG runs it under its own name, from the corpus to the report, which shows its scores in
    a table of their own (it fills no column of the paper's tables). The run is the session's
    (conftest.byo_beside_e2e: in a folder beside the e2e experiment, whose files it leaves alone);
    the dry run, from an empty folder."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    dry = smk(tmp_path, "-n", configfile=tmp_path / "examples" / "byo" / "config.yaml")
    assert dry.returncode == 0, dry.stderr[-2000:]
    counts = job_counts(dry.stdout + dry.stderr)
    # evaluate_in_train_job: the schema's default, as config.yaml says: each train job decodes dev/test
    assert counts["train"] == 2 and counts["experiments"] == 1 and "evaluate" not in counts and "hotswap" not in counts
    res, work = byo_beside_e2e.run, byo_beside_e2e.work
    assert res.returncode == 0, res.stderr[-3000:]
    out = work / "results" / "byo"
    rows = (out / "corpus/byo/passages.tsv").read_text().splitlines()
    assert rows[0] == "id\ttitle\ttext" and len(rows) == 1 + 4
    assert rows[1].startswith("ada_0\tAda Lovelace\tAda Lovelace was")
    test = [json.loads(x) for x in (out / "data/byo_qa/test.jsonl").read_text().splitlines()]
    assert test[0]["targets"] == ["Charles Babbage", "Babbage"]
    for variant in ("rag_token", "closed_book"):
        metrics = json.loads((out / f"runs/byo_qa/{variant}/seed1/test/metrics.json").read_text())
        assert metrics["task"] == "byo_qa" and set(metrics["metrics"]) == {"em"}
    assert (out / "experiments/topk/byo_qa/rag_token/seed1.json").is_file()
    html = (work / "reports/byo/report.html").read_text(encoding="utf-8")
    own = html.split(">Tasks of this experiment<", 1)[1].split("</table>", 1)[0]
    assert "<th>BYO QA em</th>" in own and "RAG-Token" in own and "BART" in own
    assert "BYO QA: exact match vs test-time K" in html  # Figure 3: experiments.topk_task byo_qa


def test_missing_input_file_stops_the_dag_whatever_outputs_exist(tmp_path, monkeypatch):
    """A local input file the config names that does not exist stops even a dry run with one line
    naming the key and the path, also when every output exists from an earlier run (Snakemake
    alone would say "Nothing to be done" and exit 0)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the jobs' `rag` runs the code under test
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    cfg = tmp_path / "examples" / "byo" / "config.yaml"
    target = "results/byo/data/byo_qa/test.jsonl"
    res = smk(tmp_path, target, configfile=cfg)
    assert res.returncode == 0, res.stderr[-3000:]
    again = smk(tmp_path, "-n", target, configfile=cfg)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "results").rglob("*") if p.is_file()}
    (tmp_path / "examples" / "byo" / "qa-train.jsonl").unlink()
    for args in (("-n", target), (target,)):
        res = smk(tmp_path, *args, configfile=cfg)
        out = res.stdout + res.stderr
        assert res.returncode != 0, out[-3000:]
        assert "config key 'tasks.byo_qa.files.train': input file examples/byo/qa-train.jsonl not found" in out
        assert "Nothing to be done" not in out and "Job stats" not in out
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "results").rglob("*") if p.is_file()} == before
