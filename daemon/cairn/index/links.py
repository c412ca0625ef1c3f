"""What a note's links resolve against during indexing: the vault's file list and the notes' aliases.

A text run (:mod:`cairn.index.text_run`) resolves the links of the notes it writes against
every file of the vault (attachments are link targets too) and every note's aliases: the stored ones, then the
ones this run changed. :class:`LinkTargets` keeps that state for one run; :class:`LinkCache` is what a run leaves
for the next hinted batch, so a save resolves its links without walking the vault again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cairn.notes import LinkResolver
from cairn.store import Store
from cairn.vault import list_all_files

__all__ = ["LINK_FILES_META", "LinkCache", "LinkTargets", "fingerprint"]

#: Meta key: sha256 of the vault's file list (:func:`list_all_files`) the stored links were last resolved against.
LINK_FILES_META = "link_files_sha256"


def fingerprint(files: Sequence[str] | None) -> str:
    """sha256 (hex) of a file list."""
    h = hashlib.sha256()
    for path in files or ():
        h.update(path.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


@dataclass
class LinkCache:
    """What links resolve against: every file of the vault (sorted, :func:`list_all_files`), the notes' aliases by
    path, and the resolver built from both (made on first need)."""

    files: list[str]
    file_set: frozenset[str]
    aliases: dict[str, list[str]]
    resolver: LinkResolver | None = None


class LinkTargets:
    """One text-phase run's link targets: the vault's file list and the notes' aliases, read on first need (or
    taken from ``links``, the last run's :class:`LinkCache`, when still valid), and the aliases this run changed.
    :attr:`aliases_changed` is set when a note written or skipped in this run changed its aliases."""

    def __init__(self, root: Path, ignore: Sequence[str], store: Store, links: LinkCache | None = None) -> None:
        self.root = root
        self.ignore = ignore
        self.store = store
        self.aliases_changed = False
        self._files: list[str] | None = None
        self._old_aliases: dict[str, list[str]] | None = None
        self._fresh_aliases: dict[str, list[str]] = {}  # path -> aliases, for notes whose aliases changed in this run
        self._links = links
        self._file_set: frozenset[str] | None = None
        self._resolver: LinkResolver | None = None
        if links is not None:
            self._files, self._file_set, self._old_aliases = links.files, links.file_set, dict(links.aliases)
            self._resolver = links.resolver

    def resolver(self) -> LinkResolver:
        """Links resolve against every file of the vault and the aliases known so far (stored, then this run's).
        Built once per run; later alias changes are applied to it in place (:meth:`note_aliases`)."""
        if self._files is None:
            self._files = list(list_all_files(self.root, self.ignore))
        if self._file_set is None:
            self._file_set = frozenset(self._files)
        if self._old_aliases is None:
            self._old_aliases = self.store.note_aliases()
        if self._resolver is None:
            self._resolver = LinkResolver([(p, self._aliases_of(p)) for p in self._files])
        return self._resolver

    def _aliases_of(self, path: str) -> Sequence[str]:
        """``path``'s aliases as this run knows them (this run's, else the stored ones)."""
        assert self._old_aliases is not None
        fresh = self._fresh_aliases
        return fresh[path] if path in fresh else self._old_aliases.get(path, ())

    def _set_aliases(self, path: str, aliases: list[str]) -> None:
        """Record ``path``'s aliases of this run, and apply the change to the resolver once it is built."""
        before = self._aliases_of(path)
        self._fresh_aliases[path] = aliases
        if self._resolver is not None and self._file_set is not None and path in self._file_set:
            self._resolver.replace_aliases(path, before, aliases)

    def note_aliases(self, parsed: Iterable[tuple[str, list[str]]]) -> None:
        """The aliases of notes parsed in this run, ``(path, aliases)``: those that differ from the stored ones are
        kept (:attr:`aliases_changed`), as are later changes of a note changed before in this run."""
        if self._old_aliases is None:
            self._old_aliases = self.store.note_aliases()
        for path, aliases in parsed:
            if aliases != self._old_aliases.get(path, []):
                self.aliases_changed = True
                self._set_aliases(path, aliases)  # only the changed ones are kept (dropped aliases too)
            elif path in self._fresh_aliases:
                self._set_aliases(path, aliases)

    def forget_aliases(self, paths: Iterable[str]) -> None:
        """Notes recorded as skipped in this run: their stored aliases are gone (``Store.write_skipped``), so links
        by those aliases resolve elsewhere or nowhere now (:attr:`aliases_changed` when any had some)."""
        if self._old_aliases is None:
            self._old_aliases = self.store.note_aliases()
        for path in paths:
            if self._fresh_aliases.get(path, self._old_aliases.get(path)):
                self._set_aliases(path, [])
                self.aliases_changed = True

    @property
    def files(self) -> list[str] | None:
        """The vault's file list this run resolves links against (None until :meth:`resolver` first runs)."""
        return self._files

    def link_cache(self, *, complete: bool = False) -> LinkCache | None:
        """The file list and aliases as this run leaves them, for the next hinted batch. When this run read
        neither (nothing was written), the cache it was given (None if none), unless ``complete`` (a whole-vault
        run: then they are read now, so the next batch can tell whether its hints changed the files)."""
        if complete:
            self.resolver()
        if self._files is None or self._old_aliases is None:
            return self._links
        aliases = self._old_aliases
        for path, fresh in self._fresh_aliases.items():
            if fresh:
                aliases[path] = fresh
            else:
                aliases.pop(path, None)
        return LinkCache(self._files, self._file_set or frozenset(self._files), aliases, self._resolver)
