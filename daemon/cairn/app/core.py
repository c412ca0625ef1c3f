"""The composition root's parts shared by every way Cairn runs: one vault's services (:class:`Cairn`), the
services the edges take (:func:`build_services`), logging, and the checks before serving (an index exists; signals
stop the loop)."""

from __future__ import annotations

import asyncio
import logging
import logging.handlers
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from cairn.answers import AnswerService, ChatModel
from cairn.config import Config
from cairn.embedder import Embedder
from cairn.events import EventBus
from cairn.index import (
    ChunkVectors,
    IndexService,
    IndexWriter,
    NoteIndexer,
    PdfIndexer,
)
from cairn.library import NoteViews
from cairn.memory import daemon_memory
from cairn.policy import Withhold
from cairn.policy_live import PolicyHolder, daemon_policy
from cairn.policy_vault import record_vault_policy
from cairn.private_files import private_dir, private_file, tighten_install
from cairn.search import SearchService, search_caches, search_parts
from cairn.services import HealthCheck, Services
from cairn.store import Store
from cairn.store.recovery import mark_closed_cleanly, open_verified

log = logging.getLogger(__name__)


@dataclass
class MeasuredBytes:
    """A byte count measured after the services were built (the MCP HTTP server's share of memory)."""

    value: int = 0


class Cairn:
    """The services for one vault, built and closed together: ``store``, ``embedder``, ``query``, ``library``
    (:class:`~cairn.library.NoteViews`), ``events`` (index progress for ``GET /events``), the index's parts —
    ``indexer`` (the notes' text), ``vectors``, ``pdfs`` (PDF attachments), all writing through one ``writer`` — and
    ``indexing`` (:class:`~cairn.index.IndexService`: the lanes, re-index requests, stats, health). Nothing is set
    on it after it is built; the edges take :func:`build_services` over it. Close with :meth:`close`.

    ``verify`` (the daemon): check the database first; a damaged one, or one built for another vault, is moved
    aside and rebuilt (said in ``indexing.stats()["recovered"]``). ``readonly`` (``cairn mcp``): the index as it is;
    nothing is written.
    Raises :class:`~cairn.errors.ConfigError` (no vault), :class:`~cairn.errors.StoreError`
    / ``SchemaTooNewError`` (index unusable), :class:`~cairn.errors.ModelError` (model files).
    """

    def __init__(
        self, config: Config, *, embedder: Embedder | None = None, verify: bool = False, readonly: bool = False
    ) -> None:
        self.config = config
        config.require_vault()
        self._verified = verify
        recovered = None
        if verify:
            # The model loads while the index is opened and checked: both take seconds on a large vault.
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cairn-model") as pool:
                loading = pool.submit(lambda: embedder or Embedder(threads=config.embed_threads))
                self.store, recovered = open_verified(config.db_path, vault=config.vault)
                try:
                    self.embedder = loading.result()
                except BaseException:
                    self.store.close()
                    raise
        else:
            self.embedder = embedder or Embedder(threads=config.embed_threads)
            # The vault recorded in the index is checked where an index is served (the daemon, cairn mcp); the
            # CLI and tests may open an index copied along with its vault.
            self.store = Store(config.db_path, readonly=readonly, vault=config.vault if readonly else None)
        if not readonly:
            record_vault_policy(config, store=self.store)  # which policy governs this index: what `cairn mcp` checks
        self.query = SearchService(self.store, self.embedder)
        self.library = NoteViews(config, self.store, self.query.views)
        self.events = EventBus()
        self.writer = IndexWriter(self.store, config.require_vault(), config.ignore, on_removed=self.events.removed)
        self.indexer = NoteIndexer(config, self.writer, self.embedder)
        self.vectors = ChunkVectors(self.store, self.embedder)
        self.pdfs = PdfIndexer(config, self.writer, self.vectors, self.embedder)
        #: Resident bytes the MCP HTTP server added when it started (its libraries and objects; measured by
        #: :func:`start_mcp_http` when its first client connects, 0 until then).
        self.mcp_http_bytes = MeasuredBytes()
        self.indexing = IndexService(
            config,
            self.store,
            self.embedder,
            self.indexer,
            self.vectors,
            self.pdfs,
            self.events,
            recovered=recovered,
            memory=self._memory,
        )

    def _memory(self) -> dict[str, Any]:
        """The daemon's memory breakdown (:func:`cairn.memory.daemon_memory`)."""
        return daemon_memory(
            search_parts(self.query),
            onnx=self.embedder.session_bytes,
            mcp_http=self.mcp_http_bytes.value,
            pdf_worker_pid=self.pdfs.worker_pid,
            caches=search_caches(self.query),
        )

    def close(self) -> None:
        """Stop indexing work, then close the store; the daemon's is marked closed cleanly (its next start skips the
        checks when the file is as it was left)."""
        self.indexing.close()
        self.store.close()
        if self._verified and not self.store.file_changed:
            mark_closed_cleanly(self.config.db_path)


def setup_logging(config: Config, *, to_file: bool = True) -> None:
    """Log to stderr and (for the daemon) a rotating file in the platform log folder (0600 in a 0700 folder).
    Never stdout. Then the data, config and log folders of an older install are made private
    (:func:`~cairn.private_files.tighten_install`), every change logged."""
    level = logging.DEBUG if config.debug else logging.INFO
    root = logging.getLogger()
    root.setLevel(level)
    from cairn.logsafe import SafeFormatter  # every message one line: request text cannot forge log lines

    fmt = SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not any(getattr(h, "_cairn", False) for h in root.handlers):
        err = logging.StreamHandler(sys.stderr)
        err.setFormatter(fmt)
        err._cairn = True  # type: ignore[attr-defined]
        root.addHandler(err)
        if to_file:
            try:
                private_dir(config.log_dir)
                private_file(config.log_dir / "cairn.log")  # what was searched is logged: 0600, as its rotations
                fh = logging.handlers.RotatingFileHandler(
                    config.log_dir / "cairn.log", maxBytes=5_000_000, backupCount=3, encoding="utf-8"
                )
                fh.setFormatter(fmt)
                fh._cairn = True  # type: ignore[attr-defined]
                root.addHandler(fh)
            except OSError as exc:
                log.warning("cannot write the log file in %s: %s", config.log_dir, exc)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING if not config.debug else logging.INFO)
    tighten_install(config)  # an older install's folders and files made private, each change in this log


def remote_model_withhold(config: Config, policy: PolicyHolder | None = None) -> Callable[[], Withhold | None]:
    """What a remote language model must not see, read live (a function for
    :class:`~cairn.answers.AnswerService`): the governance policy's ``withhold`` (tags and folders: the model is
    a client not declared local) plus ``llm.withhold_tags``; ``None`` while the policy cannot be read (missing
    and not creatable, invalid, newer version): then nothing enters the model's prompt (fail closed).
    ``policy``: the daemon's :func:`daemon_policy` holder, shared with MCP (one is made when not given)."""
    holder = policy if policy is not None else daemon_policy(config)

    def current() -> Withhold | None:
        now = holder.current()
        if now.fail_closed_reason:
            return None
        return Withhold.of(tags=(*now.withhold.tags, *config.llm.withhold_tags), folders=now.withhold.folders)

    return current


def build_services(
    cairn: Cairn,
    *,
    model: ChatModel | None = None,
    policy: PolicyHolder | None = None,
    health: HealthCheck | None = None,
    health_detail: HealthCheck | None = None,
) -> Services:
    """The use cases an edge calls (HTTP, MCP, the CLI), over ``cairn``'s services: the one place an answer service
    is made. Answers are written by ``model``, with what a remote one must not see withheld from it
    (:func:`remote_model_withhold` under ``policy``, the daemon's live one; one is made when not given), or built
    from the passages themselves when ``model`` is ``None``. ``health`` (``/health``) defaults to the index's."""
    config = cairn.config
    remote = model is not None and model.remote
    answers = AnswerService(
        cairn.query, model, withhold_tags=remote_model_withhold(config, policy) if remote else config.llm.withhold_tags
    )
    return Services(
        config=config,
        search=cairn.query,
        answers=answers,
        library=cairn.library,
        indexing=cairn.indexing,
        events=cairn.events,
        health=health or cairn.indexing.health,
        caller=cairn.query.views.of,
        health_detail=health_detail,
    )


def stop_on_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGINT and SIGTERM. Where the running loop cannot take signal handlers (not the
    main thread — the tray runs the loop in a worker thread — or Windows' loops), the caller's own
    shutdown path (tray Quit, KeyboardInterrupt) stops it instead."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            pass


def require_index(config: Config) -> None:
    """:class:`~cairn.errors.ConfigError` when the vault has no index yet (``cairn mcp`` never indexes)."""
    from cairn.errors import ConfigError

    vault = config.require_vault()
    empty = not config.db_path.exists()
    if not empty:
        probe = Store(config.db_path, readonly=True)
        try:
            empty = probe.stats().notes == 0
        finally:
            probe.close()
    if empty:
        raise ConfigError(
            f"The vault {str(vault)!r} has no index yet; run `cairn index --vault {vault}` "
            "(or start `cairn serve`) first, then start `cairn mcp` again."
        )
