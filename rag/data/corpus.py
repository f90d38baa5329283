"""Passages: chunks of ``corpus.passage_words`` words of articles, stored as ``passages.tsv``: a
header line ``id<TAB>title<TAB>text``, then one passage per line, fields never quoted (the writer
replaces tabs and line breaks inside a field by spaces).

The one chunker (:func:`chunk_documents`), writer (:func:`write_passages`) and readers of that file:
:func:`iter_passages` / :func:`read_passages` parse every line; :class:`PassageStore` reads the file
in place, a row at a time, through the row table the writer puts beside it (:func:`rows_path`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from rag.errors import ConfigError, DataError
from rag.io import atomic_open, atomic_path, iter_lines

log = logging.getLogger(__name__)

HEADER = ["id", "title", "text"]


def chunk_documents(docs: Iterable[tuple[str, str, str]], words: int = 100) -> Iterator[dict]:
    """Split (id, title, text) documents into disjoint passages of ``words`` whitespace words (DPR/RAG:
    100), with ids ``f"{doc_id}_{k}"`` (k from 0); a document without words yields nothing."""
    if not isinstance(words, int) or isinstance(words, bool) or words < 1:
        raise ConfigError(f"words: must be a positive integer, got {words!r}")
    for doc_id, title, text in docs:
        toks = text.split()
        for k in range(-(-len(toks) // words)):
            yield {"id": f"{doc_id}_{k}", "title": title, "text": " ".join(toks[k * words: (k + 1) * words])}


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


def check_passage(where: str, seen: IdSet, pid: str, text: str) -> None:
    """Refuse (DataError at ``where``) an empty passage id, an id in ``seen`` (else added) and a text of only
    whitespace."""
    if not pid.strip():
        raise DataError(f"{where}: empty passage id")
    if not seen.add(pid):
        raise DataError(f"{where}: duplicate passage id {pid!r}")
    if not text.strip():
        raise DataError(f"{where}: {pid!r} has no text (empty or only whitespace)")


def clean_field(field: str) -> str:
    """A field as written: tabs and line breaks (``\\t``, ``\\r``, ``\\n``) replaced by spaces."""
    return field.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def rows_path(path: str | Path) -> Path:
    """The row table of a ``passages.tsv``, beside it (``passages.tsv.rows.npy``, see :class:`PassageStore`)."""
    path = Path(path)
    return path.with_name(path.name + ".rows.npy")


def id_hash(pid: str) -> int:
    """A passage id's 64-bit key in the row table (signed, as the table stores it)."""
    return int.from_bytes(hashlib.blake2b(pid.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def write_passages(path: str | Path, passages: Iterable[dict | tuple[str, str, str]]) -> int:
    """Write passages (dicts with id, title, text, or (id, title, text) tuples) to ``path``
    atomically, with the header, and its row table beside it (:func:`rows_path`); return the count.
    Duplicate ids (after cleaning) and an empty corpus are errors."""
    from array import array

    n = 0
    seen = IdSet()
    offsets, hashes = array("q"), array("q")
    with atomic_open(path, "wb") as fh:
        pos = fh.write(("\t".join(HEADER) + "\n").encode("utf-8"))
        for p in passages:
            pid, title, text = (p["id"], p["title"], p["text"]) if isinstance(p, dict) else p
            pid = clean_field(pid)
            if not seen.add(pid):
                raise DataError(f"{path}: duplicate passage id {pid!r}")
            offsets.append(pos)
            hashes.append(id_hash(pid))
            pos += fh.write(f"{pid}\t{clean_field(title)}\t{clean_field(text)}\n".encode("utf-8"))
            n += 1
        if n == 0:
            raise DataError(f"{path}: no passages to write")
    offsets.append(pos)
    keys = np.frombuffer(hashes, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    table = np.empty((3, n + 1), dtype=np.int64)
    table[0] = np.frombuffer(offsets, dtype=np.int64)
    table[1, :n], table[1, n] = keys[order], np.iinfo(np.int64).max
    table[2, :n], table[2, n] = order, -1
    try:
        with atomic_path(rows_path(path)) as tmp, open(tmp, "wb") as tfh:
            np.save(tfh, table)
    except BaseException:
        Path(path).unlink(missing_ok=True)  # no passages without their row table
        raise
    return n


def iter_passages(path: str | Path, header: bool | None = True) -> Iterator[tuple[int, str, str, str]]:
    """(line number, id, title, text) of every passage of a ``passages.tsv``, strictly (three fields a
    line, :func:`check_passage`, at least one passage). ``header``: True, the first line must be
    ``id<TAB>title<TAB>text``; None, it may be (a user's corpus in this layout)."""
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
        check_passage(f"{path}:{lineno}", seen, parts[0], parts[2])
        n += 1
        yield lineno, parts[0], parts[1], parts[2]
    if n == 0:
        raise DataError(f"{path}: empty file (no passages)")


def doc_entity(pid: str) -> str:
    """The article a passage came from: ``<doc>`` of a chunked passage id ``<doc>_<k>``, else the id."""
    head, _, tail = pid.rpartition("_")
    return head if head and tail.isdigit() else pid


@dataclass
class Passages:
    """Every passage in memory (:func:`read_passages`): for what reads the whole corpus."""

    ids: list[str]
    titles: list[str]
    texts: list[str]

    def __len__(self) -> int:
        return len(self.ids)

    def index_of(self) -> dict[str, int]:
        return {pid: i for i, pid in enumerate(self.ids)}

    def doc_entity(self, i: int) -> str:
        return doc_entity(self.ids[i])


def read_passages(path: str | Path) -> Passages:
    """All passages of a ``passages.tsv`` (see :func:`iter_passages`)."""
    ids, titles, texts = [], [], []
    for _, pid, title, text in iter_passages(path):
        ids.append(pid)
        titles.append(title)
        texts.append(text)
    return Passages(ids, titles, texts)


class PassageStore:
    """A ``passages.tsv`` read in place: what :class:`Passages` offers (``ids[j]``, ``titles[j]``,
    ``texts[j]``, ``index_of()``, ``doc_entity(j)``), each row read from the file when asked.

    The row table (:func:`rows_path`) is an int64 array [3, n + 1], memory-mapped: the byte offset of
    each row (and the file's size last), the ids' 64-bit keys (:func:`id_hash`) sorted, and the row
    of each key."""

    CACHED_ROWS = 65_536

    def __init__(self, path: str | Path):
        self.path = Path(path)
        table_path = rows_path(self.path)
        if not self.path.is_file():
            raise DataError(f"{self.path}: file not found")
        if not table_path.is_file():
            raise DataError(f"{table_path}: row table of {self.path} not found (written with it by `rag corpus` and "
                            f"`rag prepare-corpus`): write the passages again")
        try:
            table = np.load(table_path, mmap_mode="r")
        except (ValueError, OSError, EOFError) as exc:
            raise DataError(f"{table_path}: unreadable row table ({exc}): write the passages again") from None
        size = self.path.stat().st_size
        if table.ndim != 2 or table.shape[0] != 3 or table.shape[1] < 2 or table.dtype != np.int64 or int(table[0, -1]) != size:
            raise DataError(f"{table_path}: row table does not match {self.path} ({size} bytes): the file changed after "
                            f"its table was written; write the passages again")
        self.offsets, self.keys, self.key_rows = table[0], table[1, :-1], table[2, :-1]
        self._fd = os.open(self.path, os.O_RDONLY)
        self._row = functools.lru_cache(maxsize=self.CACHED_ROWS)(self._read_row)
        self.ids, self.titles, self.texts = (_Column(self, f) for f in range(3))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __del__(self):
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)

    def _read_row(self, j: int) -> tuple[str, str, str]:
        lo, hi = int(self.offsets[j]), int(self.offsets[j + 1])
        raw = os.pread(self._fd, hi - lo, lo)
        parts = raw.decode("utf-8").rstrip("\r\n").split("\t") if raw.endswith(b"\n") else []
        if len(parts) != 3:
            raise DataError(f"{self.path}: row {j} (bytes {lo}-{hi}) is not a passage line; the file does not match its "
                            f"row table {rows_path(self.path)}: write the passages again")
        return parts[0], parts[1], parts[2]

    def row(self, j: int) -> tuple[str, str, str]:
        """(id, title, text) of row ``j`` (0-based, in file order)."""
        n = len(self)
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError(f"passage row {j} out of range ({n} passages)")
        return self._row(int(j))

    def find(self, pid: str) -> int | None:
        """The row of passage ``pid``; None when the corpus has no such id."""
        key = id_hash(pid)
        i = int(np.searchsorted(self.keys, key))
        while i < len(self.keys) and int(self.keys[i]) == key:
            j = int(self.key_rows[i])
            if self.row(j)[0] == pid:
                return j
            i += 1
        return None

    def index_of(self) -> "_RowsOf":
        return _RowsOf(self)

    def doc_entity(self, i: int) -> str:
        return doc_entity(self.ids[i])


class _Column(Sequence):
    """One field (0 id, 1 title, 2 text) of a :class:`PassageStore`'s rows, by row number."""

    def __init__(self, store: PassageStore, field: int):
        self.store, self.field = store, field

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, j):
        if isinstance(j, slice):
            return [self.store.row(i)[self.field] for i in range(*j.indices(len(self)))]
        return self.store.row(j)[self.field]


class _RowsOf(Mapping):
    """id -> row of a :class:`PassageStore` (what :meth:`Passages.index_of` gives as a dict)."""

    def __init__(self, store: PassageStore):
        self.store = store

    def __getitem__(self, pid: str) -> int:
        j = self.store.find(pid)
        if j is None:
            raise KeyError(pid)
        return j

    def __contains__(self, pid) -> bool:
        return isinstance(pid, str) and self.store.find(pid) is not None

    def __len__(self) -> int:
        return len(self.store)

    def __iter__(self):
        return iter(self.store.ids)
