"""The project's error types: every failure a user can cause ends in one clear message."""

from __future__ import annotations

import errno
import os


class RagError(Exception):
    """Base class: the CLI prints ``error: <message>`` and exits with status 2."""


class ConfigError(RagError):
    """A configuration value is missing, malformed or inconsistent (message names the key)."""


class DataError(RagError):
    """An input file is missing, truncated or malformed (message names file and line)."""


class DiskFullError(RagError):
    """A write failed for want of space (message names the file and says "No space left on device")."""


# what libraries say of a full disk when they raise something other than OSError(ENOSPC), and the
# reason it is: safetensors and tokenizers (Rust: "os error 28"), SQLite, faiss ("(No space left on device)")
_FULL_TEXTS = {"No space left on device": "No space left on device", "os error 28": "No space left on device",
               "Disk quota exceeded": "Disk quota exceeded", "os error 122": "Disk quota exceeded",
               "database or disk is full": "No space left on device (SQLite: database or disk is full)"}


def chain(exc: BaseException | None):
    """``exc`` and the exceptions it was raised from (its cause, else its context), each once."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def disk_full_reason(exc: BaseException | None) -> str | None:
    """"No space left on device" (or "Disk quota exceeded") when ``exc`` or an exception it was
    raised from is a full disk, else None."""
    for e in chain(exc):
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return os.strerror(e.errno)
        for marker, reason in _FULL_TEXTS.items():
            if marker in str(e):
                return reason
    return None


# what torch says when an allocation fails (CPU: "DefaultCPUAllocator: can't allocate memory", CUDA:
# "CUDA out of memory"); MemoryError is Python's own
_OOM_TEXTS = ("DefaultCPUAllocator", "CUDA out of memory", "out of memory")


def out_of_memory_reason(exc: BaseException | None) -> str | None:
    """The allocator's words (from "DefaultCPUAllocator" on, one line) when ``exc`` or an exception
    it was raised from is an allocation that failed, else None."""
    for e in chain(exc):
        if isinstance(e, MemoryError):
            return f"MemoryError {e}".strip()
        text = " ".join(str(e).split())
        for marker in _OOM_TEXTS:
            if marker in text:
                return text[text.index(marker):][:200]
    return None


def failure_line(exc: BaseException, command: str) -> str | None:
    """The one line ``rag <command>`` prints for a failure the system caused rather than the code (a
    full disk, no memory left, a file name too long, a directory where a file belongs, a write the
    file system refuses), naming the file or the step and what to do; None for any other exception."""
    reason = disk_full_reason(exc)
    if reason is not None:
        where = getattr(exc, "filename", None) or "an output of this step"
        return f"{where}: {reason} ({type(exc).__name__}); free space and run again"
    oom = out_of_memory_reason(exc)
    if oom is not None:
        return (f"rag {command}: out of memory ({oom}); give the job more memory (config resources: <rule>: mem_mb, or a "
                f"larger machine) or make it need less (train.batch_size, train.k, generator sizes, retriever.batch_size)")
    if isinstance(exc, OSError) and exc.filename is not None:
        name = exc.filename
        if exc.errno == errno.ENAMETOOLONG:
            return name_too_long(name)
        if exc.errno == errno.EISDIR:
            return f"{name}: is a directory, not a file"
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return f"{name}: {os.strerror(exc.errno)}; change its permissions (or its folder's) or use another path"
    return None


def name_too_long(name: object) -> str:
    """The line for a path the file system refuses as too long (its start: the path is that long)."""
    return f"{str(name)[:80]}...: file name too long (over 255 bytes a name, or 4096 a path); use a shorter one"
