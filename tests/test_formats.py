"""Parsers of the official formats (rag.data.formats) on small files with the real quirks."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest

from rag.data import formats as F
from rag.data import parsers as P
from rag.data.table7 import table7
from rag.tasks import SPLITS
from rag.data.corpus import IdSet, chunk_documents
from rag.errors import ConfigError, DataError
from rag.io import read_jsonl


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _jsonl(path: Path, rows) -> Path:
    return _write(path, "".join(json.dumps(r) + "\n" for r in rows))


# --------------------------------------------------------------------------- QA formats


def test_nq_open(tmp_path):
    p = _jsonl(tmp_path / "NQ-open.dev.jsonl", [
        {"question": "who sings does he love me with reba", "answer": ["Linda Davis"]},
        {"question": "when was the last time", "answer": ["1996", "1996"], "id": "x7"},
    ])
    recs = list(P.parse_nq_open(p, id_prefix="nq-dev"))
    assert recs[0] == {"id": "nq-dev-0", "input": "who sings does he love me with reba",
                       "targets": ["Linda Davis"], "meta": {}}
    assert recs[1]["id"] == "x7" and recs[1]["targets"] == ["1996"]


def test_nq_open_wrong_type_and_missing(tmp_path):
    p = _jsonl(tmp_path / "a.jsonl", [{"question": "q", "answer": ["a"]}, {"question": "q", "answer": "a"}])
    with pytest.raises(DataError, match=r"a\.jsonl:2: .*'answer' must be list"):
        list(P.parse_nq_open(p))
    p = _jsonl(tmp_path / "b.jsonl", [{"question": "q"}])
    with pytest.raises(DataError, match=r"b\.jsonl:1: missing field 'answer'"):
        list(P.parse_nq_open(p))
    p = _write(tmp_path / "c.jsonl", '{"question": "q", "answer": ["a"]}\n{"question": \n')
    with pytest.raises(DataError, match=r"c\.jsonl:2: invalid JSON"):
        list(P.parse_nq_open(p))


def test_dpr_qa_csv_quoting(tmp_path):
    # csv.writer(delimiter="\t") output: a field with a double quote is quoted, inner quotes doubled
    p = _write(tmp_path / "nq-test.qa.csv",
               "who got the first nobel prize in physics\t['Wilhelm Conrad Röntgen']\n"
               '"who sang ""i will always love you"""\t"[\'Dolly Parton\', \'Whitney Houston\', ""Dolly\'s""]"\n')
    recs = list(P.parse_dpr_qa_csv(p, id_prefix="nq-test"))
    assert recs[0]["targets"] == ["Wilhelm Conrad Röntgen"]
    assert recs[1]["input"] == 'who sang "i will always love you"'
    assert recs[1]["targets"] == ["Dolly Parton", "Whitney Houston", "Dolly's"]
    assert [r["id"] for r in recs] == ["nq-test-0", "nq-test-1"]


def test_dpr_qa_csv_curatedtrec_regex_and_errors(tmp_path):
    p = _write(tmp_path / "curatedtrec-test.qa.csv", "what is the capital of kenya\t['Nairobi|Nayrobi']\n")
    assert list(P.parse_dpr_qa_csv(p))[0]["targets"] == ["Nairobi|Nayrobi"]
    bad = _write(tmp_path / "bad.qa.csv", "q\t['a']\nonly a question\n")
    with pytest.raises(DataError, match=r"bad\.qa\.csv:2: expected 2 tab-separated columns"):
        list(P.parse_dpr_qa_csv(bad))
    evil = _write(tmp_path / "evil.qa.csv", "q\t__import__('os').system('true')\n")
    with pytest.raises(DataError, match=r"evil\.qa\.csv:1: answer column is not a Python list literal"):
        list(P.parse_dpr_qa_csv(evil))
    notlist = _write(tmp_path / "nl.qa.csv", "q\t[1, 2]\n")
    with pytest.raises(DataError, match=r"nl\.qa\.csv:1: .*list of strings"):
        list(P.parse_dpr_qa_csv(notlist))


def test_triviaqa(tmp_path):
    data = {"Data": [{
        "Question": "Which Lloyd Webber musical premiered in the US on 10th December 1993?",
        "QuestionId": "tc_33",
        "QuestionSource": "http://www.triviacountry.com/",
        "Answer": {"Aliases": ["Sunset Blvd", "Sunset Boulevard", "West Sunset Boulevard"],
                   "NormalizedAliases": ["sunset blvd", "sunset boulevard"],
                   "NormalizedValue": "sunset boulevard", "Type": "WikipediaEntity",
                   "Value": "Sunset Boulevard"},
        "EntityPages": [], "SearchResults": [],
    }], "Domain": "Web", "Version": 1.0, "Split": "dev"}
    p = tmp_path / "unfiltered-web-dev.json.gz"
    with gzip.open(p, "wt", encoding="utf-8") as fh:
        json.dump(data, fh)
    (rec,) = P.parse_triviaqa(p)
    assert rec["id"] == "tc_33"
    assert rec["targets"] == ["Sunset Boulevard", "Sunset Blvd", "West Sunset Boulevard"]
    assert rec["meta"]["normalized_aliases"] == ["sunset blvd", "sunset boulevard"]
    del data["Data"][0]["Answer"]
    q = _write(tmp_path / "test-without-answers.json", json.dumps(data))
    with pytest.raises(DataError, match=r"Data\[0\]: missing field 'Answer'"):
        list(P.parse_triviaqa(q))


def test_webquestions_sexpressions(tmp_path):
    data = [
        {"url": "http://www.freebase.com/view/en/justin_bieber",
         "targetValue": '(list (description "Jazmine Sullivan"))', "utterance": "what is the name of justin bieber brother?"},
        {"url": "http://www.freebase.com/view/en/natalie_portman",
         "targetValue": '(list (description "Padm\u00e9 Amidala") (description Jamaica) (description 1945))',
         "utterance": "what character did natalie portman play in star wars?"},
    ]
    p = _write(tmp_path / "webquestions.examples.train.json", json.dumps(data))
    recs = list(P.parse_webquestions(p, id_prefix="webquestions-train"))
    assert recs[0]["targets"] == ["Jazmine Sullivan"]
    assert recs[1]["targets"] == ["Padmé Amidala", "Jamaica", "1945"]
    assert recs[1]["id"] == "webquestions-train-1"
    assert recs[0]["meta"]["url"].startswith("http://www.freebase.com")
    data[1]["targetValue"] = '(list (description "unterminated)'
    q = _write(tmp_path / "bad.json", json.dumps(data))
    with pytest.raises(DataError, match=r"bad\.json: example \[1\]: bad targetValue"):
        list(P.parse_webquestions(q))


def test_curatedtrec_drqa_jsonl_and_tsv(tmp_path):
    p = _jsonl(tmp_path / "CuratedTrec-test.txt", [
        {"question": "What U.S. state's motto is \"Live free or Die\"?", "answer": ["New Hampshire"]},
        {"question": "How many years did Sleeping Beauty sleep?", "answer": ["100|hundred"]},
    ])
    recs = list(P.parse_curatedtrec(p))
    assert recs[1]["targets"] == ["100|hundred"] and recs[1]["meta"] == {"regex": True}
    t = _write(tmp_path / "ct.tsv", "Who wrote Hamlet?\tShakespeare\nWhat is 2+2\t4|four\n")
    assert [r["targets"] for r in P.parse_curatedtrec(t)] == [["Shakespeare"], ["4|four"]]
    bad = _write(tmp_path / "ct_bad.tsv", "Who wrote Hamlet?\tShakespeare\nno answer column\n")
    with pytest.raises(DataError, match=r"ct_bad\.tsv:2: expected 2 tab-separated columns"):
        list(P.parse_curatedtrec(bad))


def test_msmarco_columns(tmp_path):
    data = {
        "query": {"0": ")what was the immediate impact", "1": "what is rba", "2": "nothing here"},
        "query_id": {"0": 1102432, "1": 19699, "2": 5},
        "query_type": {"0": "DESCRIPTION", "1": "DESCRIPTION", "2": "NUMERIC"},
        "answers": {"0": ["The immediate impact was X."], "1": ["Results-Based Accountability"],
                    "2": ["No Answer Present."]},
        "wellFormedAnswers": {"0": "[]", "1": ["RBA stands for Results-Based Accountability."], "2": "[]"},
        "passages": {"0": [{"is_selected": 1, "passage_text": "t", "url": "u"}], "1": [], "2": []},
    }
    p = tmp_path / "dev_v2.1.json.gz"
    with gzip.open(p, "wt", encoding="utf-8") as fh:
        json.dump(data, fh)
    recs = list(P.parse_msmarco(p))
    assert [r["id"] for r in recs] == ["1102432", "19699", "5"]
    assert recs[0]["targets"] == ["The immediate impact was X."]
    assert recs[0]["meta"]["answer_source"] == "answers"
    assert recs[1]["targets"] == ["RBA stands for Results-Based Accountability."]
    assert recs[1]["meta"]["answer_source"] == "wellFormedAnswers"
    assert recs[2]["targets"] == ["No Answer Present."] and recs[2]["meta"]["no_answer"] is True
    assert [r["id"] for r in P.parse_msmarco(p, well_formed_only=True)] == ["19699"]
    del data["answers"]["1"]
    q = _write(tmp_path / "broken.json", json.dumps(data))
    with pytest.raises(DataError, match=r"broken\.json: row '1': missing in column 'answers'"):
        list(P.parse_msmarco(q))


def test_jeopardy_jsonl_searchqa_file_and_dir(tmp_path):
    p = _jsonl(tmp_path / "jeopardy.jsonl", [
        {"question": "For the last 8 years of his life, Galileo was under house arrest for espousing this man's theory",
         "answer": "Copernicus", "category": "HISTORY"},
    ])
    (rec,) = P.parse_jeopardy(p, id_prefix="jeopardy-train")
    assert rec["input"] == "Copernicus" and rec["targets"][0].startswith("For the last 8 years")
    assert rec["id"] == "jeopardy-train-0" and rec["meta"] == {"category": "HISTORY"}
    d = tmp_path / "searchqa"
    d.mkdir()
    sq = {"category": "ESPN's TOP 10", "air_date": "2004-12-31", "question": "No. 2: 1912 Olympian",
          "value": "$200", "answer": "Jim Thorpe", "round": "Jeopardy!", "show_number": "4680",
          "search_results": [{"urls": "u", "snippets": "s", "titles": "t", "related_links": None}]}
    (d / "b.json").write_text(json.dumps(sq, indent=2))
    (d / "a.json").write_text(json.dumps(dict(sq, answer="Copernicus")))
    recs = list(P.parse_jeopardy(d))
    assert [r["input"] for r in recs] == ["Copernicus", "Jim Thorpe"]
    assert recs[1]["meta"]["show_number"] == "4680"
    bad = _jsonl(tmp_path / "bad.jsonl", [{"question": "q", "answer": "a"}, {"question": "q"}])
    with pytest.raises(DataError, match=r"bad\.jsonl:2: missing field 'answer'"):
        list(P.parse_jeopardy(bad))


FEVER_ROWS = [
    {"id": 75397, "verifiable": "VERIFIABLE", "label": "SUPPORTS",
     "claim": "Nikolaj Coster-Waldau worked with the Fox Broadcasting Company.",
     "evidence": [[[92206, 104971, "Nikolaj_Coster-Waldau", 7], [92206, 104971, "Fox_Broadcasting_Company", 0]]]},
    {"id": 150448, "verifiable": "VERIFIABLE", "label": "REFUTES", "claim": "Roman Atwood is a content creator.",
     "evidence": [[[174271, 187498, "Roman_Atwood", 1]]]},
    {"id": 225709, "verifiable": "NOT VERIFIABLE", "label": "NOT ENOUGH INFO",
     "claim": "Ryan Gosling has been to a country in Africa.", "evidence": [[[269158, None, None, None]]]},
]


def test_fever_three_and_two_way(tmp_path):
    p = _jsonl(tmp_path / "paper_dev.jsonl", FEVER_ROWS)
    recs = list(P.parse_fever(p))
    assert [r["targets"] for r in recs] == [["SUPPORTS"], ["REFUTES"], ["NOT ENOUGH INFO"]]
    assert recs[0]["id"] == "75397"
    assert recs[0]["meta"]["evidence_pages"] == ["Nikolaj_Coster-Waldau", "Fox_Broadcasting_Company"]
    assert recs[2]["meta"] == {"verifiable": "NOT VERIFIABLE", "evidence_pages": []}
    assert [r["id"] for r in P.parse_fever(p, two_way=True)] == ["75397", "150448"]
    bad = _jsonl(tmp_path / "bad.jsonl", [dict(FEVER_ROWS[0], label="MAYBE")])
    with pytest.raises(DataError, match=r"bad\.jsonl:1: label must be one of"):
        list(P.parse_fever(bad))
    unlabelled = _jsonl(tmp_path / "test.jsonl", [{"id": 1, "claim": "c"}])
    with pytest.raises(DataError, match=r"test\.jsonl:1: missing field 'label'"):
        list(P.parse_fever(unlabelled))


# --------------------------------------------------------------------------- corpus


DPR_TSV = (
    "id\ttext\ttitle\n"
    '1\t"Aaron Aaron ( or ; ""Ahärôn"") is a prophet, high priest, and the brother of Moses"\tAaron\n'
    "2\tGod at Sinai granted Aaron the priesthood for himself\tAaron\n"
)


def test_dpr_passages_plain_and_gzip(tmp_path):
    p = _write(tmp_path / "psgs_w100.tsv", DPR_TSV)
    recs = list(P.parse_dpr_passages(p))
    assert recs[0] == {"id": "1", "title": "Aaron",
                       "text": 'Aaron Aaron ( or ; "Ahärôn") is a prophet, high priest, and the brother of Moses'}
    g = tmp_path / "psgs_w100.tsv.gz"
    g.write_bytes(gzip.compress(DPR_TSV.encode()))
    assert list(P.parse_dpr_passages(g)) == recs


def test_dpr_passages_truncated_gzip(tmp_path):
    body = DPR_TSV + "".join(f"{i}\tpassage number {i} " + "word " * 50 + "\tTitle\n" for i in range(3, 3000))
    blob = gzip.compress(body.encode())
    g = tmp_path / "psgs_w100.tsv.gz"
    g.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DataError, match=r"psgs_w100\.tsv\.gz:\d+: .*truncated"):
        list(P.parse_dpr_passages(g))


def test_dpr_passages_errors(tmp_path):
    p = _write(tmp_path / "noheader.tsv", "1\ttext\ttitle\n")
    with pytest.raises(DataError, match=r"noheader\.tsv:1: expected header"):
        list(P.parse_dpr_passages(p))
    p = _write(tmp_path / "missing.tsv", "id\ttext\ttitle\n1\tsome text\tT\n2\tno title column\n")
    with pytest.raises(DataError, match=r"missing\.tsv:3: expected 3 tab-separated columns"):
        list(P.parse_dpr_passages(p))
    p = _write(tmp_path / "dup.tsv", "id\ttext\ttitle\n1\ta\tT\n2\tb\tT\n1\tc\tT\n")
    with pytest.raises(DataError, match=r"dup\.tsv:4: duplicate passage id '1'"):
        list(P.parse_dpr_passages(p))
    p = _write(tmp_path / "quote.tsv", 'id\ttext\ttitle\n1\t"unterminated\tT\n')
    with pytest.raises(DataError, match=r"quote\.tsv:2: malformed quoted field"):
        list(P.parse_dpr_passages(p))
    p = _write(tmp_path / "headeronly.tsv", "id\ttext\ttitle\n")
    with pytest.raises(DataError, match=r"headeronly\.tsv: empty file"):
        list(P.parse_dpr_passages(p))


def test_corpus_tsv_and_jsonl(tmp_path):
    p = _write(tmp_path / "c.tsv", 'id\ttitle\ttext\nd1\tT "q"\tsome "quoted" text\nd2\tU\tmore\n')
    assert list(P.parse_corpus_tsv(p))[0] == {"id": "d1", "title": 'T "q"', "text": 'some "quoted" text'}
    j = _jsonl(tmp_path / "c.jsonl", [{"id": 7, "title": "T", "text": "x"}, {"id": "a", "title": "U", "text": "y"}])
    assert [r["id"] for r in P.parse_corpus_jsonl(j)] == ["7", "a"]
    dup = _jsonl(tmp_path / "dup.jsonl", [{"id": "a", "title": "T", "text": "x"}, {"id": "a", "title": "U", "text": "y"}])
    with pytest.raises(DataError, match=r"dup\.jsonl:2: duplicate passage id 'a'"):
        list(P.parse_corpus_jsonl(dup))
    wrong = _jsonl(tmp_path / "w.jsonl", [{"id": "a", "title": None, "text": "x"}])
    with pytest.raises(DataError, match=r"w\.jsonl:1: field 'title' must be str"):
        list(P.parse_corpus_jsonl(wrong))


def test_id_set_bitmap_and_strings():
    s = IdSet()
    assert s.add("21015324") and s.add("1") and s.add("01") and s.add("abc")
    assert not s.add("21015324") and not s.add("1") and not s.add("01") and not s.add("abc")


@pytest.mark.parametrize("parser", [P.parse_nq_open, P.parse_dpr_qa_csv, P.parse_curatedtrec, P.parse_fever,
                                    P.parse_corpus_tsv, P.parse_corpus_jsonl, P.parse_dpr_passages,
                                    P.parse_triviaqa, P.parse_webquestions, P.parse_msmarco, P.parse_jeopardy])
def test_empty_file_raises(tmp_path, parser):
    p = _write(tmp_path / "empty.txt", "")
    with pytest.raises(DataError, match=r"empty\.txt"):
        list(parser(p))


@pytest.mark.parametrize("parser, content", [
    (P.parse_nq_open, b'{"question": "ok", "answer": ["a"]}\n{"question": "caf\xe9", "answer": ["a"]}\n'),
    (P.parse_corpus_tsv, b"id\ttitle\ttext\nb\tB\tcaf\xe9\n"),
    (P.parse_dpr_qa_csv, b"q\t['a']\nq2\t['caf\xe9']\n"),
])
def test_non_utf8_raises_with_line(tmp_path, parser, content):
    # line 1 is valid in each format: the error must name line 2, where the bad byte is
    p = tmp_path / "latin1.txt"
    p.write_bytes(content)
    with pytest.raises(DataError, match=r"latin1\.txt:2: not valid UTF-8"):
        list(parser(p))


def test_non_utf8_json_document_raises(tmp_path):
    p = tmp_path / "latin1.txt"
    p.write_bytes(b'{"Data": [{"Question": "caf\xe9"}]}\n')
    with pytest.raises(DataError, match=r"latin1\.txt:1: not valid UTF-8"):
        list(P.parse_triviaqa(p))


def test_chunk_documents():
    text = " ".join(f"w{i}" for i in range(250))
    out = list(chunk_documents([("doc", "Title", text), ("empty", "E", "   ")]))
    assert [len(p["text"].split()) for p in out] == [100, 100, 50]
    assert [p["id"] for p in out] == ["doc_0", "doc_1", "doc_2"]
    assert out[1]["text"].split()[0] == "w100" and out[2]["text"].split()[-1] == "w249"
    assert all(p["title"] == "Title" for p in out)
    assert [len(p["text"].split()) for p in chunk_documents([("d", "T", text)], words=200)] == [200, 50]
    with pytest.raises(ConfigError):
        list(chunk_documents([("d", "T", text)], words=0))


# --------------------------------------------------------------------------- Table 7, prepare_task, CLI


def test_table7_and_check_counts(tmp_path):
    assert table7()["nq"] == {"train": 79169, "dev": 8758, "test": 3611}
    assert table7()["fever2"]["dev"] == 6666
    assert F.check_counts("nq", "test", 3611) is None
    # Table 7 is one more than DPR's files for every NQ / TriviaQA / WebQuestions split
    for task, split, n in (("nq", "test", 3610), ("triviaqa", "test", 11313), ("webquestions", "test", 2032),
                           ("nq", "train", 79168), ("webquestions", "dev", 361)):
        assert F.check_counts(task, split, n) is None, (task, split)
    msg = F.check_counts("nq", "test", 3609)
    assert "nq" in msg and "3609" in msg and "3611" in msg and "Table 7" in msg
    assert F.check_counts("curatedtrec", "test", 634) is not None  # the offset is not general
    assert F.check_counts("webquestions", "train", 2474) is not None  # biencoder file: a real difference
    with pytest.raises(ConfigError, match="unknown task"):
        F.prepare_task("nq_open", tmp_path / "nq.jsonl", tmp_path / "out.jsonl", "squad", "dev")
    with pytest.raises(ConfigError, match="unknown split"):
        F.prepare_task("nq_open", tmp_path / "nq.jsonl", tmp_path / "out.jsonl", "nq", "val")


def test_prepare_task_writes_jsonl_and_warns(tmp_path, caplog):
    src = _jsonl(tmp_path / "fever_dev.jsonl", FEVER_ROWS)
    out = tmp_path / "out" / "fever2-dev.jsonl"
    with caplog.at_level(logging.WARNING, logger="rag.data.formats"):
        n = F.prepare_task("fever", src, out, "fever2", "dev")
    assert n == 2
    rows = read_jsonl(out, required=("id", "input", "targets", "meta"))
    assert [r["targets"] for r in rows] == [["SUPPORTS"], ["REFUTES"]]
    assert any("Table 7" in r.message and "6666" in r.message for r in caplog.records)
    nq = _jsonl(tmp_path / "nq.jsonl", [{"question": "q1", "answer": ["a"]}, {"question": "q2", "answer": ["b"]}])
    F.prepare_task("nq_open", nq, tmp_path / "nq-train.jsonl", "nq", "train")
    assert [r["id"] for r in read_jsonl(tmp_path / "nq-train.jsonl")] == ["nq-train-0", "nq-train-1"]


def test_prepare_task_failure_leaves_no_output(tmp_path):
    src = _jsonl(tmp_path / "fever.jsonl", [FEVER_ROWS[0], {"id": 2, "claim": "c"}])
    out = tmp_path / "fever3-dev.jsonl"
    with pytest.raises(DataError, match=r"fever\.jsonl:2"):
        F.prepare_task("fever", src, out, "fever3", "dev")
    assert not out.exists()
    assert list(tmp_path.glob(".fever3-dev*")) == []
    dup = _jsonl(tmp_path / "dup.jsonl", [FEVER_ROWS[0], FEVER_ROWS[0]])
    with pytest.raises(DataError, match="duplicate example id '75397'"):
        F.prepare_task("fever", dup, out, "fever3", "dev")
    assert not out.exists()


def test_local_task_without_format_reads_the_registry_format(tmp_path):
    """tasks.nq: {source: local, files: ...} without format: the task's registry format (NQ-open
    jsonl) parses every split; the task's name is no format. fever2 without format gets its
    parser's options too (NOT ENOUGH INFO dropped)."""
    from rag.config import load_config, sections
    from rag.sections import DataSection
    from rag.stages.datasets import build_task
    from rag.tasks import TASKS

    assert TASKS["nq"].format == "nq_open" and "nq" not in F.PARSERS
    files = {split: str(_jsonl(tmp_path / f"NQ-open.{split}.jsonl", [
        {"question": f"who wrote {split} {i}", "answer": [f"Author {i}", "A."]} for i in range(2)])) for split in SPLITS}
    fever = {split: str(_jsonl(tmp_path / f"fever.{split}.jsonl", FEVER_ROWS)) for split in SPLITS}
    cfg = load_config({"tasks": {"nq": {"source": "local", "files": files},
                                 "fever2": {"source": "local", "files": fever}}}, check_files=False)
    for task, n in (("nq", 2), ("fever2", 2)):
        data = sections(cfg)[f"data_{task}"]
        assert "format" not in data["task"]
        outs = {split: tmp_path / "out" / task / f"{split}.jsonl" for split in SPLITS}
        build_task(DataSection.from_dict(data, f"data_{task}"), outs, cfg["tasks"][task]["files"])
        rows = read_jsonl(outs["test"])
        assert len(rows) == n
    assert rows[0]["targets"] == ["SUPPORTS"] and rows[1]["targets"] == ["REFUTES"]
    rows = read_jsonl(tmp_path / "out" / "nq" / "dev.jsonl")
    assert rows[1] == {"id": "nq-dev-1", "input": "who wrote dev 1", "targets": ["Author 1", "A."], "meta": {}}


def test_cli_prepare_task(tmp_path, capsys):
    from rag.cli import main

    src = _write(tmp_path / "ct.qa.csv", "q one\t['a|b']\nq two\t['c']\n")
    out = tmp_path / "ct.jsonl"
    rc = main(["prepare-task", "--format", "dpr_qa_csv", "--input", str(src), "--output", str(out),
               "--task", "curatedtrec", "--split", "test"])
    assert rc == 0
    assert [r["targets"] for r in read_jsonl(out)] == [["a|b"], ["c"]]
    bad = _write(tmp_path / "bad.qa.csv", "q one\n")
    rc = main(["prepare-task", "--format", "dpr_qa_csv", "--input", str(bad), "--output", str(tmp_path / "x.jsonl"),
               "--task", "curatedtrec", "--split", "test"])
    assert rc == 2
    assert "bad.qa.csv:1:" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_cli_prepare_corpus(tmp_path):
    from rag.cli import main

    src = _write(tmp_path / "psgs_w100.tsv", DPR_TSV)
    out = tmp_path / "passages.tsv"
    assert main(["prepare-corpus", "--format", "dpr_tsv", "--input", str(src), "--output", str(out)]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "id\ttitle\ttext"
    assert lines[1] == '1\tAaron\tAaron Aaron ( or ; "Ahärôn") is a prophet, high priest, and the brother of Moses'
    assert list(P.parse_corpus_tsv(out))[1]["id"] == "2"

    docs = _jsonl(tmp_path / "docs.jsonl", [
        {"id": "D1", "title": "Tab\tTitle", "text": " ".join(["x"] * 250)},
        {"id": "D2", "title": "T2", "text": "line one\nline two"},
    ])
    out2 = tmp_path / "p2.tsv"
    assert main(["prepare-corpus", "--format", "documents", "--input", str(docs), "--output", str(out2),
                 "--words", "100"]) == 0
    recs = list(P.parse_corpus_tsv(out2))
    assert [r["id"] for r in recs] == ["D1_0", "D1_1", "D1_2", "D2_0"]
    assert recs[0]["title"] == "Tab Title" and recs[3]["text"] == "line one line two"
    assert [len(r["text"].split()) for r in recs[:3]] == [100, 100, 50]


def test_dpr_biencoder_json_gz(tmp_path):
    import gzip
    import json

    from rag.data.parsers import parse_dpr_biencoder

    p = tmp_path / "biencoder-webquestions-train.json.gz"
    rows = [{"dataset": "webq", "question": "what is the capital of france?", "answers": ["Paris", "Paris"],
             "positive_ctxs": [], "negative_ctxs": [], "hard_negative_ctxs": []},
            {"question": "who wrote hamlet?", "answers": ["William Shakespeare"]}]
    with gzip.open(p, "wt", encoding="utf-8") as fh:
        json.dump(rows, fh)
    got = list(parse_dpr_biencoder(p, id_prefix="wq-train"))
    assert got[0] == {"id": "wq-train-0", "input": "what is the capital of france?", "targets": ["Paris"], "meta": {}}
    assert got[1]["targets"] == ["William Shakespeare"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"question": "q"}]))
    with pytest.raises(DataError, match=r"bad.json: \[0\]: missing field 'answers'"):
        list(parse_dpr_biencoder(bad))


def test_one_passage_writer_and_reader(tmp_path):
    """write_passages cleans tabs and line breaks only; every reader of passages.tsv (read_passages,
    the corpus tsv format) reads what it wrote, quotes literally."""
    from rag.data.corpus import read_passages, write_passages

    out = tmp_path / "passages.tsv"
    rows = [("a_0", 'T "q"', '"quoted" start\tand\r\nbreaks'), {"id": "7", "title": "U", "text": "two  spaces kept"}]
    assert write_passages(out, rows) == 2
    p = read_passages(out)
    assert p.ids == ["a_0", "7"] and p.titles == ['T "q"', "U"]
    assert p.texts == ['"quoted" start and  breaks', "two  spaces kept"]
    assert [r["text"] for r in P.parse_corpus_tsv(out)] == p.texts
    with pytest.raises(DataError, match="duplicate passage id 'a_0'"):
        write_passages(tmp_path / "dup.tsv", [("a_0", "T", "x"), ("a_0", "T", "y")])
