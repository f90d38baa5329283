"""The index_build benchmark section at --quick size: `rag index` really ran in a process of its own,
its peak RSS was read, and the flat file was compared with a one-shot build."""

import json

from benchmarks import run


def test_index_build_section_runs_quick(tmp_path):
    args = ["--only", "index_build", "--quick", "--threads", "1", "--index-build-kinds", "flat",
            "--index-build-dir", str(tmp_path / "work"), "--out", str(tmp_path / "out")]
    assert run.main(args) == 0
    res = json.loads((tmp_path / "out" / "index_build.json").read_text())
    (row,) = res["rows"]
    assert row["index"] == "flat" and row["n"] == 20_000 and row["embedding_bytes"] == 20_000 * 384 * 4
    assert row["identical_to_one_shot_build"] is True
    assert row["peak_rss_rusage"] > row["embedding_bytes"]  # the process held the index at least
    assert row["ratio"] == (row["peak_rss_time_v"] or row["peak_rss_rusage"]) / row["embedding_bytes"]
    assert not any((tmp_path / "work").iterdir())  # the shards are removed
    assert "index_build" in (tmp_path / "out" / "summary.md").read_text()
