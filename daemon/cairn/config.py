"""Configuration: one frozen tree; defaults < TOML file < ``CAIRN_*`` env < CLI flags.

Unknown keys in the TOML file are errors naming the file and the key
(docs/design.md, "Conventions"). Folders come from platformdirs unless overridden by
``CAIRN_CONFIG_DIR`` / ``CAIRN_DATA_DIR`` (tests and scripts point these at
temp dirs, so nothing touches the real user folders).

No I/O happens at import time; :func:`load_config` reads the TOML file only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tomllib
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from cairn.contract import LIMITS
from cairn.errors import ConfigError

APP_NAME = "cairn"
DEFAULT_PORT = 27183
#: Fixed contract (docs/design.md, "Contract"): top_k 8 (its range and default live in cairn.contract), cosine
#: floor 0.35, 6,000-token budget, RRF k=60.
DEFAULT_TOP_K = LIMITS.top_k_default
COSINE_FLOOR = 0.35
CONTEXT_TOKEN_BUDGET = 6000
RRF_K = 60
NOT_FOUND_ANSWER = "I couldn't find this in your indexed notes."
#: Folders never indexed, whatever the configured globs say.
ALWAYS_IGNORED = (".obsidian", ".trash", ".git")


def is_loopback_url(url: str) -> bool:
    """True when ``url``'s host is a loopback address literal or ``localhost`` (anything else counts as remote).
    ``*.localhost`` names count as remote: RFC 6761 asks resolvers to map them to loopback, but many do not
    (this machine's does not), and a DNS answer could then send withheld notes off the machine."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return False
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class LLMConfig:
    """The optional OpenAI-compatible chat model (TOML table ``[llm]``). No ``base_url`` → no model:
    answers are extractive (``grounded: false``). The API key is never here: it lives in the keyring
    (``cairn secret set llm-api-key``)."""

    #: e.g. ``http://127.0.0.1:11434/v1`` (Ollama), ``http://127.0.0.1:8080/v1`` (llama.cpp server).
    base_url: str | None = None
    model: str = ""
    #: Seconds to open the connection; until the first streamed token; between two tokens; in all.
    connect_timeout_s: float = 5.0
    first_token_timeout_s: float = 60.0
    idle_timeout_s: float = 30.0
    total_timeout_s: float = 300.0
    temperature: float = 0.1
    max_tokens: int = 800
    #: Notes carrying any of these tags (nested included) never enter a REMOTE model's prompt (a non-loopback
    #: ``base_url``), besides what the governance policy withholds.
    withhold_tags: tuple[str, ...] = ("personal",)

    @property
    def configured(self) -> bool:
        return bool(self.base_url)

    @property
    def remote(self) -> bool:
        """A non-loopback endpoint counts as a remote client (privacy rule)."""
        return bool(self.base_url) and not is_loopback_url(self.base_url or "")


@dataclass(frozen=True)
class Config:
    """The whole configuration. Paths are absolute; ``vault`` is resolved (symlinks followed)."""

    vault: Path | None = None
    config_dir: Path = field(default_factory=lambda: Path(platformdirs.user_config_dir(APP_NAME)))
    data_dir: Path = field(default_factory=lambda: Path(platformdirs.user_data_dir(APP_NAME)))
    log_dir: Path = field(default_factory=lambda: Path(platformdirs.user_log_dir(APP_NAME)))
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    #: gitignore-style globs (vault-relative, POSIX) excluded on top of ALWAYS_IGNORED and hidden folders.
    ignore: tuple[str, ...] = ()
    top_k: int = DEFAULT_TOP_K
    #: Browser origins allowed by CORS; only Obsidian's by default (docs/design.md, "Contract").
    cors_origins: tuple[str, ...] = ("app://obsidian.md",)
    #: Files larger than this are skipped with a reason (bytes).
    max_note_bytes: int = 5 * 1024 * 1024
    #: PDF attachments are indexed page by page; ``pdf = false`` turns it off.
    pdf: bool = True
    #: A PDF with more pages is indexed up to this page, the rest recorded as not indexed.
    pdf_max_pages: int = 2000
    #: A larger PDF file is skipped with a reason (bytes).
    pdf_max_bytes: int = 200 * 1024 * 1024
    #: Per-file extraction time limit (seconds); pages extracted by then are kept, the rest recorded.
    pdf_timeout_s: float = 120.0
    #: onnxruntime intra-op threads; None = all cores.
    embed_threads: int | None = None
    #: Concurrent ``POST /ask`` streams; one more is 503 with ``Retry-After``.
    max_ask_streams: int = 4
    #: The optional chat model (``[llm]`` table).
    llm: LLMConfig = field(default_factory=LLMConfig)
    #: The daemon serves MCP over streamable HTTP (``/mcp``) on this loopback port; None → ``port + 1``
    #: (0 when ``port`` is 0: a free one). ``mcp_http = false`` turns it off.
    mcp_port: int | None = None
    mcp_http: bool = True
    #: The MCP governance policy; None → ``<config_dir>/mcp-serve.yaml`` (created from the shipped default).
    mcp_policy: Path | None = None
    #: Where the API token lives (:mod:`cairn.secrets`): ``auto`` (the OS keyring, else a 0600 file with a
    #: warning), ``file`` (the file), ``required`` (the OS keyring or refuse to start). ``CAIRN_KEYRING`` too.
    keyring: str = "auto"
    #: Syncthing conflict copies (``*.sync-conflict-*.md``): ``skip`` (listed in ``/index/stats``) or ``index``.
    sync_conflicts: str = "skip"
    #: How the daemon follows file changes: ``auto`` (native file events unless ``WATCHFILES_FORCE_POLLING`` is
    #: set), ``native``, or ``polling`` (a pass over the vault every 2 s; ignored folders are not entered).
    watch: str = "auto"
    #: A changed policy file is used once it has stayed the same this long (seconds; 0.2..60): a save in
    #: several writes is never used half-written. The previous policy stays in force meanwhile.
    mcp_policy_settle_s: float = 1.0
    #: Both HTTP servers (the plugin API and MCP): seconds a connection may take to send a request's headers
    #: (after connecting, or between two requests on a keep-alive connection), then its body; open connections
    #: per server (lowered to fit the open-file limit; the longest idle one is closed to make room).
    http_header_timeout_s: float = 10.0
    http_body_timeout_s: float = 30.0
    http_max_connections: int = 512
    #: MCP over HTTP: open sessions per client (its least recently used one is closed to make room), open
    #: sessions in all, and the seconds without a request after which a session is closed.
    mcp_sessions_per_client: int = 16
    mcp_sessions_max: int = 256
    mcp_session_idle_s: float = 300.0
    debug: bool = False

    def require_vault(self) -> Path:
        """The vault folder; raises :class:`ConfigError` when none is configured or it is not a folder."""
        if self.vault is None:
            raise ConfigError("No vault given: pass --vault PATH or set CAIRN_VAULT to your Obsidian vault folder.")
        if not self.vault.is_dir():
            raise ConfigError(f"Vault folder {str(self.vault)!r} does not exist or is not a folder; pass --vault PATH.")
        return self.vault

    @property
    def db_path(self) -> Path:
        """One SQLite file per vault, keyed by the vault's resolved path (several vaults can be served)."""
        vault = self.require_vault()
        key = hashlib.sha256(os.fsencode(vault)).hexdigest()[:16]  # the bytes, also for a non-UTF-8 name
        safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in vault.name)[:40] or "vault"
        return self.data_dir / "indexes" / f"{safe}-{key}.sqlite3"

    @property
    def index_id(self) -> str:
        """The index's name, unique per vault: ``<vault folder name>-<16 hex of sha256(vault path)>``."""
        return self.db_path.stem

    @property
    def service_file(self) -> Path:
        """``service-<index_id>.json``: where this vault's running daemon advertises its URL (never its token).
        One per vault, so daemons of two vaults sharing a data folder never overwrite each other's."""
        return self.data_dir / f"service-{self.index_id}.json"

    @property
    def shared_service_file(self) -> Path:
        """``service.json``: the same record, for the daemon started last (older plugins and scripts read it);
        it names its ``vault``, so a reader can tell whose it is."""
        return self.data_dir / "service.json"

    @property
    def mcp_http_port(self) -> int:
        """The loopback port of the daemon's MCP endpoint: ``mcp_port``, else ``port + 1`` (0 stays 0)."""
        if self.mcp_port is not None:
            return self.mcp_port
        return self.port + 1 if 0 < self.port < 65535 else 0

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


_FIELDS = {f.name: f for f in dataclasses.fields(Config)}
_PATH_KEYS = {"vault", "config_dir", "data_dir", "log_dir", "mcp_policy"}
_TUPLE_KEYS = {"ignore", "cors_origins"}
_INT_KEYS = {
    "port",
    "top_k",
    "max_note_bytes",
    "embed_threads",
    "max_ask_streams",
    "mcp_port",
    "pdf_max_pages",
    "pdf_max_bytes",
    "http_max_connections",
    "mcp_sessions_per_client",
    "mcp_sessions_max",
}
#: Keys holding a positive number of seconds.
_SECONDS_KEYS = {"pdf_timeout_s", "http_header_timeout_s", "http_body_timeout_s", "mcp_session_idle_s"}
_LLM_FIELDS = {f.name: f for f in dataclasses.fields(LLMConfig)}
_ENV = {
    "CAIRN_LLM_BASE_URL": "llm.base_url",
    "CAIRN_LLM_MODEL": "llm.model",
    "CAIRN_VAULT": "vault",
    "CAIRN_CONFIG_DIR": "config_dir",
    "CAIRN_DATA_DIR": "data_dir",
    "CAIRN_LOG_DIR": "log_dir",
    "CAIRN_PORT": "port",
    "CAIRN_MCP_PORT": "mcp_port",
    "CAIRN_KEYRING": "keyring",
}
#: The values of ``keyring``.
KEYRING_MODES = ("auto", "file", "required")
#: The keys that take one of a few words, and those words.
_CHOICES = {"keyring": KEYRING_MODES, "sync_conflicts": ("skip", "index"), "watch": ("auto", "native", "polling")}


def _coerce_llm(key: str, value: Any, origin: str) -> Any:
    """One ``llm.<key>`` value. Raises :class:`ConfigError` naming ``origin`` for an unknown key or a bad value."""
    if key not in _LLM_FIELDS:
        raise ConfigError(
            f"{origin}: unknown configuration key {'llm.' + key!r}; known keys in [llm]: "
            f"{', '.join(sorted(_LLM_FIELDS))}."
        )
    try:
        if key == "base_url":
            return _llm_base_url(value)
        if key == "model":
            return str(value).strip()
        if key == "withhold_tags":
            if isinstance(value, str):
                value = [v for v in value.split(",") if v.strip()]
            return tuple(str(v).strip().lstrip("#").lower() for v in value)
        if key == "max_tokens":
            number = int(value)
            if number < 1:
                raise ValueError("must be at least 1")
            return number
        return _llm_number(key, value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{origin}: bad value {value!r} for {'llm.' + key!r}: {exc}.") from None


def _llm_base_url(value: Any) -> str | None:
    from urllib.parse import urlsplit

    url = str(value).strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http(s) URL such as http://127.0.0.1:11434/v1")
    if parts.username or parts.password:
        raise ValueError("no credentials in the URL; store the API key with `cairn secret set llm-api-key`")
    return url or None


def _llm_number(key: str, value: Any) -> float:
    """``temperature`` (0..2) or a positive number of seconds (the timeouts)."""
    if isinstance(value, bool):
        raise ValueError("expected a number")
    number = float(value)
    if key == "temperature" and not 0 <= number <= 2:
        raise ValueError("temperature must be 0..2")
    if key != "temperature" and not number > 0:
        raise ValueError("must be a positive number of seconds")
    return number


def _coerce(key: str, value: Any, origin: str) -> Any:
    """One configuration value (``llm``/``llm.<key>`` give a dict of ``llm`` values). Raises
    :class:`ConfigError` naming ``origin`` for an unknown key or a bad value."""
    if key == "llm":
        if not isinstance(value, Mapping):
            raise ConfigError(f"{origin}: 'llm' must be a table ([llm] with base_url, model, ...).")
        return {k: _coerce_llm(k, v, origin) for k, v in value.items()}
    if key.startswith("llm."):
        return {key[4:]: _coerce_llm(key[4:], value, origin)}
    if key not in _FIELDS:
        raise ConfigError(f"{origin}: unknown configuration key {key!r}; known keys: {', '.join(sorted(_FIELDS))}.")
    if value is None:
        return None
    try:
        return _coerce_value(key, value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{origin}: bad value {value!r} for {key!r}: {exc}.") from None


def _coerce_value(key: str, value: Any) -> Any:
    """A known top-level key's value; raises ValueError or TypeError with what was expected."""
    if key in _PATH_KEYS:
        path = Path(os.path.expanduser(str(value)))
        path = path.resolve() if key == "vault" else path.absolute()
        return Path(unicodedata.normalize("NFC", str(path)))
    if key in _TUPLE_KEYS:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        return tuple(str(v).strip() for v in value)
    if key in _INT_KEYS:
        return _whole_number(key, value)
    if key in _SECONDS_KEYS:
        if isinstance(value, bool) or not float(value) > 0:
            raise ValueError("must be a positive number of seconds")
        return float(value)
    if key == "mcp_policy_settle_s":
        if isinstance(value, bool) or not 0.2 <= float(value) <= 60:
            raise ValueError("must be 0.2..60 seconds (0 would use a policy saved in several writes half-written)")
        return float(value)
    if key in ("debug", "mcp_http", "pdf"):
        return _boolean(value)
    if key in _CHOICES:
        choice = str(value).strip().lower()
        if choice not in _CHOICES[key]:
            raise ValueError(f"expected one of {', '.join(_CHOICES[key])}")
        return choice
    return str(value)


#: Allowed range (low, high or None) of the whole-number keys that have one, and the message when outside.
_INT_RANGES: dict[str, tuple[int, int | None, str]] = {
    "max_note_bytes": (1, None, "expected a size in bytes of at least 1, e.g. 5242880 (5 MB, the default)"),
    "port": (0, 65535, "port must be 0..65535"),
    "mcp_port": (0, 65535, "port must be 0..65535"),
    "max_ask_streams": (1, 64, "max_ask_streams must be 1..64"),
    "top_k": (LIMITS.top_k_min, LIMITS.top_k_max, f"top_k must be {LIMITS.top_k_min}..{LIMITS.top_k_max}"),
    "pdf_max_pages": (1, None, "must be at least 1"),
    "pdf_max_bytes": (1, None, "must be at least 1"),
    "http_max_connections": (8, None, "must be at least 8"),
    "mcp_sessions_per_client": (1, None, "must be at least 1"),
    "mcp_sessions_max": (1, None, "must be at least 1"),
}


def _whole_number(key: str, value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("expected a whole number")  # int() would take true as 1 and 5.5 as 5
    try:
        number = int(value)
    except ValueError:
        raise ValueError("expected a whole number") from None
    if key in _INT_RANGES:
        low, high, message = _INT_RANGES[key]
        if number < low or (high is not None and number > high):
            raise ValueError(message)
    return number


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower() if isinstance(value, (str, int)) else None
    if word in {"1", "true", "yes", "on"}:
        return True
    if word in {"0", "false", "no", "off"}:
        return False
    raise ValueError("expected true or false")


def load_config(
    overrides: Mapping[str, Any] | None = None,
    *,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Build the configuration: defaults < TOML file < ``CAIRN_*`` env < ``overrides`` (CLI flags).

    ``overrides`` values of ``None`` are ignored (an unset CLI flag). The TOML file is
    ``config_file`` if given, else ``<config_dir>/config.toml`` when it exists.
    Raises :class:`ConfigError` for an unreadable file, an unknown key or a bad value.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    env_values = {
        key: _coerce(key, env[name], f"environment variable {name}") for name, key in _ENV.items() if env.get(name)
    }
    cli_values = {
        k: _coerce(k, v, f"option --{k.replace('_', '-')}") for k, v in (overrides or {}).items() if v is not None
    }
    config_dir = cli_values.get("config_dir") or env_values.get("config_dir") or Config().config_dir
    path = config_file or (config_dir / "config.toml")
    if config_file is not None or path.exists():
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"Cannot read config file {str(path)!r}: {exc.strerror}.") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"Config file {str(path)!r} is not valid TOML: {exc}.") from None
        for key, value in data.items():
            values[key] = _coerce(key, value, f"config file {path}")
    llm: dict[str, Any] = {}
    for layer in (values, env_values, cli_values):
        llm.update(layer.pop("llm", None) or {})
        for k in [k for k in layer if k.startswith("llm.")]:
            llm.update(layer.pop(k))
    values.update(env_values)
    values.update(cli_values)
    return Config(**values, llm=LLMConfig(**llm))
