"""Cairn's own files private to the user who runs it: folders 0700, files 0600.

The index holds the full text of every note (``personal`` ones included), the config folder the API and MCP
tokens, the data folder the MCP audit log, the log folder what was searched. So:

- :func:`set_private_umask` sets the process umask to ``077`` at start (the CLI's first step): every file and
  folder Cairn creates afterwards, and every one a library creates for it (SQLite's ``-wal`` / ``-shm``, the log
  file's rotations), is its user's alone. The umask it replaced stays known (:func:`users_umask`) for the few
  files Cairn writes into the vault (the Obsidian plugin), which keep the user's usual modes.
- :func:`private_dir` and :func:`make_private` make one folder or file private whatever the umask (the index is
  created through them, so SQLite gives its ``-wal`` / ``-shm`` the index's own 0600).
- :func:`tighten_install` repairs an install made before (folders 0755, index 0644): run at start, it logs every
  mode it changed. A folder the user chose (``--data-dir``, ``CAIRN_*_DIR``, ``config.toml``) that already
  existed may be shared on purpose: its own mode is left as it is (and said so); only Cairn's files in it are
  made private. Files and folders of another user are never touched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from cairn.config import Config

log = logging.getLogger(__name__)

PRIVATE_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600
#: What Cairn keeps in each folder: a name or an ``fnmatch`` pattern; a folder's whole tree when it ends in ``/``.
#: Only these entries are tightened in a folder the user chose (which may hold other things).
OWN_ENTRIES: dict[str, tuple[str, ...]] = {
    "data": ("indexes/", "service*.json", ".service.*.tmp", "mcp-audit.jsonl*", "mcp-policy-created.json"),
    "config": (
        "config.toml",
        "api-token*",
        "llm-api-key",
        "mcp-serve.yaml",
        "mcp-policy-created.json",
        "mcp-policy-confirmed.json",
        "mcp-policy-vaults.json",
        "mcp-tokens/",
        "keyring-notice",
        ".*.tmp",
    ),
    "log": ("cairn.log*",),
}

_users_umask: int | None = None


def set_private_umask() -> int:
    """Set the process umask to :data:`PRIVATE_UMASK`; return the one it replaced (the user's, on the first call:
    kept for :func:`users_umask`)."""
    global _users_umask
    previous = os.umask(PRIVATE_UMASK)
    if _users_umask is None:
        _users_umask = previous
    return previous


@contextlib.contextmanager
def users_umask() -> Iterator[None]:
    """The user's own umask (from before :func:`set_private_umask`) while the block runs: for files Cairn writes
    into the vault, which are the user's notes' neighbours, not Cairn's private files. The umask is the
    process's: only for single-threaded callers (a CLI command)."""
    if _users_umask is None:
        yield
        return
    previous = os.umask(_users_umask)
    try:
        yield
    finally:
        os.umask(previous)


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) as :meth:`Path.mkdir` does, ``path`` itself with mode 0700 whatever
    the umask (a mode is only ever narrowed by it); an existing folder is kept as is (see
    :func:`tighten_install`). Returns ``path``. Raises :class:`OSError` as :meth:`Path.mkdir` does."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    return path


def private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 when it does not exist, so that whatever opens it next (SQLite) finds
    it private: SQLite gives an index's ``-wal`` and ``-shm`` the mode of the index file itself. An existing file
    is made private (:func:`make_private`, logged). Never raises: the caller's own open reports a real problem."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), FILE_MODE))
    except FileExistsError:
        change = make_private(path)
        if change is not None:
            log.warning("made private to you: %s: mode %o → %o", path, *change)
    except OSError:
        pass


def make_private(path: Path) -> tuple[int, int] | None:
    """Drop the group and other bits of ``path`` (a file: 0644 → 0600; a folder: 0755 → 0700) when it is this
    user's and not a symbolic link. Returns ``(old mode, new mode)`` when it changed it, else None; never raises
    (a file that vanished or cannot be changed is logged and left)."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid():
            return None
        old = stat.S_IMODE(st.st_mode)
        new = old & ~PRIVATE_UMASK
        if old == new:
            return None
        os.chmod(path, new)
        return old, new
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot make %s private to you: %s", path, exc.strerror)
        return None


def _own_paths(folder: Path, patterns: tuple[str, ...], whole: bool) -> Iterator[Path]:
    """Cairn's entries in ``folder`` (every one when ``whole``), trees walked without following links."""
    tops = (
        list(folder.iterdir())
        if whole
        else [p for pattern in patterns for p in folder.glob(pattern.rstrip("/")) if p.name not in ("", ".", "..")]
    )
    for top in sorted(set(tops)):
        yield top
        if top.is_dir() and not top.is_symlink():
            for root, dirs, files in os.walk(top):
                yield from (Path(root) / name for name in (*dirs, *files))


def _default_folders() -> dict[str, Path]:
    default = Config()
    return {"data": default.data_dir, "config": default.config_dir, "log": default.log_dir}


def tighten_install(config: Config) -> list[str]:
    """Make the data, config and log folders of ``config`` and Cairn's files in them private (see the module
    docstring). Returns one line per change, each also logged at WARNING (once: the next start finds nothing to
    change); a chosen folder left open to others is logged at INFO. Never raises."""
    changes: list[str] = []
    defaults = _default_folders()
    folders = {"data": config.data_dir, "config": config.config_dir, "log": config.log_dir}
    for role, folder in folders.items():
        try:
            if not folder.is_dir() or folder.is_symlink():
                continue
            ours = folder == defaults[role]  # the platform's folder for Cairn: everything in it is Cairn's
            if ours:
                _note(changes, f"the {role} folder", folder, make_private(folder))
            elif stat.S_IMODE(folder.stat().st_mode) & PRIVATE_UMASK:
                log.info(
                    "the %s folder %s is open to other users (mode %o); it was chosen in the configuration, so "
                    "Cairn leaves its mode as it is and keeps its own files in it private (run `chmod 700 %s` "
                    "unless it is shared on purpose)",
                    role,
                    folder,
                    stat.S_IMODE(folder.stat().st_mode),
                    folder,
                )
            for path in _own_paths(folder, OWN_ENTRIES[role], whole=ours):
                _note(changes, "", path, make_private(path))
        except OSError as exc:
            log.warning("cannot check that the %s folder %s is private: %s", role, folder, exc.strerror)
    return changes


def _note(changes: list[str], what: str, path: Path, change: tuple[int, int] | None) -> None:
    if change is None:
        return
    line = f"{what + ' ' if what else ''}{path}: mode {change[0]:o} → {change[1]:o}"
    changes.append(line)
    log.warning("made private to you: %s", line)
