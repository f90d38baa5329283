"""The DAG benchmark section: job records summed by rule, the whole run's wall time from its Snakemake
log, and the CPU floor (the jobs' CPU time over the cores the log says the run had)."""

from types import SimpleNamespace

from benchmarks import bench_dag
from tests.test_resources import bench

LOG = """Using workflow specific profile profiles/default for setting default command line arguments.
Provided cores: {cores}
Rules claiming more threads will be scaled down.
3 of 3 steps (100%) done
Elapsed time: 0:20:00.5
"""


def _record(folder, rule, job, wall, cpu):
    bench(folder / rule / f"{job}.json", wall, cpu)


def _run(tmp_path, monkeypatch, log: str | None):
    records = tmp_path / "resources"
    _record(records, "train", "nq-rag_token-1", 700.0, 690.0)
    _record(records, "train", "nq-rag_token-2", 650.0, 600.0)
    _record(records, "pretrain_generator", "pretrain_generator", 200.0, 390.0)  # two threads
    if log is not None:
        (tmp_path / ".snakemake" / "log").mkdir(parents=True)
        (tmp_path / ".snakemake" / "log" / "2026-01-01T000000.snakemake.log").write_text(log)
    monkeypatch.setattr(bench_dag, "ROOT", tmp_path)
    return bench_dag.run(SimpleNamespace(dag_dir=str(records)))


def test_the_floor_is_the_jobs_cpu_time_over_the_run_s_cores(tmp_path, monkeypatch):
    res = _run(tmp_path, monkeypatch, LOG.format(cores=2))
    assert res["total_cpu_s"] == 690.0 + 600.0 + 390.0
    assert res["run"]["cores"] == 2 and res["run"]["wall_s"] == 1200.5
    rows = {row["metric"].split(":")[0]: row for row in res["summary"]}
    floor = rows["default DAG CPU floor on 2 cores"]
    assert floor["value"] == (690.0 + 600.0 + 390.0) / 2 == 840.0
    assert floor["target"] == "< 900 s" and floor["met"] is True


def test_a_floor_above_the_target_is_not_met(tmp_path, monkeypatch):
    res = _run(tmp_path, monkeypatch, LOG.format(cores=1))
    floor = next(row for row in res["summary"] if row["metric"].startswith("default DAG CPU floor on 1 cores"))
    assert floor["value"] == 1680.0 and floor["met"] is False


def test_no_floor_without_a_whole_run_or_its_cores(tmp_path, monkeypatch):
    res = _run(tmp_path, monkeypatch, None)
    assert res["run"] is None and not any("floor" in row["metric"] for row in res["summary"])
    res = _run(tmp_path / "other", monkeypatch, LOG.replace("Provided cores: {cores}\n", ""))
    assert res["run"]["cores"] is None and not any("floor" in row["metric"] for row in res["summary"])
