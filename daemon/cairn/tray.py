"""The system-tray icon (layer 3 adapter on pystray; the only module importing pystray, PIL and pyperclip).

``cairn serve`` shows it when a display and a tray backend exist (DESIGN.md: the owner's view).
The tray runs on the main thread (pystray requires it); the daemon's asyncio loop runs in a
worker thread. Menu callbacks run on the tray thread and cross into the loop with
``asyncio.run_coroutine_threadsafe``; blocking work (re-index, pause, reading the token) then
runs in the loop's thread pool, never on the loop and never on the tray thread.

Menu (issue 6), top to bottom:

- a status line — ``3,879 notes · up to date``, ``Indexing 812 / 3,879``, ``Paused · 3,879 notes``,
  ``Error: …`` — and, when set, a warning line (the API token kept in a file: no keyring) and the
  result of the last action (``API token copied``);
- ``Reindex now`` (re-read every note), ``Pause watching`` / ``Resume watching``;
- ``Open vault folder``, ``Open logs folder``, ``Copy API token`` (to the clipboard; never logged);
- ``Start at login`` (a checkbox: the autostart entry of :mod:`cairn.autostart`);
- ``Quit`` (the daemon stops cleanly: streams closed, lock released, ``service.json`` removed).

The icon (PNG files drawn by ``packaging/make_icons.py``, shipped in ``cairn/icons``) follows the
state — ``idle``, ``indexing``, ``paused``, ``error`` — and the tooltip carries the status line.
Both are updated from the indexer's progress events (:class:`cairn.events.EventBus`) and from a
``stats()`` poll every ``poll_s`` seconds (pauses made over HTTP, watcher batches).

Backends: pystray picks AppIndicator or GTK (with PyGObject) or plain X11 (``xorg``) on Linux,
and the native ones on macOS and Windows. The ``xorg`` backend shows the icon and tooltip but no
menu (a left click runs the default item, ``Open vault folder``); pystray's API drives the menu
on every backend.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from cairn.events import EventBus

log = logging.getLogger(__name__)

STATES = ("idle", "indexing", "paused", "error")
#: Seconds between two ``stats()`` reads when no event arrives.
DEFAULT_POLL_S = 2.0
#: Longest tooltip (Windows cuts at 128 characters).
TOOLTIP_MAX = 120
#: Longest error text in the status line.
ERROR_MAX = 60


def unavailable_reason(env: Mapping[str, str] | None = None) -> str | None:
    """Why no tray icon can be shown here, or ``None`` when one can.

    Linux and other X11/Wayland systems need ``DISPLAY`` or ``WAYLAND_DISPLAY``; then pystray must
    import (it connects to the display and picks a backend; ``PYSTRAY_BACKEND`` forces one).
    """
    env = os.environ if env is None else env
    if sys.platform not in ("darwin", "win32") and not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        return "no display (DISPLAY and WAYLAND_DISPLAY are not set)"
    try:
        import pystray  # noqa: F401  (imports the backend, which opens the display)
    except Exception as exc:  # ImportError, or Xlib's display errors
        return f"no tray backend ({type(exc).__name__}: {str(exc).strip() or 'no detail'})"
    return None


def icon_path(state: str) -> Path:
    """The shipped PNG for ``state`` (one of :data:`STATES`)."""
    if state not in STATES:
        raise ValueError(f"unknown tray state {state!r}; expected one of {', '.join(STATES)}")
    return Path(str(resources.files("cairn").joinpath("icons", f"{state}.png")))


@dataclass(frozen=True)
class TrayStatus:
    """What the tray shows: ``state`` (icon), ``text`` (status line), ``tooltip``."""

    state: str
    text: str
    tooltip: str


def _tooltip(text: str) -> str:
    """``Cairn - <text>``, at most :data:`TOOLTIP_MAX` characters, in Latin-1 (X11's ``WM_NAME``, which the
    ``xorg`` backend sets, carries nothing else)."""
    tip = "Cairn - " + text.replace("…", "...").replace("—", "-")
    tip = tip if len(tip) <= TOOLTIP_MAX else tip[: TOOLTIP_MAX - 3] + "..."
    return tip.encode("latin-1", "replace").decode("latin-1")


def describe(stats: Mapping[str, Any] | None, progress: Mapping[str, Any] | None = None) -> TrayStatus:
    """The status for ``stats`` (``Cairn.stats()``: notes, pending, indexing, paused, indexError) and the
    last ``progress`` event (``{phase, done, total}``; phases ``scan``, ``index``, ``embed``).

    Precedence: not started yet (``stats`` None) → indexing "Starting…"; an indexing error → error;
    paused → paused; indexing or pending work → indexing with the counts; else idle "N notes · up to date".
    """
    if stats is None:
        return TrayStatus("indexing", "Starting…", _tooltip("starting"))
    notes = int(stats.get("notes") or 0)
    error = stats.get("indexError")
    if error:
        short = str(error) if len(str(error)) <= ERROR_MAX else str(error)[: ERROR_MAX - 1] + "…"
        return TrayStatus("error", f"Error: {short}", _tooltip(f"error: {error}"))
    if stats.get("paused"):
        text = f"Paused · {notes:,} notes"
        return TrayStatus("paused", text, _tooltip(f"{text} (changes are not followed)"))
    if stats.get("indexing") or int(stats.get("pending") or 0) > 0:
        if progress and int(progress.get("total") or 0) > 0:
            done, total = int(progress["done"]), int(progress["total"])
            label = {"scan": "Scanning", "embed": "Embedding"}.get(str(progress.get("phase")), "Indexing")
            unit = " passages" if progress.get("phase") == "embed" else ""
            text = f"{label} {done:,} / {total:,}{unit}"
        elif stats.get("pending"):
            text = f"Indexing · {int(stats['pending']):,} waiting"
        else:
            text = "Indexing changes…"
        return TrayStatus("indexing", text, _tooltip(f"{text} ({notes:,} notes indexed)"))
    text = f"{notes:,} notes · up to date"
    return TrayStatus("idle", text, _tooltip(text))


@dataclass
class TrayActions:
    """What the menu does, supplied by the composition root. Every callable but ``quit`` may block
    (it runs in the daemon loop's thread pool); ``quit`` must be thread-safe and return at once."""

    vault: Path
    log_dir: Path
    quit: Callable[[], None]
    stats: Callable[[], Mapping[str, Any]] | None = None
    reindex: Callable[[], Any] | None = None
    set_paused: Callable[[bool], Any] | None = None
    token: Callable[[], str] | None = None
    autostart_enabled: Callable[[], bool] | None = None
    set_autostart: Callable[[bool], Any] | None = None
    #: A standing warning for the menu (e.g. the API token is kept in a file: no keyring backend).
    warning: str | None = None
    #: Opens a folder in the file manager (default :func:`open_folder`).
    opener: Callable[[Path], None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def open_folder(path: Path) -> None:
    """Open ``path`` in the desktop's file manager (``xdg-open``, ``open``, Explorer). Returns at once.
    Raises ``OSError`` when no opener exists (Linux without xdg-utils)."""
    path.mkdir(parents=True, exist_ok=True)
    if sys.platform == "win32":
        os.startfile(str(path))  # type: ignore[attr-defined]
        return
    opener = "open" if sys.platform == "darwin" else "xdg-open"
    subprocess.Popen(
        [opener, str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def copy_to_clipboard(text: str) -> None:
    """Put ``text`` on the clipboard (pyperclip: xclip/xsel/wl-copy on Linux, pbcopy, the Win32 API).
    Raises ``RuntimeError`` naming what to install when no clipboard mechanism exists."""
    import pyperclip

    try:
        pyperclip.copy(text)
    except pyperclip.PyperclipException as exc:
        raise RuntimeError("no clipboard tool: install xclip, xsel or wl-clipboard") from exc


class Tray:
    """The tray icon and its menu. Build it on the main thread, :meth:`run` it there (blocks until
    :meth:`stop`); :meth:`bind` it to the daemon's loop once the daemon runs; :meth:`follow` is the
    coroutine (run on that loop) that keeps the status current.

    Raises ``ImportError``/``OSError`` from pystray when no backend can start (check
    :func:`unavailable_reason` first).
    """

    def __init__(self, actions: TrayActions, *, name: str = "cairn", poll_s: float = DEFAULT_POLL_S) -> None:
        import pystray
        from PIL import Image

        self.actions = actions
        self.poll_s = poll_s
        self._images = {s: Image.open(icon_path(s)).convert("RGBA") for s in STATES}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._status = describe(None)
        self._stats: Mapping[str, Any] | None = None
        self._progress: Mapping[str, Any] | None = None
        self._notice: str | None = None
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
        item, sep = pystray.MenuItem, pystray.Menu.SEPARATOR
        self.menu = pystray.Menu(
            item(lambda _i: self._status.text, None, enabled=False),
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
        self.icon = pystray.Icon(
            name, icon=self._images[self._status.state], title=self._status.tooltip, menu=self.menu
        )
        self._updater = threading.Thread(target=self._apply_updates, name="cairn-tray-update", daemon=True)
        #: pystray's plain X11 backend: shown and updated through :class:`_XorgBridge`.
        self._xorg = type(self.icon).__module__ == "pystray._xorg"

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
                self._stop_xorg()
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
        bridge = _XorgBridge(self.icon) if self._xorg else None
        try:
            if bridge is not None:
                threading.Thread(target=_xorg_clicks, args=(self.icon,), name="cairn-tray-clicks", daemon=True).start()
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
                            self.icon.update_menu()
                        shown_state = status.state
                except Exception as exc:
                    log.warning("tray: cannot update the icon: %s", exc)
        finally:
            if bridge is not None:
                bridge.close()

    def _stop_xorg(self) -> None:
        """Stop the ``xorg`` backend's loop by destroying its icon window over a second X connection.

        pystray's own ``stop()`` sends the loop an X message through the loop's connection from this
        thread; python-xlib writes a message queued by another thread only when the loop's ``select``
        wakes up, which on a quiet display can be never (seen: Quit left the process running 1 time in
        3 to 8). The DestroyNotify of its own window is what the loop waits for, and an event arriving
        always wakes it. Falls back to pystray's ``stop()`` when no second connection can be opened."""
        try:
            from Xlib import display as xdisplay

            conn = xdisplay.Display()
        except Exception as exc:
            log.debug("tray: no second X connection (%s); using pystray's stop", exc)
            self.icon.stop()
            return
        try:
            conn.set_error_handler(lambda *_a: None)  # already gone: nothing to do
            conn.create_resource_object("window", self.icon._window.id).destroy()
            conn.sync()
        finally:
            conn.close()
        if not self._stopped.wait(5):
            log.warning("the tray icon's X loop did not end after its window was destroyed")
        self.icon._running = False

    def _say(self, notice: str | None) -> None:
        self._notice = notice
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
        self._set(TrayStatus(self._status.state, "Quitting…", _tooltip("quitting")))
        self.actions.quit()


class _XorgBridge:
    """Dock, retitle and repaint pystray's ``xorg`` icon over a second X connection, from one helper thread.

    pystray's ``xorg`` backend runs these on its loop by sending itself an X message from the calling
    thread and waiting for the loop to answer. python-xlib writes a message queued by another thread
    only once the loop's ``select`` wakes up, so on a quiet display a call can wait forever (seen under
    load: the tooltip stuck on an old status for over a minute, Quit ignored). Here nothing but the
    loop's own thread touches the loop's connection: this connection sends the dock request to the
    tray manager, sets the window's name (the tooltip) and asks the server for an Expose, which wakes
    the loop; pystray then repaints ``icon._icon`` itself. Uses pystray 0.19's ``_window``, ``_icon``,
    ``_icon_data``, ``_title``, ``_visible`` and ``_systray_manager`` (pinned ``<0.20``)."""

    _REQUEST_DOCK = 0

    def __init__(self, icon: Any) -> None:
        from Xlib import display as xdisplay

        self.icon = icon
        self.conn = xdisplay.Display()
        self.conn.set_error_handler(lambda *_a: None)  # the window or the tray manager may vanish meanwhile
        self.window = self.conn.create_resource_object("window", icon._window.id)
        screen = self.conn.get_default_screen()
        self.selection = self.conn.intern_atom(f"_NET_SYSTEM_TRAY_S{screen}")
        self.opcode = self.conn.intern_atom("_NET_SYSTEM_TRAY_OPCODE")
        self.docked_to: int | None = None
        self._warned = False

    def dock(self) -> bool:
        """Ask the tray manager (the owner of ``_NET_SYSTEM_TRAY_S<n>``) to embed the icon; False when none."""
        from Xlib import X
        from Xlib.protocol import event

        owner = self.conn.get_selection_owner(self.selection)
        if owner == X.NONE or owner is None:
            if not self._warned:
                log.info("tray: no system tray on this display yet; the icon shows when one starts")
                self._warned = True
            return False
        if owner.id == self.docked_to:
            return True
        owner.send_event(
            event.ClientMessage(
                window=owner,
                client_type=self.opcode,
                data=(32, [X.CurrentTime, self._REQUEST_DOCK, self.window.id, 0, 0]),
            ),
            event_mask=X.NoEventMask,
        )
        self.conn.flush()
        self.docked_to = owner.id
        self.icon._systray_manager = self.icon._display.create_resource_object("window", owner.id)  # no request
        self.icon._visible = True
        return True

    def show(self, tooltip: str, image: Any | None) -> None:
        """Set the tooltip; with ``image``, make it the icon and have the loop repaint it."""
        self.dock()
        self.icon._title = tooltip
        self.window.set_wm_name(tooltip)
        if image is not None:
            self.icon._icon = image  # first: a resize makes pystray rescale from this one
            scaled = self._scaled(image)
            if scaled is not None:
                # One reference swap: the loop paints the old copy or this one. Setting ``_icon_data`` to
                # None instead (pystray's own way) raced with the loop's rebuild of it — seen in CI:
                # "'NoneType' object has no attribute 'tobytes'" in _assert_icon_data, ending the loop.
                self.icon._icon_data = scaled
            self.window.clear_area(0, 0, 0, 0, exposures=True)  # → Expose → the loop repaints
        self.conn.flush()

    def _scaled(self, image: Any) -> Any | None:
        """``image`` scaled to the icon window's size, as pystray's ``_assert_icon_data`` builds it
        (an RGB PIL image with ``tostring``, which python-xlib's ``put_pil_image`` calls); None when the
        window is gone."""
        from PIL import Image

        try:
            dim = self.window.get_geometry()
        except Exception:
            return None
        if not dim or dim.width < 1 or dim.height < 1:
            return None
        data = Image.new("RGB", (dim.width, dim.height))
        data.paste(image.resize((dim.width, dim.height), Image.LANCZOS))
        data.tostring = data.tobytes
        return data

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:
            pass


def _xorg_clicks(icon: Any) -> None:
    """Run the default menu item (Open vault folder) on a left click on the ``xorg`` icon.

    pystray 0.19's X11 backend has a click handler but never asks the server for button events
    (its window selects only Exposure and StructureNotify), so clicks did nothing. This thread asks
    for them on its own X connection (only one client may select ButtonPress on a window; pystray
    does not) and ends when the window is destroyed."""
    try:
        from Xlib import X
        from Xlib import display as xdisplay

        conn = xdisplay.Display()
    except Exception as exc:
        log.debug("tray: no X connection for clicks: %s", exc)
        return
    try:
        conn.set_error_handler(lambda *_a: None)
        window = conn.create_resource_object("window", icon._window.id)
        window.change_attributes(event_mask=X.ButtonPressMask | X.StructureNotifyMask)
        conn.flush()
        while True:
            ev = conn.next_event()
            if ev.type == X.DestroyNotify and ev.window.id == window.id:
                return
            if ev.type == X.ButtonPress and ev.detail == 1:
                try:
                    icon()  # pystray: activate the default item
                except Exception as exc:
                    log.warning("tray: the click action failed: %s", exc)
    except Exception as exc:
        log.debug("tray: click listener ended: %s", exc)
    finally:
        try:
            conn.close()
        except Exception:
            pass
