"""The tray icon on a real X server: Xvfb, pystray's real ``xorg`` backend, a real daemon.

Xvfb has no desktop, so the tests run a minimal system-tray manager (:class:`tray_harness.TrayHost`, the
freedesktop System Tray Protocol over python-xlib: it owns ``_NET_SYSTEM_TRAY_S0`` and docks the
icon windows that ask) — the part of a desktop pystray talks to. The daemon runs in a subprocess
(:data:`tray_harness.DRIVER`) that calls ``cairn.app.serve(tray=True)`` and answers commands on stdin by driving
the menu through pystray's own API (``icon.menu.items``, ``item(icon)``); the tests check what the
owner would notice: the docked icon's pixels and tooltip, ``/index/stats`` over HTTP, files on disk,
the clipboard, the exit code. ``cairn serve`` itself is run too, with and without a display.

Xvfb comes from ``.ci/run`` (``apt-get install xvfb xclip`` when missing and root); without it the
display tests skip saying so. Nothing touches the real user folders: HOME, XDG_CONFIG_HOME and the
CAIRN_* folders point into the test's temp dir.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cairn import autostart
from cairn import tray as tray_mod
from cairn.tray import STATES, describe, icon_path
from support import tray as tray_harness
from support.cli import cairn_executable, read_service
from support.tray import (
    DRIVER,
    HOST_BACKGROUND,
    MENU,
    NOTES,
    POLL_S,
    QUIT_DEADLINE_S,
    REPO,
    START_DEADLINE_S,
    STEP_DEADLINE_S,
    TrayDaemon,
    _reference,
    closest_state,
    daemon_env,
    tray_lines,
    write_vault,
    zombie_children,
)
from support.waits import wait_until

pytestmark = pytest.mark.e2e  # the tray on a real X display, `cairn serve` as a subprocess

xvfb = tray_harness.xvfb  # the fixtures: a private Xvfb display and its minimal tray manager
host = tray_harness.host


@pytest.fixture(scope="module")
def tray_daemon(tmp_path_factory, xvfb, host):
    home = tmp_path_factory.mktemp("tray-home")
    vault = write_vault(home / "vault")
    env = daemon_env(home, xvfb)
    # The desktop's folder opener: a stand-in `xdg-open` that records what it was asked to open.
    bin_dir = home / "bin"
    bin_dir.mkdir()
    opener = bin_dir / "xdg-open"
    opener.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$1\" >> '{home / 'opened.txt'}'\n", encoding="utf-8")
    opener.chmod(0o755)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
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
    try:
        d.start_reading()
        hello = d.reply(START_DEADLINE_S)
        assert hello and hello["ready"], f"the tray did not start: {hello}\n{d.stderr[-3000:]}"
        assert hello["backend"] == "pystray._xorg"
        d.url = d.until("service.json", lambda: (read_service(home, proc.pid) or {}).get("url"), START_DEADLINE_S)
        d.token = subprocess.run(
            [cairn_executable(), "token", "--vault", str(vault)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        yield d
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def indexed(tray_daemon):
    d = tray_daemon
    return d.until(
        "the first index",
        lambda: (s := d.stats())["notes"] == len(NOTES) and s["pending"] == 0 and not s["indexing"] and s,
    )


# -- what the tray shows -----------------------------------------------------------------------


def test_the_real_xorg_backend_docks_the_icon_which_shows_idle_and_the_note_count_in_its_tooltip(
    tray_daemon, indexed, host
):
    wid = host.wait("one docked icon", lambda: host.docked and host.docked[0])
    tray_daemon.until("the idle status", lambda: tray_daemon.send("status")["state"] == "idle")
    title = tray_daemon.until(
        "the tooltip", lambda: host.title(wid) == "Cairn - 3 notes · up to date" and host.title(wid)
    )
    assert title == "Cairn - 3 notes · up to date"
    tray_daemon.until("the idle icon on screen", lambda: closest_state(host.image(wid)) == "idle")


def test_the_xorg_icon_is_drawn_over_the_trays_background_without_black_corners(tray_daemon, indexed, host):
    wid = host.wait("one docked icon", lambda: host.docked and host.docked[0])
    tray_daemon.until("the idle icon on screen", lambda: closest_state(host.image(wid)) == "idle")
    image = host.image(wid)
    corners = [image.getpixel(xy) for xy in ((0, 0), (31, 0), (0, 31), (31, 31))]
    assert corners == [HOST_BACKGROUND] * 4  # the round icon's transparent corners show the tray, not black
    assert image.getpixel((16, 28)) != HOST_BACKGROUND  # and the icon itself is drawn


def test_the_menu_lists_status_warning_and_every_action_in_order(tray_daemon, indexed):
    items = tray_daemon.until(
        "the idle menu", lambda: (m := tray_daemon.menu())[0]["text"].endswith("up to date") and m
    )
    visible = [i for i in items if i["visible"]]
    assert visible[0] == {"text": "3 notes · up to date", "enabled": False, "checked": None, "visible": True}
    # CAIRN_KEYRING=file: the token lives in a 0600 file as chosen, and the menu says so without blaming a keyring.
    assert visible[1]["text"] == "⚠ API token kept in a 0600 file, as configured" and not visible[1]["enabled"]
    assert "The API token is kept in a 0600 file" in tray_daemon.stderr
    assert [i["text"] for i in visible[2:]] == MENU
    assert all(i["enabled"] for i in visible[2:])
    assert next(i for i in visible if i["text"] == "Start at login")["checked"] is False


def test_reindex_now_rereads_every_note_as_index_stats_shows(tray_daemon, indexed):
    before = tray_daemon.stats()
    tray_daemon.click("Reindex now")
    after = tray_daemon.until(
        "a re-index",
        lambda: (
            (s := tray_daemon.stats())["lastIngestedAt"] is not None
            and s["lastIngestedAt"] > before["lastIngestedAt"]
            and not s["indexing"]
            and s
        ),
    )
    assert after["notes"] == before["notes"] == len(NOTES)
    assert after["chunks"] == before["chunks"] and after["pending"] == 0


def test_pause_stops_following_changes_and_resume_picks_up_what_changed_meanwhile(tray_daemon, indexed, host):
    d = tray_daemon
    d.click("Pause watching")
    d.until("paused", lambda: d.stats()["paused"])
    status = d.until("the paused status", lambda: (s := d.send("status"))["state"] == "paused" and s)
    assert status["text"] == "Paused · 3 notes"
    assert any(i["text"] == "Resume watching" for i in d.menu())
    d.until("the paused icon on screen", lambda: closest_state(host.image(host.docked[0])) == "paused")

    (d.vault / "Garden" / "Beans.md").write_text("# Beans\n\nSow runner beans in May against a wigwam.\n")
    # A watching daemon applies a save within ~0.5 s (300 ms debounce); paused, nothing moves in 4× that.
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        stats = d.stats()
        assert stats["notes"] == len(NOTES) and stats["pendingPaths"] == 0, stats
        time.sleep(0.1)

    d.click("Resume watching")
    stats = d.until(
        "the note written while paused", lambda: (s := d.stats())["notes"] == len(NOTES) + 1 and not s["paused"] and s
    )
    assert stats["watching"] is True
    d.until("the idle status again", lambda: d.send("status")["text"] == "4 notes · up to date")
    assert any(i["text"] == "Pause watching" for i in d.menu())


def test_open_vault_and_logs_folders_hand_the_folders_to_the_desktop_opener(tray_daemon, indexed):
    d = tray_daemon
    d.click("Open vault folder")
    d.click("Open logs folder")
    opened = d.until(
        "two folders opened",
        lambda: (p := d.home / "opened.txt").exists() and len(lines := p.read_text().splitlines()) == 2 and lines,
    )
    # Each click starts its own opener process, so the two lines may land in either order.
    assert sorted(opened) == sorted([str(d.vault), str(d.home / "log")])


def test_an_opened_folder_leaves_no_zombie_opener_behind(tray_daemon, indexed):
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc")
    d = tray_daemon
    opened = d.home / "opened.txt"
    before = len(opened.read_text().splitlines()) if opened.exists() else 0
    d.click("Open vault folder")
    d.until("the folder opened", lambda: opened.exists() and len(opened.read_text().splitlines()) > before)
    # The opener (here a shell script) has exited; the daemon must have reaped it, not keep an `xdg-open` zombie.
    d.until("no zombie opener", lambda: not zombie_children(d.proc.pid), deadline=10)
    assert d.proc.poll() is None


def test_a_left_click_on_the_icon_opens_the_vault_folder(tray_daemon, indexed, host):
    """pystray's X11 backend has no menu; a click runs the default item, Open vault folder."""
    d = tray_daemon
    opened = d.home / "opened.txt"

    def lines() -> list[str]:
        return opened.read_text().splitlines() if opened.exists() else []

    before = lines()
    host.click(host.docked[0])
    after = d.until("the click handled", lambda: len(ln := lines()) > len(before) and ln)
    assert after[len(before) :] == [str(d.vault)]


def test_copy_api_token_puts_the_token_on_the_clipboard_and_never_in_the_log(tray_daemon, indexed, xvfb):
    xclip = shutil.which("xclip")
    if xclip is None:
        pytest.skip("xclip is not installed (.ci/run installs it with xvfb)")
    d = tray_daemon
    d.click("Copy API token")
    d.until("the copied notice", lambda: d.send("status")["notice"] == "API token copied to the clipboard")
    pasted = subprocess.run(
        [xclip, "-o", "-selection", "clipboard"],
        env={**d.env, "DISPLAY": xvfb},
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    assert pasted == d.token
    logs = d.stderr + "".join(p.read_text(errors="replace") for p in (d.home / "log").glob("*.log*"))
    assert d.token not in logs


def test_a_notice_such_as_token_copied_leaves_the_menu_again_after_a_few_seconds(tray_daemon, indexed):
    d = tray_daemon

    def visible() -> list[str]:
        return [i["text"] for i in d.menu() if i["visible"]]

    d.until("the idle menu", lambda: visible()[0].endswith("up to date"))
    d.click("Copy API token")
    notice = d.until("the notice", lambda: d.send("status")["notice"])
    assert notice in visible()  # "API token copied to the clipboard" (or why not), under the status
    items = d.until("the notice gone", lambda: notice not in (v := visible()) and v)
    assert items[2:] == MENU  # every item back in its place, below the status and the keyring line


def test_start_at_login_checkbox_installs_and_removes_the_systemd_user_unit(tray_daemon, indexed):
    d = tray_daemon
    unit = d.home / ".config" / "systemd" / "user" / f"cairn-{autostart.entry_id(Path(d.vault).resolve())}.service"
    d.click("Start at login")
    d.until("the box ticked", lambda: next(i for i in d.menu() if i["text"] == "Start at login")["checked"])
    text = unit.read_text(encoding="utf-8")
    assert f'"--vault" "{d.vault}"' in text and '"serve"' in text
    assert (unit.parent / "default.target.wants" / unit.name).is_symlink()
    d.click("Start at login")
    d.until("the box cleared", lambda: not next(i for i in d.menu() if i["text"] == "Start at login")["checked"])
    assert not unit.exists()


def test_a_second_daemon_on_the_same_vault_and_data_folder_exits_1_naming_the_first(tray_daemon, indexed, host):
    d = tray_daemon
    docked = len(host.docked)
    with open(d.home / "second.stderr", "wb") as err:
        second = subprocess.Popen(
            [cairn_executable(), "serve", "--vault", str(d.vault), "--port", "0"],
            env=d.env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
    try:
        code = second.wait(timeout=START_DEADLINE_S)
    except subprocess.TimeoutExpired:
        second.kill()
        pytest.fail(
            "a second `cairn serve` with a tray kept running beside the first:\n"
            + (d.home / "second.stderr").read_text(errors="replace")[-3000:]
        )
    err_text = (d.home / "second.stderr").read_text(errors="replace")
    assert code == 1, err_text
    assert f"{d.proc.pid}" in err_text and "Error:" in err_text
    assert d.proc.poll() is None and read_service(d.home, d.proc.pid) is not None  # the first one is unharmed
    assert len(host.docked) <= docked + 1  # its icon, if it showed, went away again
    if len(host.docked) > docked:
        host.wait("the second icon removed", lambda: host.docked[-1] in host.gone, timeout=10)


def test_quit_stops_the_daemon_cleanly_within_five_seconds(tray_daemon, indexed, host):
    from cairn.config import load_config
    from cairn.store.recovery import InstanceLock

    d = tray_daemon
    wid = host.docked[0]
    stream = open_event_stream(d)
    d.click("Quit")
    try:
        code = d.proc.wait(timeout=QUIT_DEADLINE_S)  # the bound: still running after it fails the test
    except subprocess.TimeoutExpired:
        pytest.fail(f"the daemon still ran {QUIT_DEADLINE_S} s after Quit:\n{d.stderr[-3000:]}")
    assert code == 0, d.stderr[-3000:]
    assert not (d.home / "data" / "service.json").exists()
    config = load_config({"vault": str(d.vault), "data_dir": str(d.home / "data")}, env={})
    lock = InstanceLock(config.db_path.with_name(config.db_path.name + ".lock"), what="the test").acquire()
    lock.release()  # the daemon released it: a new instance can start
    host.wait("the icon window destroyed", lambda: wid in host.gone, timeout=10)
    assert "tray: quit requested" in d.stderr and "shutting down" in d.stderr
    stream["done"].wait(10)
    assert stream["done"].is_set(), "the open /events stream was not closed by the shutdown"


def open_event_stream(d: TrayDaemon) -> dict:
    """``GET /events`` held open on a thread; ``done`` is set when the server ends the stream."""
    out: dict[str, Any] = {"open": threading.Event(), "done": threading.Event()}

    def follow() -> None:
        host, port = d.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request("GET", "/events", headers={"Authorization": f"Bearer {d.token}"})
            resp = conn.getresponse()
            out["status"] = resp.status
            out["open"].set()
            resp.read()
        except (OSError, http.client.HTTPException) as exc:
            out["error"] = exc
        finally:
            conn.close()
            out["done"].set()

    threading.Thread(target=follow, name="events-stream", daemon=True).start()
    assert out["open"].wait(30) and out["status"] == 200, out
    assert not out["done"].is_set()
    return out


# -- `cairn serve` itself ----------------------------------------------------------------------


def _serve(home: Path, env: dict[str, str], vault: Path) -> subprocess.Popen:
    err = open(home / "serve.stderr", "wb")
    try:
        return subprocess.Popen(
            [cairn_executable(), "serve", "--vault", str(vault), "--port", "0"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
    finally:
        err.close()


def _wait_service(proc: subprocess.Popen, home: Path) -> dict:
    return wait_until(
        "cairn serve to start",
        lambda: read_service(home, proc.pid),
        START_DEADLINE_S,
        proc=proc,
        log=home / "serve.stderr",
    )


def _health(url: str) -> dict:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/health")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def _stop(proc: subprocess.Popen, sig: int) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=QUIT_DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"cairn serve did not stop within {QUIT_DEADLINE_S} s of {signal.Signals(sig).name}")


@pytest.mark.parametrize(
    "display, reason",
    [
        (None, "no display (DISPLAY and WAYLAND_DISPLAY are not set)"),
        (":97", "no tray backend"),  # a display that no server answers
    ],
    ids=["DISPLAY unset", "no X server at DISPLAY"],
)
def test_cairn_serve_without_a_usable_display_runs_headless_saying_so_in_one_log_line(tmp_path, display, reason):
    env = daemon_env(tmp_path, None)
    if display is not None:
        env["DISPLAY"] = display
    proc = _serve(tmp_path, env, write_vault(tmp_path / "vault"))
    try:
        info = _wait_service(proc, tmp_path)
        assert _health(info["url"])["store"]["ok"] is True
        assert _stop(proc, signal.SIGINT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    lines = tray_lines((tmp_path / "serve.stderr").read_text())
    assert len(lines) == 1, lines
    assert f"no tray icon: {reason}" in lines[0] and "running headless" in lines[0]
    assert not (tmp_path / "data" / "service.json").exists()


def test_cairn_serve_no_tray_flag_starts_no_icon_even_with_a_display(tmp_path, xvfb, host):
    env = daemon_env(tmp_path, xvfb)
    docked = len(host.docked)
    err = open(tmp_path / "serve.stderr", "wb")
    proc = subprocess.Popen(
        [cairn_executable(), "serve", "--vault", str(write_vault(tmp_path / "vault")), "--port", "0", "--no-tray"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=err,
        stdin=subprocess.DEVNULL,
    )
    err.close()
    try:
        _wait_service(proc, tmp_path)
        assert _stop(proc, signal.SIGTERM) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert len(host.docked) == docked
    assert not tray_lines((tmp_path / "serve.stderr").read_text())


def test_cairn_serve_with_a_display_shows_the_icon_and_stops_cleanly_on_sigterm(tmp_path, xvfb, host):
    env = daemon_env(tmp_path, xvfb)
    docked = len(host.docked)
    proc = _serve(tmp_path, env, write_vault(tmp_path / "vault"))
    try:
        _wait_service(proc, tmp_path)
        wid = host.wait("the icon of `cairn serve`", lambda: len(host.docked) > docked and host.docked[-1])
        end = time.monotonic() + STEP_DEADLINE_S
        while not host.title(wid).startswith("Cairn - 3 notes"):
            assert time.monotonic() < end, host.title(wid)
            time.sleep(POLL_S)
        assert _stop(proc, signal.SIGTERM) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert not (tmp_path / "data" / "service.json").exists()
    host.wait("the icon removed", lambda: wid in host.gone, timeout=10)


# -- the status line and the icons, without a display --------------------------------------------


def test_the_status_line_says_starting_indexing_paused_error_or_up_to_date():
    assert describe(None).text == "Starting…"
    base = {"notes": 3879, "pending": 0, "indexing": False, "paused": False, "indexError": None}
    assert describe(base).text == "3,879 notes · up to date"
    assert describe(base).state == "idle" and describe(base).tooltip == "Cairn - 3,879 notes · up to date"
    busy = {**base, "indexing": True}
    assert describe(busy, {"phase": "index", "done": 812, "total": 3879}).text == "Indexing 812 / 3,879"
    assert describe(busy, {"phase": "embed", "done": 1200, "total": 20000}).text == "Embedding 1,200 / 20,000 passages"
    assert describe(busy).text == "Indexing changes…" and describe(busy).state == "indexing"
    assert describe({**base, "pending": 40}).text == "Indexing · 40 waiting"
    assert describe({**base, "paused": True}).text == "Paused · 3,879 notes"
    err = describe({**base, "paused": True, "indexError": "StoreError: " + "disk full " * 20})
    assert err.state == "error" and err.text.startswith("Error: StoreError: disk full") and len(err.text) <= 70
    assert len(err.tooltip) <= tray_mod.TOOLTIP_MAX


def test_an_unusable_mcp_policy_is_a_menu_warning_that_says_why_for_the_owner():
    base = {"notes": 3, "pending": 0, "indexing": False, "paused": False, "indexError": None}
    ok = describe({**base, "mcpPolicy": {"policy": "ok", "failClosedReason": None, "failClosedDetail": None}})
    assert ok.warning is None and ok.tooltip == "Cairn - 3 notes · up to date"
    why = "/home/ann/.config/cairn/mcp-serve.yaml:2: withhold.folders[1]: '../Divorce' is not a vault folder"
    broken = describe(
        {**base, "mcpPolicy": {"policy": "fail-closed", "failClosedReason": "policy_unusable", "failClosedDetail": why}}
    )
    assert broken.warning == f"MCP policy unusable, nothing served: {why}"
    assert broken.text == "3 notes · up to date" and broken.tooltip.endswith("MCP policy unusable, nothing served")


def test_each_state_has_its_own_shipped_icon_as_the_packaging_script_draws_it():
    from PIL import Image

    sys.path.insert(0, str(REPO / "packaging"))
    try:
        import make_icons
    finally:
        sys.path.pop(0)
    images = {}
    for state in STATES:
        shipped = Image.open(icon_path(state))
        assert shipped.size == (64, 64) and shipped.mode == "RGBA"
        assert shipped.tobytes() == make_icons.draw(state).tobytes(), (
            f"{state}.png is stale: run packaging/make_icons.py"
        )
        images[state] = shipped.tobytes()
    assert len(set(images.values())) == len(STATES)
    assert {closest_state(_reference(s)) for s in STATES} == set(STATES)


def test_no_display_is_reported_before_any_backend_is_tried():
    if sys.platform in ("darwin", "win32"):
        pytest.skip("macOS and Windows need no DISPLAY")
    assert tray_mod.unavailable_reason({}) == "no display (DISPLAY and WAYLAND_DISPLAY are not set)"
