"""Strict parsers of the official dataset formats into the project's common records.

A format is named after its parser, a generator ``parse_<format>(path, ...)`` (:data:`PARSERS`;
the corpus formats: :data:`CORPUS_FORMATS`). A task record is ``{"id": str, "input": str,
"targets": [str, ...], "meta": {...}}`` (FEVER's targets ``[label]``, CuratedTrec's regular
expressions), a corpus record ``{"id": str, "title": str, "text": str}``. A malformed record or
an empty file raises :class:`DataError` naming ``file:line`` (or the record's position in a JSON
document); sources without ids get ``f"{id_prefix}-{n}"`` (n from 0).
"""

from __future__ import annotations

import ast
import csv
import inspect
import json
import logging
import re
from pathlib import Path
from typing import Any, Callable, Iterator

from rag.data.corpus import IdSet, check_passage, chunk_documents, iter_passages
from rag.errors import ConfigError, DataError
from rag.io import iter_jsonl, iter_lines, json_object, read_json
from rag.tasks import FEVER3_LABELS

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- helpers


def _default_prefix(path: Path) -> str:
    name = Path(path).name
    for suffix in (".gz", ".jsonl", ".json", ".tsv", ".csv", ".txt"):
        name = name.removesuffix(suffix)
    return name


def _require(obj: dict, key: str, kind: type | tuple, where: str, what: str = "field") -> Any:
    if key not in obj:
        raise DataError(f"{where}: missing {what} {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise DataError(f"{where}: {what} {key!r} must be {names}, got {type(value).__name__}")
    return value


def _str_list(value: Any, where: str, name: str, nonempty: bool = True) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(f"{where}: {name!r} must be a list of strings, got {value!r:.80}")
    if nonempty and not value:
        raise DataError(f"{where}: {name!r} is empty (no answers)")
    return value


def _question(value: str, where: str, name: str = "question") -> str:
    """A question/input string: refused when empty or whitespace only."""
    if not value.strip():
        raise DataError(f"{where}: empty {name}")
    return value


def _targets(values: Any, where: str, name: str) -> list[str]:
    """Gold answers: a non-empty list of strings none empty or whitespace only, deduplicated in order."""
    for i, v in enumerate(_str_list(values, where, name)):
        if not v.strip():
            raise DataError(f"{where}: {name!r}[{i}] is an empty answer")
    return list(dict.fromkeys(values))


def _example_objects(path: Path, label: str) -> Iterator[tuple[int, str, dict]]:
    """(index, where, object) of a JSON file that is a list of example objects, strictly: a
    non-empty list, each item an object (``where``: ``<path>: <label>[i]``)."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of examples, got {type(data).__name__}")
    if not data:
        raise DataError(f"{path}: empty list (no records)")
    yield from _objects(data, path, label)


def _objects(items: list, path: Path, label: str) -> Iterator[tuple[int, str, dict]]:
    """(index, where, object) of each item of ``items``, which must be an object (``where``:
    ``<path>: <label>[i]``)."""
    for i, item in enumerate(items):
        where = f"{path}: {label}[{i}]"
        if not isinstance(item, dict):
            raise DataError(f"{where}: expected an object, got {type(item).__name__}")
        yield i, where, item


def _tsv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(lineno, fields) of a tab-separated file with csv-style double quotes."""
    for lineno, line in iter_lines(path):
        try:
            row = next(csv.reader([line], delimiter="\t", strict=True), [])
        except csv.Error as exc:
            raise DataError(f"{path}:{lineno}: malformed quoted field ({exc})") from None
        yield lineno, row


# --------------------------------------------------------------------------- QA tasks


def parse_nq_open(path: Path, id_prefix: str | None = None) -> Iterator[dict]:
    """NQ-open jsonl ``{"question": str, "answer": [str, ...]}`` (google-research-datasets/natural-questions)."""
    prefix = id_prefix or _default_prefix(path)
    for n, (lineno, obj) in enumerate(iter_jsonl(path)):
        where = f"{path}:{lineno}"
        question = _question(_require(obj, "question", str, where), where)
        answers = _require(obj, "answer", list, where)
        rid = obj.get("id")
        yield {
            "id": str(rid) if rid is not None else f"{prefix}-{n}",
            "input": question,
            "targets": _targets(answers, where, "answer"),
            "meta": {},
        }


def parse_dpr_qa_csv(path: Path, id_prefix: str | None = None) -> Iterator[dict]:
    """DPR ``*.qa.csv``: ``question<TAB>['answer', ...]`` without header (nq/trivia/webq/curatedtrec), read
    as DPR does (``csv.reader(delimiter="\\t")``, the answers a Python literal)."""
    path = Path(path)
    prefix = id_prefix or _default_prefix(path)
    n = 0
    for lineno, row in _tsv_rows(path):
        where = f"{path}:{lineno}"
        if len(row) != 2:
            raise DataError(f"{where}: expected 2 tab-separated columns (question, answer list), got {len(row)}")
        question, literal = _question(row[0], where), row[1]
        try:
            answers = ast.literal_eval(literal)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError) as exc:
            raise DataError(f"{where}: answer column is not a Python list literal ({type(exc).__name__}): {literal!r:.80}") from None
        yield {"id": f"{prefix}-{n}", "input": question, "targets": _targets(answers, where, "answers"), "meta": {}}
        n += 1
    if n == 0:
        raise DataError(f"{path}: empty file (no records)")


def parse_dpr_biencoder(path: Path, id_prefix: str | None = None) -> Iterator[dict]:
    """DPR's ``biencoder-*-{train,dev}.json(.gz)``: a JSON list of ``{"question", "answers", ...}``
    (the only published train/dev split of WebQuestions and CuratedTrec; CT answers are regexes)."""
    path = Path(path)
    prefix = id_prefix or _default_prefix(path)
    for i, where, item in _example_objects(path, ""):
        question = _question(_require(item, "question", str, where), where)
        answers = _require(item, "answers", list, where)
        yield {"id": f"{prefix}-{i}", "input": question, "targets": _targets(answers, where, "answers"), "meta": {}}


def parse_jsonl(path: Path, id_prefix: str | None = None) -> Iterator[dict]:
    """The project's own task format (bring your own task): ``{"id", "input", "targets": [...], "meta"?}``."""
    from rag.io import read_jsonl

    path = Path(path)
    for lineno, row in enumerate(read_jsonl(path, required=("input", "targets")), start=1):
        where = f"{path}:{lineno}"
        if not isinstance(row["input"], str) or not row["input"].strip():
            raise DataError(f"{where}: 'input' must be a non-empty string")
        targets = _targets(row["targets"], where, "targets")
        rid = row.get("id", f"{id_prefix or _default_prefix(path)}-{lineno - 1}")
        if not isinstance(rid, (str, int)) or isinstance(rid, bool):
            raise DataError(f"{where}: 'id' must be a string or integer")
        meta = row.get("meta", {})
        if not isinstance(meta, dict):
            raise DataError(f"{where}: 'meta' must be an object")
        yield {"id": str(rid), "input": row["input"], "targets": targets, "meta": meta}


def parse_triviaqa(path: Path, id_prefix: str | None = None) -> Iterator[dict]:
    """TriviaQA (unfiltered or rc) JSON ``{"Data": [{"Question", "QuestionId", "Answer": {"Value", "Aliases"}}]}``;
    targets = Answer.Value + Answer.Aliases, deduplicated in order."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object with key 'Data', got {type(data).__name__}")
    items = _require(data, "Data", list, f"{path}", "top-level key")
    if not items:
        raise DataError(f"{path}: 'Data' is empty (no records)")
    for _, where, item in _objects(items, path, "Data"):
        question = _question(_require(item, "Question", str, where), where, "'Question'")
        qid = _require(item, "QuestionId", str, where)
        if "Answer" not in item:
            raise DataError(f"{where}: missing field 'Answer' (a test file without answers cannot be used)")
        answer = _require(item, "Answer", dict, where)
        value = _require(answer, "Value", str, where + ".Answer")
        aliases = _str_list(answer.get("Aliases", []), where + ".Answer", "Aliases", nonempty=False)
        meta = {}
        if "NormalizedAliases" in answer:
            meta["normalized_aliases"] = _str_list(answer["NormalizedAliases"], where + ".Answer", "NormalizedAliases", nonempty=False)
        yield {"id": qid, "input": question, "targets": _targets([value, *aliases], where + ".Answer", "Value/Aliases"), "meta": meta}


_WQ_ITEM = re.compile(r"\(description (.+?)\)(?=\s*\(description |\s*$)", re.DOTALL)


def webquestions_answers(target_value: str) -> list[str]:
    """Descriptions from a WebQuestions ``targetValue`` such as ``(list (description "A B") (description C))``.

    As DrQA's ``scripts/convert/webquestions.py`` (real files hold unescaped inner quotes), an item
    runs from ``(description `` to the ``)`` before the next ``(description`` or the end of the
    list, and its double quotes are dropped.
    """
    text = target_value.strip()
    if not (text.startswith("(list") and text.endswith(")")):
        raise ValueError("targetValue is not a (list ...) expression")
    body = text[len("(list"):-1].strip()
    answers, pos = [], 0
    while pos < len(body):
        m = _WQ_ITEM.match(body, pos)
        if not m:
            raise ValueError(f"unexpected text at {pos}: {body[pos:pos + 30]!r} (expected (description ...))")
        item = m.group(1).strip()
        if len(item) >= 2 and item[0] == item[-1] == '"':
            item = re.sub(r"\\(.)", r"\1", item[1:-1])
        answer = " ".join(item.replace('"', "").split())
        if not answer:
            raise ValueError(f"empty description at {pos}")
        answers.append(answer)
        pos = m.end()
        while pos < len(body) and body[pos].isspace():
            pos += 1
    if not answers:
        raise ValueError("targetValue lists no answers")
    return answers


def parse_webquestions(path: Path, id_prefix: str | None = None) -> Iterator[dict]:
    """WebQuestions JSON (list of {url, targetValue, utterance}); answers from the targetValue s-expression
    (:func:`webquestions_answers`)."""
    path = Path(path)
    prefix = id_prefix or _default_prefix(path)
    for i, where, item in _example_objects(path, "example "):
        question = _question(_require(item, "utterance", str, where), where, "'utterance'")
        target = _require(item, "targetValue", str, where)
        try:
            answers = webquestions_answers(target)
        except ValueError as exc:
            raise DataError(f"{where}: bad targetValue {target!r:.80}: {exc}") from None
        meta = {"url": item["url"]} if isinstance(item.get("url"), str) else {}
        yield {"id": f"{prefix}-{i}", "input": question, "targets": _targets(answers, where, "targetValue"), "meta": meta}


def check_regex_targets(patterns: list[str], where: str) -> None:
    """Refuse (DataError naming ``where``) a CuratedTrec answer pattern that Python's ``re`` cannot compile."""
    from rag.scoring.answer_match import compile_regex

    for pattern in patterns:
        try:
            compile_regex(pattern)
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from None


def parse_curatedtrec(path: Path, id_prefix: str | None = None) -> Iterator[dict]:
    """CuratedTrec in the layout of its first line: DrQA's JSON lines ``{"question", "answer": [regex, ...]}``,
    the curators' TSV ``id<TAB>type<TAB>question<TAB>regex`` (brmson/dataset-factoid-curated; the type goes
    to ``meta["type"]``) or a 2-column TSV ``question<TAB>regex``; every regex must compile."""
    path = Path(path)
    prefix = id_prefix or _default_prefix(path)
    layout = None
    n = 0
    seen_ids: set[str] = set()
    for lineno, line in iter_lines(path):
        where = f"{path}:{lineno}"
        if not line.strip():
            raise DataError(f"{where}: empty line")
        if line.lstrip().startswith("{"):
            this = "json"
        else:
            cols = len(line.split("\t"))
            this = {2: "tsv2", 4: "tsv4"}.get(cols)
            if this is None:
                raise DataError(
                    f"{where}: expected 2 tab-separated columns (question, regex) or 4 (id, type, question, regex; "
                    f"the curators' curated-*.tsv), got {cols}")
        layout = layout or this
        if this != layout:
            names = {"json": "JSON", "tsv2": "2-column TSV", "tsv4": "4-column TSV"}
            raise DataError(f"{where}: {names[this]} line in a {names[layout]} CuratedTrec file (layout set by line 1)")
        rid, meta = f"{prefix}-{n}", {"regex": True}
        if layout == "json":
            obj = json_object(line, where)
            question = _require(obj, "question", str, where)
            patterns = _str_list(_require(obj, "answer", list, where), where, "answer")
        elif layout == "tsv2":
            question, pattern = line.split("\t")
            patterns = [pattern]
        else:
            qid, qtype, question, pattern = line.split("\t")
            if not qid.strip():
                raise DataError(f"{where}: empty id (column 1)")
            if qid in seen_ids:
                raise DataError(f"{where}: duplicate id {qid!r} (column 1)")
            seen_ids.add(qid)
            rid, patterns = qid, [pattern]
            meta["type"] = qtype
        question = _question(question, where)
        patterns = _targets(patterns, where, "answer regex")
        check_regex_targets(patterns, where)
        yield {"id": rid, "input": question, "targets": patterns, "meta": meta}
        n += 1
    if n == 0:
        raise DataError(f"{path}: empty file (no records)")


def parse_msmarco(path: Path, id_prefix: str | None = None, well_formed_only: bool = False) -> Iterator[dict]:
    """MS MARCO QnA v2.1: one JSON object of columns (``query``, ``query_id``, ``answers``,
    ``wellFormedAnswers``, ``query_type``) keyed by row number strings, optionally gzipped.

    Targets are the ``wellFormedAnswers`` when the row has some (the column holds the string
    ``"[]"`` when it has none), else the ``answers``. Rows answered ``["No Answer Present."]`` are
    kept and marked ``meta["no_answer"] = True``. With ``well_formed_only`` only rows with
    well-formed answers are yielded (the NLGEN subset, the size of Table 7's training split).
    """
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a column-oriented JSON object (MS MARCO v2.1), got {type(data).__name__}")
    queries = _require(data, "query", dict, f"{path}", "column")
    if "answers" not in data:
        raise DataError(f"{path}: missing column 'answers' (the public eval file has no answers)")
    answers_col = _require(data, "answers", dict, f"{path}", "column")
    ids_col = _require(data, "query_id", dict, f"{path}", "column")
    wf_col = data.get("wellFormedAnswers", {})
    types_col = data.get("query_type", {})
    if not isinstance(wf_col, dict) or not isinstance(types_col, dict):
        raise DataError(f"{path}: columns 'wellFormedAnswers' and 'query_type' must be objects keyed by row")
    if not queries:
        raise DataError(f"{path}: column 'query' is empty (no records)")
    n = 0
    for key, query in queries.items():
        where = f"{path}: row {key!r}"
        if not isinstance(query, str):
            raise DataError(f"{where}: 'query' must be a string, got {type(query).__name__}")
        if key not in answers_col:
            raise DataError(f"{where}: missing in column 'answers'")
        if key not in ids_col:
            raise DataError(f"{where}: missing in column 'query_id'")
        answers = _str_list(answers_col[key], where, "answers")
        well_formed = wf_col.get(key, "[]")
        if well_formed == "[]" or well_formed == []:
            well_formed = []
        else:
            well_formed = _str_list(well_formed, where, "wellFormedAnswers")
        if well_formed_only and not well_formed:
            continue
        no_answer = answers == ["No Answer Present."]
        qid = ids_col[key]
        if not isinstance(qid, (int, str)) or isinstance(qid, bool):
            raise DataError(f"{where}: 'query_id' must be an integer, got {type(qid).__name__}")
        meta = {
            "answer_source": "wellFormedAnswers" if well_formed else "answers",
            "no_answer": no_answer and not well_formed,
        }
        if isinstance(types_col.get(key), str):
            meta["query_type"] = types_col[key]
        yield {"id": str(qid), "input": query, "targets": list(dict.fromkeys(well_formed or answers)), "meta": meta}
        n += 1
    if n == 0:
        raise DataError(f"{path}: no rows with well-formed answers" if well_formed_only else f"{path}: no records")


_HTML_TAG = re.compile(r"<[^>]*>")


def clean_jeopardy_text(text: str) -> str:
    """A J! Archive clue or answer as SearchQA has it: HTML tags removed, whitespace collapsed, the
    raw dump's wrapping single quotes dropped; clean text (SearchQA's own files) is unchanged."""
    text = " ".join(_HTML_TAG.sub(" ", text).split())
    if len(text) >= 2 and text[0] == text[-1] == "'":
        text = text[1:-1].strip()
    return text


def _jeopardy_record(obj: Any, where: str, fallback_id: str) -> dict:
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    question = clean_jeopardy_text(_require(obj, "question", str, where))
    answer = clean_jeopardy_text(_require(obj, "answer", str, where))
    if not answer.strip() or not question.strip():
        raise DataError(f"{where}: empty 'question' or 'answer'")
    meta = {k: obj[k] for k in ("category", "air_date", "value", "round", "show_number") if k in obj}
    rid = obj.get("id")
    return {"id": str(rid) if rid is not None else fallback_id, "input": answer, "targets": [question], "meta": meta}


def parse_jeopardy(path: Path, id_prefix: str | None = None) -> Iterator[dict]:
    """Jeopardy question generation (SearchQA-derived): input = answer entity, target = question.

    Accepts JSON lines of ``{"question", "answer", ...}``, one SearchQA JSON file (an object
    with ``question``/``answer``/``search_results``), a JSON list of such objects (e.g. the raw
    J! Archive dump ``JEOPARDY_QUESTIONS1.json`` SearchQA links to), or a directory of SearchQA
    ``*.json`` files (read in sorted name order), each text through :func:`clean_jeopardy_text`.
    """
    path = Path(path)
    prefix = id_prefix or _default_prefix(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))
        if not files:
            raise DataError(f"{path}: directory holds no .json files")
        for f in files:
            yield from parse_jeopardy(f, id_prefix=f"{prefix}-{_default_prefix(f)}")
        return
    # JSON lines if the first line is a complete JSON object; otherwise one JSON document.
    first = next((line for _, line in iter_lines(path) if line.strip()), None)
    if first is None:
        raise DataError(f"{path}: empty file (no records)")
    try:
        first_obj = json.loads(first)
    except json.JSONDecodeError:
        first_obj = None
    if isinstance(first_obj, dict):
        for n, (lineno, obj) in enumerate(iter_jsonl(path)):
            yield _jeopardy_record(obj, f"{path}:{lineno}", f"{prefix}-{n}")
        return
    data = read_json(path)
    if isinstance(data, dict):
        yield _jeopardy_record(data, f"{path}", f"{prefix}-0")
    elif isinstance(data, list):
        if not data:
            raise DataError(f"{path}: empty list (no records)")
        for i, obj in enumerate(data):
            yield _jeopardy_record(obj, f"{path}: item [{i}]", f"{prefix}-{i}")
    else:
        raise DataError(f"{path}: expected JSON object(s), got {type(data).__name__}")


def _evidence_pages(evidence: Any, where: str) -> list[str]:
    """Wikipedia page titles named in FEVER evidence ``[[[annotation_id, evidence_id, page, line], ...], ...]``."""
    if not isinstance(evidence, list):
        raise DataError(f"{where}: 'evidence' must be a list of evidence sets, got {type(evidence).__name__}")
    pages = []
    for eset in evidence:
        if not isinstance(eset, list):
            raise DataError(f"{where}: each evidence set must be a list, got {type(eset).__name__}")
        for item in eset:
            if not isinstance(item, list) or len(item) != 4:
                raise DataError(f"{where}: each evidence item must be [annotation_id, evidence_id, page, line], got {item!r:.80}")
            page = item[2]
            if page is not None and not isinstance(page, str):
                raise DataError(f"{where}: evidence page must be a string or null, got {page!r:.80}")
            if page is not None:
                pages.append(page)
    return list(dict.fromkeys(pages))


def parse_fever(path: Path, two_way: bool = False, id_prefix: str | None = None) -> Iterator[dict]:
    """FEVER jsonl ``{"id", "verifiable", "label", "claim", "evidence"}``; targets = [label].
    ``two_way`` drops NOT ENOUGH INFO claims (FEVER-2, logged)."""
    path = Path(path)
    n = dropped = 0
    for lineno, obj in iter_jsonl(path):
        where = f"{path}:{lineno}"
        rid = _require(obj, "id", (int, str), where)
        claim = _require(obj, "claim", str, where)
        if "label" not in obj:
            raise DataError(f"{where}: missing field 'label' (unlabelled test file?)")
        label = _require(obj, "label", str, where)
        if label not in FEVER3_LABELS:
            raise DataError(f"{where}: label must be one of {', '.join(FEVER3_LABELS)}, got {label!r}")
        meta = {}
        if "verifiable" in obj:
            meta["verifiable"] = _require(obj, "verifiable", str, where)
        if "evidence" in obj:
            meta["evidence_pages"] = _evidence_pages(obj["evidence"], where)
        if two_way and label == "NOT ENOUGH INFO":
            dropped += 1
            continue
        n += 1
        yield {"id": str(rid), "input": claim, "targets": [label], "meta": meta}
    if two_way:
        log.info("%s: FEVER-2: dropped %d NOT ENOUGH INFO claims, kept %d", path, dropped, n)
        if n == 0:
            raise DataError(f"{path}: no SUPPORTS/REFUTES claims left for the 2-way task")


# --------------------------------------------------------------------------- corpus


def parse_dpr_passages(path: Path) -> Iterator[dict]:
    """DPR ``psgs_w100.tsv`` (optionally .gz): header ``id\\ttext\\ttitle``, csv-quoted fields (a text
    with quotes is enclosed in ``"..."``, inner quotes doubled)."""
    path = Path(path)
    seen = IdSet()
    n = 0
    for lineno, row in _tsv_rows(path):
        if lineno == 1:
            if row != ["id", "text", "title"]:
                raise DataError(f"{path}:1: expected header 'id<TAB>text<TAB>title', got {'<TAB>'.join(row)!r:.80}")
            continue
        if len(row) != 3:
            raise DataError(f"{path}:{lineno}: expected 3 tab-separated columns (id, text, title), got {len(row)}")
        pid, text, title = row
        check_passage(f"{path}:{lineno}", seen, pid, text)
        yield {"id": pid, "title": title, "text": text}
        n += 1
    if n == 0:
        raise DataError(f"{path}: empty file (no passages)")


def parse_corpus_tsv(path: Path) -> Iterator[dict]:
    """Plain TSV ``id<TAB>title<TAB>text``, the layout of ``passages.tsv`` (optional header, no quoting)."""
    for _, pid, title, text in iter_passages(path, header=None):
        yield {"id": pid, "title": title, "text": text}


def parse_corpus_jsonl(path: Path) -> Iterator[dict]:
    """JSON lines ``{"id", "title", "text"}`` (id may be an integer)."""
    path = Path(path)
    seen = IdSet()
    for lineno, obj in iter_jsonl(path):
        where = f"{path}:{lineno}"
        pid = _require(obj, "id", (str, int), where)
        title = _require(obj, "title", str, where)
        text = _require(obj, "text", str, where)
        check_passage(where, seen, str(pid), text)
        yield {"id": str(pid), "title": title, "text": text}


# format name -> parser: a format is named after its parser (parse_<format>)
PARSERS: dict[str, Callable[..., Iterator[dict]]] = {
    parser.__name__.removeprefix("parse_"): parser
    for parser in (parse_nq_open, parse_dpr_qa_csv, parse_dpr_biencoder, parse_jsonl, parse_triviaqa, parse_webquestions,
                   parse_curatedtrec, parse_msmarco, parse_jeopardy, parse_fever)
}


def parser(fmt: str, key: str = "format") -> Callable[..., Iterator[dict]]:
    """The parser of format ``fmt``: a name of :data:`PARSERS`, or the user's function named by
    ``"path/to/file.py:function"`` / ``"module:function"`` (rag.tasks.load_object; ``key``: the config
    key naming it, for errors)."""
    from rag.tasks import load_object

    if fmt in PARSERS:
        return PARSERS[fmt]
    if ":" not in fmt:
        raise ConfigError(f"config key '{key}': unknown format {fmt!r} (known: {', '.join(PARSERS)}; or "
                          f"\"path/to/file.py:function\", a parser of your own)")
    func = load_object(fmt, key)
    if not callable(func):
        raise ConfigError(f"config key '{key}': {fmt} is not a function")
    return func


def takes_option(fmt: str, option: str) -> bool:
    """Does the parser of format ``fmt`` take the keyword option ``option`` (e.g. ``well_formed_only``)?"""
    return fmt in PARSERS and option in inspect.signature(PARSERS[fmt]).parameters


CORPUS_PARSERS = {"dpr_tsv": parse_dpr_passages, "tsv": parse_corpus_tsv, "jsonl": parse_corpus_jsonl}
CORPUS_FORMATS = (*CORPUS_PARSERS, "documents")  # documents: jsonl articles, cut into passages


def corpus_passages(fmt: str, src: Path, words: int = 100) -> Iterator[dict]:
    """The passages ({id, title, text}) of the corpus file ``src`` in format ``fmt``, in order, as
    ``passages.tsv`` will hold them; ``documents`` = jsonl {id,title,text} split into ``words``-word
    passages."""
    if fmt == "documents":
        return chunk_documents(((d["id"], d["title"], d["text"]) for d in parse_corpus_jsonl(src)), words=words)
    if fmt not in CORPUS_PARSERS:
        raise ConfigError(f"format: unknown corpus format {fmt!r} (known: {', '.join(CORPUS_FORMATS)})")
    return CORPUS_PARSERS[fmt](Path(src))
