"""The Snakemake DAG: a dry run of the default, and a small real run in a temp dir."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rag.config import load_config, replicate_config
from rag.models.sizing import fine_tune_memory
from tests.conftest import ROOT, chromium_render, job_counts, needs_chromium, smk


def test_default_dry_run_lists_every_job(tmp_path):
    res = smk(tmp_path, "-n", configfile=ROOT / "config.yaml")
    assert res.returncode == 0, res.stderr[-3000:]
    counts = job_counts(res.stdout + res.stderr)
    # config.yaml: evaluate_in_train_job, so each train job also decodes dev/test; NQ runs
    # 7 variants and TriviaQA 5 (no BM25), 4 of them with five (NQ, tasks.nq.seeds) or three (seeds)
    # fine-tune seeds, the others one (one_seed_variants);
    # the other 6 tasks the 3 of their tasks.<task>.variants, one seed each (tasks.<task>.seeds); then the further
    # seeds of single runs (tasks.<task>.variant_seeds): NQ RAG-Sequence-BM25 1, WebQuestions RAG-Token 2, CuratedTrec
    # RAG-Sequence 3, Jeopardy BART 1, RAG-Sequence 1 and RAG-Token 6, FEVER-3 BART 2, RAG-Sequence 1 and RAG-Token 7,
    # FEVER-2 BART 2, RAG-Sequence 1 and RAG-Token 1
    extra = 1 + 2 + 3 + (1 + 1 + 6) + (2 + 1 + 7) + (2 + 1 + 1)
    assert counts["train"] == (4 * 5 + 3) + (4 * 3 + 1) + 6 * 3 + extra == 82 and "evaluate" not in counts
    assert counts["encode_shard"] == 4  # 2 shards x (snapshot a, snapshot b)
    # NQ's RAG-Sequence and RAG-Token: one experiments job (K sweep, hot-swap, oracle) per seed
    assert counts["experiments"] == 10 and counts["report"] == 1
    # rag plan's jobs are the DAG's
    planned = _plan_jobs(ROOT / "config.yaml", tmp_path)
    assert planned == {rule: n for rule, n in counts.items() if rule != "total"} and planned["train"] == 82
    # the further generator of config key generators: its own target, none of its jobs in the default DAG's
    res = smk(tmp_path, "-n", "generators", configfile=ROOT / "config.yaml")
    assert res.returncode == 0, res.stderr[-3000:]
    more = job_counts(res.stdout + res.stderr)
    # llama on NQ (5 seeds) and TriviaQA (3): RAG-Sequence, RAG-Token and their frozen twins, the closed book once
    assert more["pretrain_generators"] == 1 and more["report_generators"] == 1 and "pretrain_generator" in counts
    assert more["train"] == counts["train"] + (4 * 5 + 1) + (4 * 3 + 1) and more["pretrain_generator"] == 1
    plan = _plan_rules(ROOT / "config.yaml", tmp_path, targets=["generators"], whole=True)
    assert {r["rule"]: r["jobs"] for r in plan["rules"]} == {rule: n for rule, n in more.items() if rule != "total"}
    # a fine-tune's models: the larger of BART's and the Llama's (the default's plan sizes BART's alone)
    llama = fine_tune_memory({**load_config(ROOT / "config.yaml"), "generator": load_config(
        ROOT / "config.yaml")["generators"]["llama"]["generator"]})
    bart = _plan_rules(ROOT / "config.yaml", tmp_path, whole=True)["sizes"]["fine_tune"]
    assert plan["sizes"]["fine_tune"] == max(llama, bart, key=lambda m: m["bytes"]) and llama != bart
    separate = yaml.safe_load((ROOT / "config.yaml").read_text())
    separate["evaluate_in_train_job"] = False
    (tmp_path / "separate.yaml").write_text(yaml.safe_dump(separate))
    res = smk(tmp_path, "-n", configfile=tmp_path / "separate.yaml")
    assert res.returncode == 0, res.stderr[-3000:]
    split = job_counts(res.stdout + res.stderr)
    assert split["train"] == 82 and split["evaluate"] == 82 and split["total"] == counts["total"] + 82
    planned = _plan_jobs(tmp_path / "separate.yaml", tmp_path)
    assert planned == {rule: n for rule, n in split.items() if rule != "total"} and planned["evaluate"] == 82


def _plan_jobs(configfile: Path, tmp_path: Path, profile: Path | None = None, targets=None) -> dict[str, int]:
    """rag plan's jobs per rule of a config (tmp_path holds no records)."""
    return {r["rule"]: r["jobs"] for r in _plan_rules(configfile, tmp_path, profile, targets)}


def _plan_rules(configfile: Path, tmp_path: Path, profile: Path | None = None, targets=None, whole: bool = False):
    from rag.config import load_config
    from rag.plan import make_plan

    plan = make_plan(load_config(configfile, check_files=False), config_paths=[Path(configfile)], profile_path=profile,
                     results=tmp_path / "results", targets=targets)
    return plan if whole else plan["rules"]


REQUESTS = ("mem_mb", "runtime", "gpu")


def dry_run_requests(out: str) -> dict[str, list[dict]]:
    """Each job's mem_mb / runtime / gpu (None: not requested), by rule, as a dry run prints them."""
    jobs: dict[str, list[dict]] = {}
    rule = None
    for line in out.splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):$", line):
            rule = m.group(1)
        elif rule and line.startswith("    resources: "):
            values = dict(item.split("=", 1) for item in line.split(": ", 1)[1].split(", "))
            jobs.setdefault(rule, []).append({k: int(values[k]) if k in values else None for k in REQUESTS})
            rule = None
    return jobs


@pytest.mark.parametrize("config", ["config.yaml", "config/paper.yaml", "tests/data/e2e.yaml"])
def test_plan_is_the_dry_run_under_the_slurm_profile(tmp_path, config):
    """rag plan's jobs and each job's requests are what ``snakemake --dry-run`` with the same
    profile plans, for a run from empty (the config's local inputs in place: empty files here)."""
    from rag.config import load_config
    from rag.config_files import input_files

    for _, path in input_files(load_config(ROOT / config, check_files=False)):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).touch()
    profile = ROOT / "workflow/profiles/slurm"
    res = smk(tmp_path, "-n", "--profile", str(profile), configfile=ROOT / config)
    assert res.returncode == 0, res.stderr[-3000:]
    counts = job_counts(res.stdout + res.stderr)
    requests = dry_run_requests(res.stdout)
    assert sum(len(jobs) for jobs in requests.values()) == counts["total"] > 0
    planned = _plan_rules(ROOT / config, tmp_path, profile)
    assert {r["rule"]: r["jobs"] for r in planned} == {rule: n for rule, n in counts.items() if rule != "total"}
    for r in planned:
        assert [{k: r["requests"][k]["value"] for k in REQUESTS}] * r["jobs"] == requests[r["rule"]], r["rule"]
    assert any(r["requests"]["gpu"]["value"] == 1 for r in planned)


def test_config_error_stops_before_any_job(tmp_path):
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["train"]["stepz"] = 5
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    res = smk(tmp_path, "-n", configfile=bad)
    assert res.returncode != 0
    assert "stepz" in res.stderr + res.stdout
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("configfile", ["config.yaml", "tests/data/reliability.yaml", "examples/byo/config.yaml"])
def test_snakemake_lint_is_clean(tmp_path, configfile):
    """`snakemake --lint` finds nothing, under configs that between them define every conditional rule
    (check: bands; evaluate: evaluate_in_train_job false; corpus_convert: a local corpus)."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # examples/byo's files, relative to the work dir
    res = smk(tmp_path, "--lint", configfile=ROOT / configfile, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "Lints for" not in out, out[-3000:]


@pytest.mark.slow
def test_e2e_outputs(e2e):
    work, _ = e2e
    html = (work / "reports" / "e2e" / "report.html").read_text()
    assert "Table 1" in html and "Table 2" in html
    for task in ("nq", "webquestions", "fever3"):
        for variant in ("rag_sequence", "rag_token", "closed_book", "rag_token_bm25"):
            # tests/data/e2e.yaml: NQ's RAG-Sequence and RAG-Token fine-tune with seeds 1 and 2
            seeds = (1, 2) if task == "nq" and variant in ("rag_sequence", "rag_token") else (1,)
            for seed in seeds:
                for split in ("dev", "test"):
                    m = json.loads((work / f"results/e2e/runs/{task}/{variant}/seed{seed}/{split}/metrics.json").read_text())
                    assert m["n"] > 0 and m["metrics"] and m["seed"] == seed, (task, variant, seed, split)
                    preds = (work / f"results/e2e/runs/{task}/{variant}/seed{seed}/{split}/predictions.jsonl").read_text()
                    row = json.loads(preds.splitlines()[0])
                    assert ("doc_ids" in row) and (bool(row["doc_ids"]) == (variant != "closed_book"))
    assert not (work / "results/e2e/runs/nq/closed_book/seed2").exists()  # one_seed_variants: the first seed only
    for seed in (1, 2):
        topk = json.loads((work / f"results/e2e/experiments/topk/nq/rag_sequence/seed{seed}.json").read_text())
        assert topk["k"] == [1, 2, 3] and len(topk["em"]) == 3 and topk["seed"] == seed
        hot = json.loads((work / f"results/e2e/experiments/hotswap/nq/rag_token/seed{seed}.json").read_text())
        assert set(hot["cells"]) == {"a|a", "a|b", "b|a", "b|b"} and hot["seed"] == seed
    # the report: each NQ RAG cell the mean of two seeds, and says so above the checklist
    html = (work / "reports" / "e2e" / "report.html").read_text()
    assert "Fine-tune seeds: 2 per run for 2 runs" in html


@pytest.mark.slow
@needs_chromium
def test_e2e_report_renders_in_headless_chromium(e2e, tmp_path):
    work, _ = e2e
    dom, png = chromium_render(work / "reports" / "e2e" / "report.html", tmp_path)
    for caption in ("Table 1:", "Table 2:", "Table 5:", "Table 6:", "Figure 3", "Index hot-swap, RAG-Token"):
        assert caption in dom, caption
    assert dom.count("<svg") >= 2  # Figure 3 and the hot-swap chart, from this run's own results
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000


@pytest.mark.slow
def test_e2e_one_mlflow_run_per_task_and_variant(e2e):
    from mlflow.tracking import MlflowClient

    work, _ = e2e
    client = MlflowClient(f"sqlite:///{work}/results/mlflow.db")
    runs = []
    for exp in client.search_experiments():
        runs += client.search_runs([exp.experiment_id])
    keys = sorted((r.data.tags["task"], r.info.run_name) for r in runs)
    assert len(keys) == 14 and len(set(keys)) == 14  # 12 runs, and NQ's RAG-Sequence and RAG-Token's second seed
    # each run records its seed; tag cell groups a task x variant's seeds in the UI
    cells = {}
    for r in runs:
        cells.setdefault(r.data.tags["cell"], set()).add(r.data.tags["seed"])
        assert r.data.params["seed"] == r.data.tags["seed"]
    assert cells["nq/rag_token"] == {"1", "2"} and cells["nq/closed_book"] == {"1"} and len(cells) == 12
    nq = next(r for r in runs if r.data.tags["task"] == "nq" and r.info.run_name == "rag_token seed 1")
    assert "test_em" in nq.data.metrics and "train.k" in nq.data.params
    assert len(client.get_metric_history(nq.info.run_id, "train_loss")) == 3
    arts = [a.path for a in client.list_artifacts(nq.info.run_id, "eval/test")]
    assert "eval/test/predictions.jsonl" in arts


@pytest.mark.slow
def test_e2e_jobs_record_their_resources(e2e):
    """Every job's resource record (rag.resources), one per job, named by its wildcards: its records add up to
    the CPU time of the whole run's process tree, and rag plan's wall time from them to the run's."""
    from rag.resources import read_records, summary

    work, cfg = e2e
    recs = read_records(work / "results/e2e/resources")
    assert {"pretrain_generator", "train", "encode_shard", "build_index", "report", "corpus_miniworld"} <= set(recs)
    (pre,) = recs["pretrain_generator"]
    # tokenizer training, model build and 4 steps, in a process that imports torch and transformers
    assert pre["cpu_s"] > 0.2 and pre["peak_rss_mb"] > 200 and pre["wall_s"] >= pre["cpu_s"] / 2
    assert summary(recs["train"])["jobs"] == 14 and len(recs["encode_shard"]) == 4  # NQ's RAG models: two seeds
    assert {r["job"] for r in recs["train"]} >= {"nq-rag_token-1", "nq-rag_token-2", "webquestions-closed_book-1"}
    measured = json.loads((work / "measured.json").read_text())
    recorded = sum(r["cpu_s"] for rule in recs.values() for r in rule)
    assert abs(recorded - measured["cpu_s"]) <= 0.10 * measured["cpu_s"], (recorded, measured)
    res = subprocess.run(["rag", "plan", "--configfile", str(cfg), "--no-profile", "--cores", "2", "--json"],
                         capture_output=True, text=True, cwd=work)
    assert res.returncode == 0, res.stderr
    wall = json.loads(res.stdout)["compute"]["wall_s"]
    assert abs(wall - measured["wall_s"]) <= 0.15 * measured["wall_s"], (wall, measured)


@pytest.mark.slow
def test_e2e_every_run_has_a_manifest(e2e, capsys):
    from rag.cli import main
    from rag.manifest import read_manifest

    work, _ = e2e
    runs = work / "results/e2e/runs"
    models = sorted(runs.glob("*/*/seed*/model"))
    assert len(models) == 14
    for model in models:
        m, _ = read_manifest(model / "manifest.json")
        assert f"seed{m['seed']}" == model.parent.name and m["run"]["task"] == model.parent.parent.parent.name
        assert set(m["data"]["splits"]) == {"train", "dev", "test"}  # evaluate_in_train_job: the job read all three
        test = json.loads((model.parent / "test/metrics.json").read_text())
        assert test["manifest"] == m  # the copy the report reads
    rt, _ = read_manifest(runs / "nq/rag_token/seed1")
    assert rt["data"]["passages"]["path"].endswith("corpus/e2e/passages.tsv") and rt["data"]["index"]["path"].endswith("flat.faiss")
    closed_book, _ = read_manifest(runs / "nq/closed_book/seed1")
    assert closed_book["data"]["passages"] is None and closed_book["data"]["index"] is None
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{work}/results/mlflow.db")
    assert "manifest.json" in [a.path for a in client.list_artifacts(rt["run"]["mlflow_run_id"])]
    html = (work / "reports/e2e/report.html").read_text()
    assert "Runs and what produced them" in html and rt["data"]["passages"]["sha256"][:12] in html
    assert main(["diff-runs", str(runs / "nq/rag_token/seed1"), str(runs / "nq/rag_token_bm25/seed1")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[3].startswith("1. data: index differs") and "variant" in "\n".join(out)
    # NQ RAG-Token's two fine-tune seeds: the same data, config, code, packages and machine
    assert main(["diff-runs", str(runs / "nq/rag_token/seed1"), str(runs / "nq/rag_token/seed2")]) == 0
    assert "The runs differ only by seed: 1 vs 2" in capsys.readouterr().out


@pytest.mark.slow
def test_e2e_rerun_does_nothing_and_config_change_is_local(e2e):
    work, cfg = e2e
    res = smk(work, "-n", configfile=cfg)
    assert res.returncode == 0
    assert "Nothing to be done" in res.stdout + res.stderr
    changed = yaml.safe_load(cfg.read_text())
    changed["tasks"]["fever3"]["train"] = 12
    cfg2 = work / "changed.yaml"
    cfg2.write_text(yaml.safe_dump(changed))
    res = smk(work, "-n", configfile=cfg2)
    assert res.returncode == 0, res.stderr[-2000:]
    counts = job_counts(res.stdout + res.stderr)
    # only fever3's data and train sections, data, 4 trainings (each evaluating dev/test:
    # evaluate_in_train_job), and the report
    assert counts == {"config_section": 2, "task_data": 1, "train": 4, "report": 1, "all": 1, "total": 9}, counts


@pytest.mark.slow
def test_e2e_copied_without_snakemake_records_an_edit_stops_instead_of_being_ignored(e2e, tmp_path):
    """A results/ copied without .snakemake/ keeps its file times but not Snakemake's record of the
    params: an edited section would be taken as up to date. The run stops naming the files; the
    --forcerun it names plans what the edit plans with the records."""
    work = tmp_path / "work"
    shutil.copytree(e2e[0], work, symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))
    cfg = work / "config.yaml"
    res = smk(work, "-n", configfile=cfg)
    assert res.returncode == 0 and "Nothing to be done" in res.stdout + res.stderr, res.stderr[-2000:]
    changed = yaml.safe_load(cfg.read_text())
    changed["tasks"]["fever3"]["train"] = 12
    cfg2 = work / "changed.yaml"
    cfg2.write_text(yaml.safe_dump(changed))
    res = smk(work, "-n", configfile=cfg2)
    stale = ["results/e2e/config/data_fever3.json", "results/e2e/config/train_fever3.json"]
    assert res.returncode != 0 and "Job stats" not in res.stdout + res.stderr
    assert "error: config section(s) data_fever3, train_fever3 differ" in res.stderr, res.stderr[-2000:]
    assert f"run once with --forcerun {' '.join(stale)} (" in res.stderr
    res = smk(work, "-n", "--forcerun", *stale, configfile=cfg2)
    assert res.returncode == 0, res.stderr[-2000:]
    counts = job_counts(res.stdout + res.stderr)
    assert counts == {"config_section": 2, "task_data": 1, "train": 4, "report": 1, "all": 1, "total": 9}, counts


def _planned(work: Path, cfg: Path, edit) -> dict[str, int]:
    """The jobs a dry run plans after ``edit`` (a function changing the config mapping)."""
    changed = yaml.safe_load(cfg.read_text())
    edit(changed)
    path = work / "edited.yaml"
    path.write_text(yaml.safe_dump(changed))
    res = smk(work, "-n", configfile=path)
    assert res.returncode == 0, res.stderr[-2000:]
    return job_counts(res.stdout + res.stderr)


@pytest.mark.slow
def test_e2e_config_edits_rerun_only_what_they_change(e2e):
    """Each config section holds only what its consumer reads: a train-time key re-runs
    the fine-tunes and what follows them, a search-time key neither encodes nor indexes nor
    regenerates data, the report's MLflow link re-runs the report alone."""
    work, cfg = e2e
    after_training = {"experiments": 4, "report": 1, "all": 1}  # NQ: two seeds
    # train-time (the logit scale of p(z|x)): the three tasks' train sections, all 14 fine-tunes
    # (each decoding dev/test: evaluate_in_train_job) and what reads their models
    got = _planned(work, cfg, lambda c: c["retriever"].update(score_scale=21.0))
    assert got == {"config_section": 3, "train": 14, **after_training, "total": 23}, got
    # search-time: Figure 3's test-time K sweep re-runs the experiments jobs and the report only
    got = _planned(work, cfg, lambda c: c["experiments"].update(topk_sweep=[1, 2]))
    assert got == {"config_section": 1, "experiments": 4, "report": 1, "all": 1, "total": 7}, got
    # search-time: NQ's test-time K re-decodes NQ (in its train jobs, which resume from their final
    # checkpoint; WebQuestions starts from NQ), nothing upstream
    got = _planned(work, cfg, lambda c: c["tasks"]["nq"].update(decode_sequence={"k": 3}))
    assert got == {"config_section": 1, "train": 10, **after_training, "total": 17}, got
    # a third seed on NQ: its new fine-tunes and experiments, and the report (its scale box lists the
    # seeds); no fine-tune that exists re-runs
    got = _planned(work, cfg, lambda c: c["tasks"]["nq"].update(seeds=[1, 2, 3]))
    assert got == {"config_section": 1, "train": 2, "experiments": 2, "report": 1, "all": 1, "total": 7}, got
    # the report's link to the MLflow UI: the report alone
    got = _planned(work, cfg, lambda c: c.setdefault("tracking", {}).update(ui_url="http://mlflow.example:5000"))
    assert got == {"report": 1, "all": 1, "total": 2}, got
    # runtime knobs invalidate nothing
    got = _planned(work, cfg, lambda c: c.update(threads=2, resources={"train": {"mem_mb": 100}}))
    assert got == {}, got


@pytest.mark.slow
def test_e2e_replicate_config_plans_the_new_seeds_only(e2e):
    """rag replicate-config over a finished experiment: the one-seed runs' new seeds and the report
    run; no fine-tune or experiment that exists runs again (the bands' --replicates, made cheaply)."""
    work, cfg = e2e
    out, changes = replicate_config(yaml.safe_load(cfg.read_text()), [1, 2])
    assert len(changes) == 10  # NQ's BART and BM25, WebQuestions' and FEVER-3's four variants: seed 2
    counts, _ = _dry_run(work, out, "replicates.yaml")
    assert counts == {"config_section": 1, "train": 10, "report": 1, "all": 1, "total": 13}, counts


def test_e2e_variant_seeds_plan_that_variants_new_seeds_only(e2e):
    """tasks.<task>.variant_seeds over a finished experiment: the variant's new seeds and the report run,
    nothing that exists runs again; rag plan counts the same jobs."""
    work, cfg = e2e
    data = yaml.safe_load(cfg.read_text())
    data["tasks"]["fever3"]["variant_seeds"] = {"rag_token": [1, 2, 3]}
    counts, log = _dry_run(work, data, "variant_seeds.yaml")
    assert counts == {"config_section": 1, "train": 2, "report": 1, "all": 1, "total": 5}, counts
    assert "task=fever3,variant=rag_token,seed=3" in log.replace(" ", "")


def _dry_run(work: Path, data: dict, name: str) -> tuple[dict[str, int], str]:
    """(jobs per rule, the log) of a dry run of config ``data`` (written as ``work/name``) in ``work``."""
    path = work / name
    path.write_text(yaml.safe_dump(data))
    res = smk(work, "-n", configfile=path)
    assert res.returncode == 0, res.stderr[-2000:]
    return job_counts(res.stdout + res.stderr), res.stdout + res.stderr


def _run_ids(results: Path, one_seed_only: bool = False) -> set[str]:
    """The MLflow run ids of an experiment's runs (``one_seed_only``: of its cells with one seed, which
    the report links run by run; a several-seed cell links to its runs by tag)."""
    cells = [d for d in results.glob("runs/*/*") if not one_seed_only or len(list(d.glob("seed*"))) == 1]
    return {json.loads(p.read_text())["mlflow_run_id"] for d in cells for p in d.glob("seed*/*/metrics.json")}


@pytest.mark.slow
def test_two_experiments_side_by_side(byo_beside_e2e):
    """Issue 13: miniworld (e2e), then a bring-your-own-data experiment, then miniworld again in
    the same directory. Each experiment owns results/<name>/ and reports/<name>/: the second
    touches none of the first's files, the third has nothing to do, each report shows its own
    runs only."""
    work = byo_beside_e2e.work  # the e2e run's folder, copied, and examples/byo run in it
    cfg_a = work / "config.yaml"
    report_a = work / "reports" / "e2e" / "report.html"
    html_a = byo_beside_e2e.e2e_report

    res = byo_beside_e2e.run
    assert res.returncode == 0, (res.stdout[-3000:], res.stderr[-5000:])
    print("run 2 (byo):", *(res.stdout + res.stderr).strip().splitlines()[-4:], sep="\n")
    assert {p: p.stat().st_mtime_ns for p in (work / "results" / "e2e").rglob("*") if p.is_file()} == byo_beside_e2e.e2e_mtimes
    assert report_a.read_text() == html_a

    res = smk(work, configfile=cfg_a)
    out = res.stdout + res.stderr
    print("run 3 (e2e again):", *out.strip().splitlines()[-4:], sep="\n")
    assert res.returncode == 0 and "Nothing to be done" in out, out[-3000:]

    ids_a, ids_b = _run_ids(work / "results" / "e2e"), _run_ids(work / "results" / "byo")
    assert ids_a and ids_b and not ids_a & ids_b
    html_b = (work / "reports" / "byo" / "report.html").read_text()
    linked_a = _run_ids(work / "results" / "e2e", one_seed_only=True)
    assert linked_a and all(i in html_a for i in linked_a) and not any(i in html_a for i in ids_b)
    assert "searchFilter=tags.cell%20%3D%20%27nq%2Frag_token%27" in html_a  # NQ RAG-Token: two seeds
    assert all(i in html_b for i in ids_b) and not any(i in html_b for i in ids_a)
    # the BYO experiment: its one task and two variants
    assert sorted(p.relative_to(work / "results" / "byo" / "runs").parts[:2]
                  for p in (work / "results" / "byo" / "runs").glob("*/*/seed*/test/metrics.json")) == [("byo_qa", "closed_book"), ("byo_qa", "rag_token")]


def test_train_jobs_tag_their_config_hash(tmp_path):
    """Each train job gets --config-hash (the hash of its train_<task> section): the MLflow tag is set."""
    res = smk(tmp_path, "-n", "-p", configfile=ROOT / "tests" / "data" / "e2e.yaml")
    assert res.returncode == 0, res.stderr[-3000:]
    hashes = re.findall(r"rag train .*?--config-hash ([0-9a-f]+) ", res.stdout + res.stderr)
    assert len(hashes) == 3 * 4 + 2 and all(len(h) == 12 for h in hashes)  # NQ's RAG models: two seeds
    assert len(set(hashes)) == 3  # one per task section


E2E_CONFIGS = ("e2e.yaml", "e2e_coverage.yaml")


def test_the_e2e_configs_cover_every_task_and_variant():
    from rag.tasks import TASKS, VARIANTS

    tasks, variants = set(), set()
    for name in E2E_CONFIGS:
        cfg = yaml.safe_load((ROOT / "tests" / "data" / name).read_text())
        tasks |= set(cfg["tasks"])
        variants |= {v for task in cfg["tasks"].values() for v in task.get("variants", cfg["variants"])}  # what runs
    assert tasks == set(TASKS) and variants == set(VARIANTS)


@pytest.mark.slow
def test_e2e_coverage_runs_every_other_task_and_variant(tmp_path):
    from rag.tasks import TASKS

    cfg = tmp_path / "config.yaml"
    shutil.copy(ROOT / "tests" / "data" / "e2e_coverage.yaml", cfg)
    res = smk(tmp_path, configfile=cfg)
    assert res.returncode == 0, (res.stdout[-3000:], res.stderr[-5000:])
    spec = yaml.safe_load(cfg.read_text())
    runs = tmp_path / "results" / spec["name"] / "runs"
    for task in spec["tasks"]:
        for variant in spec["tasks"][task].get("variants", spec["variants"]):
            for split in ("dev", "test"):
                m = json.loads((runs / task / variant / "seed1" / split / "metrics.json").read_text())
                assert set(m["metrics"]) == set(TASKS[task].metrics) and m["n"] == spec["tasks"][task][split]
    assert (tmp_path / "reports" / spec["name"] / "report.html").is_file()
