"""Composition root (layer 4): builds one vault's services (:class:`Cairn`) and runs them: ``cairn serve``
(:func:`serve`, :func:`run_daemon`), ``cairn mcp`` over stdio or HTTP (:func:`run_mcp_stdio`,
:func:`run_mcp_http`). The work itself lives in the services; here are their threads and start/stop order.

Start order for ``cairn serve``: open the store and the model, start the HTTP API on
127.0.0.1 (``/health`` answers while indexing), write ``service.json`` (URL, pid — never
the token), then index the vault in a worker thread (keyword-ready first, vectors after).
Stop order: HTTP server closed (open streams cut), indexing asked to stop between batches,
store closed, ``service.json`` removed.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import logging.handlers
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cairn.answers import AnswerService, ChatModel
from cairn.config import Config
from cairn.discovery import moves_off, remove_service_file, write_service_file
from cairn.embedder import Embedder
from cairn.errors import CairnError
from cairn.events import EventBus
from cairn.index import (
    ChunkVectors,
    IndexService,
    IndexWriter,
    NoteIndexer,
    PdfIndexer,
    VaultWatcher,
    lower_thread_priority,
)
from cairn.library import NoteViews
from cairn.llm import answer_model, say_model
from cairn.llm_probe import LLMProbe
from cairn.loopback import require_loopback_host
from cairn.mcp_server.listener import LazyListener, McpHttp, listen
from cairn.memory import daemon_memory, fix_mmap_threshold, rss_bytes
from cairn.policy import Withhold
from cairn.policy_live import PolicyHolder, daemon_policy, policy_holder
from cairn.policy_vault import record_vault_policy
from cairn.private_files import private_dir, private_file, tighten_install
from cairn.search import SearchService, search_caches, search_parts
from cairn.services import HealthCheck, Services
from cairn.store import Store
from cairn.store.recovery import InstanceLock, instance_lock_path, mark_closed_cleanly, open_verified

if TYPE_CHECKING:
    from cairn.mcp_server import McpService

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


def mcp_service(cairn: Cairn, policy: PolicyHolder, transport: str) -> McpService:
    """The MCP service; its ``ask`` answers from the passages themselves (no model: ``grounded: false``)."""
    from cairn.audit import AuditLog, audit_path
    from cairn.mcp_server import McpService

    return McpService(
        build_services(cairn),
        policy=policy.current,
        audit=AuditLog(audit_path(cairn.config.data_dir)),
        transport=transport,
    )


async def start_mcp_http(config: Config, cairn: Cairn, policy: PolicyHolder | None = None) -> McpHttp:
    """Serve MCP over streamable HTTP on ``config.host``:``config.mcp_http_port`` (see cairn.mcp_server for
    why a second port) under ``policy`` (:func:`daemon_policy`, made when not given): it fails closed when
    missing or invalid (logged, and said in ``/health``). The port is bound here (CairnError when it cannot be);
    the MCP SDK and its server are loaded when the first client connects (:mod:`cairn.mcp_server.listener`)."""
    if policy is None:
        policy = await asyncio.to_thread(daemon_policy, config)

    async def start(sock: Any) -> Any:
        before = rss_bytes()
        # The SDK is slow to import: on a worker thread, so the plugin's API goes on answering meanwhile.
        await asyncio.to_thread(importlib.import_module, "cairn.mcp_server.streamable_http")
        from cairn.mcp_server import McpHttpServer
        from cairn.secrets import McpTokens

        service = mcp_service(cairn, policy, "http")
        server = await McpHttpServer.for_config(service, McpTokens(config).current, config).start(sock=sock)
        after = rss_bytes()
        cairn.mcp_http_bytes.value = max(0, after - before) if before is not None and after is not None else 0
        return server

    return McpHttp(policy, await _listen_mcp(config, lambda port: LazyListener(config.host, port, start).listen()))


async def _listen_mcp(config: Config, bind: Callable[[int], Any], *, recorded: bool = True) -> Any:
    """``await bind(port)`` on the MCP port; when it fails (the port in use) and
    :func:`~cairn.discovery.moves_off` says so, on a free port instead (``recorded``: in this daemon's service
    record). Raises the first attempt's CairnError otherwise."""
    port = config.mcp_http_port
    try:
        return await bind(port)
    except CairnError:
        move = moves_off(config, "MCP endpoint", config.mcp_port, recorded=recorded)
        if not port or not await asyncio.to_thread(move, port):
            raise
        return await bind(0)


async def run_mcp_stdio(config: Config, *, client: str | None, tools: list[str]) -> int:
    """``cairn mcp``: serve MCP on stdin/stdout from the existing index, read-only (no indexing, no watcher).

    Raises :class:`~cairn.policy.PolicyError` (``FILE:LINE: reason``) for a missing or invalid policy,
    :class:`~cairn.errors.BadRequestError` for an unknown ``--tool``, :class:`~cairn.errors.ConfigError` when the
    vault has no index yet. Nothing is written to stdout but the protocol."""
    from cairn.mcp_server import serve_stdio
    from cairn.secrets import check_mcp_client_name

    if client is not None:
        check_mcp_client_name(client)
    policy = policy_holder(config, strict=True)
    policy.current().served_tools(client, tools)  # an unknown --tool name fails here, before serving
    _require_index(config)
    cairn = Cairn(config, readonly=True)
    cairn.query.start_keyword_index()  # a long-lived server: keyword ranking from memory once built
    try:
        service = mcp_service(cairn, policy, "stdio")
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
    from cairn.secrets import McpTokens

    require_loopback_host(config.host, "MCP over HTTP")  # before anything opens (the loader refuses it too)
    policy = policy_holder(config, strict=True)
    _require_index(config)
    stop = stop or asyncio.Event()
    _stop_on_signals(stop)
    cairn = await asyncio.to_thread(lambda: Cairn(config, readonly=True))
    cairn.query.start_keyword_index()
    try:
        server = McpHttpServer.for_config(mcp_service(cairn, policy, "http"), McpTokens(config).current, config)

        async def bind(port: int) -> Any:
            return listen(config.host, port)

        await server.start(sock=await _listen_mcp(config, bind, recorded=False))
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
            empty = probe.stats().notes == 0
        finally:
            probe.close()
    if empty:
        raise ConfigError(
            f"The vault {str(vault)!r} has no index yet; run `cairn index --vault {vault}` "
            "(or start `cairn serve`) first, then start `cairn mcp` again."
        )


async def run_daemon(
    config: Config,
    *,
    ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    started: Callable[[Cairn, PolicyHolder | None], Any] | None = None,
) -> int:
    """Run the daemon until ``stop`` is set or SIGINT/SIGTERM. ``ready(url)`` is called once the API is listening,
    then ``started(cairn, policy)`` on the loop (the tray binds its menu there; ``policy``: the live MCP policy, when
    MCP or a remote model reads one). Returns the exit code."""
    from cairn.http import make_app, serve  # adapters are wired here, in the composition root
    from cairn.secrets import TokenWatch

    # Every listener is loopback only: checked before any socket opens, the MCP endpoint's first of all.
    require_loopback_host(config.host, "Cairn's HTTP API and MCP endpoint")
    stop = stop or asyncio.Event()
    _stop_on_signals(stop)
    token = await asyncio.to_thread(TokenWatch, config)  # first: keyring = "required" refuses before any work
    lock, cairn = await _open_exclusive(config)
    # Keyword ranking from memory from the first question on: the statistics kept beside the index are read (a
    # second or two at 40,000 notes) while the rest starts; FTS5 alone takes seconds a question at that size.
    cairn.query.start_keyword_index()
    cairn.query.warm_up()  # the names index and the chunk → note map, also read by the first question
    model = await asyncio.to_thread(answer_model, config)
    say_model(config, model)
    remote = model is not None and model.remote
    # One live policy for what MCP clients and a remote model may see.
    policy = await asyncio.to_thread(daemon_policy, config) if config.mcp_http or remote else None
    mcp, mcp_off = await _start_mcp_if_configured(config, cairn, policy)
    health, owner_health = _daemon_health(cairn, LLMProbe(model), mcp, mcp_off)
    services = build_services(cairn, model=model, policy=policy, health=health, health_detail=owner_health)
    app = make_app(services, token=token)
    watcher = await _start_watching(config, cairn)
    try:
        server = await serve(app, config.host, config.port, move_if_taken=moves_off(config, "HTTP API", config.port))
    except BaseException:
        if mcp is not None:
            await mcp.close()
        raise
    write_service_file(config, server.url, server.port, mcp.url if mcp is not None else None)
    if ready:
        ready(server.url)
    if started:
        started(cairn, policy)
    # The start-up index runs on a thread of its own, its vectors then on the bulk lane's: saves go on the save
    # lane's thread meanwhile.
    bulk = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cairn-index")  # not the loop's: its priority drops
    indexing = asyncio.get_running_loop().run_in_executor(bulk, _index_at_start, cairn)
    bulk.shutdown(wait=False)  # the thread ends with the run
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        cairn.indexing.stop_requested.set()
        await server.close()
        if mcp is not None:
            await mcp.close()
        await _stop_indexing(cairn, watcher, indexing)
        cairn.close()
        remove_service_file(config)
        lock.release()
    return 0


async def _open_exclusive(config: Config) -> tuple[InstanceLock, Cairn]:
    """One daemon per data folder and vault (a lock the OS releases even on kill -9), then a checked database."""
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
    return lock, cairn


async def _start_mcp_if_configured(
    config: Config, cairn: Cairn, policy: PolicyHolder | None
) -> tuple[McpHttp | None, str | None]:
    """The daemon's MCP endpoint when ``mcp_http`` is on, and why it is off otherwise (said in ``/health``): a
    failure to start it is logged and leaves the plugin's API running."""
    if not config.mcp_http:
        return None, "mcp_http is false in the config"
    try:
        return await start_mcp_http(config, cairn, policy), None
    except CairnError as exc:
        log.error("MCP over HTTP is off: %s", exc.message)
        return None, exc.message


def _daemon_health(
    cairn: Cairn, probe: LLMProbe, mcp: McpHttp | None, mcp_off: str | None
) -> tuple[HealthCheck, HealthCheck]:
    """``GET /health``: the index's health, the model endpoint's (:class:`~cairn.llm_probe.LLMProbe`) and MCP's;
    as anyone sees it, and as the owner (the API token) does: with why the MCP policy is unusable."""

    async def health(detail: bool = False) -> dict[str, Any]:
        out = await asyncio.to_thread(cairn.indexing.health)
        out["llm"] = await probe.status()
        out["mcp"] = await asyncio.to_thread(mcp.health, detail) if mcp is not None else {"http": None, "off": mcp_off}
        return out

    async def owner_health() -> dict[str, Any]:
        return await health(detail=True)

    return health, owner_health


async def _start_watching(config: Config, cairn: Cairn) -> VaultWatcher:
    """Watch the vault (file events become the index's hints, applied on its save lane) and start the PDF lane.
    Started before the start-up index scans, so no change falls between the two."""
    index = cairn.indexing
    watcher = VaultWatcher(
        config.require_vault(),
        apply_hints=index.save_lane.save,
        reconcile=index.save_lane.reconcile,
        hints=index.hints,
        executor=index.save_lane.executor,
        ignore=config.ignore,
        force_polling={"native": False, "polling": True}.get(config.watch),
    )
    index.pdf_lane.start()
    await watcher.start()
    return watcher


def _index_at_start(cairn: Cairn) -> None:
    """The start-up whole-vault run (blocking): the text of every note (keyword-searchable), then the in-memory
    keyword ranking built again if the run changed too much for it to follow, even after a failed run; the vectors
    follow on the bulk lane."""
    lower_thread_priority()
    stop = cairn.indexing.stop_requested
    try:
        try:
            report = cairn.indexing.index(vectors=False)
        finally:
            if not stop.is_set():
                cairn.query.start_keyword_index(when_needed=True)
        if stop.is_set():
            log.info(
                "indexing stopped early for shutdown (%d notes added or updated so far)", report.added + report.updated
            )
            return
        log.info(
            "notes indexed (keyword search ready): %d scanned, %d added, %d updated, %d deleted, %d skipped in %.1f s; "
            "vectors follow",
            report.scanned,
            report.added,
            report.updated,
            report.deleted,
            len(report.skipped),
            report.elapsed_s,
        )
        cairn.indexing.bulk_lane.request()
    except Exception:
        log.exception("indexing failed; the daemon keeps serving what is indexed")
    finally:
        cairn.store.close_thread_connection()  # this thread ends with the run


async def _stop_indexing(cairn: Cairn, watcher: VaultWatcher, indexing: asyncio.Future[None]) -> None:
    """Stop the watcher and the PDF lane, then wait (up to 30 s) for the start-up run to end between batches."""
    await watcher.stop()
    await asyncio.to_thread(cairn.indexing.pdf_lane.stop)
    try:
        await asyncio.wait_for(asyncio.shield(indexing), timeout=30)
        if not await asyncio.to_thread(cairn.indexing.bulk_lane.wait, 30):
            raise TimeoutError
    except TimeoutError:
        log.warning("indexing did not stop within 30 s")


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
    thread; SIGINT/SIGTERM and the tray's Quit stop the daemon cleanly.
    ``on_tray(tray)`` (embedding, tests) is called on the main thread before the icon shows.
    Returns the exit code; daemon start-up errors (``CairnError``) are raised as without a tray."""
    fix_mmap_threshold()  # before the first index's large buffers: they go back to the system once freed
    if tray:
        from cairn import tray as tray_mod  # the tray adapter, wired here in the composition root

        reason = tray_mod.unavailable_reason()
        if reason is not None:
            log.info("no tray icon: %s; running headless (the HTTP API and the CLI work the same)", reason)
            tray = False
    if not tray:
        return asyncio.run(run_daemon(config, ready=ready))
    return _serve_with_tray(config, ready, on_tray)


def _serve_with_tray(config: Config, ready: Callable[[str], None] | None, on_tray: Callable[[Any], None] | None) -> int:
    """The daemon beside a tray icon (:class:`~cairn.tray.TrayHost`); headless when the icon cannot be made."""
    from cairn.secrets import token_file
    from cairn.tray import TrayHost

    try:
        host = TrayHost(lambda stop_daemon: _tray_actions(config, stop_daemon))
    except Exception as exc:  # the backend imported but cannot make an icon
        log.info(
            "no tray icon: %s: %s; running headless (the HTTP API and the CLI work the same)", type(exc).__name__, exc
        )
        return asyncio.run(run_daemon(config, ready=ready))

    def started(cairn: Cairn, policy: PolicyHolder | None) -> None:  # on the daemon's loop, once the API listens
        host.actions.stats = lambda: _tray_stats(cairn, policy)
        host.actions.reindex = cairn.indexing.request_full_reindex
        host.actions.set_paused = cairn.indexing.set_paused
        if token_file(config).exists():  # chosen (keyring = "file"), or no keyring could hold it
            chosen = config.keyring == "file"
            host.actions.warning = f"API token kept in a {'0600 file, as configured' if chosen else 'file: no keyring'}"
        host.follow(cairn.events)

    return host.run(lambda stop: run_daemon(config, ready=ready, stop=stop, started=started), on_tray)


def _tray_stats(cairn: Cairn, policy: PolicyHolder | None) -> dict[str, Any]:
    """What the tray shows: the index's stats and, for the owner, the MCP policy's state with its reason."""
    out = cairn.indexing.stats()
    if policy is not None:
        out["mcpPolicy"] = policy.status(detail=True)
    return out


def _tray_actions(config: Config, stop_daemon: Callable[[], None]) -> Any:
    """The tray menu's actions that need no running daemon (the rest are bound by ``started``)."""
    from cairn import autostart
    from cairn.secrets import get_or_create_token
    from cairn.tray import TrayActions

    return TrayActions(
        vault=config.require_vault(),
        log_dir=config.log_dir,
        quit=stop_daemon,
        token=lambda: get_or_create_token(config),
        autostart_enabled=lambda: autostart.status(config)["enabled"],
        set_autostart=lambda enable: autostart.enable(config) if enable else autostart.disable(config),
    )
