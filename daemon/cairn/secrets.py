"""The API token the Obsidian plugin sends as ``Authorization: Bearer <token>``.

One token per vault, so a token opens only its own vault's daemon: the plugin keeps it in the vault's
``.obsidian`` folder, which travels when the vault is synced (docs/design.md, "Contract" → Several vaults). It
lives in the OS keyring (service ``cairn``, username ``api-token:<index id>``) when a usable keyring backend
exists. Otherwise — no backend (``keyring.backends.fail.Keyring``, a chainer with no backends, the null backend),
any keyring error, or ``keyring = "file"`` (config, or ``CAIRN_KEYRING=file``) — it lives in the file
``<config_dir>/api-tokens/<index id>``, created with mode ``0600``, and ONE warning per process says so. The one
token of an earlier Cairn (username ``api-token``, file ``<config_dir>/api-token``) becomes the token of the first
vault that asks for one, and no other's. With ``keyring = "required"`` there is no such file: every token
operation raises :class:`~cairn.errors.ConfigError` instead (the daemon refuses to start), naming why the keyring
is not usable; a file left from an earlier mode (API token, MCP token, secret) is moved into the keyring and
deleted when read.

Token: ``secrets.token_urlsafe(32)`` — 32 bytes of entropy, 43 URL-safe
characters. The token is never logged, and never put in an error message.

Reading the file re-checks its permissions: a file readable or writable by group
or others is repaired to ``0600`` with a warning; if it cannot be repaired (or
belongs to another user) it is refused with :class:`~cairn.errors.ConfigError`.

Errors: :class:`~cairn.errors.ConfigError` when the token file is unusable
(foreign owner, unrepairable permissions, not a regular file, unwritable
config folder), or the keyring is required and not usable.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import threading
from pathlib import Path

from cairn.config import KEYRING_MODES, Config
from cairn.errors import ConfigError
from cairn.secret_files import create_complete as _create_complete
from cairn.secret_files import ensure_config_dir as _ensure_config_dir
from cairn.secret_files import read_file
from cairn.secret_files import tmp_name as _tmp_name
from cairn.secret_files import write_replace as _write_replace

log = logging.getLogger(__name__)

#: keyring service name, and the username of the API token (``api-token:<index id>``; alone: the token from
#: before tokens were per vault).
KEYRING_SERVICE = "cairn"
KEYRING_USERNAME = "api-token"
#: The folder of the vaults' token files inside ``config.config_dir``; the one file from before, beside it.
TOKEN_DIR_NAME = "api-tokens"
TOKEN_FILE_NAME = "api-token"
#: The last reason the keyring was not used, so that the warning is not repeated on every ``cairn`` call.
NOTICE_FILE_NAME = "keyring-notice"
#: ``CAIRN_KEYRING=file`` forces the file backend (tests, headless servers); ``=required`` refuses any file.
KEYRING_ENV = "CAIRN_KEYRING"
#: Bytes of entropy in a new token (``secrets.token_urlsafe`` argument).
TOKEN_BYTES = 32

_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{20,256}$")
_warn_lock = threading.Lock()
_warned_file_fallback = False


def token_file(config: Config) -> Path:
    """``<config_dir>/api-tokens/<index id>``: where the vault's token lives when no keyring backend is usable.
    Raises :class:`ConfigError` when no vault is configured."""
    return config.config_dir / TOKEN_DIR_NAME / config.index_id


def _username(config: Config) -> str:
    return f"{KEYRING_USERNAME}:{config.index_id}"


def read_token(config: Config) -> str | None:
    """The vault's API token, or ``None`` when none was created yet.

    Looks in the keyring first (when usable), then in the token file. Raises :class:`ConfigError` when no
    vault is configured, or the token file exists but is unsafe and cannot be repaired.
    """
    keyring_mod = _usable_keyring(config)
    if keyring_mod is not None:
        try:
            value = keyring_mod.get_password(KEYRING_SERVICE, _username(config))
        except Exception as exc:  # any keyring backend failure → file fallback
            _warn_file_fallback(config, f"the keyring failed: {type(exc).__name__}")
        else:
            _keyring_answered(config)
            if value and _TOKEN_RE.match(value):
                return value
    value = _file_value(config, keyring_mod, _username(config), token_file(config), _TOKEN_RE, "the API token")
    if value is not None and keyring_mod is None:
        _warn_file_fallback(config, "no keyring backend is available")
    return value


def get_or_create_token(config: Config) -> str:
    """The vault's API token, made on first use: the token from before tokens were per vault when one is left
    (:func:`_take_legacy_token`), else a new one.

    Stored in the keyring when usable, else in ``<config_dir>/api-tokens/<index id>`` (mode 0600).
    Two processes creating it at once agree on one token when the file backend is used
    (the file is created with ``O_CREAT | O_EXCL``).
    """
    existing = read_token(config)
    if existing is not None:
        return existing
    token = _take_legacy_token(config) or _new_token()
    if _store_in_keyring(config, token):
        return token
    path = token_file(config)
    _ensure_token_dir(config)
    try:
        _create_complete(path, token)
    except FileExistsError:
        # Another process won the race, or the file is empty/corrupt.
        winner = read_file(path, _TOKEN_RE)
        if winner is not None:
            return winner
        log.warning("Token file %s is empty or corrupt; replacing it with a new token.", path)
        _write_replace(path, token)
    _warn_file_fallback(config, "no keyring backend is available")
    return token


def rotate_token(config: Config) -> str:
    """Replace the vault's API token with a new one and return it. A running daemon (:class:`TokenWatch`)
    refuses the old token from its next request on; clients need the new one (``cairn token``)."""
    token = _new_token()
    path = token_file(config)
    if _store_in_keyring(config, token):
        # A stale file token must not outlive a rotation.
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("Could not remove the old token file %s: %s", path, exc.strerror)
        _mark_rotation(config)
        return token
    _ensure_token_dir(config)
    _write_replace(path, token)
    _mark_rotation(config)
    _warn_file_fallback(config, "no keyring backend is available")
    return token


def _mark_rotation(config: Config) -> None:
    """Touch ``<config_dir>/api-tokens/<index id>.generation`` (a random nonce, no secret) so that a running
    daemon's :class:`TokenWatch` notices the rotation on its next request, whichever backend holds the token."""
    _ensure_token_dir(config)
    _write_replace(generation_file(config), secrets.token_hex(8))


def generation_file(config: Config) -> Path:
    return config.config_dir / TOKEN_DIR_NAME / f"{config.index_id}.generation"


def _ensure_token_dir(config: Config) -> None:
    _ensure_config_dir(config)
    try:
        (config.config_dir / TOKEN_DIR_NAME).mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"Cannot create {str(config.config_dir / TOKEN_DIR_NAME)!r}: {exc.strerror}.") from None


def _take_legacy_token(config: Config) -> str | None:
    """The one API token of a Cairn from before tokens were per vault, taken (removed from the keyring, or its
    file renamed away, so that no second vault gets it) for this vault: the plugin that holds it keeps working
    with the first vault that asks. ``None`` when there is none, or another process took it first."""
    value = None
    keyring_mod = _usable_keyring(config)
    if keyring_mod is not None:
        try:
            found = keyring_mod.get_password(KEYRING_SERVICE, KEYRING_USERNAME)
            if found and _TOKEN_RE.match(found):
                keyring_mod.delete_password(KEYRING_SERVICE, KEYRING_USERNAME)  # raises when taken meanwhile
                value = found
        except Exception:  # no such entry, taken by another process, or a failing backend: make a new token
            value = None
    path = config.config_dir / TOKEN_FILE_NAME
    try:
        found = read_file(path, _TOKEN_RE)
        if found is not None and value is None:
            taken = _tmp_name(path)
            os.rename(path, taken)  # atomic: of two processes, one gets it
            taken.unlink(missing_ok=True)
            value = found
        elif found is not None:
            path.unlink(missing_ok=True)  # the keyring's was taken: the file's copy goes too
    except (OSError, ConfigError) as exc:  # unsafe, or taken meanwhile: not adopted
        log.debug("the earlier API token file was not taken: %s", exc)
    if value is not None:
        (config.config_dir / (TOKEN_FILE_NAME + ".generation")).unlink(missing_ok=True)
        log.warning(
            "The API token made before each vault had its own is now the token of %s only; every other vault gets "
            "a token of its own: run `cairn plugin install --vault PATH` for each to give its plugin its token.",
            config.vault,
        )
    return value


class TokenWatch:
    """The API token as a running daemon sees it: :meth:`current` is called on every authenticated
    request; it ``stat``s the rotation marker and the token file (microseconds) and re-reads the token
    only when either changed — so ``cairn token --rotate`` invalidates the old token at once."""

    def __init__(self, config: Config, token: str | None = None) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._signature = self._stat()
        self._token = token or get_or_create_token(config)

    def _stat(self) -> tuple[tuple[int, int, int] | None, ...]:
        out: list[tuple[int, int, int] | None] = []
        for path in (generation_file(self.config), token_file(self.config)):
            try:
                st = os.stat(path)
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def current(self) -> str:
        signature = self._stat()
        if signature != self._signature:
            with self._lock:
                if signature != self._signature:
                    fresh = read_token(self.config)
                    if fresh:
                        if fresh != self._token:
                            log.info("The API token was rotated; the old one no longer works.")
                        self._token = fresh
                    self._signature = signature
        return self._token


# -- other secrets (the LLM API key) -----------------------------------------------------

#: Names accepted by ``cairn secret set NAME``.
SECRET_NAMES = ("llm-api-key",)
LLM_API_KEY = "llm-api-key"
_SECRET_RE = re.compile(r"^[\x21-\x7e]{1,4096}$")


def _check_secret_name(name: str) -> None:
    if name not in SECRET_NAMES:
        raise ConfigError(f"Unknown secret {name!r}; known secrets: {', '.join(SECRET_NAMES)}.")


def set_secret(config: Config, name: str, value: str) -> str:
    """Store secret ``name`` (keyring, else ``<config_dir>/<name>`` mode 0600). Returns where it went.
    Raises :class:`ConfigError` for an unknown name or an empty/invalid value (printable ASCII, no spaces)."""
    _check_secret_name(name)
    value = (value or "").strip()
    if not _SECRET_RE.match(value):
        raise ConfigError(f"The value for {name!r} is empty or has spaces/control characters; paste the key alone.")
    keyring_mod = _usable_keyring(config, f"the secret {name!r}")
    path = config.config_dir / name
    if keyring_mod is not None:
        try:
            keyring_mod.set_password(KEYRING_SERVICE, name, value)
        except Exception as exc:
            _warn_file_fallback(config, f"the keyring failed: {type(exc).__name__}", f"the secret {name!r}")
        else:
            try:
                path.unlink()
            except OSError:
                pass
            return "keyring"
    _ensure_config_dir(config)
    _write_replace(path, value)
    return str(path)


def get_secret(config: Config, name: str) -> str | None:
    """Secret ``name`` from the keyring, else from ``<config_dir>/<name>``; ``None`` when not set."""
    _check_secret_name(name)
    keyring_mod = _usable_keyring(config, f"the secret {name!r}")
    if keyring_mod is not None:
        try:
            value = keyring_mod.get_password(KEYRING_SERVICE, name)
        except Exception:
            value = None
        if value and _SECRET_RE.match(value):
            return value
    return _file_value(config, keyring_mod, name, config.config_dir / name, _SECRET_RE, f"the secret {name!r}")


# -- keyring -------------------------------------------------------------------------


def _new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def _usable_keyring(config: Config, what: str = "the API token"):
    """The ``keyring`` module when a real backend is configured, else ``None`` — or, with ``keyring =
    "required"``, :class:`ConfigError` saying why there is none for ``what`` (the owner asked for no file)."""
    mode = keyring_mode(config)
    if mode == "file":
        return None
    found = _keyring_backend()
    if found is None and mode == "required":
        raise ConfigError(_required_message("no usable OS keyring backend was found", what))
    return found


def _keyring_answered(config: Config) -> None:
    """The keyring stored or returned the API token: forget the notice, so that losing it later warns again.
    (A backend that is found but fails keeps the notice: its warning is said once, not at every start.)"""
    with contextlib.suppress(OSError):
        (config.config_dir / NOTICE_FILE_NAME).unlink(missing_ok=True)


def _file_value(config: Config, keyring_mod, username: str, path: Path, pattern: re.Pattern, what: str):
    """The secret in the file ``path`` (:func:`cairn.secret_files.read_file`; called once the keyring had none).
    With ``keyring = "required"`` a file can only be left from an earlier mode: its value is moved into the keyring as
    ``username`` and the file deleted. Raises :class:`ConfigError` naming ``what`` when the keyring refuses."""
    value = read_file(path, pattern)
    if value is None or keyring_mod is None or keyring_mode(config) != "required":
        return value
    try:
        keyring_mod.set_password(KEYRING_SERVICE, username, value)
    except Exception as exc:
        raise ConfigError(_required_message(f"the keyring failed: {type(exc).__name__}", what)) from None
    path.unlink(missing_ok=True)
    log.info('Moved %s from the file %s into the OS keyring (keyring = "required").', what, path)
    return value


def keyring_mode(config: Config) -> str:
    """``auto``, ``file`` or ``required``: ``CAIRN_KEYRING`` when set (the environment wins, as for every
    setting), else the config's ``keyring``."""
    env = os.environ.get(KEYRING_ENV, "").strip().lower()
    return env if env in KEYRING_MODES else config.keyring


def keyring_state(config: Config) -> tuple[str, str | None]:
    """``(mode, backend)``: :func:`keyring_mode` and the OS keyring backend that would keep the tokens (its class, e.g.
    ``SecretService Keyring``), None when no usable one is found. What ``cairn doctor`` reports; reads nothing."""
    found = _keyring_backend()
    return keyring_mode(config), None if found is None else str(getattr(found.get_keyring(), "name", "a backend"))


def _required_message(why: str, what: str = "the API token") -> str:
    return (
        f'keyring = "required" is set, so Cairn keeps {what} only in the OS keyring, and {why}; it '
        "refuses rather than write it to a file. Install and unlock a keyring backend (Secret "
        "Service such as GNOME Keyring or KWallet, macOS Keychain, Windows Credential Locker), or remove the "
        "setting (config.toml `keyring`, CAIRN_KEYRING) to allow 0600 files."
    )


def _keyring_backend():
    """The ``keyring`` module when a real backend is configured, else ``None``."""
    try:
        import keyring
        from keyring.backends import chainer, fail

        backend = keyring.get_keyring()
        if isinstance(backend, fail.Keyring):
            return None
        if isinstance(backend, chainer.ChainerBackend) and not backend.backends:
            return None
        try:
            from keyring.backends import null

            if isinstance(backend, null.Keyring):
                return None
        except ImportError:  # pragma: no cover - older keyring
            pass
    except Exception:  # broken installation or backend discovery error
        return None
    return keyring


def _store_in_keyring(config: Config, token: str) -> bool:
    """Store ``token`` in the keyring; ``False`` (after the one warning) when that is not possible."""
    keyring_mod = _usable_keyring(config)
    if keyring_mod is None:
        return False
    try:
        keyring_mod.set_password(KEYRING_SERVICE, _username(config), token)
    except Exception as exc:
        _warn_file_fallback(config, f"the keyring failed: {type(exc).__name__}")
        return False
    _keyring_answered(config)
    return True


def _warn_file_fallback(config: Config, reason: str, what: str = "the API token") -> None:
    """Say once where ``what`` is kept when it is not the OS keyring: a warning the first time ``reason`` holds
    for this config folder (remembered in ``keyring-notice`` there, so not on every ``cairn`` call or daemon
    start), then one short INFO line without the advice;
    INFO only when the owner chose the file (``keyring = "file"``). Raises ConfigError when it is ``required``."""
    global _warned_file_fallback
    mode = keyring_mode(config)
    if mode == "required":
        raise ConfigError(_required_message(reason, what))
    with _warn_lock:
        if _warned_file_fallback:
            return
        _warned_file_fallback = True
    what = what[:1].upper() + what[1:]
    if mode == "file":
        log.info('%s is kept in a 0600 file in %s, as keyring = "file" asks.', what, config.config_dir)
        return
    if not _first_notice(config, reason):  # warned before, for this reason: one short line in the log
        log.info("%s is kept in a 0600 file in %s, not in the OS keyring (%s).", what, config.config_dir, reason)
        return
    log.warning(
        "%s is kept in a 0600 file in %s, not in the OS keyring: %s. Install a keyring backend (e.g. Secret "
        'Service, macOS Keychain, Windows Credential Locker) to keep it there, or set keyring = "file" (config.toml '
        "or CAIRN_KEYRING) to keep the file without this warning (it is not repeated).",
        what,
        config.config_dir,
        reason,
    )


def _first_notice(config: Config, reason: str) -> bool:
    """True when ``reason`` was not the last one noted in ``<config_dir>/keyring-notice`` (then noted)."""
    path = config.config_dir / NOTICE_FILE_NAME
    try:
        if path.read_text(encoding="utf-8").strip() == reason:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    try:
        _ensure_config_dir(config)
        _write_replace(path, reason)
    except (OSError, ConfigError):
        pass
    return True


# -- per-client MCP tokens -----------------------------------------------------------------
#
# ``cairn mcp token NAME`` gives each HTTP MCP client its own bearer token; the token identifies the
# client (its name in the policy). Tokens live in the keyring (service ``cairn``, username
# ``mcp-token:NAME``) when usable, else in ``<config_dir>/mcp-tokens/NAME`` (mode 0600, folder 0700),
# read with the same permission checks as the API token. The names (no secrets) are listed in
# ``<config_dir>/mcp-tokens/clients`` so the daemon knows which tokens to look up; that file is
# rewritten on every change, which is also how a running daemon notices a new or rotated token.

#: A client name: what the policy's ``clients`` keys and ``--client`` use.
MCP_CLIENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MCP_TOKEN_DIR = "mcp-tokens"
MCP_CLIENTS_FILE = "clients"
_MCP_WHAT = "the MCP tokens"


def check_mcp_client_name(name: str) -> str:
    """``name`` if it is a valid client name (letters, digits, ``.``, ``_``, ``-``; 1-64 characters, starting
    with a letter or digit), else :class:`ConfigError` saying so."""
    if not isinstance(name, str) or not MCP_CLIENT_RE.match(name) or name == MCP_CLIENTS_FILE:
        raise ConfigError(
            f"{str(name)[:80]!r} is not a valid MCP client name; use 1-64 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit (e.g. 'claude-desktop')."
        )
    return name


def _mcp_dir(config: Config) -> Path:
    return config.config_dir / MCP_TOKEN_DIR


def _mcp_names_file(config: Config) -> Path:
    return _mcp_dir(config) / MCP_CLIENTS_FILE


def mcp_client_names(config: Config) -> list[str]:
    """The client names that have an MCP token (sorted); [] when none was made."""
    try:
        text = _mcp_names_file(config).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError(f"Cannot read {str(_mcp_names_file(config))!r}: {exc.strerror}.") from None
    return sorted({line.strip() for line in text.splitlines() if MCP_CLIENT_RE.match(line.strip())})


def _ensure_mcp_dir(config: Config) -> None:
    _ensure_config_dir(config)
    try:
        _mcp_dir(config).mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"Cannot create {str(_mcp_dir(config))!r}: {exc.strerror}.") from None


def read_mcp_token(config: Config, name: str) -> str | None:
    """Client ``name``'s MCP token (keyring first, then its file), or ``None`` when it has none."""
    check_mcp_client_name(name)
    keyring_mod = _usable_keyring(config, _MCP_WHAT)
    if keyring_mod is not None:
        try:
            value = keyring_mod.get_password(KEYRING_SERVICE, f"mcp-token:{name}")
        except Exception:
            value = None
        if value and _TOKEN_RE.match(value):
            return value
    return _file_value(config, keyring_mod, f"mcp-token:{name}", _mcp_dir(config) / name, _TOKEN_RE, _MCP_WHAT)


def mcp_token(config: Config, name: str, *, rotate: bool = False) -> str:
    """Client ``name``'s MCP bearer token, made on first use; ``rotate`` replaces it (the old one stops working
    at once in a running daemon). Raises :class:`ConfigError` for a bad name or an unusable token store."""
    check_mcp_client_name(name)
    if not rotate:
        existing = read_mcp_token(config, name)
        if existing is not None:
            _remember_mcp_client(config, name)
            return existing
    token = _new_token()
    keyring_mod = _usable_keyring(config, _MCP_WHAT)
    path = _mcp_dir(config) / name
    stored = False
    if keyring_mod is not None:
        try:
            keyring_mod.set_password(KEYRING_SERVICE, f"mcp-token:{name}", token)
            stored = True
        except Exception as exc:
            _warn_file_fallback(config, f"the keyring failed: {type(exc).__name__}", _MCP_WHAT)
    _ensure_mcp_dir(config)
    if stored:
        try:
            path.unlink()  # a stale file token must not outlive the keyring one
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("Could not remove the old MCP token file %s: %s", path, exc.strerror)
    else:
        _write_replace(path, token)
    _remember_mcp_client(config, name, force=True)
    return token


def _remember_mcp_client(config: Config, name: str, *, force: bool = False) -> None:
    names = mcp_client_names(config)
    if name in names and not force:
        return
    _ensure_mcp_dir(config)
    body = "\n".join(sorted({*names, name})) + "\n" + f"# changed {secrets.token_hex(4)}\n"
    tmp = _tmp_name(_mcp_names_file(config))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, body.encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(tmp, _mcp_names_file(config))


class McpTokens:
    """The MCP tokens as a running daemon sees them: ``current()`` → ``{client name: token}``, re-read only
    when ``<config_dir>/mcp-tokens/clients`` changed (every ``cairn mcp token`` rewrites it), so a new or
    rotated token works at once. Blocking (a ``stat``); call it from a worker thread in async code."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._signature: tuple | None = None
        self._tokens: dict[str, str] = {}

    def _stat(self) -> tuple | None:
        try:
            st = os.stat(_mcp_names_file(self.config))
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def current(self) -> dict[str, str]:
        signature = self._stat()
        if signature != self._signature or self._signature is None:
            with self._lock:
                tokens: dict[str, str] = {}
                for name in mcp_client_names(self.config):
                    try:
                        value = read_mcp_token(self.config, name)
                    except ConfigError as exc:
                        log.warning("MCP token of %s unusable: %s", name, exc.message)
                        continue
                    if value:
                        tokens[name] = value
                self._tokens, self._signature = tokens, signature
        return self._tokens
