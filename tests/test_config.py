import copy
import re
import shutil
from pathlib import Path

import pytest
import yaml

from rag.cli import main
from rag.config import load_config, replicate_config, sections
from rag.config_files import check_section_files
from rag.errors import ConfigError
from rag.runs import run_seeds, task_variants
from tests.conftest import typed_sections


@pytest.fixture
def base(root):
    with open(root / "config.yaml") as fh:
        return yaml.safe_load(fh)


@pytest.fixture
def plain(base):
    """The default config without its tasks' variant_seeds: each one-seed run runs one seed."""
    for task in base["tasks"].values():
        task.pop("variant_seeds", None)
    return base


def test_default_config_is_valid_and_filled(base):
    cfg = load_config(base)
    assert cfg["retriever"]["index"] == "flat"
    assert cfg["train"]["label_smoothing"] == 0.0  # a default from the schema
    assert set(cfg["tasks"]) == {"nq", "triviaqa", "webquestions", "curatedtrec", "msmarco", "jeopardy", "fever3", "fever2"}
    assert len(cfg["variants"]) == 7


def test_paper_config_is_valid(root, tmp_path, monkeypatch):
    load_config(root / "config" / "paper.yaml", check_files=False)
    # its Jeopardy files (SearchQA) are fetched by hand: until then loading it names the first one
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^config key 'tasks\.jeopardy\.files\.\w+': input file "
                                          r"resources/tasks/jeopardy/\w+ not found"):
        load_config(root / "config" / "paper.yaml")
    for split in ("train", "val", "test"):  # directories of SearchQA json files
        (tmp_path / "resources" / "tasks" / "jeopardy" / split).mkdir(parents=True)
    load_config(root / "config" / "paper.yaml")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c.update(bogus=1), "unknown config key 'bogus'"),
        (lambda c: c.update(warm_start=False), "config key 'warm_start' is removed (every job runs in a process of its own): "
         "delete it from the config"),
        (lambda c: c["train"].update(stepz=3), "unknown config key 'train.stepz'"),
        (lambda c: c["train"].update(steps="many"), "config key 'train.steps': expected integer"),
        (lambda c: c["tasks"].update(squad={"train": 1, "dev": 1, "test": 1}), "config key 'tasks': 'squad' is not one of"),
        (lambda c: c.update(variants=["rag_sequence", "rag_fusion"]), "config key 'variants.1': 'rag_fusion' is not one of"),
        (lambda c: c["train"].update(k=0), "config key 'train.k'"),
        (lambda c: c["train"].update(k=10_000), "config key 'train.k'"),  # impossible K
        (lambda c: c["tasks"]["webquestions"].update(init_from="fever2"), None),  # valid: fever2 is configured
        (lambda c: c["tasks"]["webquestions"].update(init_from="fever2", variant_seeds={"rag_sequence": [1, 2]}),
         "config key 'tasks.webquestions.variant_seeds.rag_sequence': seed 2 of rag_sequence would start from fever2's"),
        (lambda c: c["tasks"].pop("nq"), "tasks.webquestions.init_from"),
        (lambda c: c["tasks"]["nq"].pop("train"), "tasks.nq.train"),
        (lambda c: c["tasks"]["msmarco"].update(variants=["rag_token", "rag_fusion"]),
         "config key 'tasks.msmarco.variants.1': 'rag_fusion' is not one of"),
        (lambda c: c["tasks"]["msmarco"].update(variants=[]), "config key 'tasks.msmarco.variants'"),
        (lambda c: (c.update(variants=["rag_token", "closed_book"]), [t.pop("variants", None) for t in c["tasks"].values()],
                    c["tasks"]["msmarco"].update(variants=["rag_token_bm25"])),
         "config key 'tasks.msmarco.variants': rag_token_bm25 not among the top-level 'variants' (rag_token, closed_book)"),
        # WebQuestions starts from NQ's model of the same variant: NQ must train it
        (lambda c: c["tasks"]["webquestions"].update(variants=["rag_token_frozen"]), None),
        (lambda c: c["tasks"]["nq"].update(variants=["closed_book"]),
         "config key 'tasks.webquestions.variants': rag_sequence, rag_token would start from nq's model "
         "(init_from), which tasks.nq.variants does not train"),
        (lambda c: c["corpus"].update(name="../../etc"), "config key 'corpus.name'"),
        (lambda c: c.update(name="a b; rm -rf /"), "config key 'name'"),
        (lambda c: c["experiments"].update(topk_sweep=[1, 5000]), "experiments.topk_sweep[1]"),
        # the hot-swap runs in the experiments jobs of the topk task's models and asks NQ's questions
        (lambda c: c["experiments"].update(topk_task="triviaqa"), "config key 'experiments.topk_task': the hot-swap"),
        (lambda c: c["experiments"].update(topk_task="triviaqa", hotswap=False), None),
        (lambda c: c.update(metrics={"qbleu1": {"delta": 2}}), "config key 'metrics.qbleu1.delta'"),
        (lambda c: c.update(metrics={"qbleu1": {"w_ner": 0.7, "w_qt": 0.2, "w_re": 0.2}}),
         "config key 'metrics.qbleu1': w_ner + w_qt + w_re = 1.1 > 1"),
        (lambda c: c.update(metrics={"tokenizer": "spacy"}), "config key 'metrics.tokenizer'"),
        (lambda c: c["generator"].update(pretrain_absent=0.6), "config key 'generator.pretrain_absent': shares of the "
         "restated-fact examples add up to more than 1 (pretrain_claims 0.25 + pretrain_sentences 0.2 + pretrain_absent 0.6)"),
        (lambda c: c["generator"].update(pretrain_absent=0.5), None),  # 0.95: a twentieth plain restatements, valid
        (lambda c: c.pop("tasks"), "config key 'tasks' is missing"),
        (lambda c: c.update(tracking=[]), "config key 'tracking': expected an object, got list []"),
        # a key that may be null: what is wrong with a value of its type, or which types it takes
        (lambda c: c["generator"].update(chunk_overhead=-1), "config key 'generator.chunk_overhead': -1 is less than the minimum of 0"),
        (lambda c: c["generator"].update(chunk_overhead="x"), "config key 'generator.chunk_overhead': expected integer or null, got str 'x'"),
        (lambda c: c["tasks"]["webquestions"].update(init_from="squad"), "config key 'tasks.webquestions.init_from': 'squad' is not one of"),
        (lambda c: c["tasks"]["msmarco"].update(well_formed_only="yes"),
         "config key 'tasks.msmarco.well_formed_only': expected boolean or a list of string, got str 'yes'"),
        (lambda c: c["tasks"]["msmarco"].update(train_sampling="attributes"), None),
        (lambda c: c["tasks"]["nq"].update(train_sampling="entities"), "config key 'tasks.nq.train_sampling': 'entities' is not one of"),
        (lambda c: c["tasks"]["fever3"].update(train_sampling="attributes"),
         "config key 'tasks.fever3.train_sampling': applies to the miniworld tasks whose examples each ask one fact "
         "(nq, triviaqa, webquestions, curatedtrec, msmarco), not to miniworld fever3"),
    ],
)
def test_schema_errors_name_the_key(plain, mutate, message):
    cfg = copy.deepcopy(plain)
    mutate(cfg)
    if message is None:
        load_config(cfg)
        return
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert message in str(err.value)


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("tasks:\n  nq: {train: 1\n")
    with pytest.raises(ConfigError, match=r"c.yaml:\d+: invalid YAML"):
        load_config(p)


def test_sections_isolate_tasks(base):
    a = sections(load_config(base))
    changed = copy.deepcopy(base)
    changed["tasks"]["fever2"]["train"] = 123
    b = sections(load_config(changed))
    differing = {k for k in a if a[k] != b[k]}
    assert differing == {"data_fever2", "train_fever2"}


def test_an_edit_snakemake_cannot_see_stops_the_run_naming_its_files(base, tmp_path, monkeypatch):
    """Without Snakemake's records (results/ copied without .snakemake/) an edited section file would
    be taken as up to date: the check names each file that differs, and only those, unless Snakemake
    re-runs it by itself (its record of the file, or the run forces it)."""
    from rag.io import write_json

    monkeypatch.chdir(tmp_path)
    folder = Path("results/x/config")
    pieces = sections(load_config(base))
    for name, value in pieces.items():
        write_json(folder / f"{name}.json", value)
    never = lambda path: False  # noqa: E731
    check_section_files(folder, pieces, never)  # the files as written: nothing to say
    changed = copy.deepcopy(base)
    changed["tasks"]["fever2"]["train"] = 123
    edited = sections(load_config(changed))
    check_section_files(folder, edited, lambda path: True)  # Snakemake re-runs them
    with pytest.raises(ConfigError) as err:
        check_section_files(folder, edited, never)
    msg = str(err.value)
    assert "data_fever2, train_fever2 differ" in msg and "\n" not in msg
    assert "--forcerun results/x/config/data_fever2.json results/x/config/train_fever2.json (it writes" in msg
    with pytest.raises(ConfigError, match=r"section\(s\) train_fever2 differ"):
        check_section_files(folder, edited, lambda path: path.name == "data_fever2.json")
    (folder / "data_fever2.json").unlink()  # a missing file is the rule's to write
    (folder / "train_fever2.json").write_text("{not json")  # an unreadable one differs
    with pytest.raises(ConfigError, match=r"section\(s\) train_fever2 differ.*--forcerun \S*train_fever2.json \("):
        check_section_files(folder, edited, never)


def _edited(base, *path, value):
    cfg = copy.deepcopy(base)
    node = cfg
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return sections(load_config(cfg))


@pytest.mark.parametrize("path, value, changed", [
    # train-time: the fine-tunes (and what reads their models), not encoding, index, data or pretraining
    (("retriever", "score_scale"), 21.0, {f"train_{t}" for t in
                                          ("nq", "triviaqa", "webquestions", "curatedtrec", "msmarco", "jeopardy", "fever3", "fever2")}),
    (("train", "lr"), 0.001, {f"train_{t}" for t in
                              ("nq", "triviaqa", "webquestions", "curatedtrec", "msmarco", "jeopardy", "fever3", "fever2")}),
    # search / test time: one task's decoding, or Figure 3's sweep; the index's own search parameter
    (("tasks", "nq", "decode_sequence", "k"), 8, {"eval_nq"}),
    (("experiments", "topk_sweep"), [1, 2], {"experiments"}),
    # which runs a task has: no job of the task's other variants re-runs; the report section records the runs
    (("tasks", "msmarco", "variants"), ["rag_token"], {"report"}),
    # encode time and index time apart
    # (and the passage encoding of the end-to-end retrievers, which their sections and the report's declarations hold)
    (("retriever", "max_length"), 64, {"encode", "report"} | {f"train_{t}" for t in
                                                   ("nq", "triviaqa", "webquestions", "curatedtrec", "msmarco", "jeopardy", "fever3", "fever2")}
     | {f"retriever_e2e_{n}" for n in ("none", "rerank", "refresh", "async", "pdist", "lsr")}),
    (("retriever", "index"), "hnsw", {"index", "report"}),  # the report's scale summary names the index
    (("retriever", "hnsw_ef_search"), 64, set()),  # a flat index has no such parameter
    (("retriever", "shards"), 4, set()),  # a rule param (the shard ranges), in no section
    # runtime knobs and the report's link: in no section
    (("tracking", "ui_url"), "http://mlflow.example:5000", set()),
    (("threads",), 4, set()),
    (("resources",), {"train": {"mem_mb": 1}}, set()),
])
def test_sections_hold_only_what_their_consumer_reads(base, path, value, changed):
    a = sections(load_config(base))
    b = _edited(base, *path, value=value)
    assert set(a) == set(b)
    assert {k for k in a if a[k] != b[k]} == changed


def test_index_section_holds_its_type_parameters(base):
    hnsw = _edited(base, "retriever", "index", value="hnsw")
    assert hnsw["index"]["retriever"] == {"index": "hnsw", "hnsw_m": 128, "hnsw_ef_search": 128}
    cfg = copy.deepcopy(base)
    cfg["retriever"].update(index="hnsw", hnsw_ef_search=64)
    assert sections(load_config(cfg))["index"] != hnsw["index"]
    assert sections(load_config(cfg))["encode"] == hnsw["encode"]


def _leaves(node, path=()):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, path + (key,))
    else:
        yield path


def test_schema_defaults_are_what_config_yaml_says(base):
    """One source of defaults: for every key config.yaml sets (but the task list and the further
    generators and retrievers, the experiment's own, with no default), a config that omits it resolves to the same
    value, so a --configfile that replaces config.yaml gets the embedded default's values for what it
    leaves out."""
    full = load_config(base)
    keys = [p for p in _leaves(base) if p[0] not in ("tasks", "generators", "retrievers")]
    assert len(keys) > 40
    for path in keys:
        cfg = copy.deepcopy(base)
        node = cfg
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
        assert load_config(cfg) == full, f"config.yaml sets {'.'.join(path)} to a value the schema's default differs from"
    # whole sections too
    for key in [k for k in base if k not in ("tasks", "generators", "retrievers")]:
        cfg = copy.deepcopy(base)
        del cfg[key]
        assert load_config(cfg) == full, key


def test_test_time_k_default_is_in_the_schema(base):
    from rag.config_keys import json_schema as schema
    from rag.sections import task_decode

    default_k = schema()["$defs"]["DecodeOptions"]["properties"]["k"]["default"]
    cfg = load_config(base)
    assert cfg["tasks"]["nq"]["decode_sequence"] == {"k": default_k}
    assert task_decode(cfg, "nq", "token")["k"] == task_decode(cfg, "fever3", "sequence")["k"] == default_k
    from rag.tasks import TASKS

    assert all("k" not in spec.decode_sequence and "k" not in spec.decode_token for spec in TASKS.values())


def test_metric_options_default_and_recorded(base):
    from rag.metrics import Scorer
    from rag.predictions import metric_options
    from rag.scoring.qbleu import QBLEU_DEFAULT_WEIGHTS

    cfg = load_config(base)
    assert cfg["metrics"] == {"tokenizer": "python", "qbleu1": {"w_ner": 0.41, "w_qt": 0.2, "w_re": 0.2, "delta": 0.66}}
    parts = sections(cfg)
    assert "metrics" in parts["eval_jeopardy"] and "metrics" in parts["eval_msmarco"]
    assert "metrics" not in parts["eval_nq"]  # EM tasks do not re-run when the Q-BLEU weights change
    assert not any("metrics" in parts[f"train_{t}"] for t in cfg["tasks"])  # nor does any fine-tune
    typed = typed_sections()
    assert metric_options(typed["eval_jeopardy"]) == {
        "tokenizer": "python", "qbleu1": {"w_ner": 0.41, "w_qt": 0.2, "w_re": 0.2, "delta": 0.66}}
    assert metric_options(typed["eval_msmarco"]) == {"tokenizer": "python"}
    assert metric_options(typed["eval_nq"]) == {}
    # the default run scores as the metrics' defaults do (a report's rescoring of it included)
    assert Scorer.of(metric_options(typed["eval_jeopardy"])) == Scorer("python", QBLEU_DEFAULT_WEIGHTS)


def _byo(root) -> dict:
    with open(root / "examples" / "byo" / "config.yaml") as fh:
        return yaml.safe_load(fh)


def test_input_files_lists_local_inputs(root, base):
    from rag.config_files import input_files

    assert input_files(load_config(base)) == []  # miniworld: nothing to read
    assert input_files(load_config(_byo(root), check_files=False)) == [
        ("corpus.path", "examples/byo/documents.jsonl"),
        ("tasks.byo_qa.files.train", "examples/byo/qa-train.jsonl"),
        ("tasks.byo_qa.files.dev", "examples/byo/qa-dev.jsonl"),
        ("tasks.byo_qa.files.test", "examples/byo/qa-test.jsonl"),
    ]


@pytest.mark.parametrize("missing, key", [
    ("documents.jsonl", "corpus.path"),
    ("qa-train.jsonl", "tasks.byo_qa.files.train"),
    ("qa-test.jsonl", "tasks.byo_qa.files.test"),
])
def test_missing_input_file_names_key_and_path(root, tmp_path, monkeypatch, missing, key):
    from rag.config_files import check_input_files

    cfg = _byo(root)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError):
        load_config(cfg)  # none of the files exist here
    shutil.copytree(root / "examples" / "byo", tmp_path / "examples" / "byo")
    load_config(cfg)  # all present
    (tmp_path / "examples" / "byo" / missing).unlink()
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    msg = str(err.value)
    assert msg == f"config key '{key}': input file examples/byo/{missing} not found (relative to {tmp_path})"
    assert "\n" not in msg
    load_config(cfg, check_files=False)  # the configuration itself is valid
    # relative paths from another base; absolute paths as they are
    check_input_files(load_config(cfg, check_files=False), base=root)
    absolute = copy.deepcopy(cfg)
    absolute["tasks"]["byo_qa"]["files"]["dev"] = str(tmp_path / "nowhere" / "dev.jsonl")
    want = f"config key 'tasks.byo_qa.files.dev': input file {tmp_path}/nowhere/dev.jsonl not found"
    with pytest.raises(ConfigError, match=f"^{re.escape(want)}$"):
        check_input_files(load_config(absolute, check_files=False), base=root)


def test_report_scale_names_each_tasks_fine_tuning_steps(base):
    """The report's scale box gives each task's steps (tasks.<task>.steps over train.steps), one
    number only when every task trains the same."""
    cfg = copy.deepcopy(base)
    for t in cfg["tasks"].values():
        t.pop("steps", None)
    cfg["train"]["steps"] = 7
    assert sections(load_config(cfg))["report"]["scale"]["train_steps"] == 7
    cfg["tasks"]["nq"]["steps"] = 9
    others = ", ".join(sorted(t for t in cfg["tasks"] if t != "nq"))
    assert sections(load_config(cfg))["report"]["scale"]["train_steps"] == f"9 (nq); 7 ({others})"


def test_variant_seeds_set_one_variants_seeds_and_are_in_no_section(plain):
    """tasks.<task>.variant_seeds: the seeds of one variant on a task, over seeds and one_seed_variants;
    like seeds, in no section (the task's existing runs do not re-run), and checked against init_from."""
    cfg = copy.deepcopy(plain)
    cfg["tasks"]["fever2"]["variant_seeds"] = {"rag_token": [1, 2, 3], "closed_book": [1, 4]}
    loaded = load_config(cfg)
    assert run_seeds(loaded, "fever2", "rag_token") == [1, 2, 3] and run_seeds(loaded, "fever2", "closed_book") == [1, 4]
    assert run_seeds(loaded, "fever2", "rag_sequence") == run_seeds(load_config(plain), "fever2", "rag_sequence")
    old, new = sections(load_config(plain)), sections(loaded)
    assert sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k)) == ["report"]
    cfg["tasks"]["fever2"]["variant_seeds"] = {"rag_sequence_bm25": [1, 2]}
    with pytest.raises(ConfigError, match=r"^config key 'tasks\.fever2\.variant_seeds': rag_sequence_bm25 not among the task's variants"):
        load_config(cfg)
    cfg["tasks"]["fever2"].pop("variant_seeds")
    cfg["tasks"]["webquestions"]["variant_seeds"] = {"closed_book": [1, 2]}  # NQ's closed book runs one seed
    with pytest.raises(ConfigError, match=r"^config key 'tasks\.webquestions\.variant_seeds\.closed_book': seed 2 of closed_book would start from nq"):
        load_config(cfg)
    # a replicate gives every run the replicate's seeds, over variant_seeds with fewer
    cfg["tasks"]["nq"]["variant_seeds"] = {"closed_book": [1, 2]}
    out, _ = replicate_config(cfg, [1, 2, 3])
    assert out["tasks"]["webquestions"]["variant_seeds"] == {} and out["tasks"]["webquestions"]["seeds"] == [1, 2, 3]
    assert run_seeds(load_config(out), "webquestions", "closed_book") == [1, 2, 3]
    out, _ = replicate_config(cfg, [2, 1])  # a variant's own seeds that hold every replicate seed stay
    assert out["tasks"]["nq"]["variant_seeds"] == {"closed_book": [1, 2]} == out["tasks"]["webquestions"]["variant_seeds"]


def _without_seeds(data: dict) -> dict:
    rest = copy.deepcopy(data)
    rest.pop("one_seed_variants", None)
    for spec in rest["tasks"].values():
        spec.pop("seeds", None)
    return rest


def test_replicate_config_gives_each_one_seed_run_more_seeds_and_changes_no_run_that_exists(plain):
    given = copy.deepcopy(plain)
    out, changes = replicate_config(plain, [1, 2, 3])
    assert plain == given  # the input is left as it was
    before, after = load_config(plain), load_config(out)
    runs = [(t, v) for t in before["tasks"] for v in task_variants(before, t)]
    assert runs == [(t, v) for t in after["tasks"] for v in task_variants(after, t)]
    grown = {(t, v): run_seeds(after, t, v) for t, v in runs if len(run_seeds(before, t, v)) == 1}
    assert {(t, v) for t, v in runs if run_seeds(before, t, v) != run_seeds(after, t, v)} == set(grown)
    assert [(t, v, b, a) for t, v, b, a in changes] == [(t, v, [1], grown[t, v]) for t, v in runs if (t, v) in grown]
    # a one-seed variant of a task with several seeds runs them all; a one-seed task runs the seeds asked
    assert grown["nq", "closed_book"] == grown["nq", "rag_token_bm25"] == [1, 2, 3, 4, 5]
    assert grown["triviaqa", "closed_book"] == grown["fever3", "rag_token"] == grown["webquestions", "rag_sequence"] == [1, 2, 3]
    assert len(grown) == 22
    # the written config differs in those keys only, and the sections the runs read are the same (the
    # report's lists the seeds): over a finished experiment only the new seeds' jobs run
    assert _without_seeds(out) == _without_seeds(plain)
    old, new = sections(before), sections(after)
    assert sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k)) == ["report"]
    # more seeds than a several-seed task runs: its runs grow too, the seeds it ran kept
    out, changes = replicate_config(plain, [1, 2, 3, 4, 5])
    grown = {(t, v): (b, a) for t, v, b, a in changes}
    assert grown["triviaqa", "rag_token"] == ([1, 2, 3], [1, 2, 3, 4, 5]) and ("nq", "rag_token") not in grown


def test_replicate_config_that_does_not_validate_names_the_key(root):
    e2e = yaml.safe_load((root / "tests" / "data" / "e2e.yaml").read_text())
    with pytest.raises(ConfigError, match=r"tasks\.webquestions\.seeds.*seed 3 .*init_from"):
        replicate_config(e2e, [2, 3])  # WebQuestions starts from NQ's models, and NQ keeps its seeds 1 and 2
    out, changes = replicate_config(e2e, [1, 2])
    assert {t: s.get("seeds") for t, s in out["tasks"].items()} == {"nq": [1, 2], "webquestions": [1, 2], "fever3": [1, 2]}
    assert len(changes) == 10 and out["one_seed_variants"] == []


def test_replicate_config_command_writes_a_config_that_loads(root, tmp_path, capsys):
    out = tmp_path / "replicates.yaml"
    assert main(["replicate-config", "--config", str(root / "config.yaml"), "--seeds", "1", "2", "3", "--out", str(out)]) == 0
    assert "16 run(s) get more seeds, 32 more fine-tune(s)" in capsys.readouterr().out  # 6 of the 22 one-seed runs hold 1-3
    assert out.read_text().startswith("# rag replicate-config --config ")
    assert load_config(out)["tasks"]["msmarco"]["seeds"] == [1, 2, 3]
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    assert main(["replicate-config", "--config", str(listing), "--seeds", "1", "--out", str(tmp_path / "x.yaml")]) == 2
    assert f"{listing}: a config must be a mapping of keys, got list" in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()


def test_a_further_generator_is_generators_group_with_its_own_keys(base):
    """generators.<name>.generator: its keys over generator's, validated as that group; its runs are
    <variant>@<name> with the tasks' seeds; its pretraining a section of its own, generator's unchanged."""
    from rag.runs import generator_runs

    cfg = load_config(base)
    llama = cfg["generators"]["llama"]["generator"]
    assert llama == {**cfg["generator"], "family": "causal_lm", "local_context": 0, "exact_match": False}
    runs = generator_runs(cfg)
    assert ("nq", "rag_token_frozen@llama") in runs and ("triviaqa", "closed_book@llama") in runs and len(runs) == 10
    assert run_seeds(cfg, "nq", "rag_token@llama") == [1, 2, 3, 4, 5] and run_seeds(cfg, "nq", "closed_book@llama") == [1]
    s = sections(cfg)
    assert s["generator_llama"]["generator"]["family"] == "causal_lm" and s["generator"]["generator"]["family"] == "seq2seq"
    assert s["report"]["generators"]["llama"].startswith("decoder-only Llama from scratch")
    alone = copy.deepcopy(base)
    del alone["generators"]
    assert {k: v for k, v in sections(load_config(alone)).items() if k != "report"} == \
        {k: v for k, v in s.items() if k not in ("report", "generator_llama")}
    for edit, message in (
        ({"generator": {"d_modell": 64}}, "unknown config key 'generators.llama.generator.d_modell'"),
        ({"generator": {"d_model": 0}}, "generators.llama.generator.d_model"),
        ({"generator": {"family": "causal_lm", "local_context": 3}}, "'generators.llama.generator.local_context'"),
        ({"tasks": ["squad"]}, "generators.llama.tasks"),
        ({"tasks": ["nq"], "variants": ["rag_tokens"]}, "generators.llama.variants"),
    ):
        bad = copy.deepcopy(base)
        bad["generators"]["llama"] = {**bad["generators"]["llama"], **edit}
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(bad)
    bad = copy.deepcopy(base)
    bad["tasks"]["webquestions"] = {"train": 20, "dev": 5, "test": 5, "init_from": "nq"}
    bad["generators"]["llama"]["tasks"] = ["webquestions"]
    with pytest.raises(ConfigError, match=r"generators.llama.tasks\[0\].*init_from"):
        load_config(bad)
