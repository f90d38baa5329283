"""Per-job resource records (`rag --record`, rag.resources): measured in the process that does the
work, also when that process is a child forked from the warm start server (then its CPU time is
the job's, not the thin client's)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from rag import resources, warm
from tests.test_warm import _client, _start


def _score_inputs(tmp_path, n: int) -> list[str]:
    """A ROUGE-L scoring job of ``n`` long predictions (about a CPU-second per 2,000 here)."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    with open(tmp_path / "p.jsonl", "w") as p, open(tmp_path / "r.jsonl", "w") as r:
        for i in range(n):
            p.write(json.dumps({"id": str(i), "prediction": " ".join(rng.choices(words, k=60))}) + "\n")
            r.write(json.dumps({"id": str(i), "targets": [" ".join(rng.choices(words, k=60))]}) + "\n")
    return ["score", "--metric", "rougeL", "--predictions", "p.jsonl", "--references", "r.jsonl"]


def test_record_of_a_process_of_its_own(tmp_path):
    args = _score_inputs(tmp_path, 200)
    res = subprocess.run([sys.executable, "-m", "rag", "--record", "rec/score.json", *args], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    rec = json.loads((tmp_path / "rec" / "score.json").read_text())
    assert rec["command"] == "score" and rec["exit_code"] == 0 and rec["argv"][:2] == ["--record", "rec/score.json"]
    assert rec["forked_from_warm_server"] is False
    assert rec["wall_s"] > 0 and rec["cpu_s"] > 0 and rec["cpu_s"] == pytest.approx(rec["cpu_user_s"] + rec["cpu_sys_s"]
                                                                                       + rec["children_cpu_s"], abs=0.01)
    assert rec["peak_rss_mb"] >= rec["rss_at_start_mb"] > 5
    assert rec["gpu_peak_allocated_mb"] is None  # no CUDA in this job


def test_record_of_a_failed_command(tmp_path):
    res = subprocess.run([sys.executable, "-m", "rag", "--record", "r.json", "score", "--metric", "em",
                          "--predictions", "missing.jsonl", "--references", "missing.jsonl"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 2


def test_record_of_a_job_forked_from_the_warm_server_is_the_jobs_not_the_clients(tmp_path):
    """With warm start Snakemake's benchmark: files measured the client (0.03 CPU-seconds for a
    170-second pretraining job); the record is written by the child that ran the command."""
    args = _score_inputs(tmp_path, 3_000)
    proc, path, _ = _start("--preload", "rag.metrics")
    try:
        client = _client(path, ["--record", "rec.json", *args], tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(client.pid, 0)
        client.returncode = os.waitstatus_to_exitcode(status)
        err = client.stderr.read()
        assert client.returncode == 0, err
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    rec = json.loads((tmp_path / "rec.json").read_text())
    client_cpu = usage.ru_utime + usage.ru_stime
    assert rec["forked_from_warm_server"] is True and rec["pid"] != client.pid
    assert rec["cpu_s"] > 0.5 and rec["cpu_s"] > 3 * client_cpu, (rec["cpu_s"], client_cpu)
    assert rec["wall_s"] >= rec["cpu_user_s"] * 0.5
    # the child shares the server's imported modules: they are in its resident set from the start
    assert rec["peak_rss_mb"] >= rec["rss_at_start_mb"] > 5


def test_rank_records_and_reading_them_back(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert resources.record_path(tmp_path / "train" / "nq-bart.json").name == "nq-bart.rank1.json"
    monkeypatch.setenv("RANK", "0")
    assert resources.record_path(tmp_path / "train" / "nq-bart.json").name == "nq-bart.json"
    monkeypatch.delenv("WORLD_SIZE")
    meter = resources.JobMeter()
    sum(i * i for i in range(200_000))
    for job, code in (("nq-bart", 0), ("tqa-bart", 0), ("nq-rag_token", 1)):
        resources.write_record(tmp_path / "train" / f"{job}.json", meter.record(["train"], "train", code))
    recs = resources.read_records(tmp_path)
    assert sorted(r["job"] for r in recs["train"]) == ["nq-bart", "nq-rag_token", "tqa-bart"]
    s = resources.summary(recs["train"])
    assert s["jobs"] == 2 and s["peak_rss_mb_max"] > 0 and s["cpu_s_sum"] > 0  # the failed job is left out
    (tmp_path / "train" / "bad.json").write_text('{"x": 1}')
    from rag.errors import DataError

    with pytest.raises(DataError, match="bad.json: not a resource record"):
        resources.read_records(tmp_path)
    assert warm.FORKED is False
