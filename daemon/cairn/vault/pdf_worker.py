"""The PDF worker process: reads PDFs with pypdfium2 (PDFium) and streams their pages to its supervisor.

Started by :class:`cairn.vault.pdf.PdfExtractor` as ``python -c "from cairn.vault.pdf_worker import main;
main()" MEMORY_LIMIT_BYTES`` with stdin and stdout pipes to the supervisor; the messages are those of
:mod:`cairn.vault.pdf_protocol`. Its stdout pipe is moved to a private descriptor at once and descriptor 1
pointed at stderr, so nothing PDFium or Python prints can reach the protocol or the daemon's stdout (the MCP
stdio wire). Its address space is capped (``RLIMIT_AS`` on Linux; best effort elsewhere). pypdfium2 is not
thread-safe: every PDFium call is made from the one main thread.
"""

from __future__ import annotations

import importlib
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from cairn.vault.pdf_protocol import (
    Done,
    Extract,
    Message,
    Opened,
    OpenFailed,
    OpenFailure,
    OutOfMemory,
    Page,
    PageFailed,
    Ready,
    decode,
    encode,
)

__all__ = ["main", "read_page"]

#: ``(stage, page)``: called while opening (``"open"``, 0) and before each page (``"page"``, n).
Hook = Callable[[str, int], None]
Send = Callable[[Message], None]

_BREAK = re.compile(r"\r\n|\r|\n")


def main() -> None:
    """Serve :class:`~cairn.vault.pdf_protocol.Extract` requests from stdin until it closes.

    ``sys.argv[1]``: the address-space cap in bytes. A :class:`MemoryError` sends
    :class:`~cairn.vault.pdf_protocol.OutOfMemory` and exits with code 3 (the heap may be in a bad state:
    the supervisor starts a fresh worker).
    """
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the daemon's terminal: the daemon decides
    _exit_with_parent()
    limit = int(sys.argv[1])
    _limit_memory(limit)
    send = _sender(proto)

    import pypdfium2  # noqa: F401  (imported before Ready so the start cost is paid once, up front)

    send(Ready(os.getpid()))
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        request = decode(raw)
        if not isinstance(request, Extract):
            continue
        try:
            _serve(request, send, _load_hook(request))
        except MemoryError:
            send(OutOfMemory(limit))
            os._exit(3)
        except BrokenPipeError:
            os._exit(0)


def _sender(proto: IO[bytes]) -> Send:
    def send(message: Message) -> None:
        proto.write(encode(message))
        proto.flush()

    return send


def _exit_with_parent() -> None:
    """Exit when the daemon dies (even by SIGKILL) while a file hangs PDFium: checked every second."""
    parent = os.getppid()

    def orphan_watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=orphan_watch, name="orphan-watch", daemon=True).start()


def _limit_memory(limit_bytes: int) -> None:
    """Cap the worker's address space (Linux: RLIMIT_AS; other Unixes: best effort; Windows: none)."""
    try:
        import resource
    except ImportError:  # Windows
        return
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = limit_bytes if hard == resource.RLIM_INFINITY else min(limit_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ValueError, OSError, AttributeError):
        pass


def _no_hook(stage: str, page: int) -> None:
    """The hook of every request outside tests: nothing."""


def _load_hook(request: Extract) -> Hook:
    """The request's hook function (see :class:`~cairn.vault.pdf_protocol.Extract`), or one that does nothing."""
    if not request.hook:
        return _no_hook
    if request.hook_path and request.hook_path not in sys.path:
        sys.path.insert(0, request.hook_path)
    module, _, name = request.hook.partition(":")
    hook: Hook = getattr(importlib.import_module(module), name)
    return hook


def _open(path: str, send: Send) -> Any:
    """The opened ``pdfium.PdfDocument``, or ``None`` after sending :class:`OpenFailed`."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:
        return pdfium.PdfDocument(path)
    except pdfium.PdfiumError as exc:
        code = getattr(exc, "err_code", None)
        failure = {
            pdfium_c.FPDF_ERR_PASSWORD: OpenFailure.PASSWORD,
            pdfium_c.FPDF_ERR_SECURITY: OpenFailure.SECURITY,
            pdfium_c.FPDF_ERR_FILE: OpenFailure.FILE,
        }.get(code, OpenFailure.DAMAGED)
        send(OpenFailed(failure, str(exc)))
    except (OSError, ValueError) as exc:
        send(OpenFailed(OpenFailure.FILE, str(exc)))
    except Exception as exc:  # noqa: BLE001 — anything else PDFium's wrapper throws: this file only
        send(OpenFailed(OpenFailure.DAMAGED, f"{type(exc).__name__}: {exc}"))
    return None


def _serve(request: Extract, send: Send, hook: Hook) -> None:
    """Extract one PDF: :class:`Opened`, then one :class:`Page` (or :class:`PageFailed`) per page, then
    :class:`Done`; or only :class:`OpenFailed`."""
    import pypdfium2.raw as pdfium_c

    hook("open", 0)
    doc = _open(request.path, send)
    if doc is None:
        return
    try:
        count = len(doc)
        try:
            title = doc.get_metadata_dict().get("Title")
        except Exception:  # noqa: BLE001 — metadata is optional
            title = None
        send(Opened(count, title))
        for index in range(min(count, request.max_pages)):
            hook("page", index + 1)
            try:
                lines, height = read_page(doc, index, pdfium_c)
            except MemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 — a bad page costs that page only
                send(PageFailed(index + 1, f"{type(exc).__name__}: {exc}"))
                continue
            send(Page(index + 1, height, lines))
        send(Done())
    finally:
        doc.close()


def read_page(doc: Any, index: int, pdfium_c: Any) -> tuple[list[list[Any]], float]:
    """``([[text, top, size], ...], page height)`` for page ``index`` (0-based) of a ``pdfium.PdfDocument``;
    top and size (points) from the first non-space character of each line (PDFium's text index → char index →
    box and font size). ``pdfium_c`` is ``pypdfium2.raw``."""
    page = doc[index]
    try:
        height = float(page.get_height())
        textpage = page.get_textpage()
        try:
            return _page_lines(textpage, textpage.get_text_range(), height, pdfium_c), height
        finally:
            textpage.close()
    finally:
        page.close()


def _page_lines(textpage: Any, text: str, height: float, pdfium_c: Any) -> list[list[Any]]:
    lines: list[list[Any]] = []
    start = 0
    for m in [*_BREAK.finditer(text), None]:
        end = m.start() if m else len(text)
        segment = text[start:end]
        top, size = math.nan, 0.0
        offset = len(segment) - len(segment.lstrip())
        if segment.strip():
            char = pdfium_c.FPDFText_GetCharIndexFromTextIndex(textpage, start + offset)
            if char >= 0:
                box = textpage.get_charbox(char)
                top = round(height - box[3], 2)
                size = round(float(pdfium_c.FPDFText_GetFontSize(textpage, char)), 2)
            lines.append([segment, top, size])
        if m:
            start = m.end()
    return lines
