"""Per-job resource records (rag.resources): Snakemake's benchmark files, read back by rule and job."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rag import resources
from rag.errors import DataError

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def bench(path, *rows: tuple[str, str, str]) -> None:
    """A benchmark file as Snakemake writes it, one row per (s, max_rss, cpu_time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"{s}\t0:00:01\t{rss}\t20.0\t7.0\t8.0\t0.00\t0.00\t50.0\t{cpu}\n" for s, rss, cpu in rows))


def test_records_by_rule_and_job_and_their_summary(tmp_path):
    bench(tmp_path / "train" / "nq-bart-1.tsv", ("12.5", "300.0", "11.0"))
    bench(tmp_path / "train" / "nq-rag_token-1.tsv", ("40.0", "900.5", "38.0"), ("42.0", "880.0", "39.5"))  # repeat: 2 rows
    bench(tmp_path / "report" / "report.tsv", ("0.4", "NA", "NA"))  # over before the first sample
    recs = resources.read_records(tmp_path)
    assert sorted(recs) == ["report", "train"]
    assert [r["job"] for r in recs["train"]] == ["nq-bart-1", "nq-rag_token-1"]
    assert recs["train"][1] == {"wall_s": 42.0, "cpu_s": 39.5, "peak_rss_mb": 900.5, "rule": "train",
                                "job": "nq-rag_token-1", "file": str(tmp_path / "train" / "nq-rag_token-1.tsv")}
    assert recs["report"][0]["peak_rss_mb"] == 0.0 and recs["report"][0]["cpu_s"] == 0.0
    assert resources.summary(recs["train"]) == {"jobs": 2, "wall_s_sum": 54.5, "wall_s_max": 42.0, "cpu_s_sum": 50.5,
                                                "cpu_s_max": 39.5, "peak_rss_mb_max": 900.5}


@pytest.mark.parametrize("text", ["", "wall\tcpu\n1\t2\n", HEADER + "x\t0\t1\t1\t1\t1\t0\t0\t1\t1\n"])
def test_a_file_that_is_not_a_benchmark_is_an_error_naming_it(tmp_path, text):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "bad.tsv").write_text(text)
    with pytest.raises(DataError, match="bad.tsv: not a Snakemake benchmark file"):
        resources.read_records(tmp_path)


def test_snakemake_benchmark_files_read_back(tmp_path):
    """A rule with ``benchmark:`` run by Snakemake itself: its file reads as a record."""
    (tmp_path / "Snakefile").write_text(
        'rule a:\n    output: "a.txt"\n    benchmark: "res/a/{x}.tsv".format(x="job")\n'
        '    shell: "python -c \'sum(i * i for i in range(3_000_000))\' && touch {output}"\n')
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "-q"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = resources.read_records(tmp_path / "res")["a"]
    assert rec["job"] == "job" and rec["wall_s"] > 0 and rec["peak_rss_mb"] > 0 and rec["cpu_s"] >= 0
