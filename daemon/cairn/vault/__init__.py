"""Reading the vault from disk (layer 1): scanning folders, reading note text, containing paths.

The vault is read-only to Cairn: nothing here writes, moves or deletes a file.

- :func:`scan_vault` yields the notes to index (``.md`` by default) as
  :class:`VaultFile`; :func:`list_all_files` yields every file path (attachments
  too) for :class:`cairn.notes.LinkResolver`.
- Skipped always: hidden files and folders (leading ``.``, which covers
  ``.obsidian/``, ``.trash/`` and ``.git/``), symlinks leading outside the vault,
  folders already visited through another symlink (no loops, no duplicates),
  and the configured gitignore-style globs.
- :func:`read_note_text` decodes a note as UTF-8 or raises
  :class:`~cairn.errors.NoteReadError` with a reason the owner can act on.
- :func:`resolve_in_vault` turns a client-supplied vault-relative path into an
  absolute path, raising :class:`~cairn.errors.PathOutsideVault` for escapes.

Vault-relative paths are POSIX (``/``), Unicode NFC (macOS stores file names in
NFD; Obsidian links are typed in NFC), without a leading ``./``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from cairn.errors import NoteReadError, PathOutsideVault

__all__ = [
    "VaultFile",
    "scan_vault",
    "list_all_files",
    "read_note_text",
    "resolve_in_vault",
    "normalise_rel_path",
    "IgnoreRules",
    "stat_hint",
    "hinted_paths",
    "on_disk_path",
    "file_digest",
]

log = logging.getLogger(__name__)

#: File kinds by extension (lower-case, with the dot); others get the bare extension.
_KINDS = {".md": "markdown", ".pdf": "pdf", ".canvas": "canvas"}


@dataclass(frozen=True, slots=True)
class VaultFile:
    """One file found in the vault.

    ``path`` is vault-relative (POSIX, NFC); ``abs_path`` is the file under the
    given root as spelled on disk (possibly NFD; symlinks not resolved); ``mtime_ns`` is the modification time
    in nanoseconds and ``size`` the size in bytes (of the symlink's target for a
    symlinked file); ``kind`` is ``"markdown"`` for ``.md`` files.
    """

    path: str
    abs_path: Path
    mtime_ns: int
    size: int
    kind: str


def normalise_rel_path(p: str) -> str:
    """Normalise a vault-relative path: ``\\`` to ``/``, Unicode NFC, no ``./`` or empty segments, no trailing ``/``.

    ``..`` segments and a leading ``/`` are kept as they are, so that
    :func:`resolve_in_vault` can refuse them.
    """
    p = unicodedata.normalize("NFC", p.replace("\\", "/"))
    leading = "/" if p.startswith("/") else ""
    parts = [seg for seg in p.split("/") if seg not in ("", ".")]
    return leading + "/".join(parts)


# ------------------------------------------------------------------ ignore rules

def _glob_to_regex(glob: str) -> str:
    """Translate one gitignore glob (without leading/trailing ``/``) to a regex over a whole path."""
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        ch = glob[i]
        if ch == "*":
            if glob.startswith("**", i):
                at_start = i == 0 or glob[i - 1] == "/"
                j = i + 2
                if at_start and j < n and glob[j] == "/":  # "**/" : zero or more folders
                    out.append("(?:.*/)?")
                    i = j + 1
                    continue
                if at_start and j == n:  # trailing "/**": everything inside
                    out.append(".*")
                    i = j
                    continue
                out.append(".*")
                i = j
                continue
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            j = glob.find("]", i + 2 if glob.startswith("[!", i) or glob.startswith("[]", i) else i + 1)
            if j < 0:
                out.append(re.escape(ch))
            else:
                body = glob[i + 1 : j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        elif ch == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(glob[i]))
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


class IgnoreRules:
    """gitignore-style globs over vault-relative paths.

    As in ``.gitignore``: a pattern without ``/`` matches a file or folder name
    at any depth (``*.excalidraw.md``, ``Templates``); a pattern with a ``/``
    inside or at the start is anchored at the vault root (``archive/**``,
    ``/Daily``); a trailing ``/`` matches folders only (``Templates/``);
    ``**`` spans folders; ``!pattern`` re-includes; the last matching pattern
    wins; blank lines and ``#`` comments are ignored. A file inside an ignored
    folder cannot be re-included (the folder is never entered). Case-sensitive.
    """

    def __init__(self, patterns: Sequence[str] = ()) -> None:
        self._rules: list[tuple[re.Pattern[str], bool, bool, bool]] = []
        for raw in patterns:
            pat = unicodedata.normalize("NFC", str(raw).strip())
            if not pat or pat.startswith("#"):
                continue
            negate = pat.startswith("!")
            if negate:
                pat = pat[1:]
            dir_only = pat.endswith("/")
            pat = pat.rstrip("/")
            anchored = "/" in pat  # a leading or middle "/" anchors at the vault root
            pat = pat.lstrip("/")
            if not pat:
                continue
            self._rules.append((re.compile(_glob_to_regex(pat) + r"\Z", re.DOTALL), negate, dir_only, anchored))

    def __bool__(self) -> bool:
        return bool(self._rules)

    def excludes(self, rel_path: str) -> bool:
        """As the vault scan decides for a file or folder at vault-relative ``rel_path``: a hidden segment
        (``.obsidian/``, ``.trash/``, ``.git/``…), an ignored folder on the way, or the path itself matching
        the globs (as a file and as a folder)."""
        parts = rel_path.split("/")
        if any(p.startswith(".") for p in parts):
            return True
        if not self._rules:
            return False
        for i in range(1, len(parts)):
            if self.ignored("/".join(parts[:i]), True):
                return True
        return self.ignored(rel_path, False) and self.ignored(rel_path, True)

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        """True when the vault-relative ``rel_path`` (a folder if ``is_dir``) is excluded."""
        name = rel_path.rsplit("/", 1)[-1]
        result = False
        for regex, negate, dir_only, anchored in self._rules:
            if dir_only and not is_dir:
                continue
            if regex.match(rel_path if anchored else name):
                result = not negate
        return result


# ----------------------------------------------------------------------- scanning

def _walk(root: Path, ignore: Sequence[str]) -> Iterator[tuple[str, Path, os.stat_result]]:
    """Yield (vault-relative path, abs path, stat) for every non-ignored regular file, sorted by path."""
    root = Path(root)
    try:
        root_real = root.resolve(strict=True)
    except OSError as exc:
        raise FileNotFoundError(f"vault folder {str(root)!r} cannot be opened: {exc.strerror or exc}") from None
    rules = IgnoreRules(ignore)
    visited: set[str] = {str(root_real)}

    def inside(real: str) -> bool:
        base = str(root_real)
        return real == base or real.startswith(base.rstrip(os.sep) + os.sep)

    def walk_dir(abs_dir: Path, rel_dir: str) -> Iterator[tuple[str, Path, os.stat_result]]:
        try:
            with os.scandir(abs_dir) as it:
                entries = list(it)
        except OSError as exc:
            log.warning("Skipping folder %r of the vault: %s", rel_dir or ".", exc.strerror or exc)
            return
        items: list[tuple[str, str, os.DirEntry[str], bool, os.stat_result]] = []
        for entry in entries:
            name = unicodedata.normalize("NFC", entry.name)
            if name.startswith("."):
                continue
            try:
                st = entry.stat(follow_symlinks=True)
            except OSError:  # broken symlink, vanished file, permission denied
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if not is_dir and not stat.S_ISREG(st.st_mode):
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if rules and rules.ignored(rel, is_dir):
                continue
            if entry.is_symlink() and not inside(os.path.realpath(entry.path)):
                log.info("Skipping %r: symlink leads outside the vault", rel)
                continue
            # Sorting by name + "/" for folders gives the same order as sorting full paths.
            items.append((name + "/" if is_dir else name, rel, entry, is_dir, st))
        items.sort(key=lambda item: item[0])
        for _key, rel, entry, is_dir, st in items:
            if is_dir:
                real = os.path.realpath(entry.path)
                if real in visited:
                    log.info("Skipping %r: folder already scanned through another path (symlink)", rel)
                    continue
                visited.add(real)
                yield from walk_dir(Path(entry.path), rel)
            else:
                # entry.path keeps the on-disk spelling (it may be NFD while `rel` is NFC).
                yield rel, Path(entry.path), st

    yield from walk_dir(root, "")


def scan_vault(root: Path, ignore: Sequence[str] = (), *, extensions: Sequence[str] = (".md",)) -> Iterator[VaultFile]:
    """Yield the vault's files with one of ``extensions`` (case-insensitive), sorted by vault-relative path.

    Skips hidden files and folders (``.obsidian/``, ``.trash/``, ``.git/``...),
    paths matching the gitignore-style ``ignore`` globs (see :class:`IgnoreRules`),
    and symlinks leading outside the vault. Symlinked folders inside the vault
    are followed once (each real folder is scanned at most once, so loops end).
    Raises ``FileNotFoundError`` when ``root`` does not exist.
    """
    exts = tuple(e.lower() if e.startswith(".") else "." + e.lower() for e in extensions)
    for rel, abs_path, st in _walk(Path(root), ignore):
        lower = rel.lower()
        ext = next((e for e in exts if lower.endswith(e)), None)
        if ext is None:
            continue
        yield VaultFile(rel, abs_path, st.st_mtime_ns, st.st_size, _KINDS.get(ext, ext.lstrip(".")))


def stat_hint(root: Path, rel: str, rules: IgnoreRules, *, extensions: Sequence[str] = (".md",)) -> list[VaultFile]:
    """The files with one of ``extensions`` at vault-relative ``rel`` now (a file event is only a hint): [] when
    it is gone or another kind of file, the file itself, or — for a folder — those under it that ``rules`` do
    not exclude. A symlinked file leading outside ``root`` counts as absent."""
    exts = tuple(e.lower() for e in extensions)
    abs_path = on_disk_path(root, rel)
    try:
        st = abs_path.stat()
    except OSError:
        return []
    if stat.S_ISDIR(st.st_mode):
        try:
            inner = list(scan_vault(abs_path, extensions=exts))
        except OSError:
            return []
        return [VaultFile(f"{rel}/{vf.path}", vf.abs_path, vf.mtime_ns, vf.size, vf.kind) for vf in inner
                if not rules.excludes(f"{rel}/{vf.path}")]
    ext = next((e for e in exts if rel.lower().endswith(e)), None)
    if not stat.S_ISREG(st.st_mode) or ext is None:
        return []
    if abs_path.is_symlink() and not Path(os.path.realpath(abs_path)).is_relative_to(Path(root).resolve()):
        return []
    return [VaultFile(rel, abs_path, st.st_mtime_ns, st.st_size, _KINDS.get(ext, ext.lstrip(".")))]


def hinted_paths(paths: Iterable[str], rules: IgnoreRules) -> Iterator[str]:
    """The hinted paths worth a look, vault-relative and NFC: empty, absolute, ``..`` and ignored or hidden ones
    are dropped (a file event is only a hint; see :meth:`cairn.indexer.Indexer.index_paths`)."""
    for raw in paths:
        rel = normalise_rel_path(str(raw))
        if rel and not rel.startswith("/") and ".." not in rel.split("/") and not rules.excludes(rel):
            yield rel


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


def list_all_files(root: Path, ignore: Sequence[str] = ()) -> Iterator[str]:
    """Yield the vault-relative path of every non-ignored file (notes and attachments), sorted.

    Same skipping rules as :func:`scan_vault`; meant to build a
    :class:`cairn.notes.LinkResolver`.
    """
    for rel, _abs, _st in _walk(Path(root), ignore):
        yield rel


# ------------------------------------------------------------------------ reading

def _human_size(n: int) -> str:
    for unit, factor in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= factor:
            return f"{n / factor:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


def read_note_text(abs_path: Path, *, max_bytes: int) -> tuple[str, str]:
    """Read a note as UTF-8: return (text without BOM, sha256 hex digest of the raw bytes).

    Raises :class:`~cairn.errors.NoteReadError` with a human reason when the file
    is larger than ``max_bytes`` ("file is 7.2 MB, limit 5 MB"), looks binary
    (NUL bytes; UTF-16 is named as such), is not valid UTF-8 (the byte, its
    offset and line are given) or cannot be read (the OS error).
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
    except OSError as exc:
        raise NoteReadError(f"cannot read the file: {exc.strerror or exc}") from None
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


# -------------------------------------------------------------------- containment

def on_disk_path(root: Path, rel: str) -> Path:
    """``root / rel``, but each segment spelled as on disk when only its NFC form matches (NFD names on Linux)."""
    if os.path.lexists(Path(root) / rel):
        return Path(root) / rel
    path = Path(root)
    for seg in rel.split("/"):
        nxt = path / seg
        if seg != ".." and not os.path.lexists(nxt):
            try:
                with os.scandir(path) as it:
                    nxt = next((Path(e.path) for e in it if unicodedata.normalize("NFC", e.name) == seg), nxt)
            except OSError:
                pass
        path = nxt
    return path


def resolve_in_vault(root: Path, rel_path: str) -> Path:
    """Absolute, symlink-resolved path of the vault-relative ``rel_path`` inside ``root``.

    Raises :class:`~cairn.errors.PathOutsideVault` for an absolute path (``/x``,
    ``C:\\x``, ``\\\\server``), a ``..`` escape, a NUL character, or a symlink
    that resolves outside the vault. The file need not exist.
    """
    if not isinstance(rel_path, str) or "\x00" in rel_path:
        raise PathOutsideVault(f"Path {rel_path!r} is not a valid vault-relative path (contains a NUL character).")
    raw = rel_path  # not stripped: ' lead.md' and 'dir /x.md' are real Obsidian note names
    if raw.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", raw) or os.path.isabs(raw):
        raise PathOutsideVault(
            f"Path {rel_path!r} is absolute; expected a path relative to the vault root, e.g. 'folder/note.md'."
        )
    rel = normalise_rel_path(raw)
    root_real = Path(root).resolve()
    candidate = (on_disk_path(root_real, rel) if rel else root_real).resolve(strict=False)
    if candidate != root_real and not candidate.is_relative_to(root_real):
        raise PathOutsideVault(
            f"Path {rel_path!r} leads outside the vault (via '..' or a symlink); expected a path inside the vault."
        )
    return candidate
