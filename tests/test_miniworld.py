from collections import Counter

from rag.data import miniworld

CFG = dict(countries=20, people=50, cities=25, changed_fraction=0.5, test_fraction=0.2)


def test_world_is_deterministic():
    a = miniworld.passages(miniworld.build_world(CFG, 3)["a"], 60)
    b = miniworld.passages(miniworld.build_world(CFG, 3)["a"], 60)
    c = miniworld.passages(miniworld.build_world(CFG, 4)["a"], 60)
    assert a == b and a != c


def test_passages_are_at_most_100_words_unique_and_several_per_entity():
    world = miniworld.build_world(CFG, 3)["a"]
    rows = miniworld.passages(world, 100)
    assert all(len(t.split()) <= 100 for _, _, t in rows)
    assert len({r[0] for r in rows}) == len(rows)
    per_entity = Counter(pid.rsplit("_", 1)[0] for pid, _, _ in rows)
    assert min(per_entity.values()) >= 2  # the answering passage is one of several about its entity


def test_look_alike_names_exist():
    world = miniworld.build_world(CFG, 3)["a"]
    names = sorted(e.name.lower() for e in world.values() if e.kind in ("country", "city"))
    close = [(a, b) for a in names for b in names if a < b and len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1]
    assert close


def test_facts_are_paraphrased_not_the_questions_wording():
    import re

    stop = set("the of a an in is was what who where when which how do does did they there to and on by its it for as are be "
               "this that their at from s v".split())
    for task, templates in miniworld.QA_TEMPLATES.items():
        for attr, q in templates.items():
            qw = set(re.findall(r"[a-z]+", q.lower())) - stop
            for ph in miniworld.PHRASINGS[attr]:
                assert not qw & (set(re.findall(r"[a-z]+", ph.lower())) - stop), (task, attr, ph)


def test_test_entities_are_disjoint_from_train():
    world = miniworld.build_world(CFG, 3)["a"]
    for task in ("nq", "triviaqa", "msmarco", "jeopardy", "fever3"):
        train = {r["meta"]["subject"] for r in miniworld.make_task(world, task, "train", 30, 3)}
        test = {r["meta"]["subject"] for r in miniworld.make_task(world, task, "test", 10, 3)}
        assert train and test and not (train & test), task


def test_training_questions_can_take_the_attributes_in_turn():
    import random

    world = miniworld.build_world(CFG, 3)["a"]
    pool = miniworld._candidates(world, "nq", "train", random.Random(0))
    per_attr = Counter(a for _, a in pool)  # 10 (currency) to 31 (birthplace) facts
    n = 10 * len(per_attr)
    facts = miniworld.make_task(world, "nq", "train", n, 3)
    turns = miniworld.make_task(world, "nq", "train", n, 3, sampling="attributes")
    assert set(Counter(r["meta"]["attribute"] for r in turns).values()) == {10}  # each attribute as often
    assert max(Counter(r["meta"]["attribute"] for r in facts).values()) > 15  # facts: as common as their entities
    # the same facts, each asked once while they last; past them the round goes on over the rest
    assert {(r["meta"]["subject"], r["meta"]["attribute"]) for r in turns} <= {(e.id, a) for e, a in pool}
    assert len({r["input"] for r in turns}) == n
    more = miniworld.make_task(world, "nq", "train", 12 * len(per_attr), 3, sampling="attributes")
    assert Counter(r["meta"]["attribute"] for r in more)["currency"] == 10 and len({r["input"] for r in more}) == len(more)


def test_train_sampling_changes_the_train_split_only_and_only_its_tasks_sections(tmp_path):
    from rag.stages.datasets import build_task
    from tests.conftest import typed_sections

    import yaml

    from tests.conftest import ROOT

    cfg = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    cfg["tasks"]["nq"].pop("train_sampling", None)
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    small = {"tasks": {"nq": {"train": 60, "dev": 10, "test": 20}}}
    plain = typed_sections(small, tmp_path / "plain.yaml")
    turns = typed_sections({"tasks": {"nq": dict(small["tasks"]["nq"], train_sampling="attributes")}}, tmp_path / "plain.yaml")
    files = {}
    for tag, secs in (("facts", plain), ("attributes", turns)):
        outs = {split: tmp_path / f"{tag}-{split}.jsonl" for split in ("train", "dev", "test")}
        build_task(secs["data_nq"], outs, {})
        files[tag] = {split: p.read_bytes() for split, p in outs.items()}
    assert files["facts"]["train"] != files["attributes"]["train"]
    assert files["facts"]["dev"] == files["attributes"]["dev"] and files["facts"]["test"] == files["attributes"]["test"]
    # unset, the key is in no section: the other tasks' sections (and a run's files) stay as they were
    assert "train_sampling" not in plain["data_nq"].to_dict()["task"]
    assert turns["data_nq"].to_dict()["task"]["train_sampling"] == "attributes"
    assert all(plain[k].to_dict() == turns[k].to_dict() for k in plain if not k.endswith("_nq") and k != "report")


def test_train_sampling_is_refused_where_examples_are_not_facts():
    import pytest

    world = miniworld.build_world(CFG, 3)["a"]
    for task in ("jeopardy", "fever3"):
        with pytest.raises(ValueError, match="does not apply"):
            miniworld.make_task(world, task, "train", 10, 3, sampling="attributes")


def test_answers_are_in_the_gold_passage():
    world = miniworld.build_world(CFG, 3)["a"]
    text = {pid: t for pid, _, t in miniworld.passages(world, 100)}
    for task in ("nq", "triviaqa", "msmarco"):
        for row in miniworld.make_task(world, task, "test", 20, 3, 100):
            assert row["meta"]["answer"] in text[row["meta"]["gold_docs"][0]], row


def test_curatedtrec_targets_are_regexes_matching_the_answer():
    import re

    world = miniworld.build_world(CFG, 3)["a"]
    for row in miniworld.make_task(world, "curatedtrec", "train", 10, 3):
        assert re.search(row["targets"][0], row["meta"]["answer"])


def test_fever_labels_are_balanced():
    world = miniworld.build_world(CFG, 3)["a"]
    three = Counter(r["targets"][0] for r in miniworld.make_task(world, "fever3", "train", 30, 3))
    two = Counter(r["targets"][0] for r in miniworld.make_task(world, "fever2", "train", 30, 3))
    assert three == {"SUPPORTS": 10, "REFUTES": 10, "NOT ENOUGH INFO": 10}
    assert two == {"SUPPORTS": 15, "REFUTES": 15}


def test_snapshot_b_changes_leaders():
    worlds = miniworld.build_world(CFG, 3)
    rows = miniworld.hotswap_questions(worlds)
    # held-out countries only: fine-tuning saw the training split's leaders
    held_out = [e for e in worlds["a"].values() if e.kind == "country" and e.split != "train"]
    assert len(rows) == len(held_out) > 0
    assert {r["meta"]["subject"] for r in rows} == {e.id for e in held_out}
    changed = [r for r in rows if r["meta"]["changed"]]
    assert 0 < len(changed) < len(rows)
    assert all(r["targets"]["a"] != r["targets"]["b"] for r in changed)
    # the b corpus states the new leader
    text_b = " ".join(t for _, _, t in miniworld.passages(worlds["b"], 100))
    assert all(r["targets"]["b"][0] in text_b for r in changed)


def test_snapshots_differ_only_where_leaders_changed():
    worlds = miniworld.build_world(CFG, 3)
    a = dict((p, t) for p, _, t in miniworld.passages(worlds["a"], 100))
    b = dict((p, t) for p, _, t in miniworld.passages(worlds["b"], 100))
    changed = {pid.rsplit("_", 1)[0] for pid in a if a[pid] != b.get(pid)}
    involved = set()
    for cid, e in worlds["a"].items():
        if e.kind == "country" and e.attrs["leader"] != worlds["b"][cid].attrs["leader"]:
            involved |= {cid, e.attrs["leader"], worlds["b"][cid].attrs["leader"]}
    assert changed and changed <= involved


def test_restatements_are_train_facts_read_only_from_their_passage():
    import random

    from rag.models.pretraining_data import Restatements
    from rag.models.tokenizer import label_token
    from rag.tasks import FEVER3_LABELS

    world = miniworld.build_world(CFG, 3)["a"]
    rows = miniworld.passages(world, 100)
    text = {pid: t for pid, _, t in rows}
    recs = miniworld.restatements(world, 100)
    assert recs and {world[r["passage"].rsplit("_", 1)[0]].split for r in recs} == {"train"}
    for r in recs:
        assert r["sentence"].format(v=r["value"]) in text[r["passage"]]
        assert r["queries"] and r["sentence"] not in r["queries"]  # asked in another phrasing
        assert all("{v}" in q for q in r["queries"])
        assert all("{v}" not in q for q in r["questions"])  # as the QA tasks ask it
        assert bool(r["questions"]) == any(r["attribute"] in t for t in miniworld.QA_TEMPLATES.values())
        assert all("{v}" in c for c in r["claims"]) and all("{v}" in c for _, c in r["unstated"])
        assert not {a for a, _ in r["unstated"]} & {x["attribute"] for x in recs if x["passage"] == r["passage"]}
    ids, titles, texts = zip(*rows)
    restated = Restatements(recs, list(ids))
    rng = random.Random(0)
    questions = {q for r in recs for q in r["questions"]}
    orders = set()
    for _ in range(50):
        src, target = restated.example(list(titles), list(texts), rng)
        passage, query = src.split(" // ")
        assert ("<mask>" in query or query in questions) and target in passage  # the answer is read from the passage
        src, target = restated.example(list(titles), list(texts), rng, max_context=1)  # the curriculum's first window
        passage = src.split(" // ")[0].split(" / ", 1)[1]
        assert target in passage and passage.count(". ") == 0  # one sentence: the one stating the swapped value
    # re-rendered: one passage comes in several sentence orders and phrasings
    one_passage = Restatements([r for r in recs if r["passage"] == recs[0]["passage"]], list(ids))
    for s in range(10):
        src, _ = one_passage.example(list(titles), list(texts), random.Random(s))
        orders.add(src.split(" // ")[0])
    assert len(orders) > 5
    # a value swapped in, not the world's: one fact asked with several seeds gets several answers
    one = Restatements(recs[:1], list(ids))
    answers = {one.example(list(titles), list(texts), random.Random(s))[1] for s in range(20)}
    assert len(answers) == 1  # a single record: its attribute has no other value to swap in
    two = Restatements([r for r in recs if r["attribute"] == "founded"][:10], list(ids))
    answers = {two.example(list(titles), list(texts), random.Random(s))[1] for s in range(40)}
    assert len(answers) > 3
    # sentences: a fact of the re-rendered passage restated as the generation tasks' answers
    assert any(r["sentences"] for r in recs)
    for s in range(20):
        src, target = restated.sentence(list(titles), list(texts), random.Random(s))
        passage, query = src.split(" // ")
        pairs = [(q, t) for r in recs for q, t in r["sentences"] if q == query]
        assert pairs and any(target == t.format(v=v) and v in passage
                             for _, t in pairs for r in recs for v in restated.values[r["attribute"]]
                             if t.format(v=v) == target)
    # claims, labelled by what the re-rendered passage says
    def claimed(claim):  # {(stated in its record's passage?, value)} of the records' claim templates the claim fits
        out = set()
        for r in recs:
            for stated, template in [(True, c) for c in r["claims"]] + [(False, c) for _, c in r["unstated"]]:
                head, tail = template.split("{v}")
                if claim.startswith(head) and claim.endswith(tail) and len(claim) > len(head) + len(tail):
                    out.add((stated, claim[len(head):len(claim) - len(tail)]))
        assert out, claim
        return out

    seen = set()
    for s in range(80):
        src, label = restated.claim(list(titles), list(texts), random.Random(s), FEVER3_LABELS)
        passage, claim = src.split(" // ")
        fits = claimed(claim)  # one claim can be stated in one passage of its entity and not in another
        seen.add(label)
        stated = label != label_token("NOT ENOUGH INFO")  # NEI: an attribute its passage does not state
        assert any(st == stated for st, _ in fits)
        if label == label_token("SUPPORTS"):
            assert any(v in passage for st, v in fits if st)
    assert seen == {label_token(lb) for lb in FEVER3_LABELS}


def test_absent_facts_are_asked_of_a_sibling_passage_that_does_not_state_them():
    import random

    from rag.models.pretraining_data import Restatements

    world = miniworld.build_world(CFG, 3)["a"]
    rows = miniworld.passages(world, 100)
    ids, titles, texts = (list(x) for x in zip(*rows))
    recs = miniworld.restatements(world, 100)
    restated = Restatements(recs, ids)
    rows_of = {}
    for row, title in enumerate(titles):
        rows_of.setdefault(title, []).append(row)
    asked = {q.format(v="<mask>"): r for r in recs for q in [r["sentence"]] + r["queries"]}
    asked.update({q: r for r in recs for q in r["questions"]})
    attributes = set()
    for s in range(60):
        src, target = restated.absent(titles, texts, random.Random(s))
        head, query = src.split(" // ")
        title, passage = head.split(" / ", 1)
        r = asked[query]  # a record's fact, asked as pretraining asks it
        entity = titles[ids.index(r["passage"])]
        assert title == entity and len(rows_of[title]) > 1  # another passage of the same article
        own = texts[ids.index(r["passage"])]
        assert r["sentence"].format(v=r["value"]) in own and r["value"] not in passage  # that passage does not state it
        assert target in restated.values[r["attribute"]]  # a value of the asked attribute
        attributes.add(r["attribute"])
    assert len(attributes) > 3
    # the curriculum's window: a few sentences of that passage
    src, _ = restated.absent(titles, texts, random.Random(0), max_context=1)
    assert src.split(" // ")[0].split(" / ", 1)[1].count(". ") == 0
    # a corpus whose articles are one passage each has none to ask
    import pytest

    from rag.errors import ConfigError

    with pytest.raises(ConfigError, match="pretrain_absent"):
        Restatements(recs, ids).absent(ids, texts, random.Random(0))  # every passage its own title


def test_counterfactuals_of_an_entity_valued_fact_are_every_entity_of_its_kind():
    import random

    import pytest

    from rag.errors import ConfigError
    from rag.models.pretraining_data import Restatements

    world = miniworld.build_world(CFG, 3)["a"]
    rows = miniworld.passages(world, 100)
    ids, titles, texts = (list(x) for x in zip(*rows))
    recs = miniworld.restatements(world, 100)
    kinds = {r["attribute"]: r.get("value_kind") for r in recs}
    assert kinds["leader"] == "person" and kinds["capital"] == "city" and kinds["leads"] == "country"
    assert kinds["born"] is None and kinds["occupation"] is None  # a year, a word: no entity
    pools = miniworld.kind_pools(ids, titles)
    assert {k: set(v) for k, v in pools.items()} == {k: {e.name for e in world.values() if e.kind == k}
                                                      for k in ("country", "city", "person")}
    old, new = Restatements(recs, ids), Restatements(recs, ids, pools)
    unseen = set(pools["person"]) - set(old.values["leader"])  # e.g. held-out countries' leaders
    assert unseen and set(old.values["leader"]) <= set(pools["person"])  # training leaders' names only
    assert set(new.values["leader"]) == set(pools["person"])  # every person, held-out ones too
    assert new.values["born"] == old.values["born"]
    leaders = [r for r in recs if r["attribute"] == "leader"]
    one = Restatements(leaders, ids, pools)
    read = {one.example(titles, texts, random.Random(s))[1] for s in range(200)}
    assert read & unseen and read <= set(pools["person"])  # names no training fact has are read in pretraining
    # a corpus of other ids, or records of an older corpus rule, stop it with the key named
    with pytest.raises(ConfigError, match="pretrain_counterfactuals"):
        miniworld.kind_pools(["doc1_0"], ["A title"])
    with pytest.raises(ConfigError, match="value_kind"):
        Restatements([{k: v for k, v in r.items() if k != "value_kind"} for r in recs], ids, pools)
