"""Passages: chunks of ``corpus.passage_words`` words of articles (DPR/RAG: 100; the miniworld default: 60),
stored as ``passages.tsv`` (id, title, text).

The one chunker (:func:`chunk_documents`), writer (:func:`write_passages`) and reader
(:func:`iter_passages`, :func:`read_passages`) of that file: a header line ``id<TAB>title<TAB>text``,
then one passage per line, fields never quoted (the writer replaces tabs and line breaks inside a
field by spaces, so a line splits on its tabs into exactly three fields).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from rag.errors import ConfigError, DataError
from rag.io import atomic_open, iter_lines

log = logging.getLogger(__name__)

HEADER = ["id", "title", "text"]


def chunk_words(text: str, words: int) -> list[str]:
    """Disjoint chunks of ``words`` whitespace words (the last one may be shorter), as DPR/RAG."""
    toks = text.split()
    return [" ".join(toks[i : i + words]) for i in range(0, len(toks), words)]


def chunk_documents(docs: Iterable[tuple[str, str, str]], words: int = 100) -> Iterator[dict]:
    """Split (id, title, text) documents into disjoint passages of ``words`` whitespace words (DPR/RAG: 100).

    Passage ids are ``f"{doc_id}_{k}"`` (k from 0, also for a document of one passage, as the
    miniworld corpus names its passages); the last passage of a document may be shorter; a
    document without words yields nothing.
    """
    if not isinstance(words, int) or isinstance(words, bool) or words < 1:
        raise ConfigError(f"words: must be a positive integer, got {words!r}")
    for doc_id, title, text in docs:
        for k, chunk in enumerate(chunk_words(text, words)):
            yield {"id": f"{doc_id}_{k}", "title": title, "text": chunk}


class IdSet:
    """Seen-set for passage ids; canonical non-negative integer ids go into a bitmap (21M ids ~ 2.6 MB)."""

    MAX_BITMAP_ID = 1 << 31

    def __init__(self):
        self.bits = bytearray()
        self.other: set[str] = set()

    def add(self, pid: str) -> bool:
        """Add ``pid``; False when it was already present."""
        if pid.isdigit() and (pid == "0" or pid[0] != "0") and int(pid) < self.MAX_BITMAP_ID:
            i = int(pid)
            byte, bit = divmod(i, 8)
            if byte >= len(self.bits):
                self.bits.extend(bytes(max(byte + 1 - len(self.bits), len(self.bits))))
            if self.bits[byte] >> bit & 1:
                return False
            self.bits[byte] |= 1 << bit
            return True
        if pid in self.other:
            return False
        self.other.add(pid)
        return True


def clean_field(field: str) -> str:
    """A field as written: tabs and line breaks (``\\t``, ``\\r``, ``\\n``) replaced by spaces."""
    return field.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def write_passages(path: str | Path, passages: Iterable[dict | tuple[str, str, str]]) -> int:
    """Write passages (dicts with id, title, text, or (id, title, text) tuples) to ``path``
    atomically, with the header; return the count. Duplicate ids (after cleaning) and an empty
    corpus are errors."""
    n = 0
    seen = IdSet()
    with atomic_open(path) as fh:
        fh.write("\t".join(HEADER) + "\n")
        for p in passages:
            pid, title, text = (p["id"], p["title"], p["text"]) if isinstance(p, dict) else p
            pid = clean_field(pid)
            if not seen.add(pid):
                raise DataError(f"{path}: duplicate passage id {pid!r}")
            fh.write(f"{pid}\t{clean_field(title)}\t{clean_field(text)}\n")
            n += 1
    if n == 0:
        raise DataError(f"{path}: no passages to write")
    return n


def iter_passages(path: str | Path, header: bool | None = True) -> Iterator[tuple[int, str, str, str]]:
    """(line number, id, title, text) of every passage of a ``passages.tsv``, strictly: three
    tab-separated fields a line, a non-empty id, no id twice, a text that is not only whitespace,
    at least one passage.

    ``header``: True, the first line must be ``id<TAB>title<TAB>text``; None, it may be (a
    user's corpus in this layout)."""
    seen = IdSet()
    n = 0
    for lineno, line in iter_lines(path):
        parts = line.split("\t")
        if lineno == 1 and header is not False:
            if parts == HEADER:
                continue
            if header:
                raise DataError(f"{path}:1: expected header 'id\\ttitle\\ttext', got {line[:80]!r}")
        if len(parts) != 3:
            raise DataError(f"{path}:{lineno}: expected 3 tab-separated columns (id, title, text), got {len(parts)}")
        pid = parts[0]
        if not pid.strip():
            raise DataError(f"{path}:{lineno}: empty passage id")
        if not seen.add(pid):
            raise DataError(f"{path}:{lineno}: duplicate passage id {pid!r}")
        if not parts[2].strip():
            raise DataError(f"{path}:{lineno}: {pid!r} has no text (empty or only whitespace)")
        n += 1
        yield lineno, pid, parts[1], parts[2]
    if n == 0:
        raise DataError(f"{path}: empty file (no passages)")


@dataclass
class Passages:
    ids: list[str]
    titles: list[str]
    texts: list[str]

    def __len__(self) -> int:
        return len(self.ids)

    def index_of(self) -> dict[str, int]:
        return {pid: i for i, pid in enumerate(self.ids)}

    def doc_entity(self, i: int) -> str:
        """The article a passage came from: ``<doc>`` of a chunked passage id ``<doc>_<k>``, else the id."""
        pid = self.ids[i]
        head, _, tail = pid.rpartition("_")
        return head if head and tail.isdigit() else pid


def read_passages(path: str | Path) -> Passages:
    """All passages of a ``passages.tsv`` (see :func:`iter_passages`)."""
    ids, titles, texts = [], [], []
    for _, pid, title, text in iter_passages(path):
        ids.append(pid)
        titles.append(title)
        texts.append(text)
    return Passages(ids, titles, texts)
