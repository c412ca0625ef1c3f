"""Reading the vault from disk (layer 1): scanning folders, reading note text, containing paths.

The vault is read-only to Cairn: nothing here writes, moves or deletes a file.

- :func:`scan_vault` yields the notes to index (``.md`` by default) as
  :class:`VaultFile`; :func:`list_all_files` yields every file path (attachments
  too) for :class:`cairn.notes.LinkResolver`.
- Skipped always: hidden files and folders (leading ``.``, which covers
  ``.obsidian/``, ``.trash/`` and ``.git/``), every symlink (one leading outside
  the vault would leak outside text; one leading inside would index its target
  twice, under an alias path that ``withhold.folders`` does not cover — the target
  is indexed once under its own path), folder loops, and the configured
  gitignore-style globs. The full scan and a watcher's hinted path go through the
  same rules (:class:`_Tree`); a hinted path is a folder or a file as the disk says.
- Two files whose paths are equal in Unicode NFC are not both indexed: one is, the
  other is yielded with :attr:`VaultFile.duplicate_of` (see :class:`_Tree`).
- What sync tools leave (:mod:`cairn.vault.sync_copies`): a Syncthing conflict copy is yielded with
  :attr:`VaultFile.conflict_of`; an iCloud placeholder (``.Note.md.icloud``) stands for ``Note.md``: a link
  target, never read, and — like a place that cannot be read now (permission denied, too many open files) —
  reported in ``unreadable`` so that what is indexed there is kept (:func:`kept_unreadable`), never deleted.
- :func:`read_note_text` decodes a note as UTF-8 or raises
  :class:`~cairn.errors.NoteReadError` with a reason the owner can act on.
- :func:`checked_rel_path` refuses a client-supplied path that is never vault-relative; :func:`resolve_in_vault`
  turns a vault-relative path into an absolute path, raising :class:`~cairn.errors.PathOutsideVaultError` for
  escapes.

Vault-relative paths are POSIX (``/``), Unicode NFC (macOS stores file names in
NFD; Obsidian links are typed in NFC), without a leading ``./``.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import re
import stat
import unicodedata
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.contract import parse_path
from cairn.errors import NotFoundError, PathOutsideVaultError
from cairn.vault.ignore import IgnoreRules
from cairn.vault.reading import file_digest, read_note_text
from cairn.vault.sync_copies import (
    conflict_copy_of,
    conflict_reason,
    icloud_placeholder_of,
    is_not_downloaded,
    not_downloaded_reason,
)

__all__ = [
    "VaultFile",
    "scan_vault",
    "list_all_files",
    "read_note_text",
    "resolve_in_vault",
    "checked_rel_path",
    "normalise_rel_path",
    "IgnoreRules",
    "stat_hint",
    "hinted_paths",
    "paths_under",
    "hinted_changes",
    "duplicate_reason",
    "on_disk_path",
    "file_digest",
    "kept_unreadable",
    "conflict_reason",
    "is_not_downloaded",
]

log = logging.getLogger(__name__)

#: File kinds by extension (lower-case, with the dot); others get the bare extension.
_KINDS = {".md": "markdown", ".pdf": "pdf", ".canvas": "canvas"}


@dataclass(frozen=True, slots=True)
class VaultFile:
    """One file found in the vault.

    ``path`` is vault-relative (POSIX, NFC); ``abs_path`` is the file under the
    given root as spelled on disk (possibly NFD; never a symlink); ``mtime_ns`` is the modification time
    in nanoseconds and ``size`` the size in bytes; ``kind`` is ``"markdown"`` for ``.md`` files.

    ``duplicate_of`` is set when this file's vault-relative path equals another file's once Unicode-normalised
    (NFC; e.g. ``Résumé.md`` stored once composed, once decomposed, as a Mac sync can leave them): it is the
    path of the file indexed in its place, and ``path`` is then this file's own spelling (not NFC), so the
    indexer can record it as skipped apart from the one indexed.

    ``conflict_of`` is set when the file is a Syncthing conflict copy: the path of the note it copies
    (:func:`~cairn.vault.sync_copies.conflict_copy_of`; the indexer skips it unless ``sync_conflicts = "index"``).
    """

    path: str
    abs_path: Path
    mtime_ns: int
    size: int
    kind: str
    duplicate_of: str | None = None
    conflict_of: str | None = None


def normalise_rel_path(p: str) -> str:
    """Normalise a vault-relative path: ``\\`` to ``/``, Unicode NFC, no ``./`` or empty segments, no trailing ``/``.

    ``..`` segments and a leading ``/`` are kept as they are, so that
    :func:`resolve_in_vault` can refuse them.
    """
    p = unicodedata.normalize("NFC", p.replace("\\", "/"))
    leading = "/" if p.startswith("/") else ""
    parts = [seg for seg in p.split("/") if seg not in ("", ".")]
    return leading + "/".join(parts)


_DRIVE = re.compile(r"^[A-Za-z]:")


def checked_rel_path(raw: Any) -> str:
    """A vault-relative note path from a client. Refuses what is never a vault-relative POSIX path: not a path by
    the edge contract (:func:`cairn.contract.parse_path`: non-strings, empty, too long;
    :class:`~cairn.errors.BadRequestError`), NUL, backslashes, absolute, ``..`` (:class:`PathOutsideVaultError`)."""
    raw = parse_path(raw)
    shown = raw[:120]
    if "\x00" in raw or "\\" in raw:
        raise PathOutsideVaultError(
            f"Path {shown!r} holds a NUL or a backslash; expected a vault-relative path with '/'."
        )
    if raw.startswith("/") or _DRIVE.match(raw):
        raise PathOutsideVaultError(f"Path {shown!r} is absolute; expected a path relative to the vault root.")
    if ".." in raw.split("/"):
        raise PathOutsideVaultError(f"Path {shown!r} contains '..'; expected a path inside the vault.")
    return normalise_rel_path(raw)


# ----------------------------------------------------------------------- scanning

_Id = tuple[int, int]  # (st_dev, st_ino) of a folder
#: The errors that say a path is not there (any other error listing or stat'ing it says nothing of the kind).
_GONE_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR})


@dataclass(frozen=True, slots=True)
class _Found:
    """A regular file the tree rules let through: ``rel`` is its vault-relative key (NFC, or its own spelling
    when it lost a Unicode-name collision), ``nfc`` the NFC path, ``duplicate_of`` the winner's key or None."""

    rel: str
    nfc: str
    abs_path: str
    st: os.stat_result
    duplicate_of: str | None = None
    placeholder: bool = False  # an iCloud placeholder standing for the file ``rel``: a link target, never read


def _is_placeholder(abs_path: str) -> bool:
    """Whether a file the tree found is an iCloud placeholder (the only hidden names it lets through)."""
    return os.path.basename(abs_path).startswith(".")


class _Tree:
    """The one place that decides which on-disk paths of a vault Cairn reads, and under which vault-relative path.

    The full scan (:meth:`walk`) and a watcher hint (:meth:`look`) both go through :meth:`_children`, so one
    set of rules applies to both (a hint is never a new scan root):

    - hidden names (leading ``.``: ``.obsidian/``, ``.trash/``, ``.git/``…) and the ignore globs (see
      :class:`IgnoreRules`; a folder's rules apply to everything under it) are skipped;
    - **symlinks are never followed**, files and folders alike. One leading outside the vault would put
      outside text in the index (and serve it); one leading inside would index its target a second time under
      an alias path that policy rules on vault-relative paths (``withhold.folders``) do not cover. The target
      of an inside symlink is indexed once, under its own path; each skip is logged (INFO), it is not an error;
    - a folder that is one of its own ancestors (a bind-mount loop) is not entered;
    - whether a path is a folder or a file is what ``lstat`` says now (a folder named ``Projects.md`` is a
      folder); only folders and regular files count (no sockets, fifos, devices);
    - names are compared in Unicode NFC. Folders whose names are equal in NFC are one folder (their contents
      are merged). Files whose vault-relative paths are equal in NFC (``Résumé.md`` stored once composed, once
      decomposed) collide: the one spelled in NFC wins, else the one whose spelling sorts first (code points),
      and the others are reported with ``duplicate_of`` under their own (non-NFC) spelling, so they can be
      recorded apart. Case is significant (``Note.md`` and ``note.md`` are two files on a case-sensitive disk).
    """

    def __init__(
        self, root: Path, ignore: Sequence[str] | IgnoreRules = (), unreadable: dict[str, str] | None = None
    ) -> None:
        self.root = Path(root)
        #: The places (NFC vault-relative; ``""`` for the vault folder) that exist but could not be listed or
        #: stat'ed now (permission denied, too many open files, a busy network share), with the OS's reason:
        #: what was indexed under them is not known to be gone.
        self.unreadable: dict[str, str] = {} if unreadable is None else unreadable
        try:
            self.root_real = self.root.resolve(strict=True)
            root_st = self.root.stat()
        except OSError as exc:
            raise FileNotFoundError(f"vault folder {str(root)!r} cannot be opened: {exc.strerror or exc}") from None
        if not stat.S_ISDIR(root_st.st_mode):
            raise FileNotFoundError(f"vault folder {str(root)!r} cannot be opened: it is not a folder")
        self.root_id: _Id = (root_st.st_dev, root_st.st_ino)
        self.rules = ignore if isinstance(ignore, IgnoreRules) else IgnoreRules(ignore)
        self._base = str(self.root_real).rstrip(os.sep) + os.sep

    def _inside(self, real: str) -> bool:
        return real == str(self.root_real) or real.startswith(self._base)

    def _symlink_skipped(self, abs_path: str, rel: str) -> None:
        real = os.path.realpath(abs_path)
        if not os.path.exists(real):
            log.info("Skipping %r: broken symlink", rel)
        elif not self._inside(real):
            log.info("Skipping %r: symlink leads outside the vault", rel)
        else:
            target = Path(real).relative_to(self.root_real).as_posix()
            log.info(
                "Skipping %r: symlink to %r inside the vault (indexed under its own path; Cairn follows no symlink)",
                rel,
                unicodedata.normalize("NFC", target),
            )

    def _children(
        self,
        dirs: Sequence[str | Path],
        rel_dir: str,
        ancestors: frozenset[_Id],
        only: str | None = None,
    ) -> tuple[dict[str, list[tuple[str, os.stat_result]]], dict[str, list[tuple[str, os.stat_result]]]]:
        """The entries of the folders ``dirs`` (one folder of the vault, at NFC path ``rel_dir``; several when
        names equal in NFC merge) that the rules let through: ({NFC name: files}, {NFC name: folders}), each
        list in preference order. ``only``: just the entries of that NFC name (a hint's next segment)."""
        files: dict[str, list[tuple[str, os.stat_result]]] = {}  # abs paths as str: a Path each costs time
        folders: dict[str, list[tuple[str, os.stat_result]]] = {}
        for abs_dir in dirs:
            for entry in self._list(abs_dir, rel_dir):
                found = self._entry(entry, rel_dir, ancestors, only)
                if found is not None:
                    name, st, is_dir = found
                    (folders if is_dir else files).setdefault(name, []).append((entry.path, st))
        for group in (*files.values(), *folders.values()):
            if len(group) > 1:
                group.sort(key=lambda item: self._preference(item[0]))
        return files, folders

    def _entry(
        self, entry: os.DirEntry[str], rel_dir: str, ancestors: frozenset[_Id], only: str | None
    ) -> tuple[str, os.stat_result, bool] | None:
        """(NFC name, lstat, is a folder) of one folder entry the rules let through, else None. An iCloud
        placeholder (``.Note.md.icloud``) counts as the file it stands for (``Note.md``), recorded in
        :attr:`unreadable` as not downloaded: found (its index entry kept, a link target) but never read."""
        name = unicodedata.normalize("NFC", entry.name)
        placeholder = icloud_placeholder_of(name) if name.startswith(".") else None
        if placeholder:
            name = placeholder
        if (only is not None and name != only) or name.startswith("."):
            return None
        rel = f"{rel_dir}/{name}" if rel_dir else name
        try:
            if entry.is_symlink():
                self._symlink_skipped(entry.path, rel)
                return None
            st = entry.stat(follow_symlinks=False)
        except OSError as exc:  # vanished; or there but not stat'able now
            if exc.errno not in _GONE_ERRNOS:
                self.unreadable[rel] = exc.strerror or str(exc)
            return None
        is_dir = stat.S_ISDIR(st.st_mode)
        if (not is_dir and not stat.S_ISREG(st.st_mode)) or (placeholder and is_dir):
            return None
        if self.rules and self.rules.ignored(rel, is_dir):
            return None
        if is_dir and (st.st_dev, st.st_ino) in ancestors:
            log.info("Skipping %r: the folder is one of its own parents (a loop)", rel)
            return None
        if placeholder:
            self.unreadable.setdefault(rel, not_downloaded_reason(entry.name))
        return name, st, is_dir

    def _list(self, abs_dir: str | Path, rel_dir: str) -> list[os.DirEntry[str]]:
        """The entries of one folder; [] when it cannot be listed (recorded in :attr:`unreadable` unless gone)."""
        try:
            with os.scandir(abs_dir) as it:
                return list(it)
        except OSError as exc:
            log.warning("Skipping folder %r of the vault: %s", rel_dir or ".", exc.strerror or exc)
            if exc.errno not in _GONE_ERRNOS:
                self.unreadable[rel_dir] = exc.strerror or str(exc)
            return []

    def _raw_rel(self, abs_path: str) -> str:
        return Path(abs_path).relative_to(self.root).as_posix()

    def _preference(self, abs_path: str) -> tuple[bool, bool, str]:
        raw = self._raw_rel(abs_path)
        return (_is_placeholder(abs_path), not unicodedata.is_normalized("NFC", raw), raw)

    def _file_group(self, rel: str, group: list[tuple[str, os.stat_result]]) -> Iterator[_Found]:
        """The winner of files whose NFC path is ``rel`` under ``rel``, then the others as duplicates. An iCloud
        placeholder comes last and is no duplicate: beside the file itself (being downloaded) it is not there."""
        (first, first_st), rest = group[0], group[1:]
        placeholder = _is_placeholder(first)
        if not placeholder and len(group) > 1 and _is_placeholder(group[-1][0]):
            self.unreadable.pop(rel, None)
        yield _Found(rel, rel, first, first_st, placeholder=placeholder)
        for abs_path, st in rest:
            if not _is_placeholder(abs_path):
                yield _Found(self._raw_rel(abs_path), rel, abs_path, st, duplicate_of=rel)

    def _walk(self, dirs: Sequence[str | Path], rel_dir: str, ancestors: frozenset[_Id]) -> Iterator[_Found]:
        files, folders = self._children(dirs, rel_dir, ancestors)
        # Sorting by name + "/" for folders gives the same order as sorting full paths.
        keys = sorted([(name, False) for name in files] + [(name + "/", True) for name in folders])
        for key, is_dir in keys:
            if is_dir:
                name = key[:-1]
                group = folders[name]
                inner = ancestors | {(st.st_dev, st.st_ino) for _p, st in group}
                yield from self._walk([p for p, _st in group], f"{rel_dir}/{name}" if rel_dir else name, inner)
            else:
                yield from self._file_group(f"{rel_dir}/{key}" if rel_dir else key, files[key])

    def walk(self) -> Iterator[_Found]:
        """Every file the rules let through, sorted by vault-relative path (duplicates right after their winner)."""
        return self._walk([self.root], "", frozenset({self.root_id}))

    def look(self, rel: str) -> list[_Found]:
        """What the full scan would yield at or under the NFC vault-relative ``rel`` (a file, or every file
        under a folder), decided by what is on disk now; [] when nothing there is read."""
        parts = rel.split("/")
        dirs: list[str | Path] = [self.root]
        ancestors = frozenset({self.root_id})
        rel_dir = ""
        for seg in parts[:-1]:
            _files, folders = self._children(dirs, rel_dir, ancestors, only=seg)
            group = folders.get(seg)
            if not group:
                return []
            dirs = [p for p, _st in group]
            ancestors = ancestors | {(st.st_dev, st.st_ino) for _p, st in group}
            rel_dir = f"{rel_dir}/{seg}" if rel_dir else seg
        last = parts[-1]
        files, folders = self._children(dirs, rel_dir, ancestors, only=last)
        out = list(self._file_group(rel, files[last])) if last in files else []
        if last in folders:
            group = folders[last]
            out.extend(
                self._walk([p for p, _st in group], rel, ancestors | {(st.st_dev, st.st_ino) for _p, st in group})
            )
        return out


def _kind_of(nfc_path: str, exts: Sequence[str]) -> str | None:
    lower = nfc_path.lower()
    ext = next((e for e in exts if lower.endswith(e)), None)
    return None if ext is None else _KINDS.get(ext, ext.lstrip("."))


def _norm_exts(extensions: Sequence[str]) -> tuple[str, ...]:
    return tuple(e.lower() if e.startswith(".") else "." + e.lower() for e in extensions)


def _vault_files(found: Iterable[_Found], exts: Sequence[str]) -> Iterator[VaultFile]:
    for f in found:
        kind = None if f.placeholder else _kind_of(f.nfc, exts)
        if kind is not None:
            conflict = conflict_copy_of(f.nfc)
            yield VaultFile(f.rel, Path(f.abs_path), f.st.st_mtime_ns, f.st.st_size, kind, f.duplicate_of, conflict)


def scan_vault(
    root: Path,
    ignore: Sequence[str] = (),
    *,
    extensions: Sequence[str] = (".md",),
    unreadable: dict[str, str] | None = None,
) -> Iterator[VaultFile]:
    """Yield the vault's files with one of ``extensions`` (case-insensitive), sorted by vault-relative path.
    ``unreadable``, when given, is filled with the places that exist but could not be read now, with the reason
    (see :func:`kept_unreadable`: what is indexed there is not gone).

    The rules are :class:`_Tree`'s: hidden files and folders and the gitignore-style ``ignore`` globs
    (:class:`IgnoreRules`) are skipped, no symlink is followed (one leading outside the vault would leak, one
    leading inside would index its target twice, under an alias path), and a file whose path equals another's
    in Unicode NFC is yielded with ``duplicate_of`` set (right after the one indexed). Raises
    ``FileNotFoundError`` when ``root`` does not exist or is not a folder.
    """
    yield from _vault_files(_Tree(root, ignore, unreadable).walk(), _norm_exts(extensions))


def kept_unreadable(known: Iterable[str], unreadable: Mapping[str, str]) -> set[str]:
    """The paths among ``known`` at or under a place of ``unreadable`` (``""``: the whole vault): not found by a
    scan, but not known to be gone either — an error listing a folder or opening a file (permission denied,
    too many open files, a file locked a moment) is never a deletion; the last indexed version is kept."""
    if not unreadable:
        return set()
    if "" in unreadable:
        return set(known)
    return paths_under(known, unreadable)


def stat_hint(root: Path, rel: str, rules: IgnoreRules, *, extensions: Sequence[str] = (".md",)) -> list[VaultFile]:
    """The files with one of ``extensions`` at or under vault-relative NFC ``rel`` now (a file event is only a
    hint): exactly what :func:`scan_vault` would yield there — the file, or every file under a folder (whatever
    its name: a folder named ``Projects.md`` is a folder), duplicates included — decided by what is on disk now,
    with the same rules (``rules``, symlinks, Unicode collisions). [] when nothing there is read. Raises
    ``FileNotFoundError`` when the vault folder itself cannot be opened, as :func:`scan_vault` does (a vanished
    vault is not every hinted note deleted)."""
    return list(_vault_files(_Tree(root, rules).look(rel), _norm_exts(extensions)))


def hinted_changes(
    root: Path,
    paths: Iterable[str],
    rules: IgnoreRules,
    known: Iterable[str],
    *,
    extensions: Sequence[str] = (".md",),
    unreadable: dict[str, str] | None = None,
) -> tuple[list[VaultFile], list[str]]:
    """What a batch of file-event hints means for the indexed paths ``known``: (the files with one of ``extensions``
    at or under the hinted paths now, sorted by path — what :func:`stat_hint` finds for each; the known paths at
    or under them that are not found there now — deleted, moved away or no longer read, sorted). A place that
    could not be read now is not a deletion: ``unreadable``, when given, is filled with those places and their
    reasons, and the known paths there are left out of the second list (:func:`kept_unreadable`). Hints that are
    not worth a look are dropped (:func:`hinted_paths`). Raises ``FileNotFoundError`` as :func:`stat_hint` does."""
    hinted = list(hinted_paths(paths, rules))
    if not hinted:
        return [], []
    known = list(known)
    tree, exts = _Tree(root, rules, unreadable), _norm_exts(extensions)
    found = {vf.path: vf for rel in hinted for vf in _vault_files(tree.look(rel), exts)}
    gone = paths_under(known, hinted) - set(found) - kept_unreadable(known, tree.unreadable)
    return [found[p] for p in sorted(found)], sorted(gone)


def hints_change_files(root: Path, paths: Iterable[str], rules: IgnoreRules, files: Collection[str]) -> bool:
    """Whether a batch of file-event hints may have changed which files the vault holds, ``files`` being
    :func:`list_all_files` before them (any kind of file: attachments are link targets). False only when every
    hinted path is either a file of ``files`` that is still there (its bytes changed), or holds nothing now and held
    nothing of ``files`` (a temporary file that came and went: an atomic save). Each hint costs what
    :func:`stat_hint` costs (a listing of each folder on its path), far less than a walk of the whole vault.
    Raises ``FileNotFoundError`` as :func:`stat_hint` does."""
    tree = _Tree(root, rules)
    known = files if isinstance(files, (set, frozenset)) else set(files)
    ordered: list[str] | None = None
    for rel in hinted_paths(paths, rules):
        found = [f.rel for f in tree.look(rel) if f.duplicate_of is None]
        if rel in known:
            if found != [rel]:
                return True  # deleted, or a folder now
            continue
        if found:
            return True  # something new there
        if ordered is None:
            ordered = sorted(known)
        i = bisect.bisect_left(ordered, rel + "/")
        if i < len(ordered) and ordered[i].startswith(rel + "/"):
            return True  # a folder that held files (deleted, renamed away)
    return False


def duplicate_reason(vf: VaultFile) -> str:
    """Why a file with :attr:`VaultFile.duplicate_of` set is not indexed (shown in ``/index/stats`` and
    ``cairn index``): it names the file indexed instead and says how to fix it."""
    form = (
        "decomposed (NFD), as a sync from a Mac can leave it"
        if unicodedata.is_normalized("NFD", vf.path)
        else "not in the composed form NFC"
    )
    return (
        f"not indexed: another file, {vf.duplicate_of!r}, has the same name once Unicode-normalised (NFC) — the "
        f"two names differ only in how accented letters are encoded (this one is {form}) — and that one is "
        "indexed; rename or delete one of the two files"
    )


def hinted_paths(paths: Iterable[str], rules: IgnoreRules) -> Iterator[str]:
    """The hinted paths worth a look, vault-relative and NFC: empty, absolute, ``..`` and ignored or hidden ones
    are dropped (a file event is only a hint; see :meth:`cairn.index.notes.NoteIndexer.index_paths`)."""
    for raw in paths:
        rel = normalise_rel_path(str(raw))
        if rel and not rel.startswith("/") and ".." not in rel.split("/") and not rules.excludes(rel):
            yield rel


def paths_under(known: Iterable[str], rels: Iterable[str]) -> set[str]:
    """The paths among ``known`` (index keys) at or under any of the NFC vault-relative ``rels``, compared in
    NFC (a duplicate's key keeps its own spelling). With the files :func:`stat_hint` found there removed, these
    are the indexed paths gone from disk — whether ``rel`` was a file or a folder (a folder's name may end in
    ``.md``). Sorted lookups: O((k + h) log k) for k known paths and h hints."""
    index = sorted((unicodedata.normalize("NFC", p), p) for p in known)
    keys = [n for n, _p in index]
    out: set[str] = set()
    for rel in rels:
        lo, hi = bisect.bisect_left(keys, rel), bisect.bisect_right(keys, rel)
        out.update(p for _n, p in index[lo:hi])
        lo, hi = bisect.bisect_left(keys, rel + "/"), bisect.bisect_left(keys, rel + "0")  # "0" follows "/"
        out.update(p for _n, p in index[lo:hi])
    return out


def list_all_files(root: Path, ignore: Sequence[str] = ()) -> Iterator[str]:
    """Yield the vault-relative path of every non-ignored file (notes and attachments), sorted.

    Same rules as :func:`scan_vault`; a file whose name collides with another's in Unicode NFC is left out
    (the one indexed stands for both). Meant to build a :class:`cairn.notes.LinkResolver`.
    """
    for f in _Tree(root, ignore).walk():
        if f.duplicate_of is None:
            yield f.rel


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

    Raises :class:`~cairn.errors.PathOutsideVaultError` for an absolute path (``/x``,
    ``C:\\x``, ``\\\\server``), a ``..`` escape, a NUL character, or a symlink
    that resolves outside the vault; :class:`~cairn.errors.NotFoundError` for a path
    through a symlink that stays inside (Cairn follows no symlink: the target has its
    own path). The file need not exist.
    """
    if not isinstance(rel_path, str) or "\x00" in rel_path:
        raise PathOutsideVaultError(f"Path {rel_path!r} is not a valid vault-relative path (contains a NUL character).")
    raw = rel_path  # not stripped: ' lead.md' and 'dir /x.md' are real Obsidian note names
    if raw.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", raw) or os.path.isabs(raw):
        raise PathOutsideVaultError(
            f"Path {rel_path!r} is absolute; expected a path relative to the vault root, e.g. 'folder/note.md'."
        )
    rel = normalise_rel_path(raw)
    root_real = Path(root).resolve()
    candidate = (on_disk_path(root_real, rel) if rel else root_real).resolve(strict=False)
    if candidate != root_real and not candidate.is_relative_to(root_real):
        raise PathOutsideVaultError(
            f"Path {rel_path!r} leads outside the vault (via '..' or a symlink); expected a path inside the vault."
        )
    if candidate != Path(os.path.normpath(on_disk_path(root_real, rel) if rel else root_real)):
        # Through a symlink inside the vault: Cairn indexes no alias path (see _Tree), and reading through one
        # would serve the target under a path the policy's folder rules do not cover. The target is not named.
        raise NotFoundError(
            f"Path {rel_path!r} goes through a symlink; Cairn reads no symlinked file or folder (a symlink's "
            "target inside the vault is indexed under its own path: use that path)."
        )
    return candidate
