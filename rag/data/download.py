"""Resumable, verified downloads (standard library only).

``download(url, dest)`` fetches ``url`` into ``<dest>.part``, resumed by a later call with
``Range: bytes=<size>-`` (206 appends, 200 restarts, 416: the part is complete); the finished part
is checked against ``sha256`` or, without it, against the size and SHA-256 the first download
recorded in ``<dest>.sha256.json``, and only then renamed onto ``dest``. Only ``https://`` URLs are
accepted; ``http://`` only with ``allow_http=True`` (local tests).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from pathlib import Path

from rag.errors import ConfigError, DataError

log = logging.getLogger(__name__)

USER_AGENT = "rag-reproduction-download/1.0"


def _check_scheme(url: str, allow_http: bool) -> None:
    from urllib.parse import urlsplit

    scheme = urlsplit(url).scheme.lower()
    if scheme == "https" or (scheme == "http" and allow_http):
        return
    hint = " (pass allow_http / --allow-http only for a local test server)" if scheme == "http" else ""
    raise ConfigError(f"refusing to download {url!r}: only https:// URLs are allowed{hint}")


def _read_record(record: Path) -> dict | None:
    if not record.exists():
        return None
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{record}: unreadable download record ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("sha256"), str) or not isinstance(data.get("size"), int):
        raise DataError(f"{record}: malformed download record (needs integer 'size' and string 'sha256')")
    return data


def _verify(url: str, path: Path, sha256: str | None, record: Path, what: str) -> None:
    """Check ``path`` against ``sha256`` or, failing that, the record; record it when neither exists."""
    from rag.io import write_json
    from rag.manifest import PROGRESS_BYTES, sha256_file

    size = path.stat().st_size
    digest = sha256_file(path, progress=size >= PROGRESS_BYTES)
    if sha256 is not None and digest != sha256.lower():
        raise DataError(f"{url}: checksum mismatch: expected {sha256.lower()}, got {digest} ({what} {path})")
    rec = _read_record(record)
    if rec is None:
        write_json(record, {"url": url, "size": size, "sha256": digest})
        log.info("recorded %s: %d bytes, sha256 %s (in %s)", path, size, digest, record)
        return
    if sha256 is None and (rec["size"] != size or rec["sha256"] != digest):
        raise DataError(
            f"{url}: checksum mismatch: expected {rec['sha256']} ({rec['size']} bytes, recorded in {record}), "
            f"got {digest} ({size} bytes) for {what} {path}"
        )


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, total size) of a Content-Range header ('bytes 0-9/100' or 'bytes */100'); None where absent."""
    m = re.match(r"\s*bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)\s*$", value or "")
    if not m:
        return None, None
    return (int(m.group(1)) if m.group(1) else None), (None if m.group(2) == "*" else int(m.group(2)))


def _fetch(url: str, part: Path, chunk_size: int, timeout: float) -> None:
    """Bring ``part`` to the complete remote content (resuming when it exists)."""
    import http.client
    import socket
    import urllib.error
    import urllib.request

    from tqdm import tqdm

    for _ in range(2):  # a second attempt only after discarding an unusable part
        offset = part.stat().st_size if part.exists() else 0
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        request = urllib.request.Request(url, headers=headers)
        try:
            response = urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and offset:
                total = _content_range(exc.headers.get("Content-Range"))[1]
                exc.close()
                if total == offset:
                    log.info("%s: %s already complete (%d bytes)", url, part, offset)
                    return
                log.warning("%s: server rejected resume at byte %d (size %s); restarting", url, offset, total)
                part.unlink()
                continue
            raise DataError(f"{url}: HTTP error {exc.code} {exc.reason}") from None
        except urllib.error.URLError as exc:
            raise DataError(f"{url}: download failed: {exc.reason}") from None
        except (OSError, http.client.HTTPException) as exc:
            raise DataError(f"{url}: download failed: {type(exc).__name__}: {exc}") from None

        with response:
            status = response.status
            length = response.headers.get("Content-Length")
            length = int(length) if length and length.isdigit() else None
            if status == 206 and offset:
                start = _content_range(response.headers.get("Content-Range"))[0]
                if start != offset:
                    raise DataError(
                        f"{url}: server answered the resume at byte {offset} with Content-Range "
                        f"{response.headers.get('Content-Range')!r}; delete {part} to restart"
                    )
                mode = "ab"
            elif status == 200:
                if offset:
                    log.info("%s: server ignored the Range request; restarting from scratch", url)
                offset, mode = 0, "wb"
            else:
                raise DataError(f"{url}: unexpected HTTP status {status} {response.reason}")
            expected = offset + length if length is not None else None
            written = offset
            bar = tqdm(
                total=expected, initial=offset, unit="B", unit_scale=True, unit_divisor=1024,
                desc=part.name[:-5], file=sys.stderr, disable=not sys.stderr.isatty(), leave=False,
            )
            try:
                with open(part, mode) as fh:
                    while True:
                        try:
                            block = response.read(chunk_size)
                        except (OSError, http.client.HTTPException, socket.timeout) as exc:
                            raise DataError(
                                f"{url}: connection lost after {written} bytes ({type(exc).__name__}: {exc}); "
                                f"partial download kept in {part}, run again to resume"
                            ) from None
                        if not block:
                            break
                        fh.write(block)
                        written += len(block)
                        bar.update(len(block))
                    fh.flush()
                    os.fsync(fh.fileno())
            finally:
                bar.close()
            if expected is not None and written != expected:
                raise DataError(
                    f"{url}: connection lost after {written} of {expected} bytes; "
                    f"partial download kept in {part}, run again to resume"
                )
            return
    raise DataError(f"{url}: could not resume or restart the download into {part}")


def download(
    url: str,
    dest: Path,
    sha256: str | None = None,
    allow_http: bool = False,
    chunk_size: int = 1 << 20,
    timeout: float = 60,
) -> Path:
    """Download ``url`` to ``dest`` (resumable, verified, atomic); return ``dest``. A ``dest`` that exists
    and verifies is not fetched again; a failed verification raises :class:`DataError` and leaves no ``dest``."""
    _check_scheme(url, allow_http)
    if sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        raise ConfigError(f"sha256 for {url}: expected 64 hex digits, got {sha256!r}")
    dest = Path(dest)
    record = dest.with_name(dest.name + ".sha256.json")
    if dest.exists():
        _verify(url, dest, sha256, record, "existing file")
        log.info("%s: %s present and verified", url, dest)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    _fetch(url, part, chunk_size, timeout)
    try:
        _verify(url, part, sha256, record, "downloaded file")
    except DataError:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, dest)
    log.info("%s: saved to %s", url, dest)
    return dest
