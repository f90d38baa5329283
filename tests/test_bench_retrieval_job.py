"""The retrieval_job benchmark section at --quick size: each way of starting a retrieving job ran in a
process of its own, its peak RSS and timings were read, and the summary holds the bars."""

import json

from benchmarks import run


def test_retrieval_job_section_runs_quick(tmp_path):
    args = ["--only", "retrieval_job", "--quick", "--threads", "1", "--retrieval-job-kinds", "flat",
            "--retrieval-job-dir", str(tmp_path / "work"), "--out", str(tmp_path / "out")]
    assert run.main(args) == 0
    res = json.loads((tmp_path / "out" / "retrieval_job.json").read_text())
    rows = {r["mode"]: r for r in res["rows"]}
    assert set(rows) == {"everything loaded", "in place, index read whole", "in place"}
    for r in rows.values():
        assert r["index"] == "flat" and r["n"] == 20_000 and r["index_bytes"] == 20_000 * 384 * 4
        assert r["peak_rss_rusage"] > r["index_bytes"]  # the process held the index at least
        assert 0 < r["files_s"] < r["first_step_inputs_s"] and r["question_encoder_load_s"] > 0
    metrics = [s["metric"] for s in res["summary"]]
    assert len(metrics) == 2 * 3 and all("flat index" in m for m in metrics)
    assert not any((tmp_path / "work").iterdir())  # its files are removed
