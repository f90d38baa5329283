"""Further retrievers through the DAG (config key retrievers): a hybrid of the dense and BM25 retrievers, a reranker
over it (its cross-encoder trained by the DAG) and a toy family of the user's (one file: its retriever and its
registry entry, no file of the package edited), run beside a finished e2e experiment by `snakemake retrievers`."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tests.conftest import ROOT, job_counts, smk

TOY = '''"""A toy retriever family: the first K passages of the corpus, equal scores."""
import numpy as np
import torch

from rag.retrieval.base import Retrieved, Retriever
from rag.tasks import RetrieverSpec


class FirstK(Retriever):
    def __init__(self, passages):
        super().__init__()
        self.passages = passages

    @classmethod
    def from_files(cls, files, options, device, question_encoder_dir=None, *, declaration, build):
        from rag.data.corpus import PassageStore

        return cls(PassageStore(files.passages))

    def retrieve(self, questions, k):
        return Retrieved(np.tile(np.arange(k), (len(questions), 1)), torch.zeros(len(questions), k))


FAMILY = RetrieverSpec("firstk", ("passages",), "toy_retriever.py:FirstK.from_files", "the first K passages",
                       grads_when=None)
'''

RETRIEVERS = {
    "hy": {"family": "hybrid", "options": {"parts": ["dense", "bm25"], "fusion": "weighted", "score_scale": 5.0},
           "tasks": ["nq"], "variants": ["rag_token"]},
    "toy": {"family": "toy_retriever.py:FAMILY", "tasks": ["nq"], "variants": ["rag_sequence_frozen"]},
    # the default's MiniLM trained into a cross-encoder on NQ's 12 questions, four steps
    "rr": {"family": "rerank", "options": {"first_stage": "hy", "depth": 6, "train_steps": 4, "train_batch_questions": 2,
                                           "negatives": 3, "max_length": 64}, "tasks": ["nq"], "variants": ["rag_token_frozen"]},
}


@pytest.fixture(scope="module")
def retrievers_run(e2e, tmp_path_factory):
    """A copy of the finished e2e folder, its config with two further retrievers, `snakemake retrievers` run
    in it: (the folder, the run, results/e2e's file times before it)."""
    work = tmp_path_factory.mktemp("retrievers") / "work"
    shutil.copytree(e2e[0], work, symlinks=True)
    cfg = yaml.safe_load((ROOT / "tests/data/e2e.yaml").read_text())
    cfg["retrievers"] = RETRIEVERS
    (work / "config.yaml").write_text(yaml.safe_dump(cfg))
    (work / "toy_retriever.py").write_text(TOY)
    mtimes = {p: p.stat().st_mtime_ns for p in (work / "results/e2e/runs").rglob("*") if p.is_file()}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(ROOT))
        run = smk(work, "retrievers", configfile=work / "config.yaml")
    return work, run, mtimes


@pytest.mark.slow
def test_further_retrievers_run_beside_the_experiment(retrievers_run):
    """Their runs alone are trained (two seeds each, NQ's), the experiment's own runs left as they were; each
    run's jobs got its retriever's section, and its predictions are that retriever's."""
    work, run, mtimes = retrievers_run
    assert run.returncode == 0, run.stderr[-4000:]
    counts = job_counts(run.stdout + run.stderr)
    assert counts["train"] == 6 and counts["train_reranker"] == 1 and counts["report_retrievers"] == 1, counts
    assert all(p.stat().st_mtime_ns == t for p, t in mtimes.items())  # nothing of e2e's runs written again
    runs = work / "results/e2e/runs/nq"
    assert sorted(p.name for p in runs.iterdir() if "+" in p.name) == ["rag_sequence_frozen+toy", "rag_token+hy",
                                                                        "rag_token_frozen+rr"]
    reranker = work / "results/e2e/rerankers/rr/nq/model"
    record = json.loads((reranker / "reranker.json").read_text())
    assert len(record["losses"]) == 4 and record["examples"] > 0 and (reranker / "model.safetensors").is_file()
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
def test_the_retrievers_report_sets_them_side_by_side(retrievers_run):
    work, run, _ = retrievers_run
    assert run.returncode == 0, run.stderr[-4000:]
    html = (work / "reports/e2e/retrievers.html").read_text()
    assert "Retrievers side by side" in html
    for row in ("Natural Questions test: RAG-Token (hy)", "Natural Questions test: RAG-Token ",
                "Natural Questions test: RAG-Sequence-Frozen (toy)", "Natural Questions test: RAG-Token-Frozen (rr)"):
        assert row in html, row
    assert "hy: hybrid (depth None, fusion weighted, parts dense+bm25" in html and "toy: toy_retriever.py:FAMILY" in html
