"""The system-tray icon (layer 3 adapter on pystray; the only package importing pystray, PIL and pyperclip).

``cairn serve`` shows it when a display and a tray backend exist (docs/design.md: the owner's view).
The tray runs on the main thread (pystray requires it); the daemon's asyncio loop runs in a
worker thread. Menu callbacks run on the tray thread and cross into the loop with
``asyncio.run_coroutine_threadsafe``; blocking work (re-index, pause, reading the token) then
runs in the loop's thread pool, never on the loop and never on the tray thread.

Menu, top to bottom:

- a status line — ``3,879 notes · up to date``, ``Indexing 812 / 3,879``, ``Paused · 3,879 notes``,
  ``Error: …`` — and, when set, a warning line (the API token kept in a file, as configured or for want of a
  keyring) and the result of the last action (``API token copied``);
- ``Reindex now`` (re-read every note), ``Pause watching`` / ``Resume watching``;
- ``Open vault folder``, ``Open logs folder``, ``Copy API token`` (to the clipboard; never logged);
- ``Start at login`` (a checkbox: the autostart entry of :mod:`cairn.autostart`);
- ``Quit`` (the daemon stops cleanly: streams closed, lock released, ``service.json`` removed).

The icon (PNG files drawn by ``packaging/make_icons.py``, shipped in ``cairn/icons``) follows the
state — ``idle``, ``indexing``, ``paused``, ``error`` — and the tooltip carries the status line.
Both are updated from the indexer's progress events (:class:`cairn.events.EventBus`) and from a
``stats()`` poll every ``poll_s`` seconds (pauses made over HTTP, watcher batches).

Backends (:mod:`cairn.tray.backend`): on Linux the first of AppIndicator, GTK (both with PyGObject
and a D-Bus session bus) and plain X11 (``xorg``) that loads, named in one INFO line; the native ones
on macOS and Windows; ``PYSTRAY_BACKEND`` forces one. The ``xorg`` backend shows the icon and tooltip
but no menu (a left click runs the default item, ``Open vault folder``), and its INFO line says so
and how to get one; pystray's API drives the menu on every backend.
"""

from cairn.tray.actions import TrayActions, copy_to_clipboard, open_folder
from cairn.tray.backend import Backend, TrayUnavailable, choose_backend
from cairn.tray.host import TrayHost
from cairn.tray.icon import Tray
from cairn.tray.status import (
    DEFAULT_POLL_S,
    ERROR_MAX,
    STATES,
    TOOLTIP_MAX,
    TrayStatus,
    describe,
    icon_path,
    unavailable_reason,
)

__all__ = [
    "Backend",
    "DEFAULT_POLL_S",
    "ERROR_MAX",
    "STATES",
    "TOOLTIP_MAX",
    "Tray",
    "TrayActions",
    "TrayHost",
    "TrayStatus",
    "TrayUnavailable",
    "choose_backend",
    "copy_to_clipboard",
    "describe",
    "icon_path",
    "open_folder",
    "unavailable_reason",
]
