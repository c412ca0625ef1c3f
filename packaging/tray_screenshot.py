"""Screenshot of the tray icon with its menu open (``docs/tray.png``), or with its tooltip (``--hover``), taken on a
private Xvfb display.

Runs the real ``cairn serve`` on the sample vault with the backend Cairn chooses (``--backend`` forces
one): with PyGObject and GTK 3 the GTK backend (a D-Bus session is started here with ``dbus-daemon
--session``, as a desktop has), else the ``xorg`` one (the icon and tooltip, no menu). ``--cairn`` runs another
installed ``cairn``, e.g. one in a venv made with ``--system-site-packages`` (docs/tray.md's way to the menu). Docks
its icon in the minimal tray manager of ``tests/support/tray.py``, right-clicks it or rests the pointer on it
(XTEST) and grabs the screen with Pillow. Prints what it did as JSON, with the log line naming the backend.

    .venv/bin/python packaging/tray_screenshot.py [--out docs/tray.png] [--backend auto|gtk|xorg] [--hover]
        [--cairn PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def start_xvfb(size: str) -> tuple[subprocess.Popen, str]:
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", f"{size}x24", "-nolisten", "tcp"],
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        number = pipe.readline().strip().decode()
    if not number:
        raise SystemExit("Xvfb did not start")
    return proc, f":{number}"


def wait(what: str, check, timeout: float = 120.0):
    end = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "tray.png")
    parser.add_argument("--vault", type=Path, default=REPO / "examples" / "vault")
    parser.add_argument(
        "--backend",
        choices=("auto", "gtk", "xorg"),
        default="auto",
        help="pystray backend (PYSTRAY_BACKEND); auto: the one Cairn chooses, named in its log",
    )
    parser.add_argument("--hover", action="store_true", help="rest the pointer on the icon (its tooltip), no click")
    default = Path(sys.executable).parent / "cairn"
    parser.add_argument("--cairn", type=Path, default=default, help=f"the cairn to run (default {default})")
    return parser.parse_args()


def serve_env(home: Path, display: str, backend: str) -> dict[str, str]:
    """The environment of ``cairn serve``: every user folder inside ``home``, the display, the backend."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "XDG_", "PYSTRAY_"))}
    if backend != "auto":
        env["PYSTRAY_BACKEND"] = backend
    env.update(
        {
            "DISPLAY": display,
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "CAIRN_DATA_DIR": str(home / "data"),
            "CAIRN_CONFIG_DIR": str(home / "config"),
            "CAIRN_LOG_DIR": str(home / "log"),
            "CAIRN_KEYRING": "file",
        }
    )
    return env


def start_bus(env: dict[str, str]) -> int | None:
    """A private D-Bus session bus (the GTK backends need one, as on a desktop), its address put in ``env``;
    returns its pid, or None without ``dbus-daemon``."""
    if not shutil.which("dbus-daemon"):
        return None
    out = subprocess.run(
        ["dbus-daemon", "--session", "--fork", "--print-address=1", "--print-pid=1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    env["DBUS_SESSION_BUS_ADDRESS"] = out[0]
    return int(out[1])


def shoot(host, display: str, out: Path, hover: bool = False) -> tuple[int, int]:
    """Right-click the newest docked icon (XTEST), or rest the pointer on it (``hover``), grab the screen down to
    what is drawn, save it to ``out``."""
    from PIL import ImageGrab

    with host.cond:
        host.cond.wait_for(lambda: host.current, 60)
    time.sleep(3)  # the tray's status poll (2 s) shows the note count
    wid = next(w for w in reversed(host.docked) if w in host.current)  # AppIndicator may replace its window
    if hover:
        host.hover(wid)
    else:
        host.click(wid, button=3)
    time.sleep(1.5)
    shot = ImageGrab.grab(xdisplay=display)
    bbox = shot.convert("L").point(lambda v: 255 if v > 0 else 0).getbbox()  # drop the empty black screen
    shot = shot.crop((0, 0, shot.width, min(shot.height, (bbox[3] if bbox else shot.height) + 8)))
    out.parent.mkdir(parents=True, exist_ok=True)
    shot.save(out, optimize=True)
    return shot.size


def main() -> int:
    args = parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    from support.tray import TrayHost  # the minimal XEmbed tray manager the tests use

    xvfb, display = start_xvfb("360x330")
    home = Path(tempfile.mkdtemp(prefix="cairn-shot-"))
    serve = None
    bus_pid = None
    try:
        host = TrayHost(display)
        env = serve_env(home, display, args.backend)
        bus_pid = start_bus(env)
        cmd = [str(args.cairn), "serve", "--vault", str(args.vault), "--port", "0"]
        log = home / "serve.log"
        with open(log, "wb") as err:
            serve = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        wait("the index", lambda: "vectors complete" in log.read_text(errors="replace"))
        line = next((ln for ln in log.read_text(errors="replace").splitlines() if "tray icon" in ln), "")
        backend = line.split("pystray's ", 1)[-1].split(" ", 1)[0] if "pystray's " in line else "none"
        size = shoot(host, display, args.out, args.hover)
        started = time.monotonic()
        serve.send_signal(signal.SIGINT)  # Ctrl-C: the GTK backend resets SIGINT; cairn puts its handler back
        code = serve.wait(timeout=15)
        stop_s = round(time.monotonic() - started, 2)
        trays = line.split(" INFO ", 1)[-1]
        print(
            json.dumps(
                {
                    "out": str(args.out),
                    "backend": backend,
                    "trayLog": trays,
                    "size": size,
                    "ctrlCExit": code,
                    "stopS": stop_s,
                }
            )
        )
        return 0
    finally:
        if serve is not None and serve.poll() is None:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(timeout=15)
            except subprocess.TimeoutExpired:
                serve.kill()
        if bus_pid is not None:
            os.kill(bus_pid, signal.SIGTERM)
        xvfb.terminate()
        xvfb.wait(timeout=10)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
