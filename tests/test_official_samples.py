"""Parsers on small samples in the official layouts, and a dry run of config/paper.yaml's
parsers over such samples: every task's every split must prepare.

The samples copy the layout of the public files (a few lines each; contents shortened):
DPR ``*.qa.csv`` and ``biencoder-*.json.gz``, MS MARCO v2.1 columns, SearchQA / J! Archive JSON,
FEVER jsonl, the curators' CuratedTrec TSV (brmson/dataset-factoid-curated), WebQuestions JSON,
NQ-open jsonl and TriviaQA JSON.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from rag.data import formats as F
from rag.data import parsers as P
from rag.errors import DataError
from rag.io import read_jsonl
from rag.tasks import SPLITS

ROOT = Path(__file__).resolve().parent.parent


def _bienc(dataset, question, answers):
    return {"dataset": dataset, "question": question, "answers": answers,
            "positive_ctxs": [{"title": "T", "text": "passage text", "score": 1000, "title_score": 1, "passage_id": "7"}],
            "negative_ctxs": [], "hard_negative_ctxs": []}


def _marco(rows):
    """MS MARCO v2.1: one object of columns keyed by row number strings."""
    cols = {"answers": {}, "passages": {}, "query": {}, "query_id": {}, "query_type": {}, "wellFormedAnswers": {}}
    for i, (qid, query, answers, wf) in enumerate(rows):
        k = str(i)
        cols["answers"][k] = answers
        cols["passages"][k] = [{"is_selected": 1, "passage_text": "text", "url": "http://example.org"}]
        cols["query"][k] = query
        cols["query_id"][k] = qid
        cols["query_type"][k] = "DESCRIPTION"
        cols["wellFormedAnswers"][k] = wf
    return cols


def _searchqa(answer, question):
    return {"answer": answer, "category": "HISTORY", "air_date": "2004-12-31", "question": question,
            "value": "$200", "round": "Jeopardy!", "show_number": "4680",
            "search_results": [{"urls": "http://example.org", "snippet": "s", "title": "t", "related_links": None}]}


FEVER = [
    {"id": 75397, "verifiable": "VERIFIABLE", "label": "SUPPORTS",
     "claim": "Nikolaj Coster-Waldau worked with the Fox Broadcasting Company.",
     "evidence": [[[92206, 104971, "Nikolaj_Coster-Waldau", 7], [92206, 104971, "Fox_Broadcasting_Company", 0]]]},
    {"id": 150448, "verifiable": "VERIFIABLE", "label": "REFUTES", "claim": "Roman Atwood is a content creator.",
     "evidence": [[[174271, 187498, "Roman_Atwood", 1]]]},
    {"id": 113501, "verifiable": "NOT VERIFIABLE", "label": "NOT ENOUGH INFO", "claim": "Grease had bad reviews.",
     "evidence": [[[133128, None, None, None]]]},
]

# file name (as the last part of config/paper.yaml's URL / path) -> content
SAMPLES = {
    "nq/nq-train.qa.csv": "big little lies season 2 how many episodes\t['seven']\n"
                          "who had the most wins in the nfl\t['Tom Brady']\n",
    "nq/nq-dev.qa.csv": "who sings does he love me with reba\t['Linda Davis']\n",
    "nq/nq-test.qa.csv": "who got the first nobel prize in physics\t['Wilhelm Conrad Röntgen']\n"
                         "\"what does \"\"hotel california\"\" mean\"\t['a metaphor']\n",
    "triviaqa/trivia-train.qa.csv.gz": "Who was the man behind The Chipmunks?\t['David Seville']\n",
    "triviaqa/trivia-dev.qa.csv.gz": "Which Lloyd Webber musical premiered in the US on 10th December 1993?\t['Sunset Boulevard', 'Sunset Blvd']\n",
    "triviaqa/trivia-test.qa.csv.gz": "Who was President when the first Peanuts cartoon was published?\t['Harry Truman', 'Truman']\n",
    "webquestions/biencoder-webquestions-train.json.gz": [
        _bienc("webquestions", "what is the name of justin bieber brother?", ["Jazmyn Bieber", "Jaxon Bieber"])],
    "webquestions/biencoder-webquestions-dev.json.gz": [
        _bienc("webquestions", "what character did natalie portman play in star wars?", ["Padmé Amidala"])],
    "webquestions/webquestions-test.qa.csv": "what does jamaican people speak?\t['Jamaican English', 'Jamaican Creole English Language']\n",
    "curatedtrec/biencoder-curatedtrec-train.json.gz": [
        _bienc("curatedtrec", "What is the capital of Ohio?", ["Columbus"])],
    "curatedtrec/biencoder-curatedtrec-dev.json.gz": [
        _bienc("curatedtrec", "How tall is Mount McKinley?", ["20\\s?,?320|20,?\\s?320\\s?(feet|ft\\.?)"])],
    "curatedtrec/curatedtrec-test.qa.csv": "Who is the author of the book \"\"The Iron Lady\"\"?\t['Hugo\\\\s+Young']\n",
    "msmarco/train_v2.1.json.gz": _marco([
        (1185869, ")what was the immediate impact of the success of the manhattan project?",
         ["The immediate impact of the success of the manhattan project was the only cloud hanging over."], "[]"),
        (1185868, "_________ justice is designed to repair the harm to victim",
         ["The approach is based on a theory of justice."], ["Restorative justice is designed to repair the harm."]),
    ]),
    "msmarco/dev_v2.1.json.gz": _marco([
        (1102432, ". what is a corporation?", ["A corporation is a company."], ["A corporation is a company or group of people."]),
        (1102431, "why did rachel carson write an obligation to endure", ["No Answer Present."], "[]"),
    ]),
    "jeopardy/train/0001.json": _searchqa("Copernicus", "For the last 8 years of his life, Galileo was under house arrest for espousing this man's theory"),
    "jeopardy/val/0002.json": _searchqa("Jim Thorpe", "No. 2: 1912 Olympian; football star at Carlisle Indian School; 6 MLB seasons with the Reds, Giants & Braves"),
    "jeopardy/test/0003.json": _searchqa("Arizona", "The city of Yuma in this state has a record average of 4,055 hours of sunshine each year"),
    "fever3/train.jsonl": FEVER, "fever3/paper_dev.jsonl": FEVER, "fever3/paper_test.jsonl": FEVER,
    "fever2/train.jsonl": FEVER, "fever2/paper_dev.jsonl": FEVER, "fever2/paper_test.jsonl": FEVER,
}


def write_sample(path: Path, content) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, list) and path.suffix == ".jsonl":
        text = "".join(json.dumps(r) + "\n" for r in content)
    elif isinstance(content, (list, dict)):
        text = json.dumps(content)
    else:
        text = content
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def test_paper_config_prepares_every_split_of_every_task(tmp_path, caplog):
    """Dry run of config/paper.yaml's parsers (formats, per-split formats, well_formed_only) over
    official-layout samples named as the config's files."""
    from rag.config import load_config

    cfg = load_config(ROOT / "config" / "paper.yaml", check_files=False)  # SearchQA is fetched by hand
    src = tmp_path / "resources"
    for rel, content in SAMPLES.items():
        write_sample(src / rel, content)
    done = []
    for name, task in cfg["tasks"].items():
        for split in SPLITS:
            fmt = task.get("formats", {}).get(split, task.get("format", name))
            wf = task.get("well_formed_only", False)
            wf = split in wf if isinstance(wf, list) else bool(wf)
            kw = {"well_formed_only": True} if wf and fmt == "msmarco" else {}
            path = src / name / Path(task["files"][split]).name
            assert path.exists(), f"no sample for {name}/{split}: {path.name}"
            out = tmp_path / "out" / name / f"{split}.jsonl"
            n = F.prepare_task(fmt, path, out, name, split, **kw)
            rows = read_jsonl(out, required=("id", "input", "targets"))
            assert n == len(rows) > 0, (name, split)
            assert all(r["input"].strip() and r["targets"] and all(t.strip() for t in r["targets"]) for r in rows)
            done.append((name, split, fmt, n))
    assert len(done) == 3 * len(cfg["tasks"]) == 24
    counts = {(t, s): n for t, s, _, n in done}
    # MS MARCO: train/dev keep the well-formed rows only; test is all of dev_v2.1
    assert counts[("msmarco", "train")] == 1 and counts[("msmarco", "dev")] == 1 and counts[("msmarco", "test")] == 2
    assert counts[("fever2", "dev")] == 2 and counts[("fever3", "dev")] == 3
    assert read_jsonl(tmp_path / "out" / "nq" / "test.jsonl")[1]["input"] == 'what does "hotel california" mean'


# --------------------------------------------------------------------------- point 1: CuratedTrec TSV

CURATED_TSV = (  # brmson/dataset-factoid-curated curated-train.tsv: id, type, question, regex
    "1669\tfactoid\tHow tall is Mount McKinley?\t20\\s?,?320|20,?\\s?320\\s?(feet|ft\\.?)\n"
    "1670\tfactoid\tWhere is the Smithsonian Institute located?\t^[Ww]ashington,? (D\\.? ?C\\.?)?$\n"
)


def test_curatedtrec_curators_tsv(tmp_path):
    p = write_sample(tmp_path / "curated-train.tsv", CURATED_TSV)
    rows = list(P.parse_curatedtrec(p))
    assert rows[0] == {"id": "1669", "input": "How tall is Mount McKinley?",
                       "targets": ["20\\s?,?320|20,?\\s?320\\s?(feet|ft\\.?)"], "meta": {"regex": True, "type": "factoid"}}
    assert rows[1]["input"] == "Where is the Smithsonian Institute located?"


@pytest.mark.parametrize("text, message", [
    (CURATED_TSV + "1671\tHow deep is Crater Lake?\t1,?932\n", r"curated\.tsv:3: expected 2 tab-separated columns .* or 4 .* got 3"),
    ("1669\tfactoid\tHow tall?\t20\textra\n", r"curated\.tsv:1: .* got 5"),
    (CURATED_TSV + "How deep is Crater Lake?\t1,?932\n", r"curated\.tsv:3: 2-column TSV line in a 4-column TSV"),
    (CURATED_TSV + "1669\tfactoid\tAgain?\tx\n", r"curated\.tsv:3: duplicate id '1669'"),
])
def test_curatedtrec_other_layouts_refused(tmp_path, text, message):
    p = write_sample(tmp_path / "curated.tsv", text)
    with pytest.raises(DataError, match=message):
        list(P.parse_curatedtrec(p))


# --------------------------------------------------------------------------- point 3: WebQuestions quotes


def test_webquestions_unescaped_inner_quotes(tmp_path):
    data = [  # WebQuestions webquestions.examples.test.json layout
        {"url": "http://www.freebase.com/view/en/justin_bieber", "targetValue": "(list (description \"Jazmyn Bieber\") (description \"Jaxon Bieber\"))",
         "utterance": "what is the name of justin bieber brother?"},
        {"url": "http://www.freebase.com/view/en/f_scott_fitzgerald",
         "targetValue": "(list (description \"Temperance \"Tempie\" Fitzgerald\"))",
         "utterance": "who was f scott fitzgerald's sister?"},
        {"url": "http://www.freebase.com/view/en/jamaica", "targetValue": "(list (description Jamaican English) (description \"Jamaican Creole English Language\"))",
         "utterance": "what does jamaican people speak?"},
    ]
    p = write_sample(tmp_path / "webquestions.examples.test.json", data)
    rows = list(P.parse_webquestions(p))
    assert rows[0]["targets"] == ["Jazmyn Bieber", "Jaxon Bieber"]
    assert rows[1]["targets"] == ["Temperance Tempie Fitzgerald"]  # DrQA's conversion gives the same
    assert rows[2]["targets"] == ["Jamaican English", "Jamaican Creole English Language"]
    bad = write_sample(tmp_path / "bad.json", [dict(data[0], targetValue="(list (name x))")])
    with pytest.raises(DataError, match=r"bad\.json: example \[0\]: bad targetValue"):
        list(P.parse_webquestions(bad))


# --------------------------------------------------------------------------- point 4: J! Archive dump


def test_jeopardy_raw_j_archive_dump_cleaned(tmp_path):
    dump = [  # JEOPARDY_QUESTIONS1.json layout: clues wrapped in single quotes, some with HTML
        {"category": "HISTORY", "air_date": "2004-12-31",
         "question": "'For the last 8 years of his life, Galileo was under house arrest for espousing this man's theory'",
         "value": "$200", "answer": "Copernicus", "round": "Jeopardy!", "show_number": "4680"},
        {"category": "EPITAPHS & TRIBUTES", "air_date": "2004-12-31",
         "question": "'<a href=\"http://www.j-archive.com/media/2004-12-31_DJ_24.jpg\" target=\"_blank\">This</a> guy is buried in <i>Westminster Abbey</i>'",
         "value": "$2,000", "answer": "<i>Isaac Newton</i>", "round": "Double Jeopardy!", "show_number": "4680"},
    ]
    p = write_sample(tmp_path / "JEOPARDY_QUESTIONS1.json", dump)
    rows = list(P.parse_jeopardy(p))
    assert rows[0]["targets"] == ["For the last 8 years of his life, Galileo was under house arrest for espousing this man's theory"]
    assert rows[1]["targets"] == ["This guy is buried in Westminster Abbey"]
    assert rows[1]["input"] == "Isaac Newton"
    # SearchQA's own (already clean) text is unchanged
    assert P.clean_jeopardy_text("'Tis the season") == "'Tis the season"
    empty = write_sample(tmp_path / "e.json", [dict(dump[0], question="'<i></i>'")])
    with pytest.raises(DataError, match=r"e\.json: item \[0\]: empty 'question'"):
        list(P.parse_jeopardy(empty))


# --------------------------------------------------------------------------- point 5: uncompilable regex


def test_uncompilable_regex_one_behaviour_everywhere(tmp_path):
    from rag import metrics as M
    from rag.scoring.answer_match import compile_regex

    bad = "1671\tfactoid\tWhat is (unclosed?\t(1,932\n"
    p = write_sample(tmp_path / "curated-test.tsv", CURATED_TSV + bad)
    with pytest.raises(DataError, match=r"curated-test\.tsv:3: invalid gold regular expression '\(1,932'"):
        list(P.parse_curatedtrec(p))
    # DPR's qa.csv layout for the curatedtrec task: prepare_task checks every pattern
    csv = write_sample(tmp_path / "curatedtrec-test.qa.csv", "How deep is Crater Lake?\t['(1,932']\n")
    with pytest.raises(DataError, match=r"curatedtrec-test\.qa\.csv: record 0 \(id 'curatedtrec-test-0'\): invalid gold"):
        F.prepare_task("dpr_qa_csv", csv, tmp_path / "out.jsonl", "curatedtrec", "test")
    assert not (tmp_path / "out.jsonl").exists()
    # scoring and the training-target search raise the same error
    with pytest.raises(DataError, match=r"invalid gold regular expression '\(1,932'"):
        M.Scorer().compute("em_regex", ["1,932"], [["(1,932"]])
    with pytest.raises(DataError, match=r"invalid gold regular expression '\(1,932'"):
        compile_regex("(1,932")


def test_training_targets_refuse_uncompilable_regex():
    from rag.stages.fine_tuning import _targets_for_training
    from tests.conftest import typed_sections

    class _Ret:
        class ids:
            @staticmethod
            def tolist():
                return [[0]]

    class _System:
        class passages:
            texts = ["Crater Lake is 1,932 feet deep."]

            def __len__(self):
                return 1

        passages = passages()

        def retrieve(self, inputs, depth):
            return _Ret()

    cfg = typed_sections()["train_curatedtrec"]
    rows = [{"id": "ct-0", "input": "How deep is Crater Lake?", "targets": ["(1,932"]}]
    with pytest.raises(DataError, match=r"curatedtrec training example 'ct-0': invalid gold regular expression"):
        _targets_for_training(cfg, _System(), rows)


# --------------------------------------------------------------------------- point 7: empty questions / answers


@pytest.mark.parametrize("parser, name, content, message", [
    ("nq_open", "nq-open-dev.jsonl", [{"question": "who sings", "answer": ["Linda Davis"]}, {"question": " ", "answer": ["x"]}],
     r"nq-open-dev\.jsonl:2: empty question"),
    ("nq_open", "nq-open-dev.jsonl", [{"question": "who sings", "answer": [""]}], r"nq-open-dev\.jsonl:1: 'answer'\[0\] is an empty answer"),
    ("dpr_qa_csv", "nq-dev.qa.csv", "who sings\t['Linda Davis']\n\t['x']\n", r"nq-dev\.qa\.csv:2: empty question"),
    ("dpr_qa_csv", "nq-dev.qa.csv", "who sings\t['']\n", r"nq-dev\.qa\.csv:1: 'answers'\[0\] is an empty answer"),
    ("triviaqa", "unfiltered-web-dev.json",
     {"Data": [{"Question": "", "QuestionId": "tc_1", "Answer": {"Value": "x", "Aliases": []}}]}, r"Data\[0\]: empty 'Question'"),
    ("triviaqa", "unfiltered-web-dev.json",
     {"Data": [{"Question": "Who?", "QuestionId": "tc_1", "Answer": {"Value": "", "Aliases": []}}]},
     r"Data\[0\]\.Answer: 'Value/Aliases'\[0\] is an empty answer"),
    ("jeopardy", "val.jsonl", [{"question": "This man", "answer": " "}], r"val\.jsonl:1: empty 'question' or 'answer'"),
    ("jeopardy", "val.jsonl", [{"question": "", "answer": "Copernicus"}], r"val\.jsonl:1: empty 'question' or 'answer'"),
    ("dpr_biencoder", "biencoder-webquestions-dev.json", [_bienc("webquestions", "what?", [""])], r"\[0\]: 'answers'\[0\] is an empty answer"),
])
def test_empty_questions_and_answers_refused_everywhere(tmp_path, parser, name, content, message):
    p = write_sample(tmp_path / name, content)
    with pytest.raises(DataError, match=message):
        list(F.PARSERS[parser](p))
