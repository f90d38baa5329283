"""The start-up benchmark section runs both ways at --quick size, and times each process."""

import json

from benchmarks import run


def test_startup_section_runs_quick(tmp_path):
    assert run.main(["--only", "startup", "--quick", "--threads", "1", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "startup.json").read_text())
    assert [row[0] for row in res["tables"][0]["rows"]] == ["rag init-store", "rag encode (4 passages)"]
    for name, t in res["times"].items():
        assert all(len(v) == 1 and v[0] > 0 for v in t.values()), name
    assert "startup" in (tmp_path / "summary.md").read_text()
