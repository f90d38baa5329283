"""Per-job resource records (rag.resources): each job's record (rag-record), read back by rule and job."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rag import resources
from rag.errors import DataError


def bench(path, wall: float, cpu: float, largest_mb: float = 100.0, tree_mb: float | None = None) -> None:
    """A job's record as rag-record writes it: its wall and CPU time, its largest process's peak memory and
    the sampled peak of its tree (none: a record written before the recorder sampled the tree)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = {"wall_s": wall, "cpu_s": cpu, "user_s": cpu, "system_s": 0.0, "max_rss_mb": largest_mb}
    if tree_mb is not None:
        rec["tree_rss_mb"] = tree_mb
    path.write_text(json.dumps(rec))


def test_records_by_rule_and_job_and_their_summary(tmp_path):
    bench(tmp_path / "train" / "nq-closed_book-1.json", 12.5, 11.0, 290.0, 300.0)
    bench(tmp_path / "train" / "nq-rag_token-1.json", 42.0, 39.5, 900.5, 880.0)  # one process: its own peak is larger
    bench(tmp_path / "report" / "report.json", 0.4, 0.0, 100.0)  # no tree sample: the largest process's
    (tmp_path / "train" / "stray.tsv").write_text("not a record\n")  # other files beside the records are not read
    recs = resources.read_records(tmp_path)
    assert sorted(recs) == ["report", "train"]
    assert [r["job"] for r in recs["train"]] == ["nq-closed_book-1", "nq-rag_token-1"]
    assert recs["train"][1] == {"wall_s": 42.0, "cpu_s": 39.5, "peak_rss_mb": 900.5, "rule": "train",
                                "job": "nq-rag_token-1", "file": str(tmp_path / "train" / "nq-rag_token-1.json")}
    assert recs["train"][0]["peak_rss_mb"] == 300.0  # two processes at once: the tree's sum
    assert recs["report"][0]["peak_rss_mb"] == 100.0 and recs["report"][0]["cpu_s"] == 0.0
    assert resources.summary(recs["train"]) == {"jobs": 2, "wall_s_sum": 54.5, "wall_s_max": 42.0, "cpu_s_sum": 50.5,
                                                "cpu_s_max": 39.5, "peak_rss_mb_max": 900.5}


@pytest.mark.parametrize(("text", "match"), [
    ("", "bad.json: empty file"), ("{", "bad.json:1: invalid JSON"), ("[]", "bad.json: not a resource record"),
    ('{"wall_s": 1}', "bad.json: not a resource record"),
    ('{"wall_s": 1, "cpu_s": true, "max_rss_mb": 1}', "bad.json: not a resource record"),
    ('{"wall_s": 1, "cpu_s": 1, "max_rss_mb": 1, "tree_rss_mb": "9"}', "bad.json: not a resource record"),
])
def test_a_file_that_is_not_a_record_is_an_error_naming_it(tmp_path, text, match):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "bad.json").write_text(text)
    with pytest.raises(DataError, match=match):
        resources.read_records(tmp_path)


BUSY = "import os, sys; sum(i * i for i in range(4_000_000)); sys.exit(int(sys.argv[1]))"


def test_rag_record_holds_the_whole_process_tree_and_its_exit_code(tmp_path):
    """A child that spends its CPU in a grandchild and after it: all of it in the record, exactly as the
    tree's rusage measures it around the run; a failing command writes no record and keeps its exit code."""
    import resource

    out = tmp_path / "rec.json"
    tree = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BUSY!r}, '0']); exec({BUSY!r})"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(["rag-record", "--out", str(out), "--", sys.executable, "-c", tree, "0"], capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    around = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    # two busy loops; what the record cannot hold is its own writing (the recorder ends at once after it, its
    # interpreter's teardown skipped): 0.3-0.5 % here, against 2-6 % with the teardown
    assert rec["cpu_s"] == pytest.approx(around, rel=0.03) and rec["cpu_s"] > 0.3
    # the recorder's own start counted: its interpreter and imports (about 0.15 s here) come before the child runs
    quick = tmp_path / "quick.json"
    assert subprocess.run(["rag-record", "--out", str(quick), "--", "true"]).returncode == 0
    assert json.loads(quick.read_text())["wall_s"] >= 0.03
    assert rec["wall_s"] > 0 and rec["max_rss_mb"] > 5 and rec["tree_rss_mb"] > 5 and rec["cpu_s"] == pytest.approx(rec["user_s"] + rec["system_s"], abs=0.002)
    fail = subprocess.run(["rag-record", "--out", str(tmp_path / "no.json"), "--", sys.executable, "-c", BUSY, "3"])
    assert fail.returncode == 3 and not (tmp_path / "no.json").exists()
    missing = subprocess.run(["rag-record", "--out", str(tmp_path / "no.json"), "--", "no-such-command-here"],
                             capture_output=True, text=True)
    assert missing.returncode == 127 and "no-such-command-here" in missing.stderr


def test_the_tree_memory_is_the_sum_of_processes_alive_together(tmp_path):
    """A child holding 200 MB while its own child holds another 200 MB: the record's tree peak holds both
    (about 400 MB), its largest process one; read back, the peak is the tree's."""
    # each holds its 200 MB for 3 s once both hold theirs (the child says so on a pipe), whatever the load
    fill = "b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096])"
    child = f"import sys, time; {fill}; print('ready', flush=True); time.sleep(3)"
    tree = (f"import subprocess, sys, time; {fill}; p = subprocess.Popen([sys.executable, '-c', {child!r}], "
            "stdout=subprocess.PIPE); p.stdout.readline(); time.sleep(3); p.wait()")
    out = tmp_path / "j" / "a.json"
    proc = subprocess.run(["rag-record", "--out", str(out), "--", sys.executable, "-c", tree], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    assert 190 < rec["max_rss_mb"] < 300 and 390 < rec["tree_rss_mb"] < 560, rec
    (back,) = resources.read_records(tmp_path)["j"]
    assert back["peak_rss_mb"] == rec["tree_rss_mb"]


def test_a_recorded_rule_run_by_snakemake_reads_back(tmp_path):
    """A rule whose command runs under rag-record, run by Snakemake itself: a record."""
    (tmp_path / "Snakefile").write_text(
        'rule a:\n    output: "a.txt"\n    params: record="res/a/job.json"\n'
        '    shell: "rag-record --out {params.record:q} -- python -c \'sum(i * i for i in range(3_000_000))\' && touch {output}"\n')
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "-q"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = resources.read_records(tmp_path / "res")["a"]
    assert rec["job"] == "job" and rec["wall_s"] > 0 and rec["peak_rss_mb"] > 0 and rec["cpu_s"] > 0.05


def test_the_record_s_memory_is_not_that_of_the_process_that_started_the_recorder(tmp_path):
    """rag-record started by a process holding 600 MB (Snakemake, a test runner): a small job records its own
    memory, not the starter's, which Linux keeps in the recorder's high-water mark across exec."""
    out = tmp_path / "rec.json"
    starter = (f"import subprocess, sys; b = bytearray(600 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
               f"sys.exit(subprocess.run(['rag-record', '--out', {str(out)!r}, '--', sys.executable, '-c', 'pass']).returncode)")
    assert subprocess.run([sys.executable, "-c", starter]).returncode == 0
    rec = json.loads(out.read_text())
    assert rec["max_rss_mb"] < 200 and rec["tree_rss_mb"] < 200, rec
