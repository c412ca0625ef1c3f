"""Which pystray backend shows the icon (:func:`choose_backend`) and the log line that names it (:func:`describe`).

pystray picks its backend when ``import pystray`` runs and stops at the first whose import raises
``ImportError``. On a Debian 12 desktop with PyGObject but without the AppIndicator typelib, its
AppIndicator backend raises ``ValueError`` instead, so ``import pystray`` fails as a whole and the GTK
backend, which would work, is never tried. Here ``pystray`` is imported with its inert ``dummy``
backend (only :class:`pystray.Menu` and :class:`pystray.MenuItem` are used from it) and each backend
module is imported in turn, any exception meaning "not this one". GTK-based backends also need a
D-Bus session bus (pystray's notifier connects to it when the icon starts): without one they are
passed over here rather than failing later, after the icon was promised.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

#: Tried in this order on Linux and other X11 systems: the first two have a menu, ``xorg`` has none.
LINUX_ORDER = ("appindicator", "gtk", "xorg")
#: pystray's backend names (``PYSTRAY_BACKEND`` forces one of them).
KNOWN = ("appindicator", "gtk", "xorg", "darwin", "win32", "dummy")
#: What the log line tells an owner whose tray has no menu (docs/tray.md says more).
MENU_HINT = (
    "for the menu, install PyGObject with GTK 3 (Debian/Ubuntu: python3-gi and gir1.2-gtk-3.0 with a venv "
    "made with --system-site-packages, or pip install PyGObject, 'PyGObject<3.51' on Debian 12); see docs/tray.md"
)

_import_lock = threading.Lock()


class TrayUnavailable(Exception):
    """No pystray backend can show an icon here; ``str()`` says why (each backend tried, and its error)."""


@dataclass(frozen=True)
class Backend:
    """The chosen backend: pystray's ``name``, its ``Icon`` class, whether it has a menu, and the backends tried
    before it with why each was passed over (``(name, reason)`` pairs, in order)."""

    name: str
    icon_class: Any
    has_menu: bool
    skipped: tuple[tuple[str, str], ...] = ()


def candidates(env: Mapping[str, str] | None = None, platform: str | None = None) -> tuple[str, ...]:
    """The backends to try, in order: ``PYSTRAY_BACKEND`` alone when set, the native one on macOS and Windows,
    else :data:`LINUX_ORDER`."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    forced = env.get("PYSTRAY_BACKEND", "").strip()
    if forced:
        return (forced,)
    if platform == "darwin":
        return ("darwin",)
    if platform == "win32":
        return ("win32",)
    return LINUX_ORDER


def load_backend(name: str) -> ModuleType:
    """Import pystray's backend module ``name`` (``pystray._gtk`` …) without pystray's own choice running.
    Raises what the import raises (``ImportError``, ``ValueError`` for a missing typelib, Xlib's display
    errors), or ``OSError`` when a GTK-based backend has no D-Bus session bus."""
    if name not in KNOWN:
        raise ImportError(f"unknown backend {name!r} (PYSTRAY_BACKEND); expected one of {', '.join(KNOWN)}")
    _import_pystray()
    module = importlib.import_module(f"pystray._{name}")
    if name in ("appindicator", "gtk"):
        _require_session_bus()
    return module


def choose_backend(
    env: Mapping[str, str] | None = None,
    *,
    platform: str | None = None,
    load: Callable[[str], ModuleType] = load_backend,
) -> Backend:
    """The first of :func:`candidates` whose module loads (``load(name)``). Raises :class:`TrayUnavailable`
    naming every backend tried and its error when none does."""
    skipped: list[tuple[str, str]] = []
    for name in candidates(env, platform):
        try:
            module = load(name)
        except Exception as exc:
            skipped.append((name, f"{type(exc).__name__}: {str(exc).strip() or 'no detail'}"))
            continue
        icon_class = module.Icon
        return Backend(name, icon_class, bool(getattr(icon_class, "HAS_MENU", True)), tuple(skipped))
    raise TrayUnavailable("; ".join(f"{name}: {why}" for name, why in skipped) or "no backend to try")


def describe(backend: Backend) -> str:
    """The INFO line for ``backend``: its name, whether it has a menu (and, without one, what a left click does
    and how to get a menu), and the backends passed over."""
    if backend.has_menu:
        text = f"tray icon: pystray's {backend.name} backend, with its menu"
    else:
        text = (
            f"tray icon: pystray's {backend.name} backend shows the icon and its tooltip but NO MENU "
            f"(a left click opens the vault folder); {MENU_HINT}"
        )
    if backend.skipped:
        text += " (passed over: " + "; ".join(f"{name}: {why}" for name, why in backend.skipped) + ")"
    return text


def _import_pystray() -> None:
    """Import the ``pystray`` package with its ``dummy`` backend, which opens nothing (see the module docstring)."""
    if "pystray" in sys.modules:
        return
    with _import_lock:
        if "pystray" in sys.modules:
            return
        before = os.environ.get("PYSTRAY_BACKEND")
        os.environ["PYSTRAY_BACKEND"] = "dummy"
        try:
            importlib.import_module("pystray")
        finally:
            if before is None:
                os.environ.pop("PYSTRAY_BACKEND", None)
            else:
                os.environ["PYSTRAY_BACKEND"] = before


def _require_session_bus() -> None:
    """Raise ``OSError`` when no D-Bus session bus answers (GIO's error text says why)."""
    from gi.repository import Gio, GLib

    try:
        Gio.bus_get_sync(Gio.BusType.SESSION, None)
    except GLib.Error as exc:
        raise OSError(f"no D-Bus session bus: {exc.message}") from exc
