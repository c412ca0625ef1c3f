"""The tray icon and its menu (:class:`Tray`) on pystray: shown on the main thread, its menu's actions sent
to the daemon's loop, its status kept current from index events and a ``stats()`` poll."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from cairn.events import EventBus
from cairn.tray.actions import TrayActions, copy_to_clipboard, open_folder
from cairn.tray.backend import Backend, choose_backend
from cairn.tray.backend import describe as describe_backend
from cairn.tray.status import DEFAULT_POLL_S, STATES, TrayStatus, describe, icon_path, tooltip
from cairn.tray.xorg import XorgBridge, draw_over_tray, stop_xorg, xorg_clicks

log = logging.getLogger(__name__)

#: Seconds a notice (``API token copied to the clipboard``, ``Reindex failed: …``) stays in the menu.
NOTICE_S = 8.0


class Tray:
    """The tray icon and its menu. Build it on the main thread, :meth:`run` it there (blocks until
    :meth:`stop`); :meth:`bind` it to the daemon's loop once the daemon runs; :meth:`follow` is the
    coroutine (run on that loop) that keeps the status current.

    ``backend``: the pystray backend to use (default: :func:`~cairn.tray.backend.choose_backend`, logged at
    INFO). Raises :class:`~cairn.tray.backend.TrayUnavailable` when no backend loads (check
    :func:`unavailable_reason` first), or what the backend raises when it cannot make an icon.
    """

    def __init__(
        self,
        actions: TrayActions,
        *,
        name: str = "cairn",
        poll_s: float = DEFAULT_POLL_S,
        backend: Backend | None = None,
    ) -> None:
        from PIL import Image

        self.backend = backend or choose_backend()
        import pystray  # loaded by choose_backend with its inert backend: only Menu and MenuItem are used

        self.actions = actions
        self.poll_s = poll_s
        self._images = {s: Image.open(icon_path(s)).convert("RGBA") for s in STATES}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._status = describe(None)
        self._stats: Mapping[str, Any] | None = None
        self._progress: Mapping[str, Any] | None = None
        self._notice: str | None = None
        self._notice_serial = 0
        self._notice_lock = threading.Lock()
        self.notice_s = NOTICE_S
        self._quitting = False
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._stop_wanted = threading.Event()
        self._stop_lock = threading.Lock()
        #: One pystray call at a time from our threads: the xorg backend hands each call to its loop and
        #: waits on ONE shared result queue, so two threads calling at once could take each other's result.
        self._icon_lock = threading.Lock()
        self._icon_stopped = False
        self._updates: queue.Queue[TrayStatus | None] = queue.Queue()
        #: Futures of actions sent to the loop (the last few), for callers that want to wait.
        self.pending: list[Future] = []
        self.menu = self._menu(pystray)
        self.icon = self.backend.icon_class(
            name, icon=self._images[self._status.state], title=self._status.tooltip, menu=self.menu
        )
        log.info("%s", describe_backend(self.backend))
        self._updater = threading.Thread(target=self._apply_updates, name="cairn-tray-update", daemon=True)
        #: pystray's plain X11 backend: shown and updated through :class:`XorgBridge`.
        self._xorg = self.backend.name == "xorg"
        if self._xorg:
            draw_over_tray(self.icon)

    def _menu(self, pystray: Any) -> Any:
        """The menu (see the package docstring); labels and states are read each time it is shown."""
        item, sep = pystray.MenuItem, pystray.Menu.SEPARATOR
        return pystray.Menu(
            item(lambda _i: self._status.text, None, enabled=False),
            item(
                lambda _i: f"⚠ {self._status.warning}",
                None,
                enabled=False,
                visible=lambda _i: bool(self._status.warning),
            ),
            item(
                lambda _i: f"⚠ {self.actions.warning}",
                None,
                enabled=False,
                visible=lambda _i: bool(self.actions.warning),
            ),
            item(lambda _i: self._notice or "", None, enabled=False, visible=lambda _i: bool(self._notice)),
            sep,
            item("Reindex now", self._on_reindex, enabled=lambda _i: self._can_act()),
            item(
                lambda _i: "Resume watching" if self.paused else "Pause watching",
                self._on_pause,
                enabled=lambda _i: self._can_act(),
            ),
            sep,
            item("Open vault folder", self._on_open_vault, default=True),
            item("Open logs folder", self._on_open_logs),
            item("Copy API token", self._on_copy_token, enabled=lambda _i: self.actions.token is not None),
            sep,
            item(
                "Start at login",
                self._on_autostart,
                checked=lambda _i: self._autostart_checked(),
                enabled=lambda _i: self.actions.set_autostart is not None,
            ),
            sep,
            item("Quit", self._on_quit),
        )

    # ------------------------------------------------------------------ state
    @property
    def status(self) -> TrayStatus:
        return self._status

    @property
    def paused(self) -> bool:
        return bool(self._stats and self._stats.get("paused"))

    @property
    def notice(self) -> str | None:
        return self._notice

    @property
    def stopping(self) -> bool:
        """True once Quit was chosen or :meth:`stop` was called (any thread)."""
        return self._quitting or self._stop_wanted.is_set()

    def _can_act(self) -> bool:
        return self._loop is not None and not self._quitting

    def _autostart_checked(self) -> bool:
        if self.actions.autostart_enabled is None:
            return False
        try:
            return bool(self.actions.autostart_enabled())
        except Exception as exc:  # a broken entry must not break the menu
            log.warning("cannot read the start-at-login state: %s", exc)
            return False

    # ------------------------------------------------------------------ lifecycle
    def run(self) -> None:
        """Show the icon and handle its events on the calling (main) thread until :meth:`stop`.
        Raises what the backend raises when it cannot start (e.g. GTK without a D-Bus session)."""
        self._updater.start()
        failed = threading.Event()

        def setup(icon: Any) -> None:
            if failed.is_set():
                return
            if not self._xorg:  # xorg: the updater thread docks the icon over its own X connection
                icon.visible = True
            self._ready.set()
            if self._stop_wanted.is_set():  # stop() came before the icon was up (the daemon failed to start)
                self._stop_icon()

        try:
            self.icon.run(setup=setup)
        except BaseException:
            failed.set()
            if not self._ready.is_set():
                # pystray's setup thread (not a daemon thread) waits for a "ready" that will never come and
                # would keep the process from exiting: release it (pystray 0.19's private queue).
                pending = getattr(self.icon, "_Icon__queue", None)
                if pending is not None:
                    pending.put(False)
            raise
        finally:
            self._stopped.set()
            self._updates.put(None)

    def call_on_main(self, fn: Callable[[], None]) -> bool:
        """Run ``fn`` on the tray's (main) thread soon, for backends whose loop is not Python's (GTK,
        AppIndicator: a GLib main loop). Returns False when the backend needs nothing of the kind."""
        if type(self.icon).__module__ not in ("pystray._gtk", "pystray._appindicator"):
            return False
        from gi.repository import GLib

        def once() -> bool:
            fn()
            return False

        GLib.idle_add(once)
        return True

    def wait_ready(self, timeout: float) -> bool:
        """True once the icon is shown (its backend loop runs)."""
        return self._ready.wait(timeout)

    def stop(self, timeout: float = 3.0) -> None:
        """End :meth:`run` (any thread), also when called before the icon is up (then :meth:`run` ends as
        soon as it is). Bounded by ``timeout`` seconds even if the backend is wedged."""
        self._quitting = True
        self._stop_wanted.set()
        if self._stopped.is_set() or not self._ready.is_set():
            return
        done = threading.Event()

        def stop_icon() -> None:
            try:
                self._stop_icon()
            finally:
                done.set()

        threading.Thread(target=stop_icon, name="cairn-tray-stop", daemon=True).start()
        if not done.wait(timeout):
            log.warning("the tray icon did not stop within %.0f s", timeout)

    def _stop_icon(self) -> None:
        with self._stop_lock:  # once, whoever comes first (stop() or the setup callback)
            if self._icon_stopped:
                return
            self._icon_stopped = True
        try:
            if self._xorg:
                stop_xorg(self.icon, self._stopped)
            else:
                self.icon.stop()
        except Exception as exc:
            log.warning("the tray icon did not stop cleanly: %s", exc)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Connect the menu to the daemon's running loop (call from that loop once the daemon serves)."""
        self._loop = loop
        self._push()

    async def follow(self, events: EventBus) -> None:
        """Keep the status current from ``events`` (``progress``, ``indexed``, ``error``) and a ``stats()``
        poll every ``poll_s`` seconds. Runs on the daemon loop until cancelled."""
        sub = events.subscribe()
        try:
            await self.refresh()
            while True:
                try:
                    name, data = await asyncio.wait_for(sub.get(), timeout=self.poll_s)
                except TimeoutError:
                    await self.refresh()
                    continue
                if name == "progress" and isinstance(data, Mapping):
                    self._progress = data
                    base = dict(self._stats or {})
                    base["indexing"] = True
                    self._set(describe(base, data))
                elif name in ("indexed", "error"):
                    self._progress = None
                    await self.refresh()
        finally:
            sub.close()

    async def refresh(self) -> None:
        """Read ``stats()`` (in a worker thread) and show the result."""
        if self.actions.stats is None:
            return
        try:
            stats = await asyncio.to_thread(self.actions.stats)
        except Exception as exc:
            log.warning("tray: cannot read the index stats: %s", exc)
            return
        self._stats = stats
        self._set(describe(stats, self._progress if stats.get("indexing") else None))

    # ------------------------------------------------------------------ showing
    def _set(self, status: TrayStatus) -> None:
        if self._quitting and status.text != "Quitting…":
            return
        if status != self._status:
            self._status = status
            self._push()

    def _push(self) -> None:
        self._updates.put(self._status)

    def _apply_updates(self) -> None:
        """Apply status changes to the icon on this helper thread: some backends' setters wait for the
        tray thread, which must never stall the daemon loop."""
        self._ready.wait()
        shown_state = None
        bridge = XorgBridge(self.icon) if self._xorg else None
        try:
            if bridge is not None:
                threading.Thread(target=xorg_clicks, args=(self.icon,), name="cairn-tray-clicks", daemon=True).start()
                bridge.show(self._status.tooltip, self._images[self._status.state])
                shown_state = self._status.state
            while True:
                status = self._updates.get()
                while not self._updates.empty():  # only the newest matters
                    status = self._updates.get()
                if status is None or self._stopped.is_set():
                    return
                try:
                    with self._icon_lock:
                        if self._icon_stopped:
                            return
                        image = self._images[status.state] if status.state != shown_state else None
                        if bridge is not None:
                            bridge.show(status.tooltip, image)
                        else:
                            if image is not None:
                                self.icon.icon = image
                            self.icon.title = status.tooltip
                            self._gtk_tooltip(status.tooltip)
                            self.icon.update_menu()
                        shown_state = status.state
                except Exception as exc:
                    log.warning("tray: cannot update the icon: %s", exc)
        finally:
            if bridge is not None:
                bridge.close()

    def _gtk_tooltip(self, text: str) -> None:
        """Show ``text`` when the pointer rests on the GTK backend's icon. pystray sets only the GTK status icon's
        title, which desktops do not show (AppIndicator has no tooltip; the ``xorg`` one is the window's name)."""
        status_icon = getattr(self.icon, "_status_icon", None)
        if status_icon is not None and type(self.icon).__module__ == "pystray._gtk":
            self.call_on_main(lambda: status_icon.set_tooltip_text(text))

    def _say(self, notice: str | None) -> None:
        """Show ``notice`` (the result of the last action) as a menu line for :data:`NOTICE_S` seconds: it says
        what happened, then gives its place back so the items do not stay pushed down."""
        with self._notice_lock:
            self._notice = notice
            self._notice_serial += 1
            serial = self._notice_serial
        self._push()
        if notice is not None:
            timer = threading.Timer(self.notice_s, self._expire_notice, args=(serial,))
            timer.daemon = True
            timer.start()

    def _expire_notice(self, serial: int) -> None:
        with self._notice_lock:
            if serial != self._notice_serial:  # a newer notice replaced it and has its own timer
                return
            self._notice = None
        self._push()

    # ------------------------------------------------------------------ actions (tray thread)
    def _submit(
        self, fn: Callable[..., Any], *args: Any, done: Callable[[Any], None] | None = None, what: str = "action"
    ) -> Future | None:
        """Run blocking ``fn(*args)`` in the daemon loop's thread pool; ``done(result)`` afterwards; errors are
        logged and shown in the menu. Returns the future (``None`` when the daemon is not running)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self._say("The daemon is still starting")
            return None

        async def call() -> Any:
            try:
                result = await asyncio.to_thread(fn, *args)
            except Exception as exc:
                log.warning("tray: %s failed: %s", what, exc)
                self._say(f"{what} failed: {getattr(exc, 'message', None) or exc}")
                raise
            if done is not None:
                done(result)
            await self.refresh()
            return result

        future = asyncio.run_coroutine_threadsafe(call(), loop)
        self.pending = [f for f in self.pending if not f.done()][-8:] + [future]
        return future

    def _on_reindex(self, _icon: Any = None, _item: Any = None) -> None:
        if self.actions.reindex is None:
            return
        log.info("tray: reindex requested")
        self._say("Re-reading every note")
        self._submit(self.actions.reindex, what="Reindex")

    def _on_pause(self, _icon: Any = None, _item: Any = None) -> None:
        if self.actions.set_paused is None:
            return
        pause = not self.paused
        self._say(None)
        self._submit(self.actions.set_paused, pause, what="Pause" if pause else "Resume")

    def _open(self, path: Path, what: str) -> None:
        try:
            (self.actions.opener or open_folder)(path)
        except Exception as exc:
            log.warning("tray: cannot open the %s %s: %s", what, path, exc)
            self._say(f"Cannot open the {what}: {exc}")

    def _on_open_vault(self, _icon: Any = None, _item: Any = None) -> None:
        self._open(self.actions.vault, "vault folder")

    def _on_open_logs(self, _icon: Any = None, _item: Any = None) -> None:
        self._open(self.actions.log_dir, "logs folder")

    def _on_copy_token(self, _icon: Any = None, _item: Any = None) -> None:
        token_fn = self.actions.token
        if token_fn is None:
            return

        def copy() -> None:
            copy_to_clipboard(token_fn())  # the token never reaches a log line or the menu

        if self._loop is None:
            try:
                copy()
                self._say("API token copied to the clipboard")
            except Exception as exc:
                log.warning("tray: copying the API token failed: %s", exc)
                self._say(f"Copy failed: {exc}")
            return
        self._submit(copy, done=lambda _r: self._say("API token copied to the clipboard"), what="Copy API token")

    def _on_autostart(self, _icon: Any = None, _item: Any = None) -> None:
        if self.actions.set_autostart is None:
            return
        enable = not self._autostart_checked()
        try:
            self.actions.set_autostart(enable)  # a few small files: quick enough for the tray thread
            self._say("Cairn will start at login" if enable else "Cairn will not start at login")
        except Exception as exc:
            log.warning("tray: start at login could not be changed: %s", exc)
            self._say(f"Start at login failed: {getattr(exc, 'message', None) or exc}")

    def _on_quit(self, _icon: Any = None, _item: Any = None) -> None:
        log.info("tray: quit requested")
        self._quitting = True
        self._set(TrayStatus(self._status.state, "Quitting…", tooltip("quitting")))
        self.actions.quit()
