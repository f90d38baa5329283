"""The K sweep benchmark section: which jobs it reruns, how their command lines are redirected,
and that the sweeps log to a copy of the run's MLflow store, never to the store itself."""

import json

import pytest

from benchmarks import bench_sweep


HEADER = "output_file\tdate\trule\tlog-file(s)\tinput-file(s)\tshellcmd\tstatus\tplan\n"


def _row(variant, seed, rule="experiments", task="nq"):
    """A line of ``snakemake --detailed-summary``: an output, its rule and the command that wrote it."""
    out = f"results/x/experiments/topk/{task}/{variant}/seed{seed}.json"
    cmd = (f"RAG_THREADS=1 rag experiments --seed {seed} --config results/x/config/train_nq.json results/x/config/eval_nq.json "
           f"--variant {variant} --model-dir 'results/x/runs/a b/model' --topk-out {out} --oracle-out o.json "
           f"--hotswap-out h.json --questions q.jsonl 2> results/x/logs/experiments/{seed}.log")
    return f"{out}\tFri Nov 27 21:44:41 2026\t{rule}\tlog\tinput\t{cmd}\tok\tno update\n"


def test_jobs_are_the_finished_rag_sequence_sweeps_by_seed():
    summary = HEADER + "".join(_row("rag_sequence", seed) for seed in (3, 1, 2))
    summary += _row("rag_token", 1)  # RAG-Token: its sweep decodes each K, nothing to compare
    summary += _row("rag_sequence", 4, task="tqa")  # another task
    summary += "results/x/config/eval_nq.json\tdate\tconfig_section\t\t\t\tok\tno update\n"  # a run: block, no command
    jobs = bench_sweep.sweep_jobs(summary, 2)
    assert [j["seed"] for j in jobs] == [1, 2]
    assert jobs[0]["out"] == "results/x/experiments/topk/nq/rag_sequence/seed1.json"
    # the sweep alone: neither the other experiments' flags nor the log redirection
    assert jobs[0]["argv"][0] == "experiments" and jobs[0]["argv"][-1] == jobs[0]["out"]
    assert "results/x/runs/a b/model" in jobs[0]["argv"]  # a quoted word stays one
    assert [j["seed"] for j in bench_sweep.sweep_jobs(summary, 10)] == [1, 2, 3]


def test_rewrite_replaces_the_output_and_the_train_section_only(tmp_path):
    argv = bench_sweep.sweep_jobs(HEADER + _row("rag_sequence", 1), 1)[0]["argv"]
    got = bench_sweep.rewrite(argv, tmp_path / "o.json", tmp_path / "train.json")
    changed = [(a, b) for a, b in zip(argv, got) if a != b]
    assert changed == [("results/x/config/train_nq.json", str(tmp_path / "train.json")),
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
