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


# what libraries say of a full disk when they raise something other than OSError(ENOSPC):
# safetensors and tokenizers (Rust: "os error 28"), SQLite, faiss ("(No space left on device)")
_FULL_TEXTS = ("No space left on device", "os error 28", "Disk quota exceeded", "os error 122",
               "database or disk is full")


def disk_full_reason(exc: BaseException | None) -> str | None:
    """"No space left on device" (or "Disk quota exceeded") when ``exc`` or an exception it was
    raised from is a full disk, else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return os.strerror(exc.errno)
        text = str(exc)
        for marker in _FULL_TEXTS:
            if marker in text:
                quota = "quota" in marker or "122" in marker
                return "Disk quota exceeded" if quota else "No space left on device" + (
                    " (SQLite: database or disk is full)" if marker.startswith("database") else "")
        exc = exc.__cause__ or exc.__context__
    return None
