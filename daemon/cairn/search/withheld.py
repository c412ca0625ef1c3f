"""The notes a caller's ``withhold`` hides in the store right now (:class:`WithheldSet`).

Withholding: every search entry point takes ``withhold`` (a :class:`~cairn.policy.Withhold`; ``None`` or empty for
the owner). The chunks of withheld notes are removed from both ranked lists *before* the top-N is taken, so
``top_k`` is still filled with allowed notes; links in returned text and snippets that point to a withheld note
become ``[withheld link]``, and so do the withheld notes' names in heading paths (``symbol``: stored without link
brackets, see :meth:`~cairn.policy.LinkRedactor.redact_symbol`). When tags are withheld, notes whose front-matter
cannot be read (tags unknown) are withheld too (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from cairn.policy import LinkRedactor, Withhold
from cairn.store import Store


@dataclass(frozen=True)
class WithheldSet:
    """The notes ``withhold`` hides in this store right now: ``notes`` {note id: path}, ``chunks``
    {chunk id: note id} of their chunks, and a :class:`~cairn.policy.LinkRedactor` for links to them.
    Read per call by :func:`cairn.search.view.load_withheld`, the one place that reads it."""

    withhold: Withhold
    notes: dict[int, str]
    chunks: dict[int, int]
    redactor: LinkRedactor

    def __bool__(self) -> bool:
        return bool(self.withhold)

    def hides(self, note_id: int, path: str) -> bool:
        """True for a withheld note (by id, or by path for a note indexed after this set was built)."""
        return note_id in self.notes or self.withhold.path_withheld(path)

    def hides_path(self, path: str) -> bool:
        return path in self.paths or self.withhold.path_withheld(path)

    @cached_property
    def paths(self) -> frozenset[str]:
        """The withheld notes' paths."""
        return frozenset(self.notes.values())

    def redact(self, text: str) -> str:
        return self.redactor.redact(text) if self.redactor else text

    def symbol_masker(self, store: Store) -> Callable[[str, str], str]:
        """``mask(path, symbol)``: the heading path ``symbol`` of a chunk of the note at ``path`` with the
        withheld notes' names masked (:meth:`~cairn.policy.LinkRedactor.redact_symbol`), including the
        shown text of that note's links to withheld notes (read once per note, from its stored links)."""
        displays: dict[str, tuple[str, ...]] = {}

        def mask(path: str, symbol: str) -> str:
            if not symbol or not self.redactor:
                return symbol
            if path not in displays:  # how a heading shows those links: "alias", or "target > heading"
                shown: list[str] = []
                for link in store.links_of_note(path):
                    if (link.target_path and self.hides_path(link.target_path)) or self.redactor.matches(
                        link.raw_target or ""
                    ):
                        sub = link.heading or link.block_id
                        shown += [link.alias or "", f"{link.raw_target or ''} > {sub}" if sub else ""]
                displays[path] = tuple(d for d in shown if d.strip())
            return self.redactor.redact_symbol(symbol, displays[path])

        return mask
