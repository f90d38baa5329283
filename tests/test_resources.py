"""Per-job resource records (rag.resources): each job's exact record (rag-record) beside Snakemake's
benchmark file, read back by rule and job."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rag import resources
from rag.errors import DataError

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def bench(path, *rows: tuple[str, str, str]) -> None:
    """A job's record as a run writes it: Snakemake's benchmark file, one row per (s, max_rss, cpu_time), and
    the exact record beside it (the last row's wall and CPU time, a largest process of 100 MB)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"{s}\t0:00:01\t{rss}\t20.0\t7.0\t8.0\t0.00\t0.00\t50.0\t{cpu}\n" for s, rss, cpu in rows))
    s, _, cpu = rows[-1]
    path.with_suffix(".json").write_text(json.dumps({"wall_s": float(s), "cpu_s": 0.0 if cpu == "NA" else float(cpu),
                                                     "max_rss_mb": 100.0}))


def test_records_by_rule_and_job_and_their_summary(tmp_path):
    bench(tmp_path / "train" / "nq-bart-1.tsv", ("12.5", "300.0", "11.0"))
    bench(tmp_path / "train" / "nq-rag_token-1.tsv", ("40.0", "900.5", "38.0"), ("42.0", "880.0", "39.5"))  # repeat: 2 rows
    bench(tmp_path / "report" / "report.tsv", ("0.4", "NA", "NA"))  # over before Snakemake's first sample
    recs = resources.read_records(tmp_path)
    assert sorted(recs) == ["report", "train"]
    assert [r["job"] for r in recs["train"]] == ["nq-bart-1", "nq-rag_token-1"]
    assert recs["train"][1] == {"wall_s": 42.0, "cpu_s": 39.5, "peak_rss_mb": 900.5, "rule": "train",
                                "job": "nq-rag_token-1", "file": str(tmp_path / "train" / "nq-rag_token-1.tsv")}
    # the exact record's largest process where Snakemake sampled nothing
    assert recs["report"][0]["peak_rss_mb"] == 100.0 and recs["report"][0]["cpu_s"] == 0.0
    assert resources.summary(recs["train"]) == {"jobs": 2, "wall_s_sum": 54.5, "wall_s_max": 42.0, "cpu_s_sum": 50.5,
                                                "cpu_s_max": 39.5, "peak_rss_mb_max": 900.5}


@pytest.mark.parametrize("text", ["", "wall\tcpu\n1\t2\n", HEADER + "1\t0\tx\t1\t1\t1\t0\t0\t1\t1\n"])
def test_a_file_that_is_not_a_benchmark_is_an_error_naming_it(tmp_path, text):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "bad.tsv").write_text(text)
    (tmp_path / "train" / "bad.json").write_text('{"wall_s": 1, "cpu_s": 1, "max_rss_mb": 1}')
    with pytest.raises(DataError, match="bad.tsv: not a Snakemake benchmark file"):
        resources.read_records(tmp_path)


def test_a_benchmark_without_its_exact_record_is_an_error_naming_it(tmp_path):
    bench(tmp_path / "train" / "a.tsv", ("1.0", "10.0", "1.0"))
    (tmp_path / "train" / "a.json").unlink()
    with pytest.raises(DataError, match=r"a.tsv: no exact record a.json beside it"):
        resources.read_records(tmp_path)
    (tmp_path / "train" / "a.json").write_text('{"wall_s": 1}')
    with pytest.raises(DataError, match=r"a.json: not a resource record"):
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
    assert rec["cpu_s"] == pytest.approx(around, rel=0.03) and rec["cpu_s"] > 0.3  # two busy loops
    assert rec["wall_s"] > 0 and rec["max_rss_mb"] > 5 and rec["cpu_s"] == pytest.approx(rec["user_s"] + rec["system_s"], abs=0.002)
    fail = subprocess.run(["rag-record", "--out", str(tmp_path / "no.json"), "--", sys.executable, "-c", BUSY, "3"])
    assert fail.returncode == 3 and not (tmp_path / "no.json").exists()
    missing = subprocess.run(["rag-record", "--out", str(tmp_path / "no.json"), "--", "no-such-command-here"],
                             capture_output=True, text=True)
    assert missing.returncode == 127 and "no-such-command-here" in missing.stderr


def test_a_recorded_rule_run_by_snakemake_reads_back(tmp_path):
    """A rule with ``benchmark:`` and its command under rag-record, run by Snakemake itself: a record."""
    (tmp_path / "Snakefile").write_text(
        'rule a:\n    output: "a.txt"\n    benchmark: "res/a/{x}.tsv".format(x="job")\n    params: record="res/a/job.json"\n'
        '    shell: "rag-record --out {params.record:q} -- python -c \'sum(i * i for i in range(3_000_000))\' && touch {output}"\n')
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "-q"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = resources.read_records(tmp_path / "res")["a"]
    assert rec["job"] == "job" and rec["wall_s"] > 0 and rec["peak_rss_mb"] > 0 and rec["cpu_s"] > 0.05
