"""Request parsing at the edge: the limits every edge enforces and one parser per request.

HTTP, MCP and the CLI map their own field names onto the canonical keys and call ``XRequest.parse(mapping)``, which
raises :class:`~cairn.errors.BadRequestError` with one message per rule (see :mod:`cairn.contract`). A parsed
request is checked once, here, and trusted after.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cairn.conversation import Turn, parse_history
from cairn.errors import BadRequestError
from cairn.notes import normalise_tag


@dataclass(frozen=True)
class Limits:
    """Edge limits. ``*_chars`` are lengths in characters (``len(str)``), ranges are inclusive."""

    top_k_min: int = 1
    top_k_max: int = 50
    #: The contract's ``top_k`` default (docs/design.md, "Contract" → Retrieval); an edge may use the configured
    #: ``top_k`` instead.
    top_k_default: int = 8
    #: A question or a search query.
    text_chars: int = 2000
    #: Tags (or folders) in one request, and the longest one.
    scope_items: int = 64
    scope_chars: int = 512
    #: A vault-relative note path.
    path_chars: int = 1024
    related_default: int = 10
    related_max: int = 50
    list_default: int = 50
    list_max: int = 500
    #: A follow-up's earlier turns (``history``): at most this many, each answer at most this long.
    history_turns: int = 6
    history_answer_chars: int = 4000


LIMITS = Limits()

#: What every edge says when a search finds nothing in an index that holds notes.
NO_RESULTS_TEXT = "No note holds these words or comes close to them in meaning."
#: What every edge says when an empty query lists no recent note in an index that holds notes (the scope given holds
#: none the caller may see).
NO_RECENT_TEXT = "No indexed note carries these tags or lies in these folders."


def empty_index_text(vault: Any) -> str:
    """What every edge says when a search or question meets an index holding no note of the vault ``vault``."""
    return (
        f"The index is empty: no Markdown notes were found in {str(vault)!r}, so nothing can match. "
        "Is this your vault? Pass the folder that holds your notes (the one with .obsidian in it) as --vault."
    )


def no_notes_text(vault: Any, *, obsidian: bool) -> str:
    """The warning after indexing a folder with no note in it; ``obsidian``: it has a ``.obsidian`` folder."""
    return (
        f"no Markdown notes found in {str(vault)!r}{'' if obsidian else ' (and no .obsidian folder)'} — is this "
        "your vault? Pass the folder that holds your notes as --vault (or set CAIRN_VAULT)."
    )


# -- rules ---------------------------------------------------------------------------------------------


def quote_value(value: Any) -> str:
    """``value`` as a client wrote it: a string quoted (cut at 40 characters, closed with an ellipsis), anything
    else as JSON (``true``, ``null``, ``3.5``), or its type's name when it has no JSON form."""
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "…")
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return type(value).__name__
    return text if len(text) <= 40 else text[:40] + "…"


_DIGITS = re.compile(r"[+-]?[0-9]{1,4}")


def parse_text(value: Any, what: str) -> str:
    """A question or query (``what``: ``"question"`` / ``"query"``): a string with something besides
    whitespace, at most ``LIMITS.text_chars`` long. Returned as given (not stripped)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise BadRequestError(f"The {what} is empty; expected some words to search for.")
    if not isinstance(value, str):
        raise BadRequestError(f"The {what} must be a string, got {type(value).__name__}.")
    if len(value) > LIMITS.text_chars:
        raise BadRequestError(f"The {what} is {len(value)} characters long; the limit is {LIMITS.text_chars}.")
    return value


def parse_query(value: Any) -> str:
    """A search's query: a string of at most ``LIMITS.text_chars``; empty, only whitespace or absent (``None``) is
    ``""``, which asks for the most recently modified notes (docs/design.md, "Contract" → Recent notes). Returned as
    given otherwise (not stripped)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return ""
    return parse_text(value, "query")


def _integer(value: Any, *, text: bool) -> int | None:
    """``value`` as an int: an int, a float with an integral value, or (``text``) up to 4 digits with an
    optional sign; else None."""
    if text and isinstance(value, str):
        digits = value.strip()
        return int(digits) if _DIGITS.fullmatch(digits) else None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def parse_count(value: Any, name: str, low: int, high: int, default: int | None, *, text: bool = False) -> int:
    """An integer ``low..high`` named ``name`` in the message; ``None`` → ``default`` (``default`` None: a value
    is required, and ``None`` is refused like any bad value). ``text``: digits are accepted too (a URL query
    parameter, a command-line argument)."""
    if value is None and default is not None:
        return default
    number = _integer(value, text=text)
    if number is None or not low <= number <= high:
        shown = quote_value(value) if number is None else number  # "0" from a URL reads as 0 from JSON
        raise BadRequestError(f"{name} must be an integer from {low} to {high}, got {shown}.")
    return number


def parse_top_k(value: Any, default: int | None = LIMITS.top_k_default, *, text: bool = False) -> int:
    """``top_k`` (the number of results): ``LIMITS.top_k_min..top_k_max``; ``None`` → ``default`` (refused when
    ``default`` is None). The message names it "The number of results (top_k)", the field's term: the edges call it
    ``topK`` (HTTP), ``top_k`` / ``limit`` (MCP) and ``--top-k`` (CLI), and one bad value gets one message at all of
    them."""
    name = "The number of results (top_k)"
    return parse_count(value, name, LIMITS.top_k_min, LIMITS.top_k_max, default, text=text)


def parse_limit(value: Any, high: int, default: int | None, *, text: bool = False) -> int:
    """A listing's ``limit``: an integer ``1..high``; ``None`` → ``default`` (refused when ``default`` is None)."""
    return parse_count(value, "limit", 1, high, default, text=text)


def parse_scope_item(value: Any, what: str) -> str:
    """One tag or folder (``what``: ``"tag"`` / ``"folder"``): a non-empty string of at most
    ``LIMITS.scope_chars`` characters."""
    if not isinstance(value, str) or not value.strip() or len(value) > LIMITS.scope_chars:
        raise BadRequestError(
            f"A {what} must be a non-empty string of at most {LIMITS.scope_chars} characters, got {quote_value(value)}."
        )
    return value


def parse_scope(value: Any, what: str) -> tuple[str, ...]:
    """A list of tags or folders (``what``: ``"tag"`` / ``"folder"``), at most ``LIMITS.scope_items``;
    ``None`` → ``()``."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise BadRequestError(f'The {what}s must be a list of strings, e.g. ["project"].')
    if len(value) > LIMITS.scope_items:
        raise BadRequestError(f"{len(value)} {what}s given; the limit is {LIMITS.scope_items}.")
    return tuple(parse_scope_item(item, what) for item in value)


def parse_path(value: Any) -> str:
    """A note's vault-relative path: a non-empty string of at most ``LIMITS.path_chars`` characters (confinement
    to the vault is the library's check)."""
    if not isinstance(value, str) or not value.strip():
        raise BadRequestError(
            "The path is missing; expected the vault-relative path of a note, e.g. 'Garden/Garlic.md'."
        )
    if len(value) > LIMITS.path_chars:
        raise BadRequestError(f"The note path is {len(value)} characters long; the limit is {LIMITS.path_chars}.")
    return value


def check_chars(text: str, what: str) -> None:
    """:class:`BadRequestError` when ``text`` holds a surrogate code point (U+D800–U+DFFF), named ``what``
    ("The query").

    A surrogate is not a character: it cannot be encoded as UTF-8 for the tokenizer or SQLite (a TypeError or
    UnicodeEncodeError deep inside, i.e. an ``internal`` error, without this check). U+DC80–U+DCFF is a byte that
    was not UTF-8 (Python's surrogateescape: a command-line argument typed in a Latin-1 terminal); the others
    come from a lone ``\\uD800``-style JSON escape."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        ch = text[exc.start]
        if "\udc80" <= ch <= "\udcff":
            why = f"the byte 0x{ord(ch) - 0xDC00:02X}, which is not UTF-8 text (is the terminal set to UTF-8?)"
        else:
            why = f"U+{ord(ch):04X}, half of a UTF-16 surrogate pair, which is not a character"
        raise BadRequestError(f"{what} holds {why} at character {exc.start + 1}; send the text as UTF-8.") from None


def scope_tags(tags: Sequence[str]) -> tuple[str, ...]:
    """The scope's tags normalised (:func:`cairn.notes.normalise_tag`: ``#Garden/Beds`` → ``garden/beds``);
    :class:`BadRequestError` for one that is not a tag or not made of characters."""
    out = []
    for t in tags:
        check_chars(t, f"The tag {t!r}")
        norm = normalise_tag(t)
        if norm is None:
            raise BadRequestError(f"{t!r} is not a valid tag; expected e.g. 'project' or 'project/alpha'.")
        out.append(norm)
    return tuple(out)


def scope_folders(folders: Sequence[str]) -> tuple[str, ...]:
    """The scope's folders without surrounding slashes and blanks (empty ones dropped); :class:`BadRequestError` for
    one not made of characters."""
    for f in folders:
        check_chars(f, f"The folder {f!r}")
    return tuple(f.strip().strip("/") for f in folders if f.strip().strip("/"))


# -- requests -------------------------------------------------------------------------------------------
# ``parse`` reads canonical keys; ``text`` says whether numbers may arrive as digits (URL, argv).


@dataclass(frozen=True)
class _Read:
    """What a search and an ask share, as read from a request before the characters are checked. A search's
    query may be empty (recent notes); a question may not."""

    text: str
    what: str
    top_k: int
    tags: tuple[str, ...]
    folders: tuple[str, ...]

    @classmethod
    def of(cls, data: Mapping[str, Any], what: str, default_top_k: int, text: bool) -> _Read:
        words = data.get(what)
        return cls(
            parse_query(words) if what == "query" else parse_text(words, what),
            what,
            parse_top_k(data.get("top_k"), default_top_k, text=text),
            parse_scope(data.get("tags"), "tag"),
            parse_scope(data.get("folders"), "folder"),
        )

    def checked(self) -> tuple[str, int, tuple[str, ...], tuple[str, ...]]:
        """(text stripped, top_k, tags normalised, folders) once every character is one."""
        check_chars(self.text, f"The {self.what}")
        return self.text.strip(), self.top_k, scope_tags(self.tags), scope_folders(self.folders)


@dataclass(frozen=True)
class SearchRequest:
    """``search``: keys ``query``, ``top_k``, ``tags``, ``folders``. An empty or absent query (``recent``) lists the
    most recently modified notes instead of ranking. Parsed, it is what the search service trusts: ``query``
    stripped, ``tags`` normalised, ``folders`` without surrounding slashes (module docstring). Built directly
    (in-process callers), it is trusted as it is."""

    query: str
    top_k: int = LIMITS.top_k_default
    tags: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()

    @classmethod
    def parse(
        cls, data: Mapping[str, Any], *, default_top_k: int = LIMITS.top_k_default, text: bool = False
    ) -> SearchRequest:
        return cls(*_Read.of(data, "query", default_top_k, text).checked())

    @property
    def recent(self) -> bool:
        """The request lists the most recently modified notes (its query is empty or only whitespace)."""
        return not self.query.strip()


@dataclass(frozen=True)
class AskRequest(SearchRequest):
    """``ask``: a search's keys, ``question`` for its text (:attr:`question`), and ``history`` (the earlier turns of
    a conversation, :func:`cairn.conversation.parse_history`)."""

    history: tuple[Turn, ...] = ()

    @property
    def question(self) -> str:
        return self.query

    @classmethod
    def parse(
        cls, data: Mapping[str, Any], *, default_top_k: int = LIMITS.top_k_default, text: bool = False
    ) -> AskRequest:
        read = _Read.of(data, "question", default_top_k, text)
        history = parse_history(data.get("history"), LIMITS)
        return cls(*read.checked(), history=history)


@dataclass(frozen=True)
class NoteRequest:
    """``get_note``: key ``path``."""

    path: str

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> NoteRequest:
        return cls(path=parse_path(data.get("path")))


@dataclass(frozen=True)
class RelatedRequest:
    """``related``: keys ``path``, ``limit`` (``1..LIMITS.related_max``, default ``LIMITS.related_default``)."""

    path: str
    limit: int = LIMITS.related_default

    @classmethod
    def parse(cls, data: Mapping[str, Any], *, text: bool = False) -> RelatedRequest:
        return cls(
            path=parse_path(data.get("path")),
            limit=parse_limit(data.get("limit"), LIMITS.related_max, LIMITS.related_default, text=text),
        )


@dataclass(frozen=True)
class ListRequest:
    """``list_notes``: keys ``tag``, ``folder`` (each optional), ``limit`` (``1..LIMITS.list_max``)."""

    tag: str | None = None
    folder: str | None = None
    limit: int = LIMITS.list_default

    @classmethod
    def parse(cls, data: Mapping[str, Any], *, text: bool = False) -> ListRequest:
        tag, folder = data.get("tag"), data.get("folder")
        return cls(
            tag=None if tag is None else parse_scope_item(tag, "tag"),
            folder=None if folder is None else parse_scope_item(folder, "folder"),
            limit=parse_limit(data.get("limit"), LIMITS.list_max, LIMITS.list_default, text=text),
        )
