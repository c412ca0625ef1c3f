"""Reading one vault file's bytes (layer 1): a note's text as UTF-8 with a reason the owner can act on, a file's
sha256. Re-exported by :mod:`cairn.vault`."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cairn.errors import FileOpenError, NoteReadError


def _human_size(n: int) -> str:
    for unit, factor in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= factor:
            return f"{n / factor:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


def read_note_text(abs_path: Path, *, max_bytes: int) -> tuple[str, str]:
    """Read a note as UTF-8: return (text without BOM, sha256 hex digest of the raw bytes).

    Raises :class:`~cairn.errors.NoteReadError` with a human reason when the file
    is larger than ``max_bytes`` ("file is 7.2 MB, limit 5 MB"), looks binary
    (NUL bytes; UTF-16 is named as such) or is not valid UTF-8 (the byte, its
    offset and line are given); its subclass :class:`~cairn.errors.FileOpenError` when the file cannot be
    opened or read now (the OS error: permission denied, too many open files, locked, vanished).
    """
    limit = _human_size(max_bytes)
    try:
        with open(abs_path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > max_bytes:
                raise NoteReadError(
                    f"file is {_human_size(size)}, limit {limit}; raise max_note_bytes in the config to index it"
                )
            raw = fh.read(max_bytes + 1)
    except NoteReadError:
        raise
    except OSError as exc:  # not a property of the note's bytes: looked at again later, never a deletion
        raise FileOpenError(f"cannot open or read the file now: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:  # grew while we were reading
        raise NoteReadError(f"file is over {limit}, limit {limit}; raise max_note_bytes in the config to index it")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise NoteReadError("file is UTF-16 text, not UTF-8; re-save it as UTF-8 to index it")
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise NoteReadError(f"file looks binary (NUL byte at offset {nul}), not a UTF-8 text note")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise NoteReadError(
            f"file is not valid UTF-8: byte 0x{raw[exc.start]:02X} at offset {exc.start} (line {line}); "
            "re-save it as UTF-8 (it may be Latin-1 or Windows-1252)"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, hashlib.sha256(raw).hexdigest()


def file_digest(path: Path) -> str:
    """sha256 (hex) of the file's bytes, read 1 MB at a time; ``""`` when it cannot be read."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return ""
    return h.hexdigest()
