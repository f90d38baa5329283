"""rag.io's atomic writers: outputs get the mode the process umask gives, as open()/mkdir() would."""

from __future__ import annotations

import os
import stat

import pytest

from rag import io as rio


# umask -> (file mode, directory mode) that open() / mkdir() give under it
MODES = {0o022: (0o644, 0o755), 0o027: (0o640, 0o750), 0o077: (0o600, 0o700)}


@pytest.fixture(params=sorted(MODES), ids=lambda m: f"umask{m:03o}")
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_current_umask_reads_without_changing(umask):
    assert rio.current_umask() == umask
    assert os.umask(umask) == umask  # still set to what the fixture set


def test_current_umask_without_proc(umask, monkeypatch):
    real_open = open

    def no_proc(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", no_proc)
    assert rio.current_umask() == umask
    assert os.umask(umask) == umask


def test_atomic_file_gets_the_umask_mode(tmp_path, umask):
    want = MODES[umask][0]
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert _mode(plain) == want  # what a plain open() gives
    with rio.atomic_open(tmp_path / "out" / "a.txt") as fh:
        fh.write("a")
    assert _mode(tmp_path / "out" / "a.txt") == want
    rio.write_json(tmp_path / "b.json", {"b": 1})
    assert _mode(tmp_path / "b.json") == want
    # a writer that is handed the temporary path (np.save, faiss.write_index, torch.save) reopens
    # the 0600 file mkstemp made: the mode is fixed before the rename all the same
    with rio.atomic_path(tmp_path / "c.bin") as tmp:
        with open(tmp, "wb") as fh:
            fh.write(b"c")
    assert _mode(tmp_path / "c.bin") == want
    # replacing an existing output
    with rio.atomic_open(tmp_path / "out" / "a.txt") as fh:
        fh.write("a2")
    assert _mode(tmp_path / "out" / "a.txt") == want and (tmp_path / "out" / "a.txt").read_text() == "a2"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.txt", "b.json", "c.bin", "out", "plain.txt"]


def test_atomic_dir_gets_the_umask_mode(tmp_path, umask):
    want = MODES[umask][1]
    (tmp_path / "plain").mkdir()
    assert _mode(tmp_path / "plain") == want  # what a plain mkdir() gives
    for _ in range(2):  # a new directory, then one replacing it
        with rio.atomic_dir(tmp_path / "model") as tmp:
            (tmp / "sub").mkdir()
            (tmp / "sub" / "weights.bin").write_bytes(b"w")
    assert _mode(tmp_path / "model") == want
    assert _mode(tmp_path / "model" / "sub") == want
    assert _mode(tmp_path / "model" / "sub" / "weights.bin") == MODES[umask][0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "plain"]


def test_failed_write_leaves_nothing(tmp_path, umask):
    with pytest.raises(RuntimeError):
        with rio.atomic_open(tmp_path / "a.txt") as fh:
            fh.write("half")
            raise RuntimeError("interrupted")
    with pytest.raises(RuntimeError):
        with rio.atomic_dir(tmp_path / "d"):
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []
