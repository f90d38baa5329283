"""The K sweep benchmark section: which jobs it reruns, how their command lines are redirected,
and that the sweeps log to a copy of the run's MLflow store, never to the store itself."""

import json

import pytest

from benchmarks import bench_sweep


def _record(folder, name, seed, exit_code=0, command="topk-sweep"):
    argv = ["--record", f"results/x/resources/topk_sweep/{name}.json", command, "--seed", str(seed), "--config",
            "results/x/config/train_nq.json", "results/x/config/eval_nq.json", "--variant", "rag_sequence",
            "--out", f"results/x/experiments/topk/nq/rag_sequence/seed{seed}.json"]
    (folder / f"{name}.json").write_text(json.dumps({"argv": argv, "exit_code": exit_code, "cpu_s": 1.0}))


def test_jobs_are_the_finished_rag_sequence_sweeps_by_seed(tmp_path):
    for seed in (3, 1, 2):
        _record(tmp_path, f"nq-rag_sequence-{seed}", seed)
    _record(tmp_path, "nq-rag_sequence-4", 4, exit_code=1)  # failed: not rerun
    _record(tmp_path, "nq-rag_token-1", 1)  # RAG-Token: its sweep decodes each K, nothing to compare
    jobs = bench_sweep.sweep_jobs(tmp_path, 2)
    assert [j["seed"] for j in jobs] == [1, 2]
    assert jobs[0]["out"] == "results/x/experiments/topk/nq/rag_sequence/seed1.json"
    assert [j["seed"] for j in bench_sweep.sweep_jobs(tmp_path, 10)] == [1, 2, 3]


def test_rewrite_replaces_the_record_the_output_and_the_train_section_only(tmp_path):
    _record(tmp_path, "nq-rag_sequence-1", 1)
    argv = bench_sweep.sweep_jobs(tmp_path, 1)[0]["argv"]
    got = bench_sweep.rewrite(argv, tmp_path / "r.json", tmp_path / "o.json", tmp_path / "train.json")
    changed = [(a, b) for a, b in zip(argv, got) if a != b]
    assert changed == [("results/x/resources/topk_sweep/nq-rag_sequence-1.json", str(tmp_path / "r.json")),
                       ("results/x/config/train_nq.json", str(tmp_path / "train.json")),
                       ("results/x/experiments/topk/nq/rag_sequence/seed1.json", str(tmp_path / "o.json"))]
    assert len(got) == len(argv) and "results/x/config/eval_nq.json" in got


def test_the_sweeps_log_to_a_copy_of_the_store(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"the run's store")
    section = tmp_path / "train_nq.json"
    section.write_text(json.dumps({"task_name": "nq", "tracking": {"uri": f"sqlite:///{db}"}}))
    work = tmp_path / "work"
    work.mkdir()
    copy = bench_sweep.private_store(section, work)
    got = json.loads(copy.read_text())
    assert got["tracking"]["uri"] == f"sqlite:///{work / 'mlflow.db'}" and got["task_name"] == "nq"
    assert (work / "mlflow.db").read_bytes() == db.read_bytes()
    assert json.loads(section.read_text())["tracking"]["uri"] == f"sqlite:///{db}"  # the run's section unchanged
    section.write_text(json.dumps({"tracking": {"uri": "http://127.0.0.1:5000"}}))
    with pytest.raises(RuntimeError, match="not a sqlite file"):
        bench_sweep.private_store(section, work)


def test_no_records_names_the_folder(tmp_path):
    from types import SimpleNamespace

    with pytest.raises(RuntimeError, match="no NQ RAG-Sequence topk_sweep records under"):
        bench_sweep.run(SimpleNamespace(dag_dir=str(tmp_path), quick=True, sweep_models=2, sweep_rounds=1,
                                        sweep_baseline=None))
