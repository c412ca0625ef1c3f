"""What the tray tests share: a private Xvfb display (:func:`xvfb`), a minimal system-tray manager on it
(:class:`TrayHost`: the freedesktop System Tray Protocol over python-xlib — it owns ``_NET_SYSTEM_TRAY_S0`` and
docks the icon windows that ask, the part of a desktop pystray talks to), and the daemon with its tray in a
subprocess (:data:`DRIVER`, driven by :class:`TrayDaemon`) that answers commands on stdin by driving the menu
through pystray's own API (``icon.menu.items``, ``item(icon)``).

Used by ``tests/test_tray*.py`` and ``packaging/tray_screenshot.py``. Nothing touches the real user folders:
HOME, XDG_CONFIG_HOME and the CAIRN_* folders point into the test's temp dir (:func:`daemon_env`).
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cairn.tray import STATES, icon_path
from support.waits import wait_until

REPO = Path(__file__).resolve().parents[2]
SYSTEM_GI = Path("/usr/lib/python3/dist-packages/gi")  # the distribution's PyGObject (python3-gi)
START_DEADLINE_S = 90
STEP_DEADLINE_S = 60
QUIT_DEADLINE_S = 5.0
POLL_S = 0.05
NOTES = {
    "Garden/Tomatoes.md": "---\ntags: [garden]\n---\n# Tomatoes\n\nPinch out the side shoots every week in July.\n",
    "Home/Boiler.md": "# Boiler\n\nThe boiler pressure should sit at 1.3 bar when the system is cold.\n",
    "Bikes/Touring.md": "# Touring bike\n\nTyre pressure for the touring bike: 65 psi front, 75 psi rear.\n",
}
MENU = [
    "Reindex now",
    "Pause watching",
    "Open vault folder",
    "Open logs folder",
    "Copy API token",
    "Start at login",
    "Quit",
]

#: The daemon with its tray, driven through pystray's API from stdin (one JSON command per line,
#: one JSON answer per line on stdout). argv: vault.
DRIVER = r"""
import json, sys, threading
from cairn.app import serve, setup_logging
from cairn.config import load_config

config = load_config({"vault": sys.argv[1], "port": 0})
setup_logging(config)

def items(tray):
    import pystray  # loaded by Cairn's choice of backend; importing it first would run pystray's own choice
    return [i for i in tray.icon.menu.items if i is not pystray.Menu.SEPARATOR]

def on_tray(tray):
    def drive():
        ready = tray.wait_ready(60)
        print(json.dumps({"ready": ready, "backend": type(tray.icon).__module__}), flush=True)
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["op"] == "menu":
                out = [{"text": i.text, "enabled": i.enabled, "checked": i.checked, "visible": i.visible}
                       for i in items(tray)]
            elif cmd["op"] == "click":
                item = next((i for i in items(tray) if i.text == cmd["text"]), None)
                if item is None:
                    out = {"error": "no item " + cmd["text"]}
                else:
                    item(tray.icon)
                    out = {"clicked": cmd["text"]}
            elif cmd["op"] == "status":
                status_icon = getattr(tray.icon, "_status_icon", None)  # the GTK backend's Gtk.StatusIcon
                out = {"state": tray.status.state, "text": tray.status.text, "title": tray.icon.title,
                       "notice": tray.notice,
                       "tooltip": status_icon.get_tooltip_text() if status_icon is not None else None}
            print(json.dumps(out), flush=True)
    threading.Thread(target=drive, daemon=True).start()

sys.exit(serve(config, tray=True, on_tray=on_tray))
"""


# -- the X server and a tray manager ------------------------------------------------------------


@pytest.fixture(scope="module")
def xvfb(tmp_path_factory):
    """A private Xvfb display (``:N``); skipped only when Xvfb is missing or cannot start."""
    exe = shutil.which("Xvfb")
    if exe is None:
        pytest.skip("Xvfb is not installed (.ci/run installs it with `apt-get install -y xvfb` when run as root)")
    log = tmp_path_factory.mktemp("xvfb") / "xvfb.log"
    read_fd, write_fd = os.pipe()
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [exe, "-displayfd", str(write_fd), "-screen", "0", "640x200x24", "-nolisten", "tcp"],
            pass_fds=(write_fd,),
            stdout=err,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
    os.close(write_fd)
    number = b""
    with os.fdopen(read_fd, "rb") as pipe:
        number = pipe.readline().strip()
    if not number:
        proc.kill()
        pytest.skip(f"Xvfb could not start: {log.read_text(errors='replace')[-500:]}")
    try:
        yield f":{number.decode()}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class TrayHost:
    """A minimal system-tray manager on ``display``: owns ``_NET_SYSTEM_TRAY_S0`` and docks every icon
    window that sends ``SYSTEM_TRAY_REQUEST_DOCK`` (reparented into its 640×48 strip at 32×32 px)."""

    def __init__(self, display: str) -> None:
        from Xlib import X
        from Xlib import display as xdisplay
        from Xlib.protocol import event

        self.X = X
        self.d = xdisplay.Display(display)
        self.q = xdisplay.Display(display)  # a second connection for the test thread's queries
        screen = self.d.screen()
        self.win = screen.root.create_window(
            0,
            0,
            640,
            48,
            0,
            screen.root_depth,
            background_pixel=screen.white_pixel,
            event_mask=X.StructureNotifyMask | X.SubstructureNotifyMask,
        )
        self.win.map()
        self.selection = self.d.intern_atom(f"_NET_SYSTEM_TRAY_S{self.d.get_default_screen()}")
        self.opcode = self.d.intern_atom("_NET_SYSTEM_TRAY_OPCODE")
        self.win.set_selection_owner(self.selection, X.CurrentTime)
        manager = self.d.intern_atom("MANAGER")
        screen.root.send_event(
            event.ClientMessage(
                window=screen.root, client_type=manager, data=(32, [X.CurrentTime, self.selection, self.win.id, 0, 0])
            ),
            event_mask=X.StructureNotifyMask,
        )
        self.d.flush()
        self.docked: list[int] = []  # every docking, in order (ids may repeat across clients)
        self.current: set[int] = set()
        self.where: dict[int, tuple[int, int]] = {}  # top-left corner of each docked icon on the screen
        self.gone: list[int] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._loop, name="tray-host", daemon=True).start()

    def _loop(self) -> None:
        from Xlib import error

        X = self.X
        try:
            while True:
                ev = self.d.next_event()
                if ev.type == X.ClientMessage and ev.client_type == self.opcode and ev.data[1][1] == 0:
                    wid = ev.data[1][2]
                    if wid in self.current:  # pystray asks again on every icon change: already here
                        continue
                    child = self.d.create_resource_object("window", wid)
                    x = 8 + 40 * (len(self.current) % 15)
                    missing = error.CatchError(error.BadWindow)
                    child.reparent(self.win, x, 8, onerror=missing)
                    self.where[wid] = (x, 8)
                    child.configure(width=32, height=32, onerror=missing)
                    child.map(onerror=missing)
                    self.d.sync()
                    with self.cond:
                        self.docked.append(wid)
                        if missing.get_error() is None:
                            self.current.add(wid)
                        else:  # its client quit before the request was read: no DestroyNotify will come
                            self.gone.append(wid)
                        self.cond.notify_all()
                elif ev.type == X.DestroyNotify:
                    with self.cond:
                        self.gone.append(ev.window.id)
                        self.current.discard(ev.window.id)  # X may give a later client the same id
                        self.cond.notify_all()
        except Exception:  # the display went away at teardown
            return

    def wait(self, what: str, predicate, timeout: float = STEP_DEADLINE_S):
        with self.cond:
            if not self.cond.wait_for(predicate, timeout):
                pytest.fail(f"timed out after {timeout} s waiting for the tray host: {what}")
            return predicate()

    def title(self, wid: int) -> str:
        """The window's name (pystray's tooltip); "" while it cannot be read (not mapped yet, gone)."""
        try:
            return self.q.create_resource_object("window", wid).get_wm_name() or ""
        except Exception:  # an X error for a window that went away (python-xlib may misname it)
            return ""

    def hover(self, wid: int) -> None:
        """Move the pointer (XTEST) to the middle of the docked icon ``wid``, at the size it has now (GTK's icon
        shrinks its window to 16×16 px after docking), and leave it there."""
        from Xlib.ext import xtest

        x, y = self.where[wid]
        size = self.q.create_resource_object("window", wid).get_geometry()
        xtest.fake_input(self.q, self.X.MotionNotify, x=x + size.width // 2, y=y + size.height // 2)
        self.q.sync()

    def leave(self) -> None:
        """Move the pointer (XTEST) off the strip of docked icons."""
        from Xlib.ext import xtest

        xtest.fake_input(self.q, self.X.MotionNotify, x=600, y=150)
        self.q.sync()

    def click(self, wid: int, button: int = 1) -> None:
        """A real pointer click (XTEST) in the middle of the docked icon ``wid``."""
        from Xlib.ext import xtest

        self.hover(wid)
        xtest.fake_input(self.q, self.X.ButtonPress, button)
        xtest.fake_input(self.q, self.X.ButtonRelease, button)
        self.q.sync()

    def image(self, wid: int):
        """The window's 32×32 pixels as an RGB image; a black one while they cannot be read."""
        from PIL import Image

        try:
            raw = self.q.create_resource_object("window", wid).get_image(0, 0, 32, 32, self.X.ZPixmap, 0xFFFFFFFF)
            return Image.frombytes("RGB", (32, 32), raw.data, "raw", "BGRX")
        except Exception:
            return Image.new("RGB", (32, 32))


class Popups:
    """Top-level windows that pop up over the screen (a menu or a tooltip is an override-redirect window)."""

    def __init__(self, display: str) -> None:
        from Xlib import X
        from Xlib import display as xdisplay

        self.X, self.d = X, xdisplay.Display(display)

    def shown(self) -> set[int]:
        out = set()
        for child in self.d.screen().root.query_tree().children:
            try:
                attrs = child.get_attributes()
            except Exception:  # gone meanwhile
                continue
            if attrs.override_redirect and attrs.map_state == self.X.IsViewable:
                out.add(child.id)
        return out

    def kind(self, wid: int) -> str:
        """The window's ``_NET_WM_WINDOW_TYPE`` without its prefix (``TOOLTIP``, ``POPUP_MENU``, ...); '' if none."""
        try:
            window = self.d.create_resource_object("window", wid)
            prop = window.get_full_property(self.d.intern_atom("_NET_WM_WINDOW_TYPE"), self.X.AnyPropertyType)
        except Exception:  # gone meanwhile
            return ""
        if not prop or not len(prop.value):
            return ""
        return self.d.get_atom_name(prop.value[0]).removeprefix("_NET_WM_WINDOW_TYPE_")


def hover_for_tooltip(host: TrayHost, popups: Popups, wid: int, timeout: float, **wait: Any) -> set[int]:
    """Rest the pointer on the docked icon ``wid`` until a tooltip window shows → its ids (``wait``: ``proc`` and
    ``log`` for :func:`wait_until`). Every 2 s the pointer leaves and comes back, as a person tries again: GTK starts
    a tooltip's delay when the pointer enters, and the icon may still be taking its docked size or its first text."""
    before = popups.shown()
    moved = [0.0]

    def tooltip() -> set[int]:
        if time.monotonic() - moved[0] > 2.0:
            host.leave()
            host.hover(wid)
            moved[0] = time.monotonic()
        return {w for w in popups.shown() - before if popups.kind(w) == "TOOLTIP"}

    return wait_until("a tooltip on the icon", tooltip, timeout, **wait)


@pytest.fixture(scope="module")
def host(xvfb):
    return TrayHost(xvfb)


#: The colour of :class:`TrayHost`'s strip, which a docked icon's transparent corners show.
HOST_BACKGROUND = (255, 255, 255)


def _reference(state: str):
    """What the xorg backend paints for ``state`` in a 32×32 window docked in :class:`TrayHost`: the icon over
    the host's background."""
    from PIL import Image

    icon = Image.open(icon_path(state)).convert("RGBA").resize((32, 32), Image.LANCZOS)
    return Image.alpha_composite(Image.new("RGBA", (32, 32), (*HOST_BACKGROUND, 255)), icon).convert("RGB")


def closest_state(image) -> str:
    """The shipped icon the docked window's pixels are nearest to (mean absolute difference)."""

    def distance(a, b) -> float:
        pa, pb = a.tobytes(), b.tobytes()
        return sum(abs(x - y) for x, y in zip(pa, pb)) / len(pa)

    return min(STATES, key=lambda s: distance(image, _reference(s)))


# -- the daemon with its tray, driven through pystray's API --------------------------------------


class TrayDaemon:
    def __init__(self, proc: subprocess.Popen, home: Path, vault: Path, env: dict[str, str]) -> None:
        self.proc, self.home, self.vault, self.env = proc, home, vault, env
        self.url = ""
        self.token = ""

    @property
    def stderr(self) -> str:
        return (self.home / "serve.stderr").read_text(encoding="utf-8", errors="replace")

    def start_reading(self) -> None:
        """Read the driver's stdout on a thread, so a silent driver fails a test instead of hanging it."""
        self.lines: queue.Queue[str] = queue.Queue()

        def pump() -> None:
            for line in self.proc.stdout:  # type: ignore[union-attr]
                self.lines.put(line)
            self.lines.put("")

        threading.Thread(target=pump, name="tray-driver-stdout", daemon=True).start()

    def reply(self, timeout: float = STEP_DEADLINE_S) -> Any:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no answer from the tray driver in {timeout} s:\n{self.stderr[-3000:]}")
        if not line:
            pytest.fail(f"the tray daemon exited ({self.proc.poll()}):\n{self.stderr[-3000:]}")
        return json.loads(line)

    def send(self, op: str, **kw: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        return self.reply()

    def menu(self) -> list[dict]:
        return self.send("menu")

    def click(self, text: str) -> None:
        out = self.send("click", text=text)
        assert out == {"clicked": text}, out

    def stats(self) -> dict:
        host, port = self.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request("GET", "/index/stats", headers={"Authorization": f"Bearer {self.token}"})
            resp = conn.getresponse()
            body = json.loads(resp.read())
            assert resp.status == 200, body
            return body
        finally:
            conn.close()

    def until(self, what: str, check, deadline: float = STEP_DEADLINE_S):
        return wait_until(what, check, deadline, proc=self.proc, log=lambda: self.stderr)


def daemon_env(home: Path, display: str | None) -> dict[str, str]:
    """An environment whose every user folder is inside ``home`` (never the real ones)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "PYSTRAY_", "XDG_"))}
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    env.update(
        {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "CAIRN_DATA_DIR": str(home / "data"),
            "CAIRN_CONFIG_DIR": str(home / "config"),
            "CAIRN_LOG_DIR": str(home / "log"),
            "CAIRN_KEYRING": "file",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if display is not None:
        env.update({"DISPLAY": display, "PYSTRAY_BACKEND": "xorg"})
    (home / "config").mkdir(parents=True, exist_ok=True)
    # The MCP endpoint has its own tests; these are about the tray and the plugin's API.
    (home / "config" / "config.toml").write_text("mcp_http = false\n", encoding="utf-8")
    return env


def write_vault(root: Path) -> Path:
    for rel, text in NOTES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def zombie_children(pid: int) -> list[str]:
    """The command names of ``pid``'s children that exited but were never waited for (state ``Z``)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        head, _, tail = text.rpartition(")")  # "PID (NAME) STATE PPID ..."; NAME may hold spaces
        state, ppid = tail.split()[:2]
        if state == "Z" and int(ppid) == pid:
            found.append(head.partition("(")[2])
    return found


def tray_lines(stderr: str) -> list[str]:
    """Log lines about the tray (by its logger or wording; paths in other lines may contain "tray")."""
    return [ln for ln in stderr.splitlines() if "cairn.tray" in ln or "tray icon" in ln]


@pytest.fixture(scope="module")
def session_bus():
    """A private D-Bus session bus address (a desktop session has one)."""
    exe = shutil.which("dbus-daemon")
    if exe is None:
        pytest.skip("dbus-daemon is not installed (.ci/run installs dbus when root)")
    out = subprocess.run(
        [exe, "--session", "--fork", "--print-address=1", "--print-pid=1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split()
    try:
        yield out[0]
    finally:
        os.kill(int(out[1]), signal.SIGTERM)


def auto_env(home: Path, display: str) -> dict[str, str]:
    """:func:`tray_harness.daemon_env` with the backend left to Cairn (no ``PYSTRAY_BACKEND``)."""
    env = daemon_env(home, display)
    env.pop("PYSTRAY_BACKEND")
    return env


@pytest.fixture(scope="module")
def system_gi(tmp_path_factory) -> Path:
    """A folder holding only the distribution's ``gi`` (for ``PYTHONPATH``); skipped when it or GTK 3 is missing
    or does not load in this Python."""
    if not SYSTEM_GI.is_dir():
        pytest.skip("python3-gi is not installed (.ci/run installs python3-gi and gir1.2-gtk-3.0 when root)")
    shim = tmp_path_factory.mktemp("system-gi")
    (shim / "gi").symlink_to(SYSTEM_GI)
    probe = subprocess.run(
        [sys.executable, "-c", "import gi; gi.require_version('Gtk', '3.0'); from gi.repository import Gtk"],
        env={**os.environ, "PYTHONPATH": str(shim)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        pytest.skip(f"the system's PyGObject with GTK 3 does not load in {sys.executable}: {probe.stderr[-300:]}")
    return shim


def with_gi(env: dict[str, str], shim: Path) -> str:
    """``PYTHONPATH`` with the system's ``gi`` after what is there (the code under test comes first)."""
    return os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(shim)) if p)
