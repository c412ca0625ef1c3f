"""pystray's plain X11 (``xorg``) backend, driven without waiting on its loop: docking, tooltip and repaint
(:class:`XorgBridge`), left clicks (:func:`xorg_clicks`) and stopping (:func:`stop_xorg`), each over a second X
connection; the icon drawn over the tray's own background (:func:`draw_over_tray`). Uses pystray 0.19's private
attributes (pinned ``<0.20``)."""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)


def draw_over_tray(icon: Any) -> None:
    """Have pystray's ``xorg`` ``icon`` drawn over the tray's own background, not black. Call before ``icon.run()``.

    pystray 0.19 pastes the RGBA icon onto a black RGB image the size of its window (``_assert_icon_data``), so the
    transparent corners of the round icon show black (an X11 window of the root's depth has no alpha). Here the
    window takes its background from the tray (``ParentRelative``, as GTK 2's tray icons did), and whenever the icon
    is to be drawn at a new size or from a new image, that background is read back (``ClearArea``, then
    ``GetImage``: in the loop's thread, on its own connection) and the icon alpha-composited over it.
    """
    from PIL import Image
    from Xlib import X

    icon._window.change_attributes(background_pixmap=X.ParentRelative)
    icon._display.flush()
    drawn: dict[str, Any] = {}

    def assert_icon_data(width: int, height: int) -> None:  # pystray's loop calls it before each repaint
        source = icon._icon
        key = (id(source), width, height)
        if icon._icon_data is not None and drawn.get("key") == key:
            return
        scaled = source.convert("RGBA").resize((width, height), Image.Resampling.LANCZOS)
        background = _tray_background(icon, width, height)
        under = background or Image.new("RGB", (width, height))  # unreadable: black, as pystray draws it
        data = Image.alpha_composite(under.convert("RGBA"), scaled).convert("RGB")
        data.tostring = data.tobytes  # type: ignore[attr-defined]  # what python-xlib calls
        icon._icon_data = data
        drawn["key"] = key if background is not None else None  # not docked yet: read it again next time

    icon._assert_icon_data = assert_icon_data


def _tray_background(icon: Any, width: int, height: int) -> Any | None:
    """The tray's background under ``icon``'s window as an RGB image, or None when it cannot be read (the window
    is not shown yet, or gone)."""
    from PIL import Image
    from Xlib import X

    try:
        window = icon._window
        window.clear_area(0, 0, width, height)  # paint the ParentRelative background over any old icon
        raw = window.get_image(0, 0, width, height, X.ZPixmap, 0xFFFFFFFF)
        if raw.depth != 24 or len(raw.data) != width * height * 4:
            return None
        order = "BGRX" if window.display.info.image_byte_order == 0 else "RGBX"  # as python-xlib writes it
        return Image.frombytes("RGB", (width, height), raw.data, "raw", order)
    except Exception as exc:  # never raised into pystray's loop: the icon would be gone
        log.debug("tray: the tray's background cannot be read: %s", exc)
        return None


class XorgBridge:
    """Dock, retitle and repaint pystray's ``xorg`` icon over a second X connection, from one helper thread.

    pystray's ``xorg`` backend runs these on its loop by sending itself an X message from the calling
    thread and waiting for the loop to answer. python-xlib writes a message queued by another thread
    only once the loop's ``select`` wakes up, so on a quiet display a call can wait forever (the tooltip
    stays on an old status, Quit is ignored). Here nothing but the
    loop's own thread touches the loop's connection: this connection sends the dock request to the
    tray manager, sets the window's name (the tooltip) and asks the server for an Expose, which wakes
    the loop; pystray then repaints ``icon._icon`` itself. Uses pystray 0.19's ``_window``, ``_icon``,
    ``_title``, ``_visible`` and ``_systray_manager`` (pinned ``<0.20``)."""

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
        """Set the tooltip; with ``image``, make it the icon and have the loop repaint it (:func:`draw_over_tray`
        composes it anew, seeing a new image)."""
        self.dock()
        self.icon._title = tooltip
        self.window.set_wm_name(tooltip)
        if image is not None:
            self.icon._icon = image  # one reference swap: the loop draws the old image or this one
            self.window.clear_area(0, 0, 0, 0, exposures=True)  # → Expose → the loop repaints
        self.conn.flush()

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:
            pass


def xorg_clicks(icon: Any) -> None:
    """Run the default menu item (Open vault folder) on a left click on the ``xorg`` icon.

    pystray 0.19's X11 backend has a click handler but never asks the server for button events
    (its window selects only Exposure and StructureNotify), so clicks do nothing. This thread asks
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


def stop_xorg(icon: Any, stopped: threading.Event) -> None:
    """Stop the ``xorg`` backend's loop of ``icon`` by destroying its icon window over a second X connection;
    ``stopped`` is set when the loop has ended.

    pystray's own ``stop()`` sends the loop an X message through the loop's connection from this
    thread; python-xlib writes a message queued by another thread only when the loop's ``select``
    wakes up, which on a quiet display can be never (Quit would leave the process running). The
    DestroyNotify of its own window is what the loop waits for, and an event arriving always wakes it.
    Falls back to pystray's ``stop()`` when no second connection can be opened."""
    try:
        from Xlib import display as xdisplay

        conn = xdisplay.Display()
    except Exception as exc:
        log.debug("tray: no second X connection (%s); using pystray's stop", exc)
        icon.stop()
        return
    try:
        conn.set_error_handler(lambda *_a: None)  # already gone: nothing to do
        conn.create_resource_object("window", icon._window.id).destroy()
        conn.sync()
    finally:
        conn.close()
    if not stopped.wait(5):
        log.warning("the tray icon's X loop did not end after its window was destroyed")
    icon._running = False
