"""Cairn's own files are its user's alone: the index holds the full text of every note.

A fresh install made by the real ``cairn`` command (under the common umask 022) leaves every folder 0700 and every
file 0600 (the index and its ``-wal`` / ``-shm`` included, which SQLite creates); an older install (folders 0755,
files 0644) is narrowed at the next start, each change said on stderr; a data folder the user chose that already
existed is left as it is (it may be shared on purpose) while Cairn's files in it are narrowed, and the user's
other files there are not touched. Real subprocesses, real SQLite, the real model (``cairn index``).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from cairn.store import Store
from support.cli import cairn_executable
from support.vaults import SAMPLE_VAULT

pytestmark = pytest.mark.slow  # `cairn` subprocesses

TIMEOUT_S = 300


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def user_env(home: Path) -> dict[str, str]:
    """A user whose home is ``home``: no ``CAIRN_*`` folders, so Cairn uses the platform's own (XDG) folders."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "XDG_"))}
    env.update({"HOME": str(home), "CAIRN_KEYRING": "file", "PYTHONUNBUFFERED": "1"})
    return env


def cairn(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """Run ``cairn ARGS`` under the umask most desktops give (022), stdin closed."""
    proc = subprocess.run(
        [cairn_executable(), *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        preexec_fn=lambda: os.umask(0o022),
    )
    return proc


def folders(home: Path) -> dict[str, Path]:
    return {
        "data": home / ".local" / "share" / "cairn",
        "config": home / ".config" / "cairn",
        "log": home / ".local" / "state" / "cairn" / "log",
    }


def everything_under(folder: Path) -> list[Path]:
    return [folder, *(p for p in folder.rglob("*"))]


def test_a_fresh_install_keeps_every_folder_0700_and_every_file_0600(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    vault = tmp_path / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    env = user_env(home)
    indexed = cairn(env, "index", "--vault", str(vault))
    assert indexed.returncode == 0, indexed.stderr
    assert cairn(env, "token", "--vault", str(vault)).returncode == 0
    # `cairn mcp` opens the log file, creates the policy and its record, then meets the end of stdin
    served = cairn(env, "mcp", "--vault", str(vault), "--client", "reader")
    assert served.returncode == 0, served.stderr
    where = folders(home)
    made = {role: everything_under(folder) for role, folder in where.items()}
    assert any(p.suffix == ".sqlite3" for p in made["data"]), made["data"]
    assert (where["log"] / "cairn.log").is_file() and len(list((where["config"] / "api-tokens").iterdir())) == 1
    wrong = {str(p): oct(mode(p)) for paths in made.values() for p in paths if mode(p) & 0o077}
    assert not wrong, wrong


def test_the_index_wal_and_shm_sqlite_creates_are_0600_whatever_the_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        store = Store(tmp_path / "data" / "indexes" / "v.sqlite3")
        try:
            store.set_meta("k", "v")  # a write: SQLite creates the -wal and -shm now
            files = [store.path, *(store.path.with_name(store.path.name + x) for x in ("-wal", "-shm"))]
            assert all(f.exists() for f in files), files
            assert {f.name: oct(mode(f)) for f in files} == {f.name: "0o600" for f in files}
            assert mode(store.path.parent) == 0o700
        finally:
            store.close()
    finally:
        os.umask(previous)


def test_an_older_index_left_open_with_its_wal_and_shm_is_narrowed_at_the_next_open(tmp_path, caplog):
    path = tmp_path / "indexes" / "v.sqlite3"
    first = Store(path)  # stands for a process killed while writing: its -wal and -shm stay
    try:
        first.set_meta("k", "v")
        files = [path, *(path.with_name(path.name + x) for x in ("-wal", "-shm"))]
        for f in files:
            f.chmod(0o644)
        with caplog.at_level("WARNING"):
            second = Store(path)
        second.close()
        assert {f.name: oct(mode(f)) for f in files} == {f.name: "0o600" for f in files}
        for f in files:
            assert f"{f}: mode 644 → 600" in caplog.text, caplog.text
    finally:
        first.close()


def old_install(home: Path) -> dict[str, Path]:
    """Folders 0755 and files 0644 as a Cairn before this change left them (an index, a moved-aside damaged one,
    the config, the token, the audit log, the log)."""
    where = folders(home)
    index = where["data"] / "indexes" / "old-0123.sqlite3"
    store = Store(index)
    store.set_meta("k", "v")
    store.close()
    files = {
        "index": index,
        "moved aside": index.with_name(index.name + ".corrupt-20260101-120000"),
        "config": where["config"] / "config.toml",
        "token": where["config"] / "api-token",
        "audit": where["data"] / "mcp-audit.jsonl",
        "log": where["log"] / "cairn.log",
    }
    for name, path in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if name != "index":
            path.write_text("top_k = 5\n" if name == "config" else ("a" * 43 if name == "token" else "{}\n"))
        path.chmod(0o644)
    for path in {*(p.parent for p in files.values()), *where.values()}:
        path.chmod(0o755)
    return files


def test_an_older_install_is_made_private_at_start_and_each_change_is_said(tmp_path):
    home = tmp_path / "home"
    files = old_install(home)
    proc = cairn(user_env(home), "paths")
    assert proc.returncode == 0, proc.stderr
    for folder in folders(home).values():
        assert mode(folder) == 0o700, folder
    assert {n: oct(mode(p)) for n, p in files.items()} == {n: "0o600" for n in files}
    for path in (*files.values(), *folders(home).values()):
        assert f"{path}: mode 644 → 600" in proc.stderr or f"{path}: mode 755 → 700" in proc.stderr, proc.stderr
    again = cairn(user_env(home), "paths")  # once: nothing left to change
    assert again.returncode == 0 and "→" not in again.stderr, again.stderr


def test_a_chosen_shared_data_folder_keeps_its_mode_and_the_users_other_files(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    shared = tmp_path / "family-share"
    index = shared / "indexes" / "old-0123.sqlite3"
    store = Store(index)
    store.close()
    photos = shared / "photos.txt"
    photos.write_text("not Cairn's\n")
    for path, m in ((index, 0o644), (photos, 0o644), (index.parent, 0o755), (shared, 0o755)):
        path.chmod(m)
    env = user_env(home) | {"CAIRN_DATA_DIR": str(shared)}
    proc = cairn(env, "paths")
    assert proc.returncode == 0, proc.stderr
    assert (mode(shared), mode(photos)) == (0o755, 0o644)
    assert (mode(index.parent), mode(index)) == (0o700, 0o600)
    assert f"{index}: mode 644 → 600" in proc.stderr and str(photos) not in proc.stderr
