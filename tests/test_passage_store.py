"""passages.tsv read in place (rag.data.corpus.PassageStore) against the parse of every line."""

import numpy as np
import pytest

from rag.data.corpus import PassageStore, read_passages, rows_path, write_passages
from rag.errors import DataError

ROWS = [("a_0", "Éa", "one two"), ("a_1", "Éa", "three\tfour"), ("b", "B", "five\nsix"), ("c_10", "", "seven"),
        ("日本_0", "日本", "八 九")]


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "passages.tsv"
    write_passages(path, ROWS)
    return path


def test_the_store_reads_what_the_parser_reads(corpus):
    full, store = read_passages(corpus), PassageStore(corpus)
    assert len(store) == len(full) == len(ROWS)
    assert list(store.ids) == full.ids and list(store.titles) == full.titles and list(store.texts) == full.texts
    assert [store.texts[j] for j in (4, 0, 2, -1)] == [full.texts[j] for j in (4, 0, 2, -1)]
    rows_of = store.index_of()
    assert {pid: rows_of[pid] for pid in full.ids} == full.index_of()
    assert "zz" not in rows_of and "b" in rows_of
    with pytest.raises(KeyError):
        rows_of["zz"]
    assert [store.doc_entity(j) for j in range(len(store))] == [full.doc_entity(j) for j in range(len(full))]
    with pytest.raises(IndexError):
        store.texts[len(ROWS)]


def test_the_row_table_holds_offsets_and_sorted_id_keys(corpus):
    table = np.load(rows_path(corpus))
    data = corpus.read_bytes()
    assert table.shape == (3, len(ROWS) + 1) and table[0, -1] == len(data)
    assert data[table[0, 0] : table[0, 1]].decode().startswith("a_0\t")
    assert np.all(np.diff(table[1, :-1]) >= 0) and sorted(table[2, :-1]) == list(range(len(ROWS)))


def test_a_changed_or_missing_table_is_refused_in_one_line(corpus):
    corpus.write_text(corpus.read_text() + "d\tD\tten\n")
    with pytest.raises(DataError, match=r"row table does not match .*passages\.tsv .*write the passages again"):
        PassageStore(corpus)
    rows_path(corpus).unlink()
    with pytest.raises(DataError, match=r"passages\.tsv\.rows\.npy: row table of .* not found"):
        PassageStore(corpus)
