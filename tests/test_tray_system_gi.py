"""The path docs/tray.md gives to a tray with its menu on Linux, followed as a user would. A pipx or uv install has no
PyGObject, so the tray falls back to the X11 icon without a menu; its way out is a venv made by the
distribution's Python with ``--system-site-packages`` (so it reaches ``python3-gi`` and GTK 3), with Cairn installed
into it, here from the wheel ``make wheel`` builds.

``cairn serve`` from that venv, on Xvfb with a D-Bus session bus as a desktop has, says in its log that its backend
has a menu; the pointer resting on the docked icon shows the tooltip (GTK), and a right click opens the menu.
Skipped with one line without /usr/bin/python3 loading PyGObject with GTK 3 (``.ci/run`` installs ``python3-gi``
and ``gir1.2-gtk-3.0`` when root), Xvfb or dbus-daemon.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import tray as tray_harness
from support.built_wheel import pip
from support.tray import START_DEADLINE_S, Popups, auto_env, hover_for_tooltip, tray_lines, write_vault
from support.waits import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.e2e]  # a venv built from the wheel, the tray on a real X display

SYSTEM_PYTHON = Path("/usr/bin/python3")
xvfb = tray_harness.xvfb
host = tray_harness.host
session_bus = tray_harness.session_bus


@pytest.fixture(scope="module")
def system_venv(tmp_path_factory, cairn_wheel) -> Path:
    """``/usr/bin/python3 -m venv --system-site-packages`` with the wheel installed (by this interpreter's pip: the
    docs/tray.md's ``venv/bin/pip install`` without needing the distribution's ``python3-venv``)."""
    probe = "import gi; gi.require_version('Gtk', '3.0'); from gi.repository import Gtk"
    if not SYSTEM_PYTHON.exists():
        pytest.skip(f"{SYSTEM_PYTHON} (the distribution's Python) is not installed")
    done = subprocess.run([SYSTEM_PYTHON, "-c", probe], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"{SYSTEM_PYTHON} cannot load PyGObject with GTK 3 (install python3-gi and gir1.2-gtk-3.0)")
    venv = tmp_path_factory.mktemp("system-gi") / "venv"
    cmd = [SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)]
    subprocess.run(cmd, check=True, timeout=120)
    python = str(venv / "bin" / "python")
    pip(["--python", python, "install", "--quiet", "--no-compile", str(cairn_wheel)], "install the wheel")
    return venv


@pytest.fixture
def serving(system_venv, tmp_path, xvfb, session_bus) -> Iterator[tuple[subprocess.Popen, Path]]:
    """``cairn serve`` from the venv on a small vault, with the display and the session bus; (process, its log)."""
    env = auto_env(tmp_path, xvfb)  # every user folder in tmp_path, the backend left to Cairn
    env["DBUS_SESSION_BUS_ADDRESS"] = session_bus
    env.pop("PYTHONPATH", None)
    vault = write_vault(tmp_path / "vault")
    log = tmp_path / "serve.stderr"
    cairn = str(system_venv / "bin" / "cairn")
    with open(log, "wb") as err:
        proc = subprocess.Popen([cairn, "serve", "--vault", str(vault), "--port", "0"], env=env, stderr=err)
    try:
        yield proc, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def test_a_venv_reaching_the_distributions_pygobject_gets_the_tray_menu_and_tooltip(serving, host, xvfb):
    proc, log = serving
    docked = len(host.docked)

    def text() -> str:
        return log.read_text(encoding="utf-8", errors="replace")

    line = wait_until(
        "the tray's backend in the log",
        lambda: next((ln for ln in tray_lines(text()) if "tray icon: pystray's" in ln), None),
        START_DEADLINE_S,
        proc=proc,
        log=text,
    )
    assert "with its menu" in line and "NO MENU" not in line, line
    assert "running headless" not in text()
    wid = host.wait(
        "the icon docked", lambda: next((w for w in reversed(host.docked[docked:]) if w in host.current), None)
    )
    popups = Popups(xvfb)
    if "pystray's gtk backend" in line:  # AppIndicator, where its library is installed, has no tooltip
        hover_for_tooltip(host, popups, wid, START_DEADLINE_S, proc=proc, log=text)
    before = popups.shown()
    host.click(wid, button=3)
    menu = wait_until(
        "the menu",
        lambda: {w for w in popups.shown() - before if popups.kind(w) != "TOOLTIP"},
        START_DEADLINE_S,
        proc=proc,
        log=text,
    )
    assert menu
