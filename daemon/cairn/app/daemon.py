"""``cairn serve``: the daemon (:func:`run_daemon`) and its start and stop order (see :mod:`cairn.app`), with or
without the tray (:func:`serve`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cairn.app.core import Cairn, build_services, stop_on_signals
from cairn.app.mcp import start_mcp_http
from cairn.config import Config
from cairn.discovery import moves_off, remove_service_file, write_service_file
from cairn.errors import CairnError
from cairn.index import VaultWatcher, lower_thread_priority
from cairn.llm import answer_model, say_model
from cairn.llm_probe import LLMProbe
from cairn.loopback import require_loopback_host
from cairn.mcp_server.listener import McpHttp
from cairn.memory import fix_mmap_threshold
from cairn.policy_live import PolicyHolder, daemon_policy
from cairn.services import HealthCheck
from cairn.store.recovery import InstanceLock, instance_lock_path

log = logging.getLogger(__name__)


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
    stop_on_signals(stop)
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
