"""The 0600 files that hold a secret when the OS keyring is not used (:mod:`cairn.secrets`): created whole or
not at all (exclusive create, then a hard link or an atomic replace), read with their owner and mode checked.
Layer 1. Raises :class:`~cairn.errors.ConfigError` naming the file and what to do."""

from __future__ import annotations

import logging
import os
import re
import secrets
import stat
from pathlib import Path

from cairn.config import Config
from cairn.errors import ConfigError

log = logging.getLogger("cairn.secrets")


def ensure_config_dir(config: Config) -> None:
    try:
        config.config_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"Cannot create the config folder {str(config.config_dir)!r}: {exc.strerror}; "
            "set CAIRN_CONFIG_DIR to a writable folder."
        ) from None


def write_exclusive(path: Path, token: str) -> None:
    """Create ``path`` with mode 0600 and write ``token``; ``FileExistsError`` if it exists."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise
    except OSError as exc:
        raise ConfigError(f"Cannot create the token file {str(path)!r}: {exc.strerror}.") from None
    try:
        os.write(fd, (token + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)


def tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def create_complete(path: Path, token: str) -> None:
    """Create ``path`` (0600) holding ``token``, never visible half-written; ``FileExistsError`` if it exists.

    The token is written to a temporary file first and hard-linked into place (atomic, fails if
    ``path`` exists), so a concurrent reader sees either no file or the whole token.
    """
    tmp = tmp_name(path)
    write_exclusive(tmp, token)
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:
        # File systems without hard links: fall back to a direct exclusive create.
        write_exclusive(path, token)
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass


def write_replace(path: Path, token: str) -> None:
    """Atomically replace ``path`` with a new 0600 file holding ``token``."""
    tmp = tmp_name(path)
    write_exclusive(tmp, token)
    try:
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise ConfigError(f"Cannot write the token file {str(path)!r}: {exc.strerror}.") from None


def read_file(path: Path, pattern: re.Pattern) -> str | None:
    """The secret in ``path``; ``None`` when absent, empty or not matching ``pattern``. Repairs loose
    permissions (to 0600, with a warning). Raises :class:`ConfigError` for a file that is not a regular file,
    belongs to another user, or cannot be opened or repaired."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(
            f"Cannot open the token file {str(path)!r}: {exc.strerror}; "
            "delete it and run `cairn token --rotate` to create a new one."
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(
                f"The token file {str(path)!r} is not a regular file; delete it and run `cairn token --rotate`."
            )
        if os.name == "posix":
            if info.st_uid != os.getuid():
                raise ConfigError(
                    f"The token file {str(path)!r} belongs to another user (uid {info.st_uid}); "
                    "delete it and run `cairn token --rotate`."
                )
            loose = stat.S_IMODE(info.st_mode) & 0o077
            if loose:
                log.warning(
                    "The token file %s was readable or writable by other users (mode %o); restricting it to 0600. "
                    "Consider `cairn token --rotate` in case it was read.",
                    path,
                    stat.S_IMODE(info.st_mode),
                )
                try:
                    os.fchmod(fd, 0o600)
                except OSError as exc:
                    raise ConfigError(
                        f"The token file {str(path)!r} has mode {stat.S_IMODE(info.st_mode):o} (expected 600) and "
                        f"cannot be repaired: {exc.strerror}; run `chmod 600` on it or delete it."
                    ) from None
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    value = data.decode("utf-8", errors="replace").strip()
    return value if pattern.match(value) else None
