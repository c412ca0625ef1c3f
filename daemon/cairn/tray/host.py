"""``cairn serve`` with a tray icon: the tray's loop on the main thread (desktops require it), the daemon's
asyncio loop in the ``cairn-daemon`` worker thread (:class:`TrayHost`)."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from cairn.events import EventBus
from cairn.tray.actions import TrayActions
from cairn.tray.icon import Tray

log = logging.getLogger(__name__)


class TrayHost:
    """The tray on the main thread and a daemon coroutine on its own loop in a worker thread. The menu's Quit,
    SIGINT and SIGTERM set the daemon's ``stop``; the daemon's end stops the tray; the tray's end (closed, or
    failed) leaves the daemon running headless until it stops.

    ``make_actions(quit)``: the menu's actions, given the thread-safe ``quit`` that stops the daemon. Raises what
    :class:`~cairn.tray.icon.Tray` raises when the backend imported but cannot make an icon.
    """

    def __init__(self, make_actions: Callable[[Callable[[], None]], TrayActions]) -> None:
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()
        self.actions = make_actions(self.request_stop)
        self._outcome: dict[str, Any] = {}  # "code" or "error": the daemon thread's
        self._previous: dict[int, Any] = {}  # the signal handlers to restore
        self._follow: asyncio.Task[None] | None = None
        try:
            self.tray = Tray(self.actions)
        except BaseException:
            self.loop.close()
            raise

    def request_stop(self) -> None:
        """Thread-safe: ask the daemon to stop."""
        try:
            self.loop.call_soon_threadsafe(self.stop.set)
        except RuntimeError:  # the loop already ended
            pass

    def follow(self, events: EventBus) -> None:
        """Call on the daemon's loop once it serves: the menu acts on that loop and follows ``events``."""
        loop = asyncio.get_running_loop()
        self.tray.bind(loop)
        self._follow = loop.create_task(self.tray.follow(events), name="cairn-tray")

    def run(
        self,
        daemon: Callable[[asyncio.Event], Coroutine[Any, Any, int]],
        on_tray: Callable[[Any], None] | None = None,
    ) -> int:
        """Run ``daemon(stop)`` in the worker thread and show the tray until the daemon ends (``on_tray(tray)``
        first, on this thread). Returns the daemon's exit code; re-raises its error here."""
        self._install_signal_handlers()
        worker = threading.Thread(target=self._daemon_thread, args=(daemon,), name="cairn-daemon")
        worker.start()
        try:
            self._run_tray(on_tray, worker)
            while worker.is_alive():
                worker.join(0.5)
        finally:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
        if "error" in self._outcome:
            raise self._outcome["error"]
        return int(self._outcome.get("code", 1))

    def _run_tray(self, on_tray: Callable[[Any], None] | None, worker: threading.Thread) -> None:
        if on_tray is not None:
            on_tray(self.tray)
        # The GTK backends reset SIGINT to the default (kill) when their loop starts: put ours back there.
        threading.Thread(
            target=lambda: self.tray.wait_ready(60) and self.tray.call_on_main(self._install_signal_handlers),
            name="cairn-tray-signals",
            daemon=True,
        ).start()
        try:
            self.tray.run()
        except Exception as exc:
            if self.tray.stopping:  # e.g. GTK's clean-up asking a missing notification service: nothing goes on
                log.debug("the tray icon's clean-up failed while stopping: %s: %s", type(exc).__name__, exc)
                return
            # the icon failed; the daemon goes on without it
            log.warning("the tray icon stopped (%s: %s); the daemon keeps running headless", type(exc).__name__, exc)
            self._install_signal_handlers()
        else:
            if worker.is_alive() and "error" not in self._outcome and not self.stop.is_set():
                log.info("the tray icon closed; the daemon keeps running (stop it with Ctrl-C or SIGTERM)")

    def _daemon_thread(self, daemon: Callable[[asyncio.Event], Coroutine[Any, Any, int]]) -> None:
        try:
            with asyncio.Runner(loop_factory=lambda: self.loop) as runner:
                self._outcome["code"] = runner.run(daemon(self.stop))
        except BaseException as exc:  # reported on the main thread
            self._outcome["error"] = exc
        finally:
            self.tray.stop()

    def _install_signal_handlers(self) -> None:  # main thread only
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                old = signal.signal(sig, lambda _s, _f: self.request_stop())
                self._previous.setdefault(sig, old)
            except (ValueError, OSError):  # not the main thread
                pass
