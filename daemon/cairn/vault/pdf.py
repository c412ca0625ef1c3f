"""Text of PDF attachments, page by page, read in a worker subprocess (layer 1).

:class:`PdfExtractor` hands each PDF to a long-lived worker process (:mod:`cairn.vault.pdf_worker`) that runs
pypdfium2 (PDFium) and streams the pages back one by one (:mod:`cairn.vault.pdf_protocol`); this side tidies
the text (:func:`cairn.vault.pdf_text.tidy_pages`) and says what could not be indexed.

Why a subprocess: PDFium is C++ fed with untrusted files. A crash (segfault), a hang or a memory bomb in it
must cost one file, not the daemon. The worker's address space is capped (``RLIMIT_AS``, 2 GiB by default, on
Linux; best effort elsewhere), a per-file time limit is enforced by killing the worker (the pages that came
back before the limit are kept), and a fresh worker serves the next file. The worker never writes to this
process's stdout (the MCP stdio wire): its stdout is a private pipe that carries only the protocol. Why
pypdfium2: several times faster than pypdf, it joins end-of-line hyphenation itself and gives each line's
position and font size, which the tidying rules use.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import re
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cairn.errors import FileOpenError, PdfReadError
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
    ProtocolError,
    Ready,
    decode,
    encode,
)
from cairn.vault.pdf_text import (
    PdfPage,
    RawLine,
    RawPage,
    clean_line,
    format_pages,
    human_bytes,
    looks_like_text,
    tidy_pages,
    tidy_title,
)

__all__ = ["PdfExtractor", "PdfText", "WorkerHook"]

log = logging.getLogger(__name__)

_MB = 1024 * 1024
#: Seconds a fresh worker may take to import pypdfium2 and say it is ready.
_START_TIMEOUT_S = 30.0

#: A module-level function ``(stage, page) -> None`` run inside the worker process while opening a file
#: (``("open", 0)``) and before each page (``("page", n)``): how tests make a real worker hang, crash or run
#: out of memory.
WorkerHook = Callable[[str, int], None]


@dataclass(frozen=True, slots=True)
class PdfText:
    """What could be read of one PDF.

    ``pages``: every page extracted, in order, pages without text included (``text == ""``); fewer than
    ``page_count`` when a page or time limit was reached or the reader crashed part-way. ``page_count``: pages
    in the document. ``title``: the /Title metadata when present and non-trivial (not empty, not
    "untitled", not a file name), else ``None``. ``problems``: human-readable reasons for what was NOT indexed
    (pages without a text layer, page/time limit, unreadable pages), each naming the pages; empty when
    everything was indexed. ``elapsed_ms``: wall time of the extraction in milliseconds (worker start excluded).
    """

    pages: tuple[PdfPage, ...]
    page_count: int
    title: str | None
    problems: tuple[str, ...]
    elapsed_ms: float = 0.0


# ------------------------------------------------------------------------------------------------ the worker


class _Worker:
    """One worker process and the thread that reads its messages into a queue (``None`` = it exited)."""

    def __init__(self, memory_limit: int) -> None:
        started = time.perf_counter()
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])  # .../daemon (holds the cairn package)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        flags = getattr(subprocess, "CREATE_NO_WINDOW", 0) if os.name == "nt" else 0
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from cairn.vault.pdf_worker import main; main()", str(memory_limit)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,
                env=env,
                creationflags=flags,
            )
        except OSError as exc:
            raise PdfReadError(f"cannot start the PDF reader process ({sys.executable}): {exc}") from None
        self.messages: queue.Queue[Message | None] = queue.Queue()
        self.files = 1  # files handed to this worker (counting the one it is started for)
        self._reader = threading.Thread(target=self._read, name=f"pdf-worker-{self.proc.pid}", daemon=True)
        self._reader.start()
        self._wait_ready()
        self.start_ms = (time.perf_counter() - started) * 1000

    def _wait_ready(self) -> None:
        try:
            msg: Message | None | str = self.get(_START_TIMEOUT_S)
        except queue.Empty:
            msg = "timeout"
        if isinstance(msg, Ready):
            return
        self.kill()
        said = (
            "exited before it was ready"
            if msg is None
            else f"was not ready after {_START_TIMEOUT_S:g} s"
            if msg == "timeout"
            else f"said {msg!r}"
        )
        raise PdfReadError(
            f"cannot start the PDF reader: its process {said} (is pypdfium2 installed? "
            "its error is in Cairn's log/stderr)"
        )

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for raw in self.proc.stdout:
                try:
                    self.messages.put(decode(raw))
                except ProtocolError:
                    log.warning("pdf worker: unreadable message %r", raw[:200])
        except (OSError, ValueError):
            pass
        finally:
            self.messages.put(None)

    def get(self, timeout: float) -> Message | None:
        """The next message; ``None`` when the worker exited; raises ``queue.Empty`` after ``timeout`` s."""
        return self.messages.get(timeout=max(0.0, timeout))

    def send(self, request: Extract) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(encode(request))
        self.proc.stdin.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover — SIGKILL does not wait on the child
            log.warning("pdf worker %s did not exit after kill", self.proc.pid)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass

    def stop(self) -> None:
        """Ask politely (close stdin: the worker's loop ends), then kill after 2 s."""
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


def _stop_worker(holder: dict[str, _Worker]) -> None:
    worker = holder.pop("worker", None)
    if worker is not None:
        worker.stop()


def _exit_reason(returncode: int | None) -> str:
    if returncode is None:
        return "exited"
    if returncode < 0:
        import signal

        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def _hook_request(hook: WorkerHook | None) -> tuple[str | None, str | None]:
    """``("module:function", sys.path entry that makes the module importable)`` for ``hook``, or Nones."""
    if hook is None:
        return None, None
    module = sys.modules[hook.__module__]
    file = Path(module.__file__ or "").resolve()
    depth = hook.__module__.count(".") + (1 if file.name == "__init__.py" else 0)
    return f"{hook.__module__}:{hook.__qualname__}", str(file.parents[depth])


# ------------------------------------------------------------------------------------------------ one reading


@dataclass(frozen=True, slots=True)
class _Stop:
    """Why reading stopped before the last page: the time limit, a crash (``detail``: how the worker
    exited) or the memory cap (``detail``: "over the reader's memory limit (…)")."""

    reason: Literal["timeout", "crash", "memory"]
    detail: str = ""


@dataclass(slots=True)
class _Reading:
    """What came back from the worker for one file."""

    page_count: int | None = None
    title: Any = None
    raw_pages: list[RawPage] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)  # page number → why it could not be read
    stop: _Stop | None = None
    elapsed_ms: float = 0.0


def _raw_page(msg: Page) -> RawPage:
    lines = tuple(RawLine(t, math.nan if top is None else float(top), float(size or 0)) for t, top, size in msg.lines)
    return RawPage(int(msg.number), lines, float(msg.height or 0.0))


def _open_error(msg: OpenFailed) -> PdfReadError:
    detail = re.sub(r"^Failed to load document \((.*)\)\.?$", r"\1", msg.detail)
    if msg.failure is OpenFailure.PASSWORD:
        return PdfReadError("encrypted: needs a password; Cairn cannot index it")
    if msg.failure is OpenFailure.SECURITY:
        return PdfReadError(
            f"encrypted with a security handler PDFium does not support ({detail}); Cairn cannot index it"
        )
    if msg.failure is OpenFailure.FILE:
        return PdfReadError(f"cannot open: the PDF reader could not read the file ({detail})")
    return PdfReadError(f"cannot open: damaged or truncated PDF ({detail})")


# ------------------------------------------------------------------------------------------------ the extractor


class PdfExtractor:
    """Extracts PDFs in a worker subprocess: a crash or hang in the PDF library cannot take the daemon down,
    and the per-file time limit is enforced by killing the worker (then a fresh one serves the next file).

    ``max_pages``: pages read per file (the rest are named in ``problems``); ``max_bytes``: larger files are
    refused; ``timeout_s``: wall seconds per file, worker start not included; ``memory_limit_bytes``: the
    worker's address-space cap (Linux RLIMIT_AS; a PDF bomb fails that file only); ``files_per_worker``: a
    worker is replaced by a fresh one after this many files (bounds whatever PDFium leaks or caches);
    ``worker_hook``: see :data:`WorkerHook` (tests only; may be changed between files). The config keys are
    ``pdf_max_pages``, ``pdf_max_bytes``, ``pdf_timeout_s``. The worker starts on the first :meth:`extract`
    and stays for the next files. Thread-safe (one extraction at a time). Use as a context manager or call
    :meth:`close`; a forgotten extractor's worker is stopped when it is garbage-collected or at interpreter
    exit.
    """

    def __init__(
        self,
        *,
        max_pages: int = 2000,
        max_bytes: int = 200 * 1024 * 1024,
        timeout_s: float = 120.0,
        memory_limit_bytes: int = 2 * 1024 * _MB,
        files_per_worker: int = 200,
        worker_hook: WorkerHook | None = None,
    ) -> None:
        if max_pages < 1 or max_bytes < 1 or not timeout_s > 0:
            raise ValueError(
                f"max_pages, max_bytes and timeout_s must be positive, got {max_pages}, {max_bytes}, {timeout_s}"
            )
        self.max_pages = int(max_pages)
        self.max_bytes = int(max_bytes)
        self.timeout_s = float(timeout_s)
        self.memory_limit_bytes = int(memory_limit_bytes)
        self.files_per_worker = max(1, int(files_per_worker))
        self.worker_hook = worker_hook
        self._lock = threading.Lock()  # one extraction at a time
        self._state = threading.Lock()  # guards _holder and _busy (close() must not wait for an extraction)
        self._holder: dict[str, _Worker] = {}
        self._busy = False
        self._interrupted = False
        self._finalizer = weakref.finalize(self, _stop_worker, self._holder)
        #: Milliseconds the most recent worker took to start (None before the first start).
        self.last_start_ms: float | None = None
        #: How many workers were started (1 + one per killed or crashed worker).
        self.workers_started = 0

    def __enter__(self) -> PdfExtractor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker process at once (idempotent); a later :meth:`extract` starts a new one.

        An extraction under way in another thread ends with :class:`~cairn.errors.PdfReadError` ("stopped: …")
        within moments; its caller should not record that as the file's reason.
        """
        with self._state:
            worker = self._holder.pop("worker", None)
            busy = self._busy
            if busy:
                self._interrupted = True
        if worker is not None:
            if busy:
                worker.kill()
            else:
                worker.stop()

    @property
    def busy(self) -> bool:
        """True while an :meth:`extract` call is under way."""
        return self._busy

    @property
    def worker_pid(self) -> int | None:
        """The current worker's process id (None when none is running)."""
        worker = self._holder.get("worker")
        return worker.proc.pid if worker is not None and worker.alive() else None

    def extract(self, path: Path) -> PdfText:
        """Read ``path``'s text page by page; see :class:`PdfText`.

        Raises :class:`~cairn.errors.FileOpenError` when the file cannot be opened now, and
        :class:`~cairn.errors.PdfReadError` when nothing can be indexed: the file is over ``max_bytes``, is not a
        PDF, needs a password, is damaged beyond repair, has no text on any page, hit the time limit before the
        first page, or the reader crashed or ran out of memory before it. Partial results (page or time limit,
        reader crash part-way, pages without text) come back with ``problems`` set.
        """
        path = Path(path)
        with self._lock:
            self._check_file(path)
            hook, hook_path = _hook_request(self.worker_hook)
            request = Extract(str(path.resolve()), self.max_pages, hook, hook_path)
            with self._state:
                self._busy, self._interrupted = True, False
            try:
                worker = self._worker()
                try:
                    worker.send(request)
                except OSError:  # the idle worker died (killed from outside): one fresh try
                    self._discard(worker)
                    worker = self._worker()
                    worker.send(request)
                return self._result(self._collect(worker))
            finally:
                with self._state:
                    self._busy = False

    def _check_file(self, path: Path) -> None:
        """Refuse, before any worker is needed, a file that cannot be read, is too big or is not a PDF."""
        try:
            size = path.stat().st_size
            with path.open("rb") as fh:
                head = fh.read(1024)
        except OSError as exc:  # a moment's error, not the PDF's: its indexed version is kept (pdf_index)
            raise FileOpenError(f"cannot open or read the file now: {exc.strerror or exc}") from None
        if size > self.max_bytes:
            raise PdfReadError(
                f"too big: {human_bytes(size)}, over pdf_max_bytes {human_bytes(self.max_bytes)}"
                f"; raise pdf_max_bytes in the config to index it"
            )
        if b"%PDF-" not in head:  # the reason goes to logs and /index/stats: never quote the file's bytes
            kind = "text" if looks_like_text(head) else "binary data"
            raise PdfReadError(
                f"not a PDF: the file holds {kind}, not a PDF header (%PDF-); is it another kind "
                "of file with a .pdf name?"
                if head
                else "not a PDF: the file is empty"
            )

    def _worker(self) -> _Worker:
        with self._state:
            worker = self._holder.get("worker")
        if worker is not None and worker.alive() and worker.files < self.files_per_worker:
            worker.files += 1
            return worker
        if worker is not None:
            worker.stop()
        worker = _Worker(self.memory_limit_bytes)
        with self._state:
            self._holder["worker"] = worker
        self.last_start_ms = worker.start_ms
        self.workers_started += 1
        log.debug("pdf worker %s started in %.0f ms", worker.proc.pid, worker.start_ms)
        return worker

    def _discard(self, worker: _Worker) -> int | None:
        worker.kill()
        with self._state:
            if self._holder.get("worker") is worker:
                del self._holder["worker"]
        return worker.proc.returncode

    def _collect(self, worker: _Worker) -> _Reading:
        """The worker's messages for one file, until :class:`Done`, the time limit, a crash or the memory cap."""
        reading = _Reading()
        started = time.monotonic()
        deadline = started + self.timeout_s
        while True:
            try:
                msg = worker.get(deadline - time.monotonic())
            except queue.Empty:
                self._discard(worker)
                reading.stop = _Stop("timeout")
                break
            if msg is None:
                code = self._discard(worker)
                if self._interrupted:
                    raise PdfReadError("stopped: the PDF reader was closed while reading this file")
                reading.stop = _Stop("crash", _exit_reason(code))
                break
            if self._take(worker, msg, reading):
                break
        reading.elapsed_ms = (time.monotonic() - started) * 1000
        return reading

    def _take(self, worker: _Worker, msg: Message, reading: _Reading) -> bool:
        """Add one message to ``reading``; True when it ends the file. Raises for a file that failed to open
        and for a memory-cap hit before any page."""
        if isinstance(msg, Opened):
            reading.page_count, reading.title = int(msg.page_count), msg.title
        elif isinstance(msg, Page):
            reading.raw_pages.append(_raw_page(msg))
        elif isinstance(msg, PageFailed):
            reading.failed[int(msg.number)] = str(msg.reason)
            reading.raw_pages.append(RawPage(int(msg.number), (), 0.0))
        elif isinstance(msg, Done):
            return True
        elif isinstance(msg, OutOfMemory):
            self._discard(worker)
            detail = f"over the reader's memory limit ({human_bytes(msg.limit_bytes)})"
            if not reading.raw_pages:
                raise PdfReadError(f"the PDF reader went {detail} (a PDF bomb?); the file is skipped")
            reading.stop = _Stop("memory", detail)
            return True
        elif isinstance(msg, OpenFailed):
            raise _open_error(msg)
        return False

    def _result(self, reading: _Reading) -> PdfText:
        """The tidied pages and the problems of one reading; raises when nothing of it can be indexed."""
        page_count = self._page_count(reading)
        problems = [*self._stop_problems(reading, page_count), *self._limit_problems(page_count)]
        if reading.failed:
            first = next(iter(reading.failed.values()))
            problems.append(f"{format_pages(reading.failed)} could not be read by the PDF reader ({first})")
        no_text = [
            raw.number
            for raw in reading.raw_pages
            if raw.number not in reading.failed and not any(clean_line(ln.text)[0] for ln in raw.lines)
        ]
        if reading.raw_pages and len(no_text) + len(reading.failed) == len(reading.raw_pages):
            if len(no_text) == page_count:
                reason = f"no text layer on any of the {page_count} pages (scanned images?); OCR is not supported"
            elif no_text:
                reason = f"no text layer on {format_pages(no_text)} (scanned images?); OCR is not supported"
            else:
                reason = "no page could be read"
            raise PdfReadError("; ".join([reason, *problems]))
        if no_text:
            verb = "has" if len(no_text) == 1 else "have"
            problems.insert(0, f"{format_pages(no_text)} {verb} no text layer (scanned images?); OCR is not supported")
        return PdfText(
            pages=tuple(tidy_pages(reading.raw_pages)),
            page_count=page_count,
            title=tidy_title(reading.title),
            problems=tuple(problems),
            elapsed_ms=round(reading.elapsed_ms, 1),
        )

    def _page_count(self, reading: _Reading) -> int:
        """The document's page count; raises when reading stopped before any page (or there are none)."""
        stop, page_count = reading.stop, reading.page_count
        if page_count is None or not reading.raw_pages:
            if stop is not None and stop.reason == "timeout":
                raise PdfReadError(
                    f"time limit {self.timeout_s:g} s reached before the first page was read; "
                    "raise pdf_timeout_s in the config to index it"
                )
            if stop is not None and stop.reason == "crash":
                where = "opening the file" if page_count is None else "reading page 1"
                raise PdfReadError(f"the PDF reader crashed while {where} (it {stop.detail}); the file is skipped")
            if page_count == 0:
                raise PdfReadError("the PDF has no pages")
        assert page_count is not None
        return page_count

    def _stop_problems(self, reading: _Reading, page_count: int) -> list[str]:
        """What an early stop (time limit, crash, memory cap) left unread, as a problem."""
        stop = reading.stop
        got = max((p.number for p in reading.raw_pages), default=0)
        if stop is None or got >= min(page_count, self.max_pages):
            return []
        missing = format_pages(range(got + 1, min(page_count, self.max_pages) + 1))
        if stop.reason == "timeout":
            return [
                f"time limit {self.timeout_s:g} s reached: {missing} not indexed "
                f"(raise pdf_timeout_s in the config to index them)"
            ]
        if stop.reason == "memory":
            return [f"the PDF reader went {stop.detail} on page {got + 1}: {missing} not indexed"]
        return [f"the PDF reader crashed on page {got + 1} (it {stop.detail}): {missing} not indexed"]

    def _limit_problems(self, page_count: int) -> list[str]:
        """The pages beyond ``max_pages``, as a problem."""
        if page_count <= self.max_pages:
            return []
        beyond = format_pages(range(self.max_pages + 1, page_count + 1))
        return [
            f"page limit {self.max_pages} reached: {beyond} not indexed "
            f"(raise pdf_max_pages in the config to index them)"
        ]
