"""Further retrievers through the DAG (config key retrievers): a hybrid of the dense and BM25 retrievers, a reranker
over it (its cross-encoder trained by the DAG) and a toy family of the user's (one file: its retriever and its
registry entry, no file of the package edited), run beside a finished e2e experiment by `snakemake retrievers`, and
two end-to-end retrievers by `snakemake end2end` in the same call."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import ROOT, job_counts, smk


@pytest.fixture(scope="module")
def retrievers_run(e2e, tmp_path_factory):
    """A copy of the finished e2e folder, tests/data/e2e_retrievers.yaml over its config and the toy family's file
    beside it, `snakemake retrievers end2end` run in it: (the folder, the run, results/e2e's file times before it)."""
    work = tmp_path_factory.mktemp("retrievers") / "work"
    shutil.copytree(e2e[0], work, symlinks=True)
    shutil.copy(ROOT / "tests/data/toy_retriever.py", work)
    mtimes = {p: p.stat().st_mtime_ns for p in (work / "results/e2e/runs").rglob("*") if p.is_file()}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(ROOT))
        # both files after --configfile (the last option: it takes every following word)
        run = smk(work, "retrievers", "end2end", "--configfile", str(ROOT / "tests/data/e2e.yaml"), str(ROOT / "tests/data/e2e_retrievers.yaml"))
    return work, run, mtimes


@pytest.mark.slow
def test_further_retrievers_run_beside_the_experiment(retrievers_run):
    """Their runs alone are trained (two seeds each, NQ's), the experiment's own runs left as they were; each
    run's jobs got its retriever's section, and its predictions are that retriever's."""
    work, run, mtimes = retrievers_run
    assert run.returncode == 0, run.stderr[-4000:]
    counts = job_counts(run.stdout + run.stderr)
    assert counts["train"] == 10 and counts["train_reranker"] == 1, counts
    assert counts["report_retrievers"] == 1 and counts["report_end2end"] == 1, counts
    assert all(p.stat().st_mtime_ns == t for p, t in mtimes.items())  # nothing of e2e's runs written again
    runs = work / "results/e2e/runs/nq"
    assert sorted(p.name for p in runs.iterdir() if "+" in p.name) == ["rag_sequence+e2e", "rag_sequence_frozen+toy",
                                                                        "rag_token+e2a", "rag_token+hy", "rag_token_frozen+rr"]
    reranker = work / "results/e2e/rerankers/rr/nq/model"
    record = json.loads((reranker / "reranker.json").read_text())
    assert len(record["losses"]) == 4 and record["examples"] > 0 and (reranker / "model.safetensors").is_file()
    # the hybrid's top 6 of each of NQ's 12 + 4 + 4 questions scored once, for the fine-tunes to read
    assert record["scored"] == {"questions": 20, "pairs": 20 * 6}
    assert sum(len(json.loads(line)["rows"]) for line in (reranker / "pair_logits.jsonl").read_text().splitlines()) == 120
    from rag.retrieval.rerank import check_cross_encoder_config
    from transformers import AutoConfig

    assert check_cross_encoder_config(AutoConfig.from_pretrained(reranker), "it") is None  # one label a pair
    section = json.loads((work / "results/e2e/config/retriever_hy.json").read_text())
    assert section == {"retrievers": {"hy": {"family": "hybrid", "options": {
        "depth": None, "fusion": "weighted", "parts": ["dense", "bm25"], "rrf_k": 60, "score_scale": 5.0, "weight": 0.5}}}}
    from rag.data.corpus import read_passages

    first = read_passages(work / "results/e2e/corpus/e2e/passages.tsv").ids[:2]  # train.k 2, the test-time K below
    for seed in (1, 2):
        rows = [json.loads(line) for line in (runs / f"rag_sequence_frozen+toy/seed{seed}/test/predictions.jsonl").open()]
        assert rows and all(r["doc_ids"][:2] == first for r in rows)
        manifest = json.loads((runs / f"rag_token+hy/seed{seed}/model/manifest.json").read_text())
        assert manifest["config"]["section"]["retriever_hy"] == section
        assert (runs / f"rag_token+hy/seed{seed}/model/question_encoder").is_dir()  # trained through the fusion
        hy = json.loads((runs / f"rag_token+hy/seed{seed}/test/metrics.json").read_text())
        assert hy["variant"] == "rag_token+hy" and set(hy["retrieval"]) >= {"answer_recall@5", "passage_recall@5"}  # the test-time K


@pytest.mark.slow
def test_an_end_to_end_retriever_trains_its_passage_encoder_and_evaluates_with_its_own_index(retrievers_run):
    """A run of the end2end family: its model folder holds the trained passage encoder and the index the final one
    makes (over every passage, its shards recorded), the refreshes' records (step 2, then the final index at the
    last step); the model loaded again as a separate evaluation would retrieves, from that index, the passages its
    predictions name."""
    from rag.data.corpus import read_passages
    from rag.retrieval import RetrievalFiles
    from rag.sections import read_task_sections
    from rag.stages.model_loading import load_trained

    work, run, _ = retrievers_run
    assert run.returncode == 0, run.stderr[-4000:]
    results = work / "results/e2e"
    n = len(read_passages(results / "corpus/e2e/passages.tsv").ids)
    steps = json.loads((results / "config/train_nq.json").read_text())["train"]["steps"]
    cfg = read_task_sections([results / "config/train_nq.json", results / "config/retriever_e2e.json"])
    shared = RetrievalFiles(passages=str(results / "corpus/e2e/passages.tsv"),
                            embeddings=sorted(str(p) for p in (results / "index/e2e").glob("*/emb-*.npy")),
                            index=str(next((results / "index/e2e").glob("*/flat.faiss"))))
    for seed in (1, 2):
        model = results / f"runs/nq/rag_sequence+e2e/seed{seed}/model"
        assert (model / "context_encoder/config.json").is_file() and (model / "question_encoder").is_dir()
        refresh = json.loads((model / "refresh.json").read_text())
        assert refresh["strategy"] == "refresh" and [r["step"] for r in refresh["records"]] == [2, steps], refresh
        assert all(0 <= r["overlap"] <= 1 and r["cpu_seconds"] > 0 for r in refresh["records"])
        system = load_trained(cfg, "rag_sequence+e2e", str(model), "cpu", shared)
        assert system.retriever.index.ntotal == n and not system.retriever.reencodes
        assert system.retriever.doc_emb.shards[0].path == model / "index/emb-0.npy"
        rows = [json.loads(line) for line in (model.parent / "test/predictions.jsonl").open()]
        data = {json.loads(line)["id"]: json.loads(line)["input"] for line in (results / "data/nq/test.jsonl").open()}
        got = system.retrieve([data[r["id"]] for r in rows], len(rows[0]["doc_ids"]))
        assert [[system.passages.ids[j] for j in ids] for ids in got.ids.tolist()] == [r["doc_ids"] for r in rows]


@pytest.mark.slow
def test_an_asynchronous_refresh_runs_an_encoder_process_in_the_train_job(retrievers_run):
    """index_refresh async: the train job is launched with torchrun, a training process and an encoder process,
    which encodes the snapshots it is sent (its log line); the model folder holds the shared encoder (no
    context_encoder/ of its own) and the final index, the record of it at the last step, the run's predictions."""
    work, run, _ = retrievers_run
    assert run.returncode == 0, run.stderr[-4000:]
    results = work / "results/e2e"
    steps = json.loads((results / "config/train_nq.json").read_text())["train"]["steps"]
    for seed in (1, 2):
        model = results / f"runs/nq/rag_token+e2a/seed{seed}/model"
        assert (model / "index/flat.faiss").is_file() and not (model / "context_encoder").exists()
        refresh = json.loads((model / "refresh.json").read_text())
        assert refresh["strategy"] == "async" and refresh["records"][-1]["step"] == steps
        log = (results / f"logs/train/nq-rag_token+e2a-seed{seed}.log").read_text()
        assert "encoder process 1 encoded" in log
        assert (model.parent / "test/predictions.jsonl").stat().st_size > 0


@pytest.mark.slow
def test_the_retrievers_report_sets_them_side_by_side(retrievers_run):
    work, run, _ = retrievers_run
    assert run.returncode == 0, run.stderr[-4000:]
    html = (work / "reports/e2e/retrievers.html").read_text()
    assert "Retrievers side by side" in html
    for row in ("Natural Questions test: RAG-Token (hy)", "Natural Questions test: RAG-Token ",
                "Natural Questions test: RAG-Sequence-Frozen (toy)", "Natural Questions test: RAG-Token-Frozen (rr)"):
        assert row in html, row
    assert "hy: hybrid (depth None, fusion weighted, parts dense+bm25" in html and "toy: toy_retriever.py:FAMILY" in html


@pytest.mark.slow
def test_the_end_to_end_report_holds_their_strategies_and_claims_rows(retrievers_run):
    """reports/e2e/end2end.html: the end-to-end runs (target end2end), not the retrievers target's; the refreshed
    one in the strategies table after the question encoder alone (e2e.yaml runs no frozen twin on NQ), its refreshes
    from its metrics (the asynchronous one trains under PDist: no strategies row, nor a row of RAG-Token alone); its
    claims rows against RAG-Sequence."""
    import pandas as pd

    work, run, _ = retrievers_run
    assert run.returncode == 0, run.stderr[-4000:]
    html = (work / "reports/e2e/end2end.html").read_text()
    assert "Index refresh strategies" in html and "(hy)" not in html and "(rr)" not in html
    strategies = next(t for t in pd.read_html(str(work / "reports/e2e/end2end.html")) if "index refreshes" in t.columns)
    labels = list(strategies.iloc[:, 0])
    assert labels == ["Natural Questions: RAG-Sequence", "Natural Questions: RAG-Sequence (e2e): refresh"], labels
    steps = json.loads((work / "results/e2e/config/train_nq.json").read_text())["train"]["steps"]
    assert float(strategies["index refreshes"].iloc[1].split()[0]) == (steps - 1) // 2  # refresh_every 2
    assert "Training the passage encoder too beats the question encoder alone (NQ)" in html


@pytest.mark.slow
def test_a_reranker_s_retrieval_option_reruns_its_fine_tunes_and_trains_no_cross_encoder(retrievers_run, tmp_path):
    """Rule train_reranker reads section reranker_<name>, the retriever_<name> section less the options read only
    where the reranker retrieves: a new score_scale re-runs the reranker's fine-tunes and rewrites its retriever's
    section and the report's (which names each retriever's options), and no train_reranker job."""
    import re

    work, run, _ = retrievers_run
    assert run.returncode == 0, run.stderr[-4000:]
    scale = tmp_path / "scale.yaml"
    scale.write_text("retrievers: {rr: {options: {score_scale: 2.0}}}\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(ROOT))
        dry = smk(work, "-n", "retrievers", "--configfile", str(ROOT / "tests/data/e2e.yaml"),
                  str(ROOT / "tests/data/e2e_retrievers.yaml"), str(scale))
    assert dry.returncode == 0, dry.stderr[-3000:]
    out = dry.stdout + dry.stderr
    assert set(re.findall(r"wildcards: task=nq, variant=([^,]+), seed=\d", out)) == {"rag_token_frozen+rr"}, out[-3000:]
    counts = job_counts(out)
    assert counts["train"] == 2 and "train_reranker" not in counts, counts
    # the report names each retriever with its options: its section changes too
    assert set(re.findall(r"output: \S+/config/(\w+)\.json", out)) == {"retriever_rr", "report"}, out[-3000:]
    reranker = json.loads((work / "results/e2e/config/reranker_rr.json").read_text())["retrievers"]
    assert "score_scale" not in reranker["rr"]["options"] and reranker["hy"]["options"]["score_scale"] == 5.0


@pytest.mark.slow
def test_an_edited_family_file_reruns_its_retrievers_runs_alone(retrievers_run):
    """A family of the user's is an input by content (rag.config_files.input_files): its file edited, with its date
    kept, changes its retriever's section (which holds the file's sha256) and so re-runs that retriever's
    fine-tunes and the report, nothing else."""
    import os
    import re

    work, run, _ = retrievers_run
    assert run.returncode == 0, run.stderr[-4000:]
    configs = ("--configfile", str(ROOT / "tests/data/e2e.yaml"), str(ROOT / "tests/data/e2e_retrievers.yaml"))
    family = work / "toy_retriever.py"
    stat = family.stat()
    family.write_text(family.read_text() + "\n# edited\n")
    os.utime(family, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(ROOT))
        dry = smk(work, "-n", "retrievers", *configs)
    assert dry.returncode == 0, dry.stderr[-3000:]
    out = dry.stdout + dry.stderr
    planned = set(re.findall(r"wildcards: task=nq, variant=([^,]+), seed=\d", out))
    assert planned == {"rag_sequence_frozen+toy"}, out[-3000:]
    counts = job_counts(out)
    assert counts["train"] == 2 and counts["config_section"] == 1 and "train_reranker" not in counts, counts
    from rag.manifest import sha256_file

    assert f"'retrievers.toy.family': '{sha256_file(family)}'" in out  # the section's new content
