"""What the tray's menu does (:class:`TrayActions`, supplied by the composition root) and the desktop calls it
needs: open a folder, copy to the clipboard."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
    """Open ``path`` in the desktop's file manager (``xdg-open``, ``open``, Explorer). Returns at once; a
    helper thread waits for the opener so that it does not stay behind as a zombie process.
    Raises ``OSError`` when no opener exists (Linux without xdg-utils)."""
    path.mkdir(parents=True, exist_ok=True)
    if sys.platform == "win32":
        os.startfile(str(path))  # type: ignore[attr-defined]
        return
    opener = "open" if sys.platform == "darwin" else "xdg-open"
    proc = subprocess.Popen(
        [opener, str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    threading.Thread(target=proc.wait, name="cairn-opener-reaper", daemon=True).start()


def copy_to_clipboard(text: str) -> None:
    """Put ``text`` on the clipboard (pyperclip: xclip/xsel/wl-copy on Linux, pbcopy, the Win32 API).
    Raises ``RuntimeError`` naming what to install when no clipboard mechanism exists."""
    import pyperclip

    try:
        pyperclip.copy(text)
    except pyperclip.PyperclipException as exc:
        raise RuntimeError("no clipboard tool: install xclip, xsel or wl-clipboard") from exc
