"""Composition root: builds the store, model, indexer and query service for one vault, and runs the daemon.

Start order for ``cairn serve``: open the store and the model, start the HTTP API on
127.0.0.1 (``/health`` answers while indexing), write ``service.json`` (URL, pid — never
the token), then index the vault in a worker thread (keyword-ready first, vectors after).
Stop order: HTTP server closed (open streams cut), indexing asked to stop between batches,
store closed, ``service.json`` removed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import logging.handlers
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cairn import __version__
from cairn.answer import AnswerService
from cairn.library import NoteViews, checked_rel_path
from cairn.config import Config
from cairn.embedder import Embedder
from cairn.errors import CairnError
from cairn.events import EventBus
from cairn.indexer import Indexer, IndexReport
from cairn.pdf_index import PdfIndexer, PdfQueue
from cairn.query import QueryService
from cairn.store import Store
from cairn.store.recovery import InstanceLock, instance_lock_path, open_verified
from cairn.vault import resolve_in_vault
from cairn.watcher import VaultWatcher, lower_thread_priority

#: Chunks per vector slice of a watcher batch (~500 sentences, a few seconds of the model): how long a new save
#: may wait behind an earlier one's vectors before its text is written (:meth:`Cairn._yield_to_new_changes`).
WATCH_EMBED_BATCH = 64

log = logging.getLogger(__name__)


class Cairn:
    """Everything for one vault: ``store``, ``embedder``, ``indexer``, ``query``. Close with :meth:`close`.

    Raises :class:`~cairn.errors.ConfigError` (no vault), :class:`~cairn.errors.StoreError`
    / ``SchemaTooNewError`` (index unusable), :class:`~cairn.errors.ModelError` (model files).
    """

    def __init__(
        self, config: Config, *, embedder: Embedder | None = None, verify: bool = False, readonly: bool = False
    ) -> None:
        self.config = config
        config.require_vault()
        self.embedder = embedder or Embedder(threads=config.embed_threads)
        #: ``verify`` (the daemon): check the database first; a damaged one is moved aside and rebuilt,
        #: and ``recovered`` says so ({movedTo, reason, at}; also in ``stats()``).
        self.recovered: dict[str, Any] | None = None
        if verify:
            self.store, self.recovered = open_verified(config.db_path)
        else:
            #: ``readonly`` (``cairn mcp``): the index as it is; nothing is written (no indexing here).
            self.store = Store(config.db_path, readonly=readonly)
        self.indexer = Indexer(config, self.store, self.embedder)
        #: PDF attachments (issue 8): indexed inline by :meth:`index` (``cairn index``), or by ``pdf_queue`` in
        #: the daemon, on its own low-priority thread after the notes.
        self.pdfs = PdfIndexer(self.indexer)
        self.pdf_queue: PdfQueue | None = None
        self.query = QueryService(self.store, self.embedder)
        self.library = NoteViews(config, self.store)
        #: Index progress for ``GET /events``: ``progress``, ``indexed``, ``removed``, ``error``.
        self.events = EventBus()
        self.indexer.on_removed = self.events.removed
        self.indexing = threading.Event()
        self._reindex_lock = threading.Lock()
        self._reindex_thread: threading.Thread | None = None
        self.stop_requested = threading.Event()
        self.last_report: IndexReport | None = None
        self.index_error: str | None = None
        self._recovery_queued = (
            False  # no reconcile to queue when the vault is back (see _recover_when_the_vault_is_back)
        )
        self.watcher: VaultWatcher | None = None  # set by run_daemon while it watches the vault
        self._paused = False
        self._full_requested = threading.Event()  # the tray's "Reindex now": the next run re-reads every note

    def index(self, *, full: bool = False, progress: Callable[[str, int, int], None] | None = None) -> IndexReport:
        """Run both indexing phases (blocking). Safe to call from a worker thread.

        Once ``stop_requested`` is set (daemon shutdown) the run ends early: between notes in the
        text phase, between batches in the vector phase; the next run picks up where it stopped.
        After :meth:`request_full_reindex` the next run is a full one whatever ``full`` says."""
        self.indexing.set()
        if self._full_requested.is_set():
            self._full_requested.clear()
            full = True
        bus = self.events.progress_callback()

        def both(phase: str, done: int, total: int) -> None:
            bus(phase, done, total)
            if progress is not None:
                progress(phase, done, total)

        try:
            report = self.indexer.index(
                full=full, progress=both, should_stop=self.stop_requested.is_set, pdf_vectors=self.pdf_queue is None
            )
            if self.pdf_queue is not None:
                self.pdf_queue.request(None, full=full)
            elif not report.stopped:
                report.merge(self.pdfs.sync(full=full, progress=both, should_stop=self.stop_requested.is_set))
            self.last_report = report
            self.index_error = None
            self._publish_indexed(report)
            return report
        except Exception as exc:
            self.index_error = f"{type(exc).__name__}: {exc}"
            # Retried by stats() once the vault is back, only when it was gone (not a loop on other failures).
            self._recovery_queued = self.config.vault.is_dir()
            self.events.publish("error", {"message": f"Indexing failed: {type(exc).__name__}; see the daemon log."})
            raise
        finally:
            self.indexing.clear()

    def start_pdf_queue(self, watcher: VaultWatcher | None = None) -> PdfQueue:
        """Index PDFs from now on in :attr:`pdf_queue`, on its own low-priority thread (the daemon). The queue
        waits while the notes' indexing runs or ``watcher`` holds file events not yet applied (issue 8: PDFs
        never delay notes), and while indexing is paused (tray, ``POST /index/pause``). Stopped by :meth:`close`."""

        def busy() -> bool:
            return self._paused or self.indexing.is_set() or (watcher is not None and watcher.pending_count() > 0)

        self.pdf_queue = PdfQueue(
            self.pdfs,
            busy=busy,
            should_stop=self.stop_requested.is_set,
            on_report=self._publish_indexed,
            thread_init=lower_thread_priority,
            progress=self.events.progress_callback(),
        )
        self.pdf_queue.start()
        return self.pdf_queue

    def _publish_indexed(self, report: IndexReport) -> None:
        self.events.publish(
            "indexed",
            {
                "added": report.added,
                "updated": report.updated,
                "removed": report.deleted,
                "skipped": len(report.skipped),
                "elapsedS": round(report.elapsed_s, 2),
                "stoppedEarly": self.stop_requested.is_set(),
            },
        )

    def request_reindex(self, path: str | None = None) -> dict[str, Any]:
        """``POST /index/reindex``: queue work and return at once. ``path`` (checked to be inside the vault)
        becomes a watcher hint; no path asks for a full reconcile. Without a watcher (tests, one-shot use)
        an incremental run starts in a background thread, one at a time."""
        rel = None
        if path is not None:
            rel = checked_rel_path(path)
            resolve_in_vault(self.config.require_vault(), rel)
        if self.watcher is not None:
            if rel is not None:
                self.watcher.add_hints([rel])
            else:
                self.watcher.request_reconcile()
            return {"queued": True, "path": rel}
        with self._reindex_lock:
            if self._reindex_thread is None or not self._reindex_thread.is_alive():
                self._reindex_thread = threading.Thread(target=self._reindex_run, name="cairn-reindex", daemon=True)
                self._reindex_thread.start()
        return {"queued": True, "path": rel}

    def request_full_reindex(self) -> dict[str, Any]:
        """The tray's "Reindex now": queue a run that re-reads and re-parses every note (vectors of unchanged
        text still come from the cache; ``lastIngestedAt`` moves). Returns at once, like :meth:`request_reindex`."""
        self._full_requested.set()
        return self.request_reindex()

    def _reindex_run(self) -> None:
        try:
            self.index()
        except Exception:
            log.exception("re-indexing failed; the daemon keeps serving what is indexed")
        finally:
            self.store.close_thread_connection()  # this thread ends (one per POST /index/reindex)

    def wait_for_indexing(self, timeout: float) -> bool:
        """Wait for a background re-index thread to end; False if it still runs after ``timeout`` s."""
        thread = self._reindex_thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def index_paths(self, paths: set[str]) -> IndexReport:
        """Index a batch of changed paths (file-event hints, re-stat'ed), then fill their vectors at once
        (keyword-searchable first). Blocking; runs on the watcher's indexing thread."""
        self.indexing.set()
        try:
            stop = self.stop_requested.is_set
            report = self.indexer.index_paths(paths, should_stop=stop)
            if not report.stopped:
                report.vectors_written, report.texts_embedded = self.indexer.embed_pending(
                    should_stop=self._yield_to_new_changes(stop),
                    batch_size=WATCH_EMBED_BATCH,
                    pdf=False if self.pdf_queue is not None else None,
                )
            pdf_hints = self.pdfs.hints(paths)  # PDFs, folders holding some (named Projects.md too), gone paths
            if pdf_hints and self.pdf_queue is not None:
                self.pdf_queue.request(pdf_hints)
            elif pdf_hints and not report.stopped:
                report.merge(self.pdfs.sync(pdf_hints, should_stop=stop))
            if report.added or report.updated or report.deleted or report.skipped:
                self._publish_indexed(report)
                log.info(
                    "changes indexed: %d added, %d updated, %d removed, %d skipped; %d texts embedded",
                    report.added,
                    report.updated,
                    report.deleted,
                    len(report.skipped),
                    report.texts_embedded,
                )
            return report
        finally:
            self.indexing.clear()

    def _yield_to_new_changes(self, stop: Callable[[], bool]) -> Callable[[], bool]:
        """``should_stop`` for the vector phase of a watcher batch: after its first slice, it also stops while the
        watcher holds changes not yet applied, so their text is written (keyword-searchable) next and the
        remaining vectors follow in the next batch. Measured before: a 5 MB note (4,617 sentences, ~95 s of
        embedding) kept every later save out of search until it was done."""
        first = True

        def should_stop() -> bool:
            nonlocal first
            if stop():
                return True
            if first:  # every batch makes progress, however often files change
                first = False
                return False
            return self.watcher is not None and self.watcher.pending_count() > 0

        return should_stop

    def pause(self) -> None:
        """Stop following file changes (the tray's and ``POST /index/pause``'s action)."""
        self._paused = True
        if self.watcher is not None:
            self.watcher.pause()

    def resume(self) -> None:
        """Follow file changes again; a reconcile picks up what changed while paused."""
        self._paused = False
        if self.watcher is not None:
            self.watcher.resume()

    def set_paused(self, paused: bool) -> dict[str, bool]:
        """``POST /index/pause`` (True) and ``/index/resume`` (False): {paused, watching} afterwards."""
        self.pause() if paused else self.resume()
        watching = self.watcher.watching if self.watcher is not None else False
        return {"paused": self._paused, "watching": watching}

    def stats(self) -> dict[str, Any]:
        """``/index/stats``: {notes, skipped, chunks, vectors, pending, lastIngestedAt, indexing, watching, paused,
        pendingPaths, recovered, errors}. ``pending`` counts chunks awaiting vectors plus changed paths awaiting indexing."""
        out = self.store.stats()
        watch = self.watcher.stats() if self.watcher is not None else {}
        pending_paths = int(watch.get("pendingPaths", 0))
        out["pending"] += pending_paths
        out.update({"pendingPaths": pending_paths, "recovered": self.recovered})
        pdf_busy = self.pdf_queue is not None and not self.pdf_queue.idle()  # a PDF being read counts as indexing
        vault_there = self._recover_when_the_vault_is_back()
        index_error = self.index_error
        if not vault_there:
            index_error = (
                f"the vault folder {str(self.config.vault)!r} is missing or not a folder (moved, renamed or "
                "on a drive not mounted); searches answer from the index as it was"
            )
        out.update(
            {
                "indexing": self.indexing.is_set() or pdf_busy,
                "watching": bool(watch.get("watching", False)) and vault_there,
                "paused": bool(watch.get("paused", self._paused)),
                "vault": str(self.config.vault),
                "schemaVersion": self.store.schema_version,
                "model": self.embedder.model_id,
                "indexError": index_error,
                "pdf": self.pdf_queue.stats() if self.pdf_queue is not None else None,
            }
        )
        return out

    def _recover_when_the_vault_is_back(self) -> bool:
        """Whether the vault folder is there now. When it is and the last whole scan failed (``index_error``, e.g.
        the folder was gone: moved, renamed, a drive unmounted), a reconcile is queued once (the watcher's, else a
        background run), and its success clears ``index_error``. Before, the error stayed until someone asked for a
        full re-index, although the folder was back and file changes were indexed again."""
        try:
            there = self.config.vault is not None and self.config.vault.is_dir()
        except OSError:
            there = False
        if there and self.index_error is not None and not self.indexing.is_set() and not self._recovery_queued:
            self._recovery_queued = True
            log.info("the vault folder %s is there again; reconciling the index with it", self.config.vault)
            self.request_reindex()
        return there

    def health(self) -> dict[str, Any]:
        """``/health``: store and model reachability; ``status`` is ``ok`` only when both work."""
        store_ok = embedder_ok = True
        try:
            self.store.conn.execute("SELECT count(*) FROM notes").fetchone()
        except Exception as exc:  # report, never raise, from a health check
            store_ok = False
            log.warning("health: store check failed: %s", exc)
        try:
            embedder_ok = self.embedder.embed_query("health").shape == (self.embedder.dim,)
        except Exception as exc:
            embedder_ok = False
            log.warning("health: embedder check failed: %s", exc)
        return {
            "status": "ok" if store_ok and embedder_ok else "degraded",
            "version": __version__,
            "store": {"ok": store_ok},
            "embedder": {"ok": embedder_ok, "model": self.embedder.model_id},
            "llm": {"configured": self.config.llm.configured, "reachable": False, "remote": self.config.llm.remote},
        }

    def close(self) -> None:
        self.stop_requested.set()
        if self.pdf_queue is not None:
            self.pdf_queue.stop()
        self.pdfs.close()
        self.store.close()


class LLMProbe:
    """``/health``'s ``llm`` entry: ``{configured, reachable, remote, model}``. The endpoint is asked at
    most every ``ttl_s`` seconds (``/health`` needs no token, so it must not drive traffic to the model)."""

    def __init__(self, model: Any, ttl_s: float = 10.0) -> None:
        self.model = model
        self.ttl_s = ttl_s
        self._at = -1e9
        self._reachable = False
        self._lock = asyncio.Lock()

    async def status(self) -> dict[str, Any]:
        if self.model is None:
            return {"configured": False, "reachable": False, "remote": False}
        async with self._lock:
            if time.monotonic() - self._at > self.ttl_s:
                self._reachable = await self.model.probe()
                self._at = time.monotonic()
        return {
            "configured": True,
            "reachable": self._reachable,
            "remote": self.model.remote,
            "model": self.model.model,
        }


def setup_logging(config: Config, *, to_file: bool = True) -> None:
    """Log to stderr and (for the daemon) a rotating file in the platform log folder. Never stdout."""
    level = logging.DEBUG if config.debug else logging.INFO
    root = logging.getLogger()
    root.setLevel(level)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not any(getattr(h, "_cairn", False) for h in root.handlers):
        err = logging.StreamHandler(sys.stderr)
        err.setFormatter(fmt)
        err._cairn = True  # type: ignore[attr-defined]
        root.addHandler(err)
        if to_file:
            try:
                config.log_dir.mkdir(parents=True, exist_ok=True)
                fh = logging.handlers.RotatingFileHandler(
                    config.log_dir / "cairn.log", maxBytes=5_000_000, backupCount=3, encoding="utf-8"
                )
                fh.setFormatter(fmt)
                fh._cairn = True  # type: ignore[attr-defined]
                root.addHandler(fh)
            except OSError as exc:
                log.warning("cannot write the log file in %s: %s", config.log_dir, exc)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING if not config.debug else logging.INFO)


def write_service_file(config: Config, url: str, port: int, mcp_url: str | None = None) -> None:
    """The discovery record (mode 0600) ``{port, pid, version, startedAt, url, vault, index}`` of the running daemon
    for the plugin and ``cairn status``, plus ``mcpUrl`` (the streamable-HTTP MCP endpoint) when it serves MCP.
    Never a token. Written twice: ``service-<index>.json`` (``config.service_file``, this vault's; what
    ``cairn status --vault`` and the plugin read) and ``service.json`` (``config.shared_service_file``: the
    daemon started last, for readers that know no vault). ``vault`` is the resolved vault path."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    info = {
        "port": port,
        "pid": os.getpid(),
        "version": __version__,
        "startedAt": time.time(),
        "url": url,
        "vault": str(config.vault),
        "index": config.index_id,
    }
    if mcp_url:
        info["mcpUrl"] = mcp_url
    data = json.dumps(info)
    for target in (config.service_file, config.shared_service_file):
        tmp = target.with_name(f".service.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, data.encode("utf-8"))
        finally:
            os.close(fd)
        os.replace(tmp, target)


class McpHttp:
    """The daemon's MCP endpoint: the policy (fail-closed holder), the audit log and the HTTP server."""

    def __init__(self, policy: Any, server: Any) -> None:
        self.policy = policy
        self.server = server

    @property
    def url(self) -> str:
        return self.server.url

    def health(self) -> dict[str, Any]:
        """``/health``'s ``mcp`` entry: ``{http, policy: "ok"|"fail-closed", failClosedReason}``."""
        policy = self.policy.current()
        return {
            "http": self.url,
            "policy": "fail-closed" if policy.fail_closed_reason else "ok",
            "failClosedReason": policy.fail_closed_reason,
        }

    async def close(self) -> None:
        await self.server.close()


def mcp_policy_path(config: Config) -> Path:
    """The policy file: ``mcp_policy`` when configured, else the owner's copy in the config folder (created
    from the shipped default on first use). Raises :class:`~cairn.policy.PolicyError` when it cannot be made."""
    from cairn.policy import ensure_owner_policy

    return config.mcp_policy if config.mcp_policy is not None else ensure_owner_policy(config.config_dir)


def daemon_policy(config: Config) -> Any:
    """The governance policy as the daemon reads it: a live :class:`~cairn.policy.PolicyHolder` over
    :func:`mcp_policy_path` that fails closed (never raises) when the file is missing and cannot be made,
    invalid, or from a newer version (logged, and its ``fail_closed_reason`` said in ``/health``)."""
    from cairn.policy import PolicyError, PolicyHolder

    try:
        path = mcp_policy_path(config)
    except PolicyError as exc:
        path = Path(exc.file)
    return PolicyHolder(path, strict=False)


def remote_model_withhold(config: Config, policy: Any = None) -> Callable[[], Any]:
    """What a remote language model must not see, read live (a function for
    :class:`~cairn.answer.AnswerService`): the governance policy's ``withhold`` (tags and folders: the model is
    a client not declared local) plus ``llm.withhold_tags``; ``None`` while the policy cannot be read (missing
    and not creatable, invalid, newer version): then nothing enters the model's prompt (fail closed).
    ``policy``: the daemon's :func:`daemon_policy` holder, shared with MCP (one is made when not given)."""
    from cairn.policy import Withhold

    holder = policy if policy is not None else daemon_policy(config)

    def current() -> Withhold | None:
        now = holder.current()
        if now.fail_closed_reason:
            return None
        return Withhold.of(tags=(*now.withhold.tags, *config.llm.withhold_tags), folders=now.withhold.folders)

    return current


def mcp_service(config: Config, cairn: Cairn, policy: Any, transport: str) -> Any:
    from cairn.audit import AuditLog, audit_path
    from cairn.mcp_server import McpService

    return McpService(
        query=cairn.query,
        library=cairn.library,
        policy=policy.current,
        audit=AuditLog(audit_path(config.data_dir)),
        transport=transport,
    )


async def start_mcp_http(config: Config, cairn: Cairn, policy: Any = None) -> McpHttp:
    """Serve MCP over streamable HTTP on ``config.host``:``config.mcp_http_port`` (see cairn.mcp_server for
    why a second port) under ``policy`` (:func:`daemon_policy`, made when not given): it fails closed when
    missing or invalid (logged, and said in ``/health``)."""
    from cairn.mcp_server import McpHttpServer
    from cairn.secrets import McpTokens

    if policy is None:
        policy = await asyncio.to_thread(daemon_policy, config)
    service = mcp_service(config, cairn, policy, "http")
    server = McpHttpServer(service, McpTokens(config).current, config.host, config.mcp_http_port)
    await server.start()
    return McpHttp(policy, server)


async def run_mcp_stdio(config: Config, *, client: str | None, tools: list[str]) -> int:
    """``cairn mcp``: serve MCP on stdin/stdout from the existing index, read-only (no indexing, no watcher).

    Raises :class:`~cairn.policy.PolicyError` (``FILE:LINE: reason``) for a missing or invalid policy,
    :class:`~cairn.errors.BadRequestError` for an unknown ``--tool``, :class:`~cairn.errors.ConfigError` when the
    vault has no index yet. Nothing is written to stdout but the protocol."""
    from cairn.mcp_server import serve_stdio
    from cairn.policy import PolicyHolder
    from cairn.secrets import check_mcp_client_name

    if client is not None:
        check_mcp_client_name(client)
    policy = PolicyHolder(mcp_policy_path(config), strict=True)
    policy.current().served_tools(client, tools)  # an unknown --tool name fails here, before serving
    _require_index(config)
    cairn = Cairn(config, readonly=True)
    cairn.query.start_keyword_index()  # a long-lived server: keyword ranking from memory once built
    try:
        service = mcp_service(config, cairn, policy, "stdio")
        served = service.served(client, tools)
        log.info(
            "MCP over stdio for client %s (%s): tools %s",
            policy.current().client(client).name,
            "local" if policy.current().is_local(client) else "not local",
            ", ".join(served),
        )
        await serve_stdio(service, client, tools)
    finally:
        cairn.close()
    return 0


def _stop_on_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGINT and SIGTERM. Where the running loop cannot take signal handlers (not the
    main thread — the tray runs the loop in a worker thread — or Windows' loops), the caller's own
    shutdown path (tray Quit, KeyboardInterrupt) stops it instead."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            pass


async def run_mcp_http(
    config: Config, *, ready: Callable[[str], None] | None = None, stop: asyncio.Event | None = None
) -> int:
    """``cairn mcp --http``: the daemon's MCP endpoint alone, in the foreground, from the existing index (read-only:
    no indexing, no watcher, no plugin API), until SIGINT/SIGTERM or ``stop``. The policy is loaded strictly at
    start (as for stdio); a later invalid edit fails closed. Raises as :func:`run_mcp_stdio`."""
    from cairn.mcp_server import McpHttpServer
    from cairn.policy import PolicyHolder
    from cairn.secrets import McpTokens

    policy = PolicyHolder(mcp_policy_path(config), strict=True)
    _require_index(config)
    stop = stop or asyncio.Event()
    _stop_on_signals(stop)
    cairn = await asyncio.to_thread(lambda: Cairn(config, readonly=True))
    cairn.query.start_keyword_index()
    try:
        server = McpHttpServer(
            mcp_service(config, cairn, policy, "http"), McpTokens(config).current, config.host, config.mcp_http_port
        )
        await server.start()
        log.info("MCP (streamable HTTP) for %s at %s", config.vault, server.url)
        if ready:
            ready(server.url)
        try:
            await stop.wait()
        finally:
            await server.close()
    finally:
        cairn.close()
    return 0


def _require_index(config: Config) -> None:
    """:class:`~cairn.errors.ConfigError` when the vault has no index yet (``cairn mcp`` never indexes)."""
    from cairn.errors import ConfigError

    vault = config.require_vault()
    empty = not config.db_path.exists()
    if not empty:
        probe = Store(config.db_path, readonly=True)
        try:
            empty = probe.stats()["notes"] == 0
        finally:
            probe.close()
    if empty:
        raise ConfigError(
            f"The vault {str(vault)!r} has no index yet; run `cairn index --vault {vault}` "
            "(or start `cairn serve`) first, then start `cairn mcp` again."
        )


def remove_service_file(config: Config) -> None:
    """Remove this daemon's discovery files (see :func:`write_service_file`): each only while it names this
    process's pid and vault, so a daemon never removes another one's (``service.json`` may be another vault's by now)."""
    for target in (config.service_file, config.shared_service_file):
        try:
            data = json.loads(target.read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("pid") == os.getpid() and data.get("vault") == str(config.vault):
                target.unlink()
        except (OSError, ValueError):
            pass


async def run_daemon(
    config: Config,
    *,
    ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    started: Callable[[Cairn], Any] | None = None,
) -> int:
    """Run the daemon until ``stop`` is set or SIGINT/SIGTERM. ``ready(url)`` is called once the
    API is listening, then ``started(cairn)`` on the loop (the tray binds its menu there). Returns the exit code."""
    from cairn.http_api import create_app, serve  # adapters are wired here, in the composition root
    from cairn.llm import OpenAIChatModel
    from cairn.secrets import LLM_API_KEY, TokenWatch, get_secret

    stop = stop or asyncio.Event()
    _stop_on_signals(stop)
    # One daemon per data folder and vault (released by the OS even on kill -9), then a checked database.
    lock = InstanceLock(
        instance_lock_path(config.db_path),
        service_file=config.service_file,
        what=f"the vault {str(config.vault)!r} with the data folder {str(config.data_dir)!r}",
    ).acquire()
    try:
        cairn = await asyncio.to_thread(lambda: Cairn(config, verify=True))
    except BaseException:
        lock.release()
        raise
    token = await asyncio.to_thread(TokenWatch, config)
    model = None
    if config.llm.configured:
        api_key = await asyncio.to_thread(get_secret, config, LLM_API_KEY)
        model = OpenAIChatModel(config.llm, api_key=api_key)
        log.info(
            "answers are written by %s at %s (%s)",
            config.llm.model or "the default model",
            config.llm.base_url,
            "remote: what the MCP policy withholds and notes tagged "
            + ", ".join(config.llm.withhold_tags)
            + " are withheld from it"
            if model.remote
            else "local",
        )
    remote = model is not None and model.remote
    # One live policy for what MCP clients and a remote model may see.
    policy = await asyncio.to_thread(daemon_policy, config) if config.mcp_http or remote else None
    answers = AnswerService(
        cairn.query, model, withhold_tags=remote_model_withhold(config, policy) if remote else config.llm.withhold_tags
    )
    probe = LLMProbe(model)

    mcp: McpHttp | None = None
    mcp_off = "mcp_http is false in the config" if not config.mcp_http else None
    if config.mcp_http:
        try:
            mcp = await start_mcp_http(config, cairn, policy)
        except CairnError as exc:  # the plugin's API still runs; /health says why MCP does not
            mcp_off = exc.message
            log.error("MCP over HTTP is off: %s", exc.message)

    async def health() -> dict[str, Any]:
        out = await asyncio.to_thread(cairn.health)
        out["llm"] = await probe.status()
        out["mcp"] = await asyncio.to_thread(mcp.health) if mcp is not None else {"http": None, "off": mcp_off}
        return out

    app = create_app(
        config=config,
        query=cairn.query,
        token=token,
        stats=cairn.stats,
        health=health,
        answers=answers,
        library=cairn.library,
        reindex=cairn.request_reindex,
        events=cairn.events,
        set_paused=cairn.set_paused,
    )
    # Watch before the start-up index scans, so no change falls between the two.
    watcher = VaultWatcher(config.vault, apply_hints=cairn.index_paths, reconcile=cairn.index, ignore=config.ignore)
    cairn.watcher = watcher
    cairn.start_pdf_queue(watcher)
    await watcher.start()
    try:
        server = await serve(app, config.host, config.port)
    except BaseException:
        if mcp is not None:
            await mcp.close()
        raise
    write_service_file(config, server.url, server.port, mcp.url if mcp is not None else None)
    if ready:
        ready(server.url)
    if started:
        started(cairn)

    def index_in_background() -> None:
        try:
            try:
                report = cairn.index()
            finally:  # keyword ranking from memory (cairn.bm25) once the start-up run is over, even a failed one
                if not cairn.stop_requested.is_set():
                    cairn.query.start_keyword_index()
            if cairn.stop_requested.is_set():
                log.info(
                    "indexing stopped early for shutdown (%d notes added or updated so far)",
                    report.added + report.updated,
                )
                return
            log.info(
                "index up to date: %d notes scanned, %d added, %d updated, %d deleted, %d skipped; "
                "%d texts embedded in %.1f s",
                report.scanned,
                report.added,
                report.updated,
                report.deleted,
                len(report.skipped),
                report.texts_embedded,
                report.elapsed_s,
            )
        except Exception:
            log.exception("indexing failed; the daemon keeps serving what is indexed")

    indexing = asyncio.get_running_loop().run_in_executor(
        watcher.executor, index_in_background
    )  # the low-priority indexing thread
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        cairn.stop_requested.set()
        await server.close()
        if mcp is not None:
            await mcp.close()
        await watcher.stop()
        await asyncio.to_thread(cairn.pdf_queue.stop)
        try:
            await asyncio.wait_for(asyncio.shield(indexing), timeout=30)
        except TimeoutError:
            log.warning("indexing did not stop within 30 s")
        cairn.close()
        remove_service_file(config)
        lock.release()
    return 0


def serve(
    config: Config,
    *,
    tray: bool = True,
    ready: Callable[[str], None] | None = None,
    on_tray: Callable[[Any], None] | None = None,
) -> int:
    """``cairn serve``: the daemon with a tray icon when ``tray`` and the desktop allows one, else headless.

    No display or no tray backend → exactly one log line saying so, and the daemon runs the same
    without it. With a tray: the tray on the main thread, the daemon's asyncio loop in a worker
    thread (DESIGN.md, issue 6); SIGINT/SIGTERM and the tray's Quit stop the daemon cleanly.
    ``on_tray(tray)`` (embedding, tests) is called on the main thread before the icon shows.
    Returns the exit code; daemon start-up errors (``CairnError``) are raised as without a tray."""
    if tray:
        from cairn import tray as tray_mod  # the tray adapter, wired here in the composition root

        reason = tray_mod.unavailable_reason()
        if reason is not None:
            log.info("no tray icon: %s; running headless (the HTTP API and the CLI work the same)", reason)
            tray = False
    if not tray:
        return asyncio.run(run_daemon(config, ready=ready))
    return _serve_with_tray(config, ready=ready, on_tray=on_tray)


def _serve_with_tray(
    config: Config, *, ready: Callable[[str], None] | None, on_tray: Callable[[Any], None] | None
) -> int:
    from cairn import autostart
    from cairn.secrets import get_or_create_token, token_file
    from cairn.tray import Tray, TrayActions

    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def request_stop() -> None:
        try:
            loop.call_soon_threadsafe(stop.set)
        except RuntimeError:  # the loop already ended
            pass

    def set_autostart(enable: bool) -> None:
        autostart.enable(config) if enable else autostart.disable()

    actions = TrayActions(
        vault=config.require_vault(),
        log_dir=config.log_dir,
        quit=request_stop,
        token=lambda: get_or_create_token(config),
        autostart_enabled=lambda: autostart.status(config)["enabled"],
        set_autostart=set_autostart,
    )
    try:
        tray = Tray(actions)
    except Exception as exc:  # the backend imported but cannot make an icon
        log.info(
            "no tray icon: %s: %s; running headless (the HTTP API and the CLI work the same)", type(exc).__name__, exc
        )
        loop.close()
        return asyncio.run(run_daemon(config, ready=ready))
    outcome: dict[str, Any] = {}

    def started(cairn: Cairn) -> None:
        actions.stats = cairn.stats
        actions.reindex = cairn.request_full_reindex
        actions.set_paused = cairn.set_paused
        if token_file(config).exists():
            actions.warning = "API token kept in a file: no keyring"
        tray.bind(asyncio.get_running_loop())
        outcome["follow"] = asyncio.get_running_loop().create_task(tray.follow(cairn.events), name="cairn-tray")

    def daemon_thread() -> None:
        try:
            with asyncio.Runner(loop_factory=lambda: loop) as runner:
                outcome["code"] = runner.run(run_daemon(config, ready=ready, stop=stop, started=started))
        except BaseException as exc:  # reported on the main thread
            outcome["error"] = exc
        finally:
            tray.stop()

    previous = {}

    def install_signal_handlers() -> None:  # main thread only
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                old = signal.signal(sig, lambda _s, _f: request_stop())
                previous.setdefault(sig, old)
            except (ValueError, OSError):  # not the main thread
                pass

    install_signal_handlers()
    worker = threading.Thread(target=daemon_thread, name="cairn-daemon")
    worker.start()
    try:
        if on_tray is not None:
            on_tray(tray)
        # The GTK backends reset SIGINT to the default (kill) when their loop starts: put ours back there.
        threading.Thread(
            target=lambda: tray.wait_ready(60) and tray.call_on_main(install_signal_handlers),
            name="cairn-tray-signals",
            daemon=True,
        ).start()
        try:
            tray.run()
        except Exception as exc:  # the icon failed; the daemon goes on without it
            log.warning("the tray icon stopped (%s: %s); the daemon keeps running headless", type(exc).__name__, exc)
            install_signal_handlers()
        else:
            if worker.is_alive() and "error" not in outcome and not stop.is_set():
                log.info("the tray icon closed; the daemon keeps running (stop it with Ctrl-C or SIGTERM)")
        while worker.is_alive():
            worker.join(0.5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if "error" in outcome:
        raise outcome["error"]
    return int(outcome.get("code", 1))
