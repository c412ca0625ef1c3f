"""What sync tools leave in a vault beside the notes, told apart by name (layer 1, pure): Syncthing conflict
copies and iCloud placeholders. Re-exported by :mod:`cairn.vault`.

- Syncthing keeps both sides of a conflicting edit: the loser is renamed
  ``<name>.sync-conflict-<YYYYMMDD>-<HHMMSS>-<device id, 7 characters><.ext>`` beside the note. Indexed, it would
  be searched and cited as if it were the note; by default it is recorded as skipped, naming the note it copies.
- iCloud Drive evicts a file it keeps only online: ``Note.md`` is replaced by the hidden ``.Note.md.icloud``.
  The note is not deleted: it is "not downloaded", and its last indexed version is kept.
"""

from __future__ import annotations

import re

__all__ = [
    "NOT_DOWNLOADED",
    "conflict_copy_of",
    "conflict_reason",
    "icloud_placeholder_of",
    "is_not_downloaded",
    "not_downloaded_reason",
]

_SYNC_CONFLICT_RE = re.compile(r"(?P<stem>.+?)\.sync-conflict-\d{8}-\d{6}-[A-Z0-9]{7}(?P<ext>\.[^./]+)?")
_ICLOUD_RE = re.compile(r"\.(?P<name>[^./][^/]*)\.icloud")
#: How every "not downloaded" reason starts (:func:`is_not_downloaded`).
NOT_DOWNLOADED = "not downloaded"


def conflict_copy_of(rel: str) -> str | None:
    """The vault-relative path of the note that ``rel`` is a Syncthing conflict copy of
    (``Plans/Trip.sync-conflict-20240315-101112-ABCDEF7.md`` → ``Plans/Trip.md``), else None."""
    folder, _, name = rel.rpartition("/")
    m = _SYNC_CONFLICT_RE.fullmatch(name)
    if m is None:
        return None
    original = m["stem"] + (m["ext"] or "")
    return f"{folder}/{original}" if folder else original


def conflict_reason(rel: str, original: str) -> str:
    """Why the conflict copy ``rel`` of ``original`` is not indexed (``/index/stats``, ``cairn index``)."""
    return (
        f"not indexed: a Syncthing conflict copy of {original!r} (the other side of an edit made on two devices "
        'at once); merge what you need into that note and delete this file, or set sync_conflicts = "index" '
        "in the config to index conflict copies as notes"
    )


def icloud_placeholder_of(name: str) -> str | None:
    """The file name an iCloud placeholder stands for (``.Note.md.icloud`` → ``Note.md``), else None."""
    m = _ICLOUD_RE.fullmatch(name)
    return m["name"] if m else None


def not_downloaded_reason(placeholder: str) -> str:
    """What ``/index/stats`` says of a note only its iCloud placeholder (file name ``placeholder``) stands for."""
    return (
        f"{NOT_DOWNLOADED}: iCloud keeps this file only online (its placeholder {placeholder!r} is on disk); the "
        "last indexed version is kept — download it (Finder: Download Now, or keep the vault folder downloaded) to "
        "index its current text"
    )


def is_not_downloaded(reason: str) -> bool:
    """Whether an unreadable place's ``reason`` is :func:`not_downloaded_reason`'s (not an error: not retried)."""
    return reason.startswith(NOT_DOWNLOADED)
