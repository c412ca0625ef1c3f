"""Read-side views of one vault's index for the API and MCP (layer 2): a note, its related notes,
a list of notes, the tags (:class:`NoteViews`).

Every client-supplied path is confined to the vault before anything is read: absolute paths,
``..`` segments, backslashes, NUL and symlinks leading out of the vault raise
:class:`~cairn.errors.PathOutsideVaultError` (400); a path that is not an indexed note raises
:class:`~cairn.errors.NotFoundError` (404). Only notes the index holds are read from disk.

Withholding: every view takes the caller (a :class:`~cairn.search.CallerView`, made for the caller's
:class:`~cairn.policy.Withhold`; ``None`` for the owner, whose views are unchanged). A withheld note asked for by path
raises the same
:class:`~cairn.errors.NotFoundError` message as a missing one; withheld notes are left out of links,
backlinks, similar notes, lists and tag counts (a withheld tag is not listed at all); links to them in
returned content, its front-matter (keys and values) and its ``aliases`` become ``[withheld link]``; a link
whose target names a withheld note is left out of ``links`` even when it did not resolve to it. When tags are
withheld, a note whose front-matter cannot be read (so its tags are unknown) is withheld too. The caller's ``tally``
(a :class:`~cairn.policy.WithheldTally`) receives the withheld notes each call left out, for the audit log.

Blocking (SQLite and file reads): call from a worker thread in async code.
"""

from __future__ import annotations

from typing import Any

from cairn.config import Config
from cairn.contract import LIMITS, parse_limit
from cairn.errors import BadRequestError, NotFoundError
from cairn.notes import normalise_tag, parse_note
from cairn.search import CallerView, Views, WithheldSet, similar_notes
from cairn.store import Backlink, LinkRecord, Store, StoredNote
from cairn.store.reads import list_notes as _list_notes
from cairn.store.reads import tag_counts as _tag_counts
from cairn.vault import checked_rel_path, read_note_text, resolve_in_vault


def link_json(link: LinkRecord) -> dict[str, Any]:
    """The JSON view of a stored link: ``{target, targetPath, heading, blockId, alias, isEmbed, line}``."""
    return {
        "target": link.raw_target,
        "targetPath": link.target_path,
        "heading": link.heading,
        "blockId": link.block_id,
        "alias": link.alias,
        "isEmbed": link.is_embed,
        "line": link.line,
    }


def _first_per_note(links: list[LinkRecord], rel: str) -> list[LinkRecord]:
    """``links`` (in document order) keeping the first link to each other note: by its resolved vault-relative
    path, or, unresolved, by its target as written (casefolded); links resolved to ``rel`` itself are dropped."""
    seen: set[str] = set()
    kept: list[LinkRecord] = []
    for link in links:
        if link.target_path == rel:
            continue
        key = link.target_path if link.target_path else "\0" + link.raw_target.casefold()
        if key not in seen:
            seen.add(key)
            kept.append(link)
    return kept


def backlink_json(backlink: Backlink) -> dict[str, Any]:
    """The JSON view of a backlink: ``{filePath, line}``."""
    return {"filePath": backlink.path, "line": backlink.line}


class NoteViews:
    """The JSON-ready views of indexed notes over ``store`` for the vault in ``config``: ``note``, ``related``,
    ``list_notes`` and ``tags``. Each view confines the client's path to the vault and applies the caller's view;
    it reads the index (and the note's file); ``similar`` notes come from the search package
    (:func:`cairn.search.related.similar_notes`: its cosine floor and withholding)."""

    def __init__(self, config: Config, store: Store, views: Views) -> None:
        self.config = config
        self.store = store
        #: the search's caller views (:mod:`cairn.search.view`): the withheld set, redacted vectors for similar notes
        self.views = views

    def _withheld(self, caller: CallerView | None) -> tuple[CallerView, WithheldSet | None]:
        """The caller's view (the owner's for None), and its withheld set (None when nothing is withheld from it)."""
        view = caller if caller is not None else self.views.of(None)
        return view, view.withheld if view.withhold else None

    def _indexed(self, raw: Any, view: CallerView, hidden: WithheldSet | None) -> tuple[str, StoredNote]:
        rel = checked_rel_path(raw)
        resolve_in_vault(self.config.require_vault(), rel)  # symlinks out of the vault → PathOutsideVaultError
        note = self.store.note_by_path(rel)
        withheld = hidden is not None and bool(hidden) and note is not None and hidden.hides(note.id, rel)
        if withheld:
            view.tally.add([rel])
        if note is not None and note.status == "skipped" and not withheld:
            raise NotFoundError(f"{rel!r} is in the vault but not indexed: {note.error or 'skipped'}.")
        if note is None or note.status != "ok" or withheld:
            # A withheld note gets exactly the answer a missing one gets.
            raise NotFoundError(
                f"No indexed note {rel!r} in the vault; paths are vault-relative, e.g. 'folder/note.md'."
            )
        return rel, note

    @staticmethod
    def _drop_links(links: list[dict], hidden: WithheldSet, view: CallerView) -> list[dict]:
        # A link whose target names a withheld note is dropped even when it did not resolve to it (a link
        # to its alias, or one left unresolved): its ``target`` would name the note, as in the content.
        kept = [
            link
            for link in links
            if not (
                (link.get("targetPath") and hidden.hides_path(link["targetPath"]))
                or (hidden.redactor and hidden.redactor.matches(link.get("target") or ""))
            )
        ]
        view.tally.add(link["targetPath"] for link in links if link not in kept and link.get("targetPath"))
        return kept

    @staticmethod
    def _drop_backlinks(backlinks: list[dict], hidden: WithheldSet, view: CallerView) -> list[dict]:
        kept = [b for b in backlinks if not hidden.hides_path(b["filePath"])]
        view.tally.add(b["filePath"] for b in backlinks if b not in kept)
        return kept

    def note(self, raw: Any, caller: CallerView | None = None) -> dict[str, Any]:
        """``{filePath, title, tags, aliases, frontmatter, content, links, backlinks, indexedAt}``.
        ``caller``: see the module docstring (content keeps its text; links to withheld notes in it,
        in its front-matter values and the ``links``/``backlinks`` entries naming them are removed)."""
        view, hidden = self._withheld(caller)
        rel, note = self._indexed(raw, view, hidden)
        if note.kind == "pdf":
            out = self._pdf_note(rel, note)
            if hidden:
                out["backlinks"] = self._drop_backlinks(out["backlinks"], hidden, view)
            return out
        path = resolve_in_vault(self.config.require_vault(), rel)
        try:
            content, _ = read_note_text(path, max_bytes=self.config.max_note_bytes)
        except Exception as exc:
            raise NotFoundError(
                f"Note {rel!r} is indexed but cannot be read now ({getattr(exc, 'message', exc)}); "
                "it may have been moved or deleted."
            ) from None
        out = {
            "filePath": rel,
            "title": note.title,
            "tags": self.store.note_tags(rel),
            "aliases": list(note.aliases),
            "frontmatter": note.frontmatter,
            "content": content,
            "links": [link_json(link) for link in self.store.links_of_note(rel)],
            "backlinks": [backlink_json(b) for b in self.store.backlinks(rel)],
            "indexedAt": note.indexed_at,
        }
        if hidden:
            # The file is read now, the tags were read at indexing: a tag added since (not indexed yet)
            # withholds the note too, and so does front-matter that cannot be read (its tags are unknown).
            parsed = parse_note(content, rel)
            if hidden.withhold.tag_withheld(list(out["tags"]) + list(parsed.tags)) or (
                hidden.withhold.tags and parsed.frontmatter_error
            ):
                view.tally.add([rel])
                raise NotFoundError(
                    f"No indexed note {rel!r} in the vault; paths are vault-relative, e.g. 'folder/note.md'."
                )
            out["links"] = self._drop_links(out["links"], hidden, view)
            out["backlinks"] = self._drop_backlinks(out["backlinks"], hidden, view)
            if hidden.redactor:
                out["content"] = hidden.redact(content)
                out["frontmatter"] = _redact_values(out["frontmatter"], hidden.redact)
                out["aliases"] = _redact_values(out["aliases"], hidden.redact)
        return out

    def _pdf_note(self, rel: str, note: StoredNote) -> dict[str, Any]:
        """A PDF's view: the text as indexed, page by page (``[page N]`` lines between pages), ``pages`` its page
        count and ``problems`` what was not indexed. PDFs carry no tags or links of their own (backlinks kept)."""
        pages: dict[int | None, list[str]] = {}
        for chunk in self.store.chunks_of_note(rel):
            pages.setdefault(chunk.page, []).append(chunk.text)
        content = "\n\n".join(f"[page {n}]\n{join_overlapping(texts)}" for n, texts in pages.items())
        return {
            "filePath": rel,
            "title": note.title,
            "kind": "pdf",
            "tags": [],
            "aliases": [],
            "frontmatter": note.frontmatter,
            "pages": note.frontmatter.get("pages"),
            "problems": note.error,
            "content": content,
            "links": [],
            "backlinks": [backlink_json(b) for b in self.store.backlinks(rel)],
            "indexedAt": note.indexed_at,
        }

    def related(self, raw: Any, limit: int = 10, caller: CallerView | None = None) -> dict[str, Any]:
        """``{filePath, links, backlinks, similar: [{filePath, title, score}]}``: other notes, each listed once.
        ``links``: one per note linked to (its first link; an unresolved link once per target as written), without
        the note's links to itself (``[[#Heading]]``); ``backlinks``: one per linking note (its first line).
        ``similar`` are the notes whose chunks are nearest (cosine ≥ the floor) to the mean of this note's chunk
        vectors (:func:`~cairn.search.related.similar_notes`). ``caller``: withheld notes are left out of all
        three (``similar`` still holds up to ``limit``). ``GET /notes`` keeps every link and backlink line."""
        view, hidden = self._withheld(caller)
        rel, _ = self._indexed(raw, view, hidden)
        links = [link_json(link) for link in _first_per_note(self.store.links_of_note(rel), rel)]
        first_lines: dict[str, Backlink] = {}
        for b in self.store.backlinks(rel):  # by path, then line
            first_lines.setdefault(b.path, b)
        backlinks = [backlink_json(b) for b in first_lines.values()]
        if hidden:
            links = self._drop_links(links, hidden, view)
            backlinks = self._drop_backlinks(backlinks, hidden, view)
        return {
            "filePath": rel,
            "links": links,
            "backlinks": backlinks,
            "similar": similar_notes(self.store, rel, limit, view),
        }

    def tags(self, caller: CallerView | None = None) -> dict[str, Any]:
        """``{tags: [{tag, count}]}`` sorted by tag. ``caller``: counts only the notes it may see, and a tag withheld
        from it (or one nested below it) is not listed."""
        withhold = caller.withhold if caller is not None else None
        if caller is None or not withhold:
            return {"tags": [{"tag": tag, "count": count} for tag, count in self.store.tag_counts()]}
        hidden = caller.withheld
        caller.tally.add(hidden.paths)
        return {
            "tags": [
                {"tag": tag, "count": count}
                for tag, count in _tag_counts(self.store, hidden.notes)
                if not withhold.tag_withheld([tag])
            ]
        }

    def list_notes(
        self,
        tag: str | None = None,
        folder: str | None = None,
        limit: int = 50,
        caller: CallerView | None = None,
    ) -> dict[str, Any]:
        """``{notes: [{filePath, title, tags, indexedAt}], total}``: indexed notes sorted by path, at most
        ``limit`` (1..``LIMITS.list_max``), optionally only those carrying ``tag`` (nested tags below it count)
        and under ``folder`` (vault-relative). ``total`` counts every matching allowed note. Withheld notes are never
        listed nor counted; asking for a withheld tag lists nothing. Raises :class:`BadRequestError` for a bad
        tag, folder or limit."""
        limit = parse_limit(limit, LIMITS.list_max, default=None)
        tags: list[str] = []
        if tag is not None and str(tag).strip():
            norm = normalise_tag(str(tag))
            if norm is None:
                raise BadRequestError(f"{tag!r} is not a valid tag; expected e.g. 'project' or 'project/alpha'.")
            tags = [norm]
        scope = None
        if folder is not None and str(folder).strip().strip("/"):
            scope = checked_rel_path(str(folder).strip().strip("/"))
        view, hidden = self._withheld(caller)
        exclude = hidden.notes if hidden else {}
        listed, total = _list_notes(self.store, tags=tags, folder=scope, exclude_ids=exclude, limit=limit)
        notes: list[dict[str, Any]] = [
            {"filePath": n.path, "title": n.title, "tags": list(n.tags), "indexedAt": n.indexed_at} for n in listed
        ]
        if hidden:
            kept = [n for n in notes if not hidden.withhold.note_withheld(n["filePath"], n["tags"])]
            total -= len(notes) - len(kept)
            notes = kept
            if exclude:  # the withheld notes matching this listing's filters
                tags_of = self.store.tags_of_notes(exclude)
                view.tally.add(
                    path
                    for nid, path in exclude.items()
                    if (scope is None or path.startswith(scope + "/"))
                    and (not tags or any(t == tags[0] or t.startswith(tags[0] + "/") for t in tags_of[nid]))
                )
        return {"notes": notes, "total": total}


def join_overlapping(texts: list[str]) -> str:
    """Consecutive chunk texts of one page joined into the page's text: the overlap a chunk repeats from the
    end of the one before (a whole number of words, up to ~32 tokens) is dropped; else joined by a space."""
    out = texts[0] if texts else ""
    for text in texts[1:]:
        words = text.split(" ")
        cut = 0
        for k in range(min(len(words) - 1, 80), 0, -1):
            if out.endswith(" ".join(words[:k])):
                cut = k
                break
        out = f"{out} {' '.join(words[cut:])}" if cut or out else text
    return out


def _redact_values(value: Any, redact: Any) -> Any:
    """Front-matter with ``redact`` applied to every string inside it."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redact_values(v, redact) for v in value]
    if isinstance(value, dict):
        return {redact(k): _redact_values(v, redact) for k, v in value.items()}
    return value
