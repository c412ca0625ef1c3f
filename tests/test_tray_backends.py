"""Which tray backend ``cairn serve`` uses, on a real X server (Xvfb), and the order it tries them in.

With the distribution's PyGObject (``python3-gi``, GTK 3) but no AppIndicator typelib — a stock Debian 12
desktop after docs/tray.md's advice — the daemon must fall back to pystray's GTK backend and show the icon
with its menu (a right click on the docked icon opens it); without PyGObject to the plain X11 backend, and
say in its log that there is no menu and how to get one. The distribution's ``gi`` is made importable
in the daemon's venv the way docs/tray.md says (the venv reaching the system's ``python3-gi``); a private
``dbus-daemon`` gives it the session bus a desktop has. The order itself (AppIndicator → GTK → xorg,
``PYSTRAY_BACKEND`` forcing one) is checked without a display with a stand-in loader.

``.ci/run`` installs ``python3-gi``, ``gir1.2-gtk-3.0`` and ``dbus`` when missing and root, and unpacks
Debian's AppIndicator library into a private folder for the AppIndicator test; without them those tests
skip saying so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cairn.tray.backend import LINUX_ORDER, TrayUnavailable, candidates, choose_backend
from cairn.tray.backend import describe as describe_backend
from support import tray as tray_harness
from support.cli import read_service
from support.tray import (
    DRIVER,
    MENU,
    START_DEADLINE_S,
    Popups,
    TrayDaemon,
    auto_env,
    hover_for_tooltip,
    tray_lines,
    with_gi,
    write_vault,
)

pytestmark = pytest.mark.e2e

xvfb = tray_harness.xvfb  # the fixtures: a private Xvfb display and its minimal tray manager
host = tray_harness.host
session_bus = tray_harness.session_bus  # a D-Bus session bus of its own
system_gi = tray_harness.system_gi  # the distribution's PyGObject, on its own PYTHONPATH entry


def has_appindicator(env: dict[str, str]) -> bool:
    code = (
        "import gi\n"
        "for ns in ('AppIndicator3', 'AyatanaAppIndicator3'):\n"
        "    try:\n"
        "        gi.require_version(ns, '0.1'); raise SystemExit(0)\n"
        "    except ValueError:\n"
        "        pass\n"
        "raise SystemExit(1)\n"
    )
    return subprocess.run([sys.executable, "-c", code], env=env, timeout=60).returncode == 0


def start_driver(home: Path, env: dict[str, str]) -> TrayDaemon:
    """The daemon with its tray (``tray_harness.DRIVER``) on ``home``'s vault; its first answer read."""
    vault = write_vault(home / "vault")
    with open(home / "serve.stderr", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(vault)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            bufsize=1,
        )
    d = TrayDaemon(proc, home, vault, env)
    d.start_reading()
    d.hello = d.reply(START_DEADLINE_S)
    return d


def stop_driver(d: TrayDaemon) -> None:
    if d.proc.poll() is None:
        d.proc.kill()
        d.proc.wait(timeout=30)


def backend_line(stderr: str) -> str:
    lines = [ln for ln in tray_lines(stderr) if "tray icon: pystray's" in ln]
    assert len(lines) == 1, tray_lines(stderr)
    assert " INFO " in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def gtk_daemon(tmp_path_factory, xvfb, host, system_gi, session_bus):
    home = tmp_path_factory.mktemp("gtk-home")
    env = auto_env(home, xvfb)
    env.update({"PYTHONPATH": with_gi(env, system_gi), "DBUS_SESSION_BUS_ADDRESS": session_bus})
    if has_appindicator(env):
        pytest.skip("an AppIndicator typelib is installed: Cairn rightly prefers it to GTK here")
    docked = len(host.docked)
    d = start_driver(home, env)
    try:
        assert d.hello["ready"], d.stderr[-3000:]
        d.url = d.until("service.json", lambda: (read_service(home, d.proc.pid) or {}).get("url"), START_DEADLINE_S)
        d.wid = host.wait("the GTK icon docked", lambda: len(host.docked) > docked and host.docked[-1])
        yield d
    finally:
        stop_driver(d)


# -- the fallbacks on a real display ----------------------------------------------------------------


def test_without_appindicator_the_gtk_backend_shows_the_icon_with_its_menu_and_says_so(gtk_daemon, host, xvfb):
    d = gtk_daemon
    assert d.hello["backend"] == "pystray._gtk", d.stderr[-3000:]
    line = backend_line(d.stderr)
    assert "pystray's gtk backend, with its menu" in line
    assert "passed over: appindicator: ValueError: Namespace AyatanaAppIndicator3 not available" in line
    assert "running headless" not in d.stderr
    visible = d.until("the idle menu", lambda: (m := d.menu())[0]["text"].endswith("up to date") and m)
    assert [i["text"] for i in visible if i["visible"] and i["enabled"]] == MENU
    # pystray sets only the GTK status icon's title; the tooltip a desktop shows is set by Cairn.
    assert d.until("the tooltip", lambda: d.send("status")["tooltip"]) == "Cairn - 3 notes · up to date"

    popups = Popups(xvfb)
    hover_for_tooltip(host, popups, d.wid, START_DEADLINE_S, proc=d.proc, log=lambda: d.stderr)
    before = popups.shown()
    host.click(d.wid, button=3)  # a real right click on the docked icon
    d.until("the menu popped up", lambda: {w for w in popups.shown() - before if popups.kind(w) != "TOOLTIP"})


def test_quitting_from_the_gtk_tray_exits_0_without_claiming_to_run_headless(gtk_daemon):
    d = gtk_daemon
    d.click("Quit")
    code = d.proc.wait(timeout=30)
    assert code == 0, d.stderr[-3000:]
    assert "tray: quit requested" in d.stderr and "shutting down" in d.stderr
    assert "headless" not in d.stderr and "tray icon stopped" not in d.stderr, tray_lines(d.stderr)


def with_appindicator(env: dict[str, str]) -> dict[str, str]:
    """``env`` reaching the AppIndicator library and typelib unpacked in ``$CAIRN_TEST_APPINDICATOR_DIR`` (a lib
    folder holding ``girepository-1.0/``; ``.ci/run`` unpacks Debian's packages there: installed system-wide
    they would make the GTK fallback untestable on the same machine)."""
    lib = os.environ.get("CAIRN_TEST_APPINDICATOR_DIR", "")
    if not lib or not (Path(lib) / "girepository-1.0").is_dir():
        return env
    paths = {"GI_TYPELIB_PATH": str(Path(lib) / "girepository-1.0"), "LD_LIBRARY_PATH": lib}
    return {**env, **{k: os.pathsep.join(p for p in (v, env.get(k, "")) if p) for k, v in paths.items()}}


def test_with_appindicator_it_comes_first_with_its_menu(tmp_path, xvfb, host, system_gi, session_bus):
    env = auto_env(tmp_path, xvfb)
    env.update({"PYTHONPATH": with_gi(env, system_gi), "DBUS_SESSION_BUS_ADDRESS": session_bus})
    env = with_appindicator(env)
    if not has_appindicator(env):
        pytest.skip(
            "no AppIndicator typelib: install gir1.2-ayatanaappindicator3-0.1, or unpack it into "
            "$CAIRN_TEST_APPINDICATOR_DIR as .ci/run does"
        )
    docked = len(host.docked)
    d = start_driver(tmp_path, env)
    try:
        assert d.hello["ready"] and d.hello["backend"] == "pystray._appindicator", d.stderr[-3000:]
        assert backend_line(d.stderr).endswith("tray icon: pystray's appindicator backend, with its menu")
        visible = d.until("the idle menu", lambda: (m := d.menu())[0]["text"].endswith("up to date") and m)
        assert [i["text"] for i in visible if i["visible"] and i["enabled"]] == MENU
        # No StatusNotifier host on Xvfb: the library falls back to a classic tray icon, which the host docks
        # (it may replace its window as the icon changes: the newest one still there is the icon).
        wid = host.wait(
            "the AppIndicator icon docked",
            lambda: next((w for w in reversed(host.docked[docked:]) if w in host.current), None),
        )
        popups = Popups(xvfb)
        before = popups.shown()
        host.click(wid, button=3)
        d.until("the menu popped up", lambda: popups.shown() - before)
        d.click("Quit")
        assert d.proc.wait(timeout=30) == 0, d.stderr[-3000:]
        assert "headless" not in d.stderr, tray_lines(d.stderr)
    finally:
        stop_driver(d)


def test_without_pygobject_the_xorg_backend_is_used_and_the_log_says_there_is_no_menu(tmp_path, xvfb, host):
    env = auto_env(tmp_path, xvfb)
    docked = len(host.docked)
    d = start_driver(tmp_path, env)
    try:
        assert d.hello["ready"] and d.hello["backend"] == "pystray._xorg", d.stderr[-3000:]
        host.wait("the X11 icon docked", lambda: len(host.docked) > docked)
        line = backend_line(d.stderr)
        assert "pystray's xorg backend shows the icon and its tooltip but NO MENU" in line
        assert "a left click opens the vault folder" in line
        assert "install PyGObject" in line and "python3-gi" in line
        assert "passed over: appindicator: " in line and "; gtk: " in line
        d.click("Quit")
        assert d.proc.wait(timeout=30) == 0, d.stderr[-3000:]
    finally:
        stop_driver(d)


# -- the order, without a display -------------------------------------------------------------------


def _loader(broken: dict[str, Exception]):
    """A stand-in for :func:`cairn.tray.backend.load_backend`: ``broken`` names fail with their error; the others
    load a module whose ``Icon`` has a menu unless it is ``xorg`` (as in pystray)."""
    tried: list[str] = []

    def load(name: str):
        tried.append(name)
        if name in broken:
            raise broken[name]
        return SimpleNamespace(Icon=type("Icon", (), {"HAS_MENU": name != "xorg"}))

    return load, tried


def test_linux_tries_appindicator_then_gtk_then_xorg_and_takes_the_first_that_loads():
    assert candidates({}, "linux") == LINUX_ORDER == ("appindicator", "gtk", "xorg")
    load, tried = _loader({})
    assert choose_backend({}, platform="linux", load=load).name == "appindicator" and tried == ["appindicator"]

    missing = ValueError("Namespace AyatanaAppIndicator3 not available")
    load, tried = _loader({"appindicator": missing})
    chosen = choose_backend({}, platform="linux", load=load)
    assert (chosen.name, chosen.has_menu, tried) == ("gtk", True, ["appindicator", "gtk"])
    assert chosen.skipped == (("appindicator", "ValueError: Namespace AyatanaAppIndicator3 not available"),)

    no_gi = ModuleNotFoundError("No module named 'gi'")
    load, tried = _loader({"appindicator": no_gi, "gtk": no_gi})
    chosen = choose_backend({}, platform="linux", load=load)
    assert (chosen.name, chosen.has_menu, tried) == ("xorg", False, list(LINUX_ORDER))
    assert "NO MENU" in describe_backend(chosen) and "install PyGObject" in describe_backend(chosen)


def test_pystray_backend_forces_one_and_nothing_loading_says_why_for_each():
    load, tried = _loader({})
    assert choose_backend({"PYSTRAY_BACKEND": "xorg"}, platform="linux", load=load).name == "xorg"
    assert tried == ["xorg"]
    assert candidates({}, "darwin") == ("darwin",) and candidates({}, "win32") == ("win32",)
    load, _ = _loader({n: OSError(f"{n} broke") for n in LINUX_ORDER})
    with pytest.raises(TrayUnavailable) as err:
        choose_backend({}, platform="linux", load=load)
    assert str(err.value) == (
        "appindicator: OSError: appindicator broke; gtk: OSError: gtk broke; xorg: OSError: xorg broke"
    )


def test_a_gtk_backend_without_a_session_bus_is_passed_over(tmp_path, xvfb, system_gi):
    """No D-Bus session bus answers: pystray's GTK backend would fail once started; Cairn takes xorg instead."""
    env = auto_env(tmp_path, xvfb)
    env.update({"PYTHONPATH": with_gi(env, system_gi), "DBUS_SESSION_BUS_ADDRESS": f"unix:path={tmp_path / 'no-bus'}"})
    code = (
        "from cairn.tray.backend import choose_backend, describe\n"
        "b = choose_backend()\n"
        "print(b.name); print(describe(b))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert out[0] == "xorg", out
    assert "gtk: OSError: no D-Bus session bus" in out[1]
