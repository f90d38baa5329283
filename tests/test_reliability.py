"""Reliability: bad input, hostile input and property tests. ``pytest -m reliability``.

The DAG fault tests (kill and resume, determinism) are in ``test_reliability_dag.py``, the
concurrent-tracking and store tests in ``test_reliability_tracking.py``, the fine-tune run tests
in ``test_reliability_runs.py`` (its own table); this table covers the first three files.

Fault / bad input tried                          | what the harness does (and the test checking it)
------------------------------------------------ | ------------------------------------------------------------------
DAG: SIGTERM to snakemake's process group after  | the killed ``rag train`` dies mid-run; its model dir is never
  ``rag train`` wrote checkpoint.pt, before it   | created (atomic_dir), checkpoint.pt (atomic rename) survives.
  wrote its model                                | A plain re-run completes (snakemake cleaned up on SIGTERM); the
                                                 | job logs "resumed from .../checkpoint.pt at step N" (0 < N < 60);
                                                 | metrics, retrieval, predictions (doc ids, p(z|x)) and the per-step
                                                 | losses equal the uninterrupted run's.
DAG: SIGKILL to the whole process group          | stale snakemake lock: the re-run needs ``snakemake --unlock`` first
                                                 | (not --rerun-incomplete: the killed output never existed); then as
                                                 | above: resumed at step N, identical results.
DAG: either kill                                 | SIGTERM: the killed attempt's MLflow run is FAILED (``rag`` exits
                                                 | through SystemExit); SIGKILL: the re-run ends it KILLED; the re-run
                                                 | logs to a new run
DAG: the same config run twice from scratch      | identical metrics, retrieval, predictions and loss curves; nothing
                                                 | forced (seeded, 1 torch thread per job, deterministic CPU kernels)
Tracking: 8 processes create runs in one fresh   | all 8 runs, 8x params, 50-point curves, metrics and artifacts are
  sqlite store (after init_store), same          | there; PRAGMA integrity_check ok. Found: concurrent creation of
  experiment                                     | the same experiment failed in the loser (RESOURCE_ALREADY_EXISTS,
                                                 | UNIQUE constraint) -- it also broke parallel ``rag train`` jobs of
                                                 | one task in a real DAG run; fixed in rag/tracking.py
                                                 | (_experiment_id: create, on "already exists" read it back).
Tracking: 4 processes log to ``mlflow server``   | all runs, curves, metrics and artifacts present, artifacts proxied
  (cluster mode)                                 | by the server; server's process group (workers, huey) killed.
Config: wrong type (train.steps: "many")         | load_config: ConfigError "config key 'train.steps': expected integer"
Config: unknown key (train.stepz)                | ConfigError "unknown config key 'train.stepz'"
Config: unknown task (tasks.squad)               | ConfigError naming 'tasks' and 'squad'
Config: impossible K (train.k > passages)        | ConfigError naming 'train.k'
Config: miniworld.people < 2 x countries         | ConfigError naming 'miniworld.people' (config.py checks it before
                                                 | ``rag tasks`` would need a leader per country)
Config via ``snakemake -n`` (the 4 above)        | exit 1, no Python traceback; impossible K: one line
                                                 | "error: config key 'train.k': ..." on stderr; schema-level errors
                                                 | (type / unknown key / unknown task) too: common.smk validates with
                                                 | rag.config.load_config only.
Data: truncated gzip                             | DataError "<file>:<line>: unreadable (EOFError ...); truncated or
                                                 | corrupt file?"; CLI exit 2, no output file, no temp file left.
Data: TSV line with 2 of 3 columns               | DataError "<file>:<line>: expected 3 tab-separated columns ..."
Data: non-UTF-8 bytes on line 397 (past the 8KiB | DataError "<file>:397: not valid UTF-8 ..." -- the exact line
  read buffer)                                   | (rag.io.iter_lines decodes line by line)
Data: empty file                                 | DataError "<file>: empty file ..."
Data: duplicate passage ids                      | DataError "<file>:<line of the 2nd>: duplicate passage id ..."
Data: a 10 MB line                               | valid: read in full; invalid: one short message naming file:line
                                                 | (the message does not echo the 10 MB)
Data: random bytes (hypothesis) into             | only RagError subclasses escape (DataError/ConfigError)
  read_passages, read_jsonl, formats parsers,    |
  prepare_corpus; plain and .gz                  |
Config: random mappings around the schema        | load_config returns a dict or raises ConfigError, nothing else
  (hypothesis)                                   |
Hostile names ``../x``, ``a b``, ``$(rm)``,      | rejected by the schema pattern ^[a-z0-9][a-z0-9_]{0,63}$ (name,
  ``a;b``, ``-x``, ``A``, 65 chars               | corpus.name) and by the enums (task keys, variants)
A trailing newline (``name: "nl\n"``, paths,     | ConfigError naming the key: patterns match the whole value
  sha256, URLs, tracking.uri)                    | (fullmatch; Python's "$" matches before a final newline) and no
                                                 | config string may hold a control character
Quotes, ``$(...)``, backquotes, spaces, ``;&|``  | every rule's command (``snakemake -n -p`` of two configs that plan
  in tracking.uri, tracking.ui_url, URLs         | every shell rule) has the same words as with a benign value, the
                                                 | value one word; ``{...}`` in a URL is not taken for a wildcard
``--config evaluate_in_train_job=false`` (str)   | read as the boolean false (true/false in any case, every boolean
                                                 | key); another word: "expected boolean, got str 'maybe'"
Shell strings in workflow/rules/*.smk            | every placeholder quoted ({x:q}; several arguments: a list param);
                                                 | every shell wildcard constrained by a strict pattern in common.smk
Checkpoint loading                               | every torch.load( in rag/ passes weights_only=True; an unreadable
                                                 | checkpoint.pt is set aside (tests/test_train_resume.py)
Data: a passage or document whose text is only   | DataError "<file>:<line>: 'p2' has no text (empty or only
  whitespace (jsonl, tsv, dpr_tsv, documents)    | whitespace)"; CLI exit 2, no output left
Disk full: OSError(ENOSPC) in an atomic write,   | one line "error: <file>: No space left on device (writing it
  torch.save's "unexpected pos" on a full file   | failed; nothing was left in its place): free space and run again";
  system, ENOSPC elsewhere                       | no temporary file left; the MLflow store and run tests:
                                                 | test_reliability_tracking.py
Fine-tune runs (one writer, K beyond a BYO       | tests/test_reliability_runs.py
  corpus, resume at the last step)               |
Re-runs (a local input replaced with an older    | tests/test_reliability_rerun.py
  date, a second snakemake of a running job)     |
URL file names / local paths with ``;``, space,  | ConfigError naming the key (rag/config.py _check_file_names): they
  ``$()``, backquotes, leading ``-``             | become unquoted {input}/{output} paths in download/corpus rules
HTML report                                      | ``<script>`` escaped: tests/test_report.py (covers the CLI path)
Downloads over http://                           | refused unless allow_http: tests/test_download.py
                                                 | ::test_http_refused_without_allow_http and ::test_cli_download
"""

from __future__ import annotations

import copy
import gzip
import json
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag.config import load_config
from rag.data import formats
from rag.data.corpus import read_passages
from rag.errors import ConfigError, DataError, RagError
from rag.io import read_jsonl

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[1]
REL_CONFIG = ROOT / "tests" / "data" / "reliability.yaml"


@pytest.fixture
def rel_cfg() -> dict:
    with open(REL_CONFIG, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


# ------------------------------------------------------------------------------------ config
CONFIG_FAULTS = [
    ("wrong type", lambda c: c["train"].update(steps="many"), "config key 'train.steps': expected integer"),
    ("unknown key", lambda c: c["train"].update(stepz=3), "unknown config key 'train.stepz'"),
    ("unknown task", lambda c: c["tasks"].update(squad={"train": 1, "dev": 1, "test": 1}), "'squad'"),
    ("impossible K", lambda c: c["train"].update(k=50), "config key 'train.k'"),
    ("too few people", lambda c: c["miniworld"].update(people=5), "config key 'miniworld.people'"),
]


@pytest.mark.parametrize("what, mutate, message", CONFIG_FAULTS, ids=[f[0] for f in CONFIG_FAULTS])
def test_bad_config_load_config(rel_cfg, what, mutate, message):
    mutate(rel_cfg)
    with pytest.raises(ConfigError) as err:
        load_config(rel_cfg)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory) -> dict:
    """``snakemake -n`` on each bad config, all started at once (each takes seconds to start)."""
    from conftest import snakemake_bin

    procs = {}
    for what, mutate, _ in CONFIG_FAULTS[:4]:
        with open(REL_CONFIG, encoding="utf-8") as fh:
            cfg = yaml.safe_load(fh)
        mutate(cfg)
        d = tmp_path_factory.mktemp("dry")
        (d / "bad.yaml").write_text(yaml.safe_dump(cfg))
        procs[what] = subprocess.Popen([snakemake_bin(), "-n", "-s", str(ROOT / "Snakefile"), "--directory", str(d / "wd"),
                                        "--configfile", str(d / "bad.yaml")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {}
    for what, p in procs.items():
        stdout, stderr = p.communicate(timeout=600)
        out[what] = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    return out


@pytest.mark.parametrize("what, mutate, message", CONFIG_FAULTS[:4], ids=[f[0] for f in CONFIG_FAULTS[:4]])
def test_bad_config_snakemake_dry_run(dry_runs, what, mutate, message):
    proc = dry_runs[what]
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Traceback" not in out
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], out


# ------------------------------------------------------------------------------------ data
N_LINES = 400  # past the 8 KiB buffer of a text reader, so a late bad line tests the line count


def _passages_text(n: int = N_LINES) -> str:
    return "id\ttitle\ttext\n" + "".join(f"p{i}\tTitle {i}\tsome passage text number {i} padded out a bit\n" for i in range(1, n))


def _jsonl_text(n: int = N_LINES) -> str:
    return "".join(json.dumps({"id": f"q{i}", "input": f"question {i} padded out a bit", "targets": ["x"]}) + "\n"
                   for i in range(n))


def _nq_text(n: int = N_LINES) -> str:
    return "".join(json.dumps({"question": f"question {i} padded out", "answer": ["a"]}) + "\n" for i in range(n))


def _bad_utf8(text: str, line: int) -> bytes:
    lines = text.encode().split(b"\n")
    lines[line - 1] = lines[line - 1][:10] + b"\xff\xfe" + lines[line - 1][10:]
    return b"\n".join(lines)


def _truncated_gz(text: str) -> bytes:
    data = gzip.compress(text.encode())
    return data[: len(data) // 2]


def _drop_column(text: str, line: int) -> bytes:
    lines = text.split("\n")
    lines[line - 1] = "\t".join(lines[line - 1].split("\t")[:2])
    return "\n".join(lines).encode()


def _duplicate(text: str, line: int) -> bytes:
    lines = text.split("\n")
    lines[line - 1] = lines[line - 2]
    return "\n".join(lines).encode()


# (name, file suffix, bytes, expected message regex with {f} = file); line numbers are exact
PASSAGE_FAULTS = [
    ("truncated gzip", ".tsv.gz", _truncated_gz(_passages_text()), r"{f}:\d+: unreadable .*truncated or corrupt"),
    ("missing column", ".tsv", _drop_column(_passages_text(), 7), r"{f}:7: expected 3 tab-separated columns"),
    ("bad utf-8", ".tsv", _bad_utf8(_passages_text(), N_LINES - 3), rf"{{f}}:{N_LINES - 3}: not valid UTF-8"),
    ("empty file", ".tsv", b"", r"{f}: empty file"),
    ("duplicate id", ".tsv", _duplicate(_passages_text(), 9), r"{f}:9: duplicate passage id 'p7'"),
    ("10 MB line", ".tsv", _passages_text(5).encode() + b"p9\t" + b"x" * 10_000_000 + b"\n", r"{f}:6: expected 3 tab-separated"),
]
JSONL_FAULTS = [
    ("truncated gzip", ".jsonl.gz", _truncated_gz(_jsonl_text()), r"{f}:\d+: unreadable .*truncated or corrupt"),
    ("missing field", ".jsonl", _jsonl_text(5).replace('"targets": ["x"]', '"targetz": 1', 1).encode(), r"{f}:1: missing field\(s\) targets"),
    ("bad utf-8", ".jsonl", _bad_utf8(_jsonl_text(), N_LINES - 1), rf"{{f}}:{N_LINES - 1}: not valid UTF-8"),
    ("empty file", ".jsonl", b"", r"{f}: empty file"),
    ("10 MB line", ".jsonl", _jsonl_text(3).encode() + b'{"id": "' + b"y" * 10_000_000 + b"\n", r"{f}:4: invalid JSON"),
]


def _write(tmp_path: Path, suffix: str, data: bytes) -> Path:
    path = tmp_path / f"input{suffix}"
    path.write_bytes(data)
    return path


def _check_message(msg: str, pattern: str, path: Path) -> None:
    assert re.search(pattern.replace("{f}", re.escape(str(path))), msg), msg
    assert len(msg) < 600, f"message echoes the input ({len(msg)} characters)"


@pytest.mark.parametrize("what, suffix, data, pattern", PASSAGE_FAULTS, ids=[f[0] for f in PASSAGE_FAULTS])
def test_bad_passages_reader(tmp_path, what, suffix, data, pattern):
    path = _write(tmp_path, suffix, data)
    with pytest.raises(DataError) as err:
        read_passages(path)
    _check_message(str(err.value), pattern, path)


@pytest.mark.parametrize("what, suffix, data, pattern", JSONL_FAULTS, ids=[f[0] for f in JSONL_FAULTS])
def test_bad_jsonl_reader(tmp_path, what, suffix, data, pattern):
    path = _write(tmp_path, suffix, data)
    with pytest.raises(DataError) as err:
        read_jsonl(path, required=("id", "input", "targets"))
    _check_message(str(err.value), pattern, path)


def test_bad_utf8_exact_line_every_position(tmp_path):
    """Bad UTF-8 is reported on the line that holds it (a buffered text reader would name the line after
    the last one it returned)."""
    text = _passages_text()
    for line in (2, 3, 150, N_LINES - 1, N_LINES):
        path = _write(tmp_path, ".tsv", _bad_utf8(text, line))
        with pytest.raises(DataError, match=rf":{line}: not valid UTF-8"):
            read_passages(path)
        gz = _write(tmp_path, ".tsv.gz", gzip.compress(_bad_utf8(text, line)))
        with pytest.raises(DataError, match=rf":{line}: not valid UTF-8"):
            read_passages(gz)


def test_ten_megabyte_valid_line_is_read(tmp_path):
    big = "w " * 5_000_000
    path = _write(tmp_path, ".tsv", (_passages_text(3) + f"big\tBig\t{big}\n").encode())
    p = read_passages(path)
    assert p.ids[-1] == "big" and len(p.texts[-1]) == len(big)
    rows = read_jsonl(_write(tmp_path, ".jsonl", (json.dumps({"id": "x", "t": big}) + "\n").encode()))
    assert len(rows[0]["t"]) == len(big)


def test_crlf_and_missing_final_newline(tmp_path):
    p = read_passages(_write(tmp_path, ".tsv", b"id\ttitle\ttext\r\na\tA\tx y\r\nb\tB\tz"))
    assert p.ids == ["a", "b"] and p.texts == ["x y", "z"]


FORMAT_FAULTS = [
    ("nq_open", "train", ".jsonl", _bad_utf8(_nq_text(), 300), r"{f}:300: not valid UTF-8"),
    ("nq_open", "train", ".jsonl.gz", _truncated_gz(_nq_text()), r"{f}:\d+: unreadable"),
    ("nq_open", "train", ".jsonl", b"", r"{f}: empty file"),
    ("nq_open", "train", ".jsonl", _nq_text(5).replace('"answer": ["a"]', '"answer": "a"', 1).encode(), r"{f}:1: .*'answer'"),
    ("dpr_qa_csv", "train", ".csv", b"q1\t['a']\nq2 only\n", r"{f}:2: expected 2 tab-separated columns"),
    ("fever", "train", ".jsonl", b'{"id": 1, "claim": "c", "label": "SUPPORTS", "evidence": []}\n{"id": 2, "claim": "c"}\n',
     r"{f}:2: missing field 'label'"),
]


@pytest.mark.parametrize("fmt, split, suffix, data, pattern", FORMAT_FAULTS, ids=[f"{f[0]}-{i}" for i, f in enumerate(FORMAT_FAULTS)])
def test_bad_task_file_via_cli(tmp_path, capsys, fmt, split, suffix, data, pattern):
    from rag.cli import main

    src = _write(tmp_path, suffix, data)
    out = tmp_path / "out" / "train.jsonl"
    task = {"fever": "fever3"}.get(fmt, "nq")
    assert main(["prepare-task", "--format", fmt, "--input", str(src), "--output", str(out), "--task", task, "--split", split]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: "), err
    _check_message(err[-1], "^error: " + pattern, src)
    assert not out.exists()
    assert not out.parent.exists() or not any(out.parent.iterdir()), "partial or temporary output left behind"


@pytest.mark.parametrize("what, suffix, data, pattern", PASSAGE_FAULTS, ids=[f[0] for f in PASSAGE_FAULTS])
@pytest.mark.parametrize("command", ["prepare-corpus", "bm25"])
def test_bad_passages_via_cli(tmp_path, capsys, command, what, suffix, data, pattern):
    from rag.cli import main

    src = _write(tmp_path, suffix, data)
    outdir = tmp_path / "out"
    if command == "prepare-corpus":
        out = outdir / "passages.tsv"
        argv = ["prepare-corpus", "--format", "tsv", "--input", str(src), "--output", str(out)]
    else:
        out = outdir / "bm25"
        argv = ["bm25", "--passages", str(src), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: "), err
    _check_message(err[-1], "^error: " + pattern, src)
    assert not out.exists()
    assert not outdir.exists() or not any(outdir.iterdir()), "partial or temporary output left behind"


# ------------------------------------------------------------------------------------ property tests
FILE_READERS = {
    "read_passages": lambda p: read_passages(p),
    "read_jsonl": lambda p: read_jsonl(p, required=("id",)),
    "dpr_passages": lambda p: list(formats.parse_dpr_passages(p)),
    "corpus_tsv": lambda p: list(formats.parse_corpus_tsv(p)),
    "corpus_jsonl": lambda p: list(formats.parse_corpus_jsonl(p)),
    **{f"parse_{name}": (lambda p, f=f: list(f(p))) for name, f in formats.PARSERS.items()},
}

# bytes that look like the inputs: fragments of headers, JSON, tabs, quotes, newlines, bad UTF-8
FRAGMENTS = [b"id\ttitle\ttext\n", b"id\ttext\ttitle\n", b"\t", b"\n", b"\r\n", b'"', b"{", b"}", b"[", b"]",
             b'{"id": 1, "title": "t", "text": "x"}\n', b'{"question": "q", "answer": ["a"]}\n', b'"Data": [',
             b"['a', 'b']", b"(list (description x))", b"\xff", b"\xc3", b"\x00", b"null", b"1e999", b"\\u0000",
             b'{"query": {"0": "q"}, "answers": {"0": ["a"]}, "query_id": {"0": 1}}', b"SUPPORTS", b"label"]
input_bytes = st.one_of(st.binary(max_size=300),
                        st.lists(st.sampled_from(FRAGMENTS) | st.binary(max_size=8), max_size=25).map(b"".join))


@pytest.mark.parametrize("reader", sorted(FILE_READERS))
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=input_bytes, gz=st.booleans())
def test_random_bytes_only_project_errors(reader, data, gz):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / ("input.json.gz" if gz else "input.json")
        path.write_bytes(gzip.compress(data) if gz else data)
        try:
            FILE_READERS[reader](path)
        except RagError:
            pass


@settings(max_examples=25, deadline=None, derandomize=True)
@given(data=input_bytes)
def test_random_bytes_prepare_corpus_leaves_no_partial_output(data):
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "in.tsv", Path(d) / "out" / "passages.tsv"
        src.write_bytes(data)
        for fmt in formats.CORPUS_FORMATS:
            try:
                formats.prepare_corpus(fmt, src, out, words=8)
            except RagError:
                assert not out.exists()
                assert not out.parent.exists() or not any(out.parent.iterdir())


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(allow_nan=True), st.text(max_size=12),
                    st.sampled_from(["nq", "fever3", "closed_book", "rag_token", "miniworld", "flat", "cpu", "../x", "a b", "$(rm)"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                      max_leaves=8)


def _schema_paths() -> list[tuple[str, ...]]:
    from rag.config_keys import json_schema as schema

    out = []

    def walk(node, path):
        if not isinstance(node, dict):
            return
        if "$ref" in node:
            node = schema()["$defs"][node["$ref"].split("/")[-1]]
        for key, sub in (node.get("properties") or {}).items():
            out.append(path + (key,))
            walk(sub, path + (key,))

    walk(schema(), ())
    return out


SCHEMA_PATHS = _schema_paths()


@st.composite
def mutated_configs(draw):
    with open(REL_CONFIG, encoding="utf-8") as fh:
        cfg = yaml.safe_load(fh)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(SCHEMA_PATHS + [("tasks", "nq"), ("tasks", "fever3", "init_from"), ("tasks", "nq", "decode_token", "k"),
                                                    ("tasks", "fever3", "steps"), ("bogus",)]))
        node = cfg
        for key in path[:-1]:
            if not isinstance(node, dict):
                break
            node = node.setdefault(key, {})
        else:
            if isinstance(node, dict):
                if draw(st.booleans()) and path[-1] in node:
                    del node[path[-1]]
                else:
                    node[path[-1]] = draw(VALUES)
    return cfg


@settings(max_examples=300, deadline=None, derandomize=True)
@given(cfg=st.one_of(mutated_configs(), VALUES))
def test_random_configs_only_config_errors(cfg):
    try:
        out = load_config(cfg)
    except ConfigError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(out, dict)


# ------------------------------------------------------------------------------------ hostile input
HOSTILE = ["../x", "a b", "$(rm)", "a;b", "-x", "A", "x" * 65, "", "a/b", "`id`", "a\nb"]


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("key", ["name", "corpus.name"])
def test_hostile_names_rejected(rel_cfg, key, value):
    node = rel_cfg
    *parents, last = key.split(".")
    for k in parents:
        node = node[k]
    node[last] = value
    with pytest.raises(ConfigError, match=re.escape(f"config key '{key}'")):
        load_config(rel_cfg)


@pytest.mark.parametrize("value", ["../x", "a;b", "$(rm)", "nq "])
def test_hostile_task_and_variant_names_rejected(rel_cfg, value):
    cfg = copy.deepcopy(rel_cfg)
    cfg["tasks"][value] = {"train": 1, "dev": 1, "test": 1}
    with pytest.raises(ConfigError, match="tasks"):
        load_config(cfg)
    cfg = copy.deepcopy(rel_cfg)
    cfg["variants"] = ["closed_book", value]
    with pytest.raises(ConfigError, match=re.escape("config key 'variants.1'")):
        load_config(cfg)


ALLOWED_FIELDS = {"input", "output", "wildcards", "threads", "log", "params", "resources"}


def _shell_strings(text: str) -> list[str]:
    """The concatenated string literals of every ``shell:`` directive of a .smk file."""
    out = []
    for m in re.finditer(r"^(\s*)shell:\s*\n((?:\1\s+.*\n?)+)", text, re.M):
        literals = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))
        out.append("".join(literals))
    return out


def test_smk_shell_strings_quote_every_placeholder():
    """Every value a rule puts into a shell command is quoted ({x:q}; a param of several arguments
    is a list, each item quoted), so no config value can change a command's words (the dry runs of
    test_hostile_values_do_not_change_any_command check the commands themselves)."""
    smk = sorted((ROOT / "workflow" / "rules").glob("*.smk"))
    shells = [(p.name, s) for p in smk for s in _shell_strings(p.read_text())]
    assert len(shells) >= 10, "shell directives not found: has the rule layout changed?"
    common = (ROOT / "workflow" / "rules" / "common.smk").read_text()
    constrained = set(re.findall(r"^\s+(\w+)=", common.split("wildcard_constraints:")[1].split("\n\n")[0], re.M))
    for name, shell in shells:
        for field in re.findall(r"(?<!\{)\{([^{}]+)\}(?!\})", shell):
            head = re.split(r"[.\[:]", field)[0]
            assert head in ALLOWED_FIELDS, f"{name}: shell uses {{{field}}}"
            assert field.endswith(":q"), f"{name}: unquoted {{{field}}} in a shell command"
            if head == "wildcards":
                assert field.split(".")[1].split(":")[0] in constrained, f"{name}: wildcard {{{field}}} has no constraint in common.smk"


def test_torch_load_always_weights_only():
    calls = []
    for path in sorted((ROOT / "rag").rglob("*.py")):
        text = path.read_text()
        for m in re.finditer(r"torch\.load\(", text):
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            calls.append((path.name, text[m.end() : i - 1]))
    assert calls, "no torch.load( found: checkpoints are loaded elsewhere?"
    for name, args in calls:
        assert re.search(r"weights_only\s*=\s*True", args), f"{name}: torch.load({args}) without weights_only=True"


def test_download_refuses_http():
    """Covered in depth (server, CLI) by tests/test_download.py; the scheme check itself here."""
    from rag.data.download import download

    with tempfile.TemporaryDirectory() as d:
        for url in ("http://example.org/x", "ftp://example.org/x", "file:///etc/passwd"):
            with pytest.raises(ConfigError, match="only https"):
                download(url, Path(d) / "x")
            assert not any(Path(d).iterdir())


@pytest.mark.parametrize("key, value", [
    ("corpus.url", "https://example.org/a;rm -rf ~.tsv"),
    ("corpus.url", "https://example.org/$(id).tsv"),
    ("corpus.url", "https://example.org/"),
    ("corpus.path", "data/a b.tsv"),
    ("corpus.path", "-rf"),
    ("corpus.path", "x`id`.tsv"),
    ("tasks.nq.files.train", "https://example.org/q&a.csv"),
])
def test_hostile_file_names_rejected(rel_cfg, key, value):
    """URL file names and local paths become {input}/{output} paths in unquoted shell commands."""
    if key.startswith("corpus."):
        rel_cfg["corpus"].update(source="download" if key == "corpus.url" else "local", **{key.split(".")[1]: value})
        rel_cfg["tasks"] = {"nq": {"source": "local", "files": {s: f"data/nq-{s}.csv" for s in ("train", "dev", "test")}}}
    else:
        rel_cfg["corpus"] = {"name": "wiki", "source": "local", "path": "data/psgs.tsv"}
        rel_cfg["tasks"] = {"nq": {"source": "download", "files": {s: f"https://example.org/nq-{s}.csv" for s in ("train", "dev", "test")}}}
        rel_cfg["tasks"]["nq"]["files"]["train"] = value
    with pytest.raises(ConfigError, match=re.escape(f"config key '{key}'")):
        load_config(rel_cfg)
    ok = copy.deepcopy(rel_cfg)
    load_config(_fixed(ok, key), check_files=False)  # the same config with a plain name is valid


def _fixed(cfg: dict, key: str) -> dict:
    cfg = copy.deepcopy(cfg)
    if key == "corpus.url":
        cfg["corpus"]["url"] = "https://example.org/psgs_w100.tsv.gz"
    elif key == "corpus.path":
        cfg["corpus"]["path"] = "data/psgs.tsv"
    else:
        cfg["tasks"]["nq"]["files"]["train"] = "https://example.org/nq-train.qa.csv"
    return cfg


# ------------------------------------------------------------------------------------ config values and shell commands
# Values that hold the characters a shell treats specially (a newline is refused by load_config,
# test_trailing_newline_refused_naming_the_key); URLs may not hold whitespace.
SHELL_HOSTILE = "x'y\"z $(touch PWNED) `id` ;&|<>*?~ \\ ${IFS}end"
URL_HOSTILE = "x'y\"z$(touch${IFS}PWNED)`id`;&|<>*~\\end"  # no "?" or "#": they end a URL's path
BENIGN = "benign"
SHA = "0" * 64


def _dry_run_configs(value: str) -> dict[str, dict]:
    """Two configs that between them plan every shell rule, ``value`` in each config string that
    reaches a command (tracking URI, report URL, download URLs): miniworld with separate evaluate
    jobs, torchrun and a reranker; a downloaded corpus, a downloaded and a local task."""
    with open(ROOT / "tests" / "data" / "e2e.yaml", encoding="utf-8") as fh:
        mini = yaml.safe_load(fh)
    tracking = {"uri": f"sqlite:///results/{value}.db", "ui_url": f"http://127.0.0.1:5000/{value}"}
    mini.update(evaluate_in_train_job=False, tracking=tracking)
    mini["train"].update(ddp_processes=2)
    # a reranker (rule train_reranker), planned by target retrievers
    mini["retrievers"] = {"rr": {"family": "rerank", "options": {"first_stage": "dense", "depth": 6}, "tasks": ["nq"],
                                 "variants": ["rag_token_frozen"]}}
    url = URL_HOSTILE if value == SHELL_HOSTILE else value
    files = {"corpus": {"name": "dl", "source": "download", "url": f"https://example.org/{url}/psgs_w100.tsv.gz",
                        "sha256": SHA, "format": "dpr_tsv"}}
    dl = {"name": "dl", "tracking": tracking, "corpus": files["corpus"], "variants": ["rag_token", "rag_sequence_bm25", "closed_book"],
          "tasks": {"nq": {"source": "local", "format": "jsonl",
                           "files": {s: f"byo/qa-{s}.jsonl" for s in ("train", "dev", "test")}},
                    "triviaqa": {"source": "download", "format": "jsonl", "sha256": {"train": SHA},
                                 "files": {s: f"https://example.org/{url}/tqa-{s}.jsonl" for s in ("train", "dev", "test")}}},
          "retriever": {"shards": 2}, "experiments": {"topk_sweep": [1, 2], "hotswap": False}}
    return {"miniworld": mini, "download": dl}


def _benign(text: str) -> str:
    return text.replace(SHELL_HOSTILE, BENIGN).replace(URL_HOSTILE, BENIGN)


def _unhashed(words: list[str]) -> list[str]:
    """``words`` with the value of --config-hash (a hash of the section, tracking URI included) blanked."""
    return [w if i == 0 or words[i - 1] != "--config-hash" else "<hash>" for i, w in enumerate(words)]


def _shell_commands(out: str) -> dict[tuple[str, str], str]:
    """(rule, output line) -> the shell command, of every job a ``snakemake -n -p`` printed."""
    jobs = {}
    for m in re.finditer(r"^(?:local)?rule (\w+):\n(.*?)^Shell command: (.*?)(?=\n\n|\nJob stats:|\n*\Z)", out, re.M | re.S):
        output = re.search(r"^\s+output: (.*)$", m.group(2), re.M)
        if m.group(3) != "None":
            jobs[(m.group(1), output.group(1) if output else "")] = m.group(3)
    return jobs


@pytest.fixture(scope="module")
def hostile_dry_runs(tmp_path_factory) -> dict:
    """``snakemake -n -p`` of each config of _dry_run_configs, with SHELL_HOSTILE and with BENIGN
    (all four at once), plus one with ``name: "nl\\n"``."""
    import shutil

    from conftest import snakemake_bin

    runs = {(kind, which): (cfg, []) for which, value in (("hostile", SHELL_HOSTILE), ("benign", BENIGN))
            for kind, cfg in _dry_run_configs(value).items()}
    with open(REL_CONFIG, encoding="utf-8") as fh:
        rel = yaml.safe_load(fh)
    runs[("name", "newline")] = ({**rel, "name": "nl\n"}, [])
    for word in ("false", "true"):  # snakemake passes the string: load_config reads it as the boolean
        runs[("evaluate_in_train_job", word)] = (rel, ["--config", f"evaluate_in_train_job={word}"])
    procs = {}
    for key, (cfg, extra) in runs.items():
        d = tmp_path_factory.mktemp("-".join(key))
        shutil.copytree(ROOT / "examples" / "byo", d / "byo")  # the local task files, relative to the working directory
        targets = []
        if key[0] in ("miniworld", "download"):  # the score-band check too (its rule runs rag check)
            bands = tmp_path_factory.getbasetemp() / "bands.yaml"  # one file for both: the commands name it
            shutil.copy(ROOT / "config" / "bands" / "paper.yaml", bands)
            cfg = {**cfg, "bands": str(bands)}  # absolute: a relative path is the repository's
            targets = ["all", "check"] + (["retrievers"] if key[0] == "miniworld" else [])
        (d / "config.yaml").write_text(yaml.safe_dump(cfg))
        procs[key] = subprocess.Popen([snakemake_bin(), "-n", "-p", "--nocolor", "-s", str(ROOT / "Snakefile"),
                                       "--directory", str(d), *targets, "--configfile", str(d / "config.yaml"), *extra],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = {}
    for key, p in procs.items():
        stdout, _ = p.communicate(timeout=600)
        out[key] = subprocess.CompletedProcess(p.args, p.returncode, stdout, "")
    return out


def test_hostile_values_do_not_change_any_command(hostile_dry_runs):
    """A config value with quotes, $(...), backquotes, shell operators, spaces and a backslash stays
    one word of every command it reaches; every other word is as with a benign value. The two
    configs plan every rule that runs a shell command."""
    smk = "".join(p.read_text() for p in (ROOT / "workflow" / "rules").glob("*.smk"))
    shell_rules = {m.group(1) for m in re.finditer(r"^\s*rule (\w+):\n(?:(?!^\s*rule ).)*?^\s+shell:", smk, re.M | re.S)}
    # a rule of `use rule <shell rule> as <name>` runs its command too (report_retrievers, planned below)
    copies = {m.group(2) for m in re.finditer(r"^\s*use rule (\w+) as (\w+)", smk, re.M) if m.group(1) in shell_rules}
    seen_rules, hostile_words = set(), 0
    for kind in ("miniworld", "download"):
        hostile, benign = hostile_dry_runs[(kind, "hostile")], hostile_dry_runs[(kind, "benign")]
        assert hostile.returncode == 0 and benign.returncode == 0, (hostile.stdout + benign.stdout)[-4000:]
        jobs_h = {(rule, _benign(out)): cmd for (rule, out), cmd in _shell_commands(hostile.stdout).items()}
        jobs_b = _shell_commands(benign.stdout)
        assert jobs_h.keys() == jobs_b.keys() and jobs_b, kind
        for job, cmd in jobs_b.items():
            words = shlex.split(jobs_h[job])
            hostile_words += sum(SHELL_HOSTILE in w or URL_HOSTILE in w for w in words)
            assert _unhashed([_benign(w) for w in words]) == _unhashed(shlex.split(cmd)), (job, jobs_h[job])
        seen_rules |= {rule for rule, _ in jobs_b}
    assert shell_rules <= seen_rules <= shell_rules | copies, f"rules not planned by the dry runs: {shell_rules - seen_rules}"
    # the URI (init_store), the report URL, the corpus URL and 3 task URLs reach a command
    assert hostile_words >= 6


def test_trailing_newline_refused_in_a_dry_run(hostile_dry_runs):
    proc = hostile_dry_runs[("name", "newline")]
    errors = [ln for ln in proc.stdout.splitlines() if ln.startswith("error:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stdout
    assert errors == ["error: config key 'name': 'nl\\n' does not match ^[a-z0-9][a-z0-9_]{0,63}$"], proc.stdout[-3000:]


@pytest.mark.parametrize("key", ["name", "corpus.name", "corpus.path", "corpus.sha256", "tasks.nq.files.train",
                                 "tasks.nq.sha256.train", "corpus.url", "tracking.uri", "tracking.ui_url"])
def test_trailing_newline_refused_naming_the_key(rel_cfg, key):
    """Python's "$" matches before a trailing newline: schema patterns and path checks match whole
    values, and no config string may hold a control character."""
    local = {s: f"data/nq-{s}.jsonl" for s in ("train", "dev", "test")}
    rel_cfg["corpus"] = {"name": "wiki", "source": "local", "path": "data/psgs.tsv", "sha256": SHA}
    rel_cfg["tasks"] = {"nq": {"source": "local", "files": local, "sha256": {"train": SHA}}}
    rel_cfg["tracking"] = {"uri": "sqlite:///results/mlflow.db", "ui_url": "http://127.0.0.1:5000"}
    if key == "corpus.url":
        rel_cfg["corpus"] = {"name": "wiki", "source": "download", "url": "https://example.org/psgs.tsv"}
    load_config(copy.deepcopy(rel_cfg), check_files=False)  # valid as it is
    node = rel_cfg
    *parents, last = key.split(".")
    for k in parents:
        node = node[k]
    node[last] += "\n"
    with pytest.raises(ConfigError) as err:
        load_config(rel_cfg, check_files=False)
    assert str(err.value).startswith(f"config key '{key}': ") and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("word", ["false", "true"])
def test_boolean_word_from_the_command_line(hostile_dry_runs, word):
    """``--config evaluate_in_train_job=false`` (a string: snakemake parses only True/False) plans the DAG."""
    proc = hostile_dry_runs[("evaluate_in_train_job", word)]
    assert proc.returncode == 0 and "error:" not in proc.stdout, proc.stdout[-3000:]
    assert "rule train:" in proc.stdout


@pytest.mark.parametrize("value, expected", [("false", False), ("False", False), ("TRUE", True), (True, True)])
def test_boolean_words_are_booleans(rel_cfg, value, expected):
    rel_cfg["evaluate_in_train_job"] = value
    rel_cfg["corpus"]["allow_http"] = value
    cfg = load_config(rel_cfg)
    assert cfg["evaluate_in_train_job"] is expected and cfg["corpus"]["allow_http"] is expected


def test_other_words_for_a_boolean_refused(rel_cfg):
    rel_cfg["evaluate_in_train_job"] = "maybe"
    with pytest.raises(ConfigError, match=re.escape("config key 'evaluate_in_train_job': expected boolean, got str 'maybe'")):
        load_config(rel_cfg)


# ------------------------------------------------------------------------------------ full disk
def _no_space(*_args, **_kwargs):
    import errno
    import os

    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_disk_full_writing_an_output_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    """OSError(ENOSPC) while an output is written: one line naming the file; nothing left in its place."""
    import os

    from rag.cli import main

    src = _write(tmp_path, ".tsv", _passages_text(5).encode())
    out = tmp_path / "out" / "passages.tsv"
    monkeypatch.setattr(os, "fsync", _no_space)  # where a full disk shows when the data is flushed
    assert main(["prepare-corpus", "--format", "tsv", "--input", str(src), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"error: {out}: No space left on device (writing it failed; nothing was left in its place): "
                       "free space and run again"), err
    assert not any(out.parent.iterdir()), "a partial or temporary output was left behind"


def test_disk_full_in_torch_save_is_named(tmp_path, monkeypatch):
    """torch.save on a full disk says "unexpected pos 576 vs 534" (measured on a 400 KB tmpfs): the
    file system, with no block left, tells it apart."""
    import os
    from collections import namedtuple

    import torch

    from rag.errors import DiskFullError
    from rag.io import atomic_path

    def torch_full(*_args, **_kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    statvfs = namedtuple("statvfs", "f_bavail")
    monkeypatch.setattr(torch, "save", torch_full)
    monkeypatch.setattr(os, "statvfs", lambda _path: statvfs(0))
    ckpt = tmp_path / "checkpoint.pt"
    with pytest.raises(DiskFullError) as err:
        with atomic_path(ckpt) as tmp:
            torch.save({}, tmp)
    assert str(err.value).startswith(f"{ckpt}: No space left on device (writing it failed")
    assert not any(tmp_path.iterdir())
    monkeypatch.setattr(os, "statvfs", lambda _path: statvfs(1000))  # space left: another fault, raised as it is
    with pytest.raises(RuntimeError, match="unexpected pos"):
        with atomic_path(ckpt) as tmp:
            torch.save({}, tmp)


def test_disk_full_elsewhere_still_one_line(tmp_path, capsys, monkeypatch):
    """ENOSPC outside the atomic writers (a library writing a file of its own): one line naming it."""
    import errno
    import os

    from rag.cli import run_commands
    from rag.cli import main

    def full(_args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "mlartifacts" / "x.json"))

    monkeypatch.setattr(run_commands, "cmd_init_store", full)
    assert main(["init-store", "--uri", "sqlite:///x.db", "--marker", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {tmp_path / 'mlartifacts' / 'x.json'}: No space left on device (OSError); free space and run again"]


# ------------------------------------------------------------------------------------ whitespace-only passages
def _rows(texts: list[str]) -> list[tuple[str, str, str]]:
    return [(f"p{i}", f"Title {i}", t) for i, t in enumerate(texts)]


WHITESPACE_TEXTS = ["some words here", "more words here", " \u00a0  \u3000 ", "last words"]
CORPUS_FILES = {  # format -> (suffix, contents, line of the whitespace-only text of passage p2)
    "jsonl": (".jsonl", "".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in _rows(WHITESPACE_TEXTS)), 3),
    "documents": (".jsonl", "".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in _rows(WHITESPACE_TEXTS)), 3),
    "tsv": (".tsv", "id\ttitle\ttext\n" + "".join(f"{i}\t{t}\t{x}\n" for i, t, x in _rows(WHITESPACE_TEXTS)), 4),
    "dpr_tsv": (".tsv", "id\ttext\ttitle\n" + "".join(f"{i}\t{x}\t{t}\n" for i, t, x in _rows(WHITESPACE_TEXTS)), 4),
}


@pytest.mark.parametrize("fmt", sorted(CORPUS_FILES))
def test_whitespace_only_passage_refused(tmp_path, capsys, fmt):
    """A passage (or document) whose text is only whitespace stops the conversion with file:line,
    in every corpus format (it was indexed as an empty passage; the documents format dropped it)."""
    from rag.cli import main

    suffix, text, line = CORPUS_FILES[fmt]
    src = _write(tmp_path, suffix, text.encode())
    out = tmp_path / "out" / "passages.tsv"
    assert main(["prepare-corpus", "--format", fmt, "--input", str(src), "--output", str(out), "--words", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"error: {src}:{line}: 'p2' has no text (empty or only whitespace)", err
    assert not out.exists() and (not out.parent.exists() or not any(out.parent.iterdir()))


def test_whitespace_only_passage_in_passages_tsv_refused(tmp_path):
    path = _write(tmp_path, ".tsv", CORPUS_FILES["tsv"][1].encode())
    with pytest.raises(DataError, match=re.escape(f"{path}:4: 'p2' has no text (empty or only whitespace)")):
        read_passages(path)
