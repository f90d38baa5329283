"""The start-up benchmark section runs all three ways at --quick size; its commands really ran in the
warm start server (the section refuses a run that fell back to its own process)."""

import json

from benchmarks import run


def test_startup_section_runs_quick(tmp_path):
    assert run.main(["--only", "startup", "--quick", "--threads", "1", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "startup.json").read_text())
    assert [row[0] for row in res["tables"][0]["rows"]] == ["rag init-store", "rag encode (4 passages)"]
    for name, t in res["times"].items():
        assert len(t["own"]) == len(t["warm"]) == 1 and min(t["own"] + t["warm"]) > 0, name
        # the same command through main(argv) in a plain script, and both processes' CPU time
        assert len(t["plain"]) == len(t["own_cpu"]) == len(t["plain_cpu"]) == 1 and min(t["own_cpu"] + t["plain_cpu"]) > 0, name
    assert [row[0] for row in res["tables"][1]["rows"]] == ["rag init-store", "rag encode (4 passages)"]
    assert "startup" in (tmp_path / "summary.md").read_text()
