"""Atomic file output, strict line-oriented input, and the run lock of a checkpoint folder.

Every output is written to a temporary file or folder beside its destination and renamed into
place, with the mode a plain ``open`` / ``mkdir`` gives under the process umask (``mkstemp`` makes
0600), so an interrupted job never leaves a half-written file that Snakemake would take as finished.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

import yaml

from rag.errors import DataError, DiskFullError, RagError, disk_full_reason, name_too_long

log = logging.getLogger(__name__)


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux: /proc)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # the only portable way to read it: set, then put back at once
    os.umask(mask)
    return mask


def _file_system_full(folder: Path) -> bool:
    try:
        return os.statvfs(folder).f_bavail == 0
    except (OSError, AttributeError):
        return False


@contextlib.contextmanager
def disk_full_names(path: str | os.PathLike, folder: str | os.PathLike | None = None) -> Iterator[None]:
    """A write of ``path`` that fails for want of space raises DiskFullError, one line naming it:
    the libraries' own words for it (:func:`rag.errors.disk_full_reason`), or a failed write while
    ``folder``'s file system has no block left (torch.save's and numpy's short writes)."""
    try:
        yield
    except RagError:
        raise
    except Exception as exc:
        reason = disk_full_reason(exc)
        writing = isinstance(exc, OSError) or (isinstance(exc, RuntimeError) and any(
            w in str(exc) for w in ("inline_container", "PytorchStreamWriter", "write")))
        if reason is None and writing and folder is not None and _file_system_full(Path(folder)):
            reason = "No space left on device"
        if reason is None:
            if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:  # a temporary name beside it: name it
                raise DataError(name_too_long(path)) from None
            raise
        raise DiskFullError(f"{path}: {reason} (writing it failed; nothing was left in its place): free space "
                            f"and run again") from exc


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success. A full
    disk raises DiskFullError naming ``path``."""
    path = Path(path)
    with disk_full_names(path, path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        try:
            yield tmp_path
            os.chmod(tmp_path, 0o666 & ~current_umask())
            os.replace(tmp_path, path)
        finally:
            if tmp_path.exists():
                tmp_path.unlink()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w"):
    """Open a temporary file for writing (text: UTF-8) that replaces ``path`` when the block succeeds."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())


def _plain_modes(folder: Path) -> None:
    """Give ``folder`` and everything in it the mode a plain ``mkdir`` / ``open`` gives under the
    process umask (libraries write some files 0600)."""
    umask = current_umask()
    os.chmod(folder, 0o777 & ~umask)
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o777 & ~umask)
        for name in files:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), 0o666 & ~umask)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory that replaces directory ``path`` when the block succeeds (a full
    disk: DiskFullError naming ``path``)."""
    import shutil

    path = Path(path)
    with disk_full_names(path, path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        try:
            yield tmp
            _plain_modes(tmp)
            if path.exists():
                shutil.rmtree(path)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def not_a_file(path: str | os.PathLike) -> str:
    """Why ``path`` is not a regular file to read, in words: "file not found", "is a directory, not a
    file", "is a named pipe (FIFO), not a file" (reading one would wait for a writer), ..."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "file not found"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return f"is {what}, not a file"
    return "file not found"


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_open(path) as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, ensure_ascii=False)
        fh.write("\n")


def read_json(path: str | os.PathLike) -> Any:
    """One JSON document (gzip by suffix), strictly: errors name the file and the line."""
    text = "\n".join(line for _, line in iter_lines(path))
    if not text.strip():
        raise DataError(f"{path}: empty file (no records)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg} (column {exc.colno})") from None


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> int:
    n = 0
    with atomic_open(path) as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True))
            fh.write("\n")
            n += 1
    return n


def _open_bytes(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def long_line(path: str | os.PathLike, limit: int, lines: int | None = None) -> int | None:
    """The number of the first line (of the first ``lines``; None: all) of ``path`` (plain or .gz)
    longer than ``limit`` bytes, else None; never holds more than ``limit`` bytes of a line. Read
    errors are left to the reader that reads the file for its content."""
    import itertools

    try:
        with _open_bytes(Path(path)) as fh:
            for lineno in itertools.count(1) if lines is None else range(1, lines + 1):
                part = fh.readline(limit + 1)
                if not part:
                    return None
                if len(part) > limit and not (len(part) == limit + 1 and part.endswith(b"\n")):
                    return lineno
    except (OSError, EOFError, ValueError):
        return None
    return None


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """Yield (line number, line without newline), turning decoding and gzip faults into DataError.
    Each line is decoded on its own, so bad UTF-8 is reported on the line that holds it."""
    import zlib

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: {not_a_file(path)}")
    lineno = 0
    try:
        with _open_bytes(path) as fh:
            for lineno, raw in enumerate(fh, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DataError(f"{path}:{lineno}: not valid UTF-8 ({exc.reason} at byte {exc.start} of the line)") from None
                yield lineno, line.rstrip("\r\n")
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise DataError(f"{path}:{lineno + 1}: unreadable ({type(exc).__name__}: {exc}); truncated or corrupt file?") from None


def json_object(line: str, where: str) -> dict:
    """One line of a JSON-lines file as its object, strictly (errors start with ``where``)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: invalid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    return row


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every line of a JSON-lines file, strictly: no empty lines, every
    line one JSON object, at least one record."""
    n = 0
    for lineno, line in iter_lines(path):
        if not line.strip():
            raise DataError(f"{path}:{lineno}: empty line")
        n += 1
        yield lineno, json_object(line, f"{path}:{lineno}")
    if n == 0:
        raise DataError(f"{path}: empty file (no records)")


def read_jsonl(path: str | os.PathLike, required: Iterable[str] = ()) -> list[dict]:
    """Read a JSON-lines file strictly: every line one object holding the ``required`` keys."""
    required = tuple(required)
    rows = []
    for lineno, row in iter_jsonl(path):
        missing = [k for k in required if k not in row]
        if missing:
            raise DataError(f"{path}:{lineno}: missing field(s) {', '.join(missing)}")
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------ run lock
LOCK = "run.lock"


@contextlib.contextmanager
def run_lock(folder: str | os.PathLike, what: str) -> Iterator[Path]:
    """Hold an exclusive lock on ``folder/run.lock`` (``fcntl.flock``) while the block runs: one
    writer per checkpoint folder, whatever Snakemake's own locks say. A second process is refused
    at once with one line naming ``what`` (the run), the lock's holder and the file. The lock ends
    with its process; the file stays, naming the last holder."""
    import fcntl
    import socket

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RagError(f"{what} is being written by another process ({_holder(fd)}): {path} is locked; wait for "
                           "that process to end (or stop it), then run this again") from None
        except OSError as exc:  # a file system without locks (some network file systems)
            log.warning("%s: cannot lock it (%s); nothing stops a second process from writing %s at the same time",
                        path, exc, what)
        else:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> str:
    return os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "a process"


def lock_holder(folder: str | os.PathLike) -> str | None:
    """The holder line ("pid N on host") of ``folder/run.lock`` (:func:`run_lock`) while a live
    process holds it, else None. Takes the lock for an instant when it is free."""
    import fcntl

    try:
        fd = os.open(Path(folder) / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None


# ------------------------------------------------------------------------------------ the user's YAML
class YamlLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping giving one key twice (YAML keeps the last, silently),
    naming the key and both lines: the loader of every YAML file of the user's the harness reads
    (configs, band files: :func:`read_yaml`)."""

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        seen: dict[tuple[str, str], yaml.Node] = {}
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                first = seen.setdefault((key.tag, key.value), key)
                if first is not key:
                    raise yaml.composer.ComposerError(
                        None, None, f"key {key.value!r:.80} given twice, on lines {first.start_mark.line + 1} and "
                        f"{key.start_mark.line + 1} (YAML would keep the second, silently); give it once", key.start_mark)
        return node


def read_yaml(stream) -> Any:
    """The YAML document of ``stream`` (text or a file opened for reading) with :class:`YamlLoader`."""
    return yaml.load(stream, Loader=YamlLoader)


MAX_CONFIG_VALUES = 100_000  # a config holds hundreds; YAML aliases repeating lists of lists make billions


def alias_bomb(data: Any) -> tuple[tuple, int] | None:
    """(the path of the first mapping or list, total) where YAML aliases (``&a`` / ``*a``) expand
    ``data`` to more than :data:`MAX_CONFIG_VALUES` values (an alias bomb), else None; linear in the loaded size."""
    sizes: dict[int, int] = {}
    found: list[tuple[tuple, int]] = []  # post-order: the first node over the limit

    def size(node: Any, path: tuple) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = 0  # a cycle (a YAML alias inside its own anchor) counts once
        children = node.items() if isinstance(node, dict) else enumerate(node)
        total = 1 + sum(size(value, path + (key,)) for key, value in children)
        sizes[id(node)] = total
        if total > MAX_CONFIG_VALUES and not found:
            found.append((path, total))
        return total

    size(data, ())
    return found[0] if found else None
