"""The messages between :class:`cairn.vault.pdf.PdfExtractor` and its PDF worker process.

One message per line, as a JSON object whose ``"kind"`` names its class (:class:`Kind`) and whose other keys
are that class's fields. The supervisor sends :class:`Extract`; the worker answers :class:`Ready` once when it
starts, then per file: :class:`Opened`, one :class:`Page` or :class:`PageFailed` per page read, and
:class:`Done`; or :class:`OpenFailed` instead of all of these; or :class:`OutOfMemory` at any point (then it
exits).

Why JSON and not pickle: the worker parses untrusted PDFs with a C++ library; a worker taken over by a
malicious file must not be able to run code in the daemon by sending it a crafted pickle. :func:`decode`
builds only the classes below, from plain JSON values.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

__all__ = [
    "Kind",
    "OpenFailure",
    "Extract",
    "Ready",
    "Opened",
    "Page",
    "PageFailed",
    "Done",
    "OpenFailed",
    "OutOfMemory",
    "Message",
    "ProtocolError",
    "encode",
    "decode",
]


class Kind(StrEnum):
    """The message kinds (the ``"kind"`` key on the wire)."""

    EXTRACT = "extract"
    READY = "ready"
    OPENED = "opened"
    PAGE = "page"
    PAGE_FAILED = "page_failed"
    DONE = "done"
    OPEN_FAILED = "open_failed"
    OUT_OF_MEMORY = "out_of_memory"


class OpenFailure(StrEnum):
    """Why PDFium could not open a file."""

    PASSWORD = "password"  # encrypted, needs a user password
    SECURITY = "security"  # a security handler PDFium does not support
    FILE = "file"  # the file could not be read
    DAMAGED = "damaged"  # damaged, truncated, or anything else


@dataclass(frozen=True, slots=True)
class Extract:
    """Supervisor → worker: read the PDF at absolute ``path``, at most ``max_pages`` pages.

    ``hook``: ``"module:function"`` of a function ``(stage, page) -> None`` the worker calls while opening
    (``("open", 0)``) and before each page (``("page", n)``), importable after ``hook_path`` is put on the
    worker's ``sys.path``; ``None`` (always, outside tests) for none.
    """

    KIND: ClassVar[Kind] = Kind.EXTRACT
    path: str
    max_pages: int
    hook: str | None = None
    hook_path: str | None = None


@dataclass(frozen=True, slots=True)
class Ready:
    """Worker → supervisor, once: the worker process ``pid`` has imported PDFium and waits for requests."""

    KIND: ClassVar[Kind] = Kind.READY
    pid: int


@dataclass(frozen=True, slots=True)
class Opened:
    """The file opened: ``page_count`` pages; ``title`` is the raw /Title metadata (any JSON value, or None)."""

    KIND: ClassVar[Kind] = Kind.OPENED
    page_count: int
    title: Any = None


@dataclass(frozen=True, slots=True)
class Page:
    """Page ``number`` (1-based) read: its ``height`` in points and its ``lines`` in content order, each
    ``[text, top, size]`` (top in points from the page's top edge, NaN when unknown; font size in points)."""

    KIND: ClassVar[Kind] = Kind.PAGE
    number: int
    height: float
    lines: list[list[Any]]


@dataclass(frozen=True, slots=True)
class PageFailed:
    """Page ``number`` could not be read (``reason``: the exception's type and message); the next pages follow."""

    KIND: ClassVar[Kind] = Kind.PAGE_FAILED
    number: int
    reason: str


@dataclass(frozen=True, slots=True)
class Done:
    """Every page asked for was sent."""

    KIND: ClassVar[Kind] = Kind.DONE


@dataclass(frozen=True, slots=True)
class OpenFailed:
    """The file could not be opened: ``failure`` says why, ``detail`` is PDFium's message."""

    KIND: ClassVar[Kind] = Kind.OPEN_FAILED
    failure: OpenFailure
    detail: str


@dataclass(frozen=True, slots=True)
class OutOfMemory:
    """The worker went over its address-space cap of ``limit_bytes`` and exits after this message."""

    KIND: ClassVar[Kind] = Kind.OUT_OF_MEMORY
    limit_bytes: int


Message = Extract | Ready | Opened | Page | PageFailed | Done | OpenFailed | OutOfMemory

_CLASSES: dict[Kind, type[Message]] = {
    cls.KIND: cls for cls in (Extract, Ready, Opened, Page, PageFailed, Done, OpenFailed, OutOfMemory)
}


class ProtocolError(ValueError):
    """A line that is not one of the messages above."""


def encode(message: Message) -> bytes:
    """``message`` as one JSON line (UTF-8, ending in ``\\n``)."""
    fields = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
    return (json.dumps({"kind": message.KIND.value, **fields}) + "\n").encode("utf-8")


def decode(line: bytes | str) -> Message:
    """The message on one JSON line; raises :class:`ProtocolError` for anything else."""
    try:
        obj = json.loads(line)
        kind = Kind(obj.pop("kind"))
        message = _CLASSES[kind](**obj)
        if isinstance(message, OpenFailed):
            message = OpenFailed(OpenFailure(message.failure), str(message.detail))
        return message
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ProtocolError(f"not a PDF worker message: {exc}") from None
