"""Configuration: one frozen tree; defaults < TOML file < ``CAIRN_*`` env < CLI flags.

Every setting is declared once, on its field of :class:`Config` or :class:`LLMConfig` (:func:`_key`): its type
and parser, default, help line and environment variable. :data:`SETTINGS` lists them; the loader, ``cairn
config`` and the settings table of docs/settings.md (:func:`settings_markdown`) all read that list, so a setting
cannot be parsed one way and documented another. Unknown keys are errors naming the file (or variable, or flag)
and the key.
Folders come from platformdirs unless overridden by ``CAIRN_CONFIG_DIR`` / ``CAIRN_DATA_DIR`` (tests and scripts
point these at temp dirs, so nothing touches the real user folders).

No I/O happens at import time; :func:`load_config` reads the TOML file only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tomllib
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import platformdirs

from cairn.contract import LIMITS
from cairn.errors import ConfigError
from cairn.loopback import LOOPBACK_ONLY, is_loopback_host, is_loopback_url

APP_NAME = "cairn"
DEFAULT_PORT = 27183
#: Fixed contract (docs/design.md, "Contract"): top_k 8 (its range and default live in cairn.contract), cosine
#: floor 0.35, 6,000-token budget, RRF k=60.
DEFAULT_TOP_K = LIMITS.top_k_default
COSINE_FLOOR = 0.35
CONTEXT_TOKEN_BUDGET = 6000
RRF_K = 60
NOT_FOUND_ANSWER = "I couldn't find this in your indexed notes."
#: The first words of an answer whose evidence is weak (then the closest passages, cited).
WEAK_ANSWER_LEAD = "I couldn't find a clear answer in your indexed notes. The closest passages say:"


def _loopback_host(value: Any) -> str:
    if not isinstance(value, str) or not is_loopback_host(value):
        raise ValueError(LOOPBACK_ONLY)
    return value.strip().strip("[]").lower()


class Kind(NamedTuple):
    """How one setting's value is read. ``label``: its type as the docs show it. ``parse``: a TOML value, or
    the text of an environment variable or flag, to the value; raises ValueError or TypeError saying what was
    expected (the loader adds where the value came from and the key)."""

    label: str
    parse: Callable[[Any], Any]


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower() if isinstance(value, (str, int)) else None
    if word in {"1", "true", "yes", "on"}:
        return True
    if word in {"0", "false", "no", "off"}:
        return False
    raise ValueError("expected true or false")


def _path(resolve: bool) -> Kind:
    """A folder or file: ``~`` expanded, made absolute (``resolve``: symlinks followed too), NFC."""

    def parse(value: Any) -> Path:
        if not isinstance(value, (str, os.PathLike)):
            raise ValueError("expected a path")
        path = Path(os.path.expanduser(value))
        path = path.resolve() if resolve else path.absolute()
        return Path(unicodedata.normalize("NFC", str(path)))

    return Kind("path", parse)


def _strings(label: str, item: Callable[[str], str] = str.strip) -> Kind:
    """A list of text: a TOML array, or one text of comma-separated items (an environment variable, a flag)."""

    def parse(value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f'expected a {label}, e.g. ["a", "b"]')
        return tuple(item(str(v)) for v in value)

    return Kind(label, parse)


def _whole(low: int | None = None, high: int | None = None, message: str = "") -> Kind:
    """A whole number in ``low..high`` (either end open when None); ``message`` when outside."""
    label = "whole number" + (f", {low}..{high}" if high is not None else f", at least {low}" if low else "")

    def parse(value: Any) -> int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("expected a whole number")  # int() would take true as 1 and 5.5 as 5
        try:
            number = int(value)
        except ValueError:
            raise ValueError("expected a whole number") from None
        if (low is not None and number < low) or (high is not None and number > high):
            raise ValueError(message)
        return number

    return Kind(label, parse)


def _number(label: str, ok: Callable[[float], bool], message: str) -> Kind:
    """A finite number for which ``ok`` holds; ``message`` otherwise (true/false is not a number)."""

    def parse(value: Any) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if isinstance(value, bool) or not math.isfinite(number) or not ok(number):
            raise ValueError(message)
        return number

    return Kind(label, parse)


def _choice(*words: str) -> Kind:
    def parse(value: Any) -> str:
        choice = str(value).strip().lower()
        if choice not in words:
            raise ValueError(f"expected one of {', '.join(words)}")
        return choice

    return Kind("one of " + ", ".join(words), parse)


def _llm_base_url(value: Any) -> str | None:
    from urllib.parse import urlsplit

    url = str(value).strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http(s) URL such as http://127.0.0.1:11434/v1")
    if parts.username or parts.password:
        raise ValueError("no credentials in the URL; store the API key with `cairn secret set llm-api-key`")
    return url or None


TEXT = Kind("text", str)
BOOLEAN = Kind("true or false", _boolean)
LOOPBACK_HOST = Kind("loopback address", _loopback_host)
SECONDS = _number("seconds, > 0", lambda s: s > 0, "must be a positive number of seconds")
PORT = _whole(0, 65535, "port must be 0..65535")
AT_LEAST_1 = _whole(1, None, "must be at least 1")
#: The values of ``keyring``.
KEYRING_MODES = ("auto", "file", "required")


def _key(
    default: Any = None,
    *,
    kind: Kind,
    doc: str,
    env: str | None = None,
    factory: Callable[[], Any] | None = None,
    shown: str | None = None,
) -> Any:
    """Declare one setting on its dataclass field: ``default`` (or ``factory``), how it is read (``kind``), its
    help line for the docs (``doc``), its ``CAIRN_*`` environment variable, and ``shown``: the default as the
    docs show it, when it is not a fixed value (a platform folder). :data:`SETTINGS` collects them."""
    meta = {"setting": (kind, doc, env, shown)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class LLMConfig:
    """The optional OpenAI-compatible chat model (TOML table ``[llm]``). No ``base_url`` → no model:
    answers are extractive (``grounded: false``). The API key is never here: it lives in the keyring
    (``cairn secret set llm-api-key``)."""

    base_url: str | None = _key(
        kind=Kind("http(s) URL", _llm_base_url),
        env="CAIRN_LLM_BASE_URL",
        doc="The chat model's OpenAI-compatible endpoint, e.g. `http://127.0.0.1:11434/v1` (Ollama); "
        "unset: answers quote your notes, no model is asked. A non-loopback URL counts as a remote client.",
    )
    model: str = _key(
        "", kind=Kind("text", lambda v: str(v).strip()), env="CAIRN_LLM_MODEL", doc="The model name the endpoint knows."
    )
    connect_timeout_s: float = _key(5.0, kind=SECONDS, doc="Seconds to open the connection to the model.")
    first_token_timeout_s: float = _key(60.0, kind=SECONDS, doc="Seconds to wait for the first streamed token.")
    idle_timeout_s: float = _key(30.0, kind=SECONDS, doc="Seconds to wait between two streamed tokens.")
    total_timeout_s: float = _key(300.0, kind=SECONDS, doc="Seconds one answer may take in all.")
    temperature: float = _key(
        0.1,
        kind=_number("number, 0..2", lambda t: 0 <= t <= 2, "temperature must be 0..2"),
        doc="Sampling temperature.",
    )
    max_tokens: int = _key(800, kind=AT_LEAST_1, doc="Most tokens one answer may have.")
    withhold_tags: tuple[str, ...] = _key(
        ("personal",),
        kind=_strings("list of tags", lambda t: t.strip().lstrip("#").lower()),
        doc="Notes with any of these tags (nested tags too) never enter a remote model's prompt, besides what "
        "the MCP policy withholds.",
    )

    @property
    def configured(self) -> bool:
        return bool(self.base_url)

    @property
    def remote(self) -> bool:
        """A non-loopback endpoint counts as a remote client (privacy rule)."""
        return bool(self.base_url) and not is_loopback_url(self.base_url or "")


def vault_id_of(vault: Path) -> str:
    """A vault's id: 16 hex digits of SHA-256 over its resolved path (NFC, as UTF-8 bytes). Stable while the
    vault stays where it is, not secret, and the same for every Cairn process and for the plugin, which
    computes it from the vault it runs in: a daemon says it in ``/health`` (``vaultId``), and a client holding
    another vault's id refuses it (docs/design.md, "Contract" → Several vaults). It also names the vault's
    index and token."""
    return hashlib.sha256(os.fsencode(vault)).hexdigest()[:16]  # the bytes, also for a non-UTF-8 name


@dataclass(frozen=True)
class Config:
    """The whole configuration. Paths are absolute; ``vault`` is resolved (symlinks followed). What each
    field means is its ``doc`` (:data:`SETTINGS`, the table in docs/settings.md)."""

    vault: Path | None = _key(
        kind=_path(resolve=True), env="CAIRN_VAULT", doc="The Obsidian vault folder (also `--vault`)."
    )
    config_dir: Path = _key(
        kind=_path(resolve=False),
        env="CAIRN_CONFIG_DIR",
        factory=lambda: Path(platformdirs.user_config_dir(APP_NAME)),
        shown="the platform's (`~/.config/cairn`)",
        doc="Where `config.toml` is looked for, and where the MCP policy and token files live (`--config FILE` "
        "reads another file instead of `config.toml`).",
    )
    data_dir: Path = _key(
        kind=_path(resolve=False),
        env="CAIRN_DATA_DIR",
        factory=lambda: Path(platformdirs.user_data_dir(APP_NAME)),
        shown="the platform's (`~/.local/share/cairn`)",
        doc="Where the indexes, `service.json` and the MCP audit log live (also `--data-dir`).",
    )
    log_dir: Path = _key(
        kind=_path(resolve=False),
        env="CAIRN_LOG_DIR",
        factory=lambda: Path(platformdirs.user_log_dir(APP_NAME)),
        shown="the platform's (`~/.local/state/cairn/log`)",
        doc="Where `cairn serve` writes `cairn.log`.",
    )
    host: str = _key(
        "127.0.0.1",
        kind=LOOPBACK_HOST,
        doc="Address both servers listen on: a loopback one only (`127.0.0.1`, `::1`, `localhost`); any other, "
        "such as `0.0.0.0`, is an error and nothing starts.",
    )
    port: int = _key(
        DEFAULT_PORT, kind=PORT, env="CAIRN_PORT", doc="The HTTP API's port (also `--port`); 0 picks a free one."
    )
    ignore: tuple[str, ...] = _key(
        (),
        kind=_strings("list of globs"),
        doc="Files and folders not indexed: gitignore-style globs over vault-relative paths, e.g. "
        '`["Templates/", "archive/**", "*.excalidraw.md"]`; see '
        "[Excluding files and folders](#excluding-files-and-folders-ignore).",
    )
    top_k: int = _key(
        DEFAULT_TOP_K,
        kind=_whole(LIMITS.top_k_min, LIMITS.top_k_max, f"top_k must be {LIMITS.top_k_min}..{LIMITS.top_k_max}"),
        doc="Results of a search or sources of an answer when the request does not say.",
    )
    cors_origins: tuple[str, ...] = _key(
        ("app://obsidian.md",),
        kind=_strings("list of origins"),
        doc="Browser origins the HTTP API allows (CORS); Obsidian's only by default.",
    )
    max_note_bytes: int = _key(
        5 * 1024 * 1024,
        kind=_whole(1, None, "expected a size in bytes of at least 1, e.g. 5242880 (5 MB, the default)"),
        doc="A larger note is skipped with its reason (bytes); the next scan reads it again after you raise it.",
    )
    pdf: bool = _key(True, kind=BOOLEAN, doc="Index PDF attachments page by page; `false` removes them.")
    pdf_max_pages: int = _key(
        2000, kind=AT_LEAST_1, doc="A longer PDF is indexed up to this page; the rest is listed as not indexed."
    )
    pdf_max_bytes: int = _key(200 * 1024 * 1024, kind=AT_LEAST_1, doc="A larger PDF is skipped with a reason (bytes).")
    pdf_timeout_s: float = _key(
        120.0, kind=SECONDS, doc="Seconds to extract one PDF; pages extracted by then are kept, the rest listed."
    )
    embed_threads: int | None = _key(
        kind=AT_LEAST_1, shown="all cores", doc="Batches the embedding model runs at once (one core each)."
    )
    max_ask_streams: int = _key(
        4, kind=_whole(1, 64, "max_ask_streams must be 1..64"), doc="Open `POST /ask` streams; one more gets 503."
    )
    llm: LLMConfig = field(default_factory=LLMConfig)
    mcp_port: int | None = _key(
        kind=PORT,
        env="CAIRN_MCP_PORT",
        shown="`port` + 1 (0 when `port` is 0)",
        doc="Loopback port of the daemon's MCP endpoint (`/mcp`); 0 picks a free one.",
    )
    mcp_http: bool = _key(True, kind=BOOLEAN, doc="Serve MCP over HTTP from `cairn serve`; `false` turns it off.")
    mcp_policy: Path | None = _key(
        kind=_path(resolve=False),
        shown="`<config_dir>/mcp-serve.yaml`",
        doc="The MCP governance policy file (created from the shipped default when missing).",
    )
    keyring: str = _key(
        "auto",
        kind=_choice(*KEYRING_MODES),
        env="CAIRN_KEYRING",
        doc="Where tokens and secrets live: `auto` (the OS keyring, else a 0600 file with a warning), `file`, or "
        "`required` (the keyring or refuse to start).",
    )
    sync_conflicts: str = _key(
        "skip",
        kind=_choice("skip", "index"),
        doc="Syncthing conflict copies (`*.sync-conflict-*.md`): `skip` (listed in `/index/stats`) or `index`.",
    )
    watch: str = _key(
        "auto",
        kind=_choice("auto", "native", "polling"),
        doc="How `cairn serve` follows file changes: `native` events, `polling` (a pass every 2 s), or `auto` "
        "(native unless `WATCHFILES_FORCE_POLLING` is set).",
    )
    mcp_policy_settle_s: float = _key(
        1.0,
        kind=_number(
            "seconds, 0.2..60",
            lambda s: 0.2 <= s <= 60,
            "must be 0.2..60 seconds (0 would use a policy saved in several writes half-written)",
        ),
        doc="A changed policy file is used once it has stayed the same this long; the previous policy stays in "
        "force meanwhile.",
    )
    http_header_timeout_s: float = _key(
        10.0, kind=SECONDS, doc="Seconds a connection may take to send a request's headers (both servers)."
    )
    http_body_timeout_s: float = _key(
        30.0, kind=SECONDS, doc="Seconds to send a whole request body once its headers are in; then 408."
    )
    http_max_connections: int = _key(
        512,
        kind=_whole(8, None, "must be at least 8"),
        doc="Open connections per server (lowered to fit the open-file limit).",
    )
    mcp_sessions_per_client: int = _key(
        16, kind=AT_LEAST_1, doc="Open MCP sessions per client; a new one closes its least recently used."
    )
    mcp_sessions_max: int = _key(256, kind=AT_LEAST_1, doc="Open MCP sessions in all.")
    mcp_session_idle_s: float = _key(
        300.0, kind=SECONDS, doc="Seconds without a request after which an MCP session is closed."
    )
    debug: bool = _key(False, kind=BOOLEAN, doc="Verbose logging (also `--debug`).")

    def require_vault(self) -> Path:
        """The vault folder; raises :class:`ConfigError` when none is configured or it is not a folder."""
        if self.vault is None:
            raise ConfigError("No vault given: pass --vault PATH or set CAIRN_VAULT to your Obsidian vault folder.")
        if not self.vault.is_dir():
            raise ConfigError(f"Vault folder {str(self.vault)!r} does not exist or is not a folder; pass --vault PATH.")
        return self.vault

    @property
    def vault_id(self) -> str:
        """This vault's id (:func:`vault_id_of`); raises :class:`ConfigError` when no vault is configured."""
        return vault_id_of(self.require_vault())

    @property
    def db_path(self) -> Path:
        """One SQLite file per vault, keyed by the vault's resolved path (several vaults can be served)."""
        vault = self.require_vault()
        safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in vault.name)[:40] or "vault"
        return self.data_dir / "indexes" / f"{safe}-{vault_id_of(vault)}.sqlite3"

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


@dataclass(frozen=True)
class Setting:
    """One setting: ``name`` as written in ``config.toml`` (``llm.<key>`` for the ``[llm]`` table), how it is
    read (``kind``), ``shown``: the default as the docs show it, ``doc``: its help line, ``env``: its ``CAIRN_*``
    variable, if it has one."""

    name: str
    kind: Kind
    shown: str
    doc: str
    env: str | None
    field: dataclasses.Field[Any] = dataclasses.field(repr=False, compare=False)

    @property
    def default(self) -> Any:
        """The value when nothing sets it (the platform folders: this machine's, computed now)."""
        f = self.field
        return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def toml_text(value: Any) -> str:
    """``value`` as written in ``config.toml`` (``(not set)`` for None, which TOML cannot write)."""
    if value is None:
        return "(not set)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    if isinstance(value, (str, Path)):
        return json.dumps(str(value), ensure_ascii=False)
    return repr(value)


def _collect(cls: type, prefix: str = "") -> Iterator[Setting]:
    for f in dataclasses.fields(cls):
        if f.name == "llm":
            yield from _collect(LLMConfig, "llm.")
            continue
        kind, doc, env, shown = f.metadata["setting"]
        if not shown and f.default is dataclasses.MISSING:
            raise TypeError(f"setting {prefix + f.name}: a default made by a factory needs `shown`")
        shown = shown or ("none" if f.default is None else f"`{toml_text(f.default)}`")
        yield Setting(prefix + f.name, kind, shown, doc, env, f)


#: Every setting, in the order of the fields of :class:`Config` (``llm.*`` in place of ``llm``).
SETTINGS: tuple[Setting, ...] = tuple(_collect(Config))
_BY_NAME = {s.name: s for s in SETTINGS}
_TOP_KEYS = sorted({s.name.split(".")[0] for s in SETTINGS})
_LLM_KEYS = sorted(s.name[4:] for s in SETTINGS if s.name.startswith("llm."))


def _parse(name: str, value: Any, origin: str) -> Any:
    """One value of the setting ``name``. Raises :class:`ConfigError` naming ``origin`` and the key for an
    unknown key or a bad value."""
    setting = _BY_NAME.get(name)
    if setting is None:
        if name.startswith("llm."):
            raise ConfigError(
                f"{origin}: unknown configuration key {name!r}; known keys in [llm]: {', '.join(_LLM_KEYS)}."
            )
        raise ConfigError(f"{origin}: unknown configuration key {name!r}; known keys: {', '.join(_TOP_KEYS)}.")
    if value is None:
        return None
    try:
        return setting.kind.parse(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{origin}: bad value {value!r} for {name!r}: {exc}.") from None


def _layer(items: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """``{setting name: value}`` of one layer; an ``llm`` table is read as its ``llm.<key>`` settings."""
    values: dict[str, Any] = {}
    for key, value in items.items():
        if key == "llm":
            if not isinstance(value, Mapping):
                raise ConfigError(f"{origin}: 'llm' must be a table ([llm] with base_url, model, ...).")
            values.update({f"llm.{k}": _parse(f"llm.{k}", v, origin) for k, v in value.items()})
        else:
            values[key] = _parse(key, value, origin)
    return values


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {str(path)!r}: {exc.strerror}.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"Config file {str(path)!r} is not valid TOML: {exc}.") from None
    return _layer(data, f"config file {path}")


@dataclass(frozen=True)
class Loaded:
    """What :func:`load_settings` found: the ``config``, the config ``file`` looked for (``file_read``: it was
    there and read), and ``sources``: where each setting's value came from — ``"default"``, the config file's
    path, an environment variable's name (``CAIRN_PORT``) or a flag (``--port``), by setting name."""

    config: Config
    file: Path
    file_read: bool
    sources: Mapping[str, str]


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    *,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Loaded:
    """Build the configuration: defaults < TOML file < ``CAIRN_*`` env < ``overrides`` (CLI flags), and say
    where each value came from.

    ``overrides`` values of ``None`` are ignored (an unset CLI flag). The TOML file is ``config_file`` if given,
    else ``<config_dir>/config.toml`` when it exists (``config_dir`` as the env or the flags set it).
    Raises :class:`ConfigError` for an unreadable file, an unknown key or a bad value.
    """
    env = os.environ if env is None else env
    by_env = {s.env: s.name for s in SETTINGS if s.env and env.get(s.env)}
    from_env = {name: _parse(name, env[var], f"environment variable {var}") for var, name in by_env.items()}
    from_flags: dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        if value is not None:
            from_flags.update(_layer({key: value}, f"option {_flag_of(key)}"))
    config_dir = from_flags.get("config_dir") or from_env.get("config_dir") or Config().config_dir
    path = config_file or (config_dir / "config.toml")
    file_read = config_file is not None or path.exists()
    from_file = _read_file(path) if file_read else {}
    values: dict[str, Any] = {**from_file, **from_env, **from_flags}
    sources = {s.name: "default" for s in SETTINGS}
    sources.update({name: str(path) for name in from_file})
    sources.update({name: var for var, name in by_env.items()})
    sources.update({name: _flag_of(name) for name in from_flags})
    top = {k: v for k, v in values.items() if not k.startswith("llm.")}
    llm = LLMConfig(**{k[4:]: v for k, v in values.items() if k.startswith("llm.")})
    return Loaded(Config(**top, llm=llm), path, file_read, sources)


def _flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def load_config(
    overrides: Mapping[str, Any] | None = None,
    *,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """The configuration of :func:`load_settings` (defaults < TOML file < ``CAIRN_*`` env < ``overrides``)."""
    return load_settings(overrides, config_file=config_file, env=env).config


def setting_default(name: str) -> Any:
    """The default of the setting ``name`` (``llm.<key>`` included), as declared on its field (:func:`_key`): for
    the places that hold a setting's value outside :class:`Config` (a server's limits) and need it by default too."""
    return _BY_NAME[name].default


def setting_value(config: Config, name: str) -> Any:
    """The value of the setting ``name`` (``llm.<key>`` included) in ``config``."""
    owner: Any = config.llm if name.startswith("llm.") else config
    return getattr(owner, name.removeprefix("llm."))


def settings_markdown() -> str:
    """The settings table of docs/settings.md (``cairn config --markdown``): one row per setting, in
    :data:`SETTINGS` order, each with its type, default, environment variable and help line."""
    rows = [
        "| Setting | Type | Default | Environment | What it sets |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in SETTINGS:
        env = f"`{s.env}`" if s.env else ""
        doc = s.doc.replace("|", "\\|")
        rows.append(f"| `{s.name}` | {s.kind.label} | {s.shown} | {env} | {doc} |")
    return "\n".join(rows) + "\n"
