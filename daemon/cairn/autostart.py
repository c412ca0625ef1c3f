"""Start at login (layer 1 resource: the OS's per-user login-items folders).

``cairn autostart enable|disable|status`` and the tray's "Start at login" checkbox install or remove
one per-user entry PER VAULT that runs ``cairn serve --vault VAULT`` when the owner logs in. An entry is named
after its vault (:func:`entry_id`: ``<vault folder name>-<8 hex of sha256(vault path)>``), so enabling a second
vault never replaces the first. Entries name no port: each vault's daemon takes a free one when the port it is
given is held by another vault's daemon, and records it where the plugin finds it (:mod:`cairn.discovery`):

==========  =============================================================  ==========================
platform    file                                                           template (packaging/autostart)
==========  =============================================================  ==========================
linux       ``$XDG_CONFIG_HOME/systemd/user/cairn-ID.service`` (default     ``cairn.service``
            ``~/.config``), enabled by the link
            ``default.target.wants/cairn-ID.service`` (what ``systemctl
            --user enable`` makes)
macos       ``~/Library/LaunchAgents/org.cairn-notes.cairn.ID.plist``        ``cairn.plist``
windows     ``%APPDATA%\\Microsoft\\Windows\\Start Menu\\Programs\\Startup\\   ``cairn.cmd``
            Cairn ID.cmd``
==========  =============================================================  ==========================

An entry written before entries were per vault (``cairn.service``, ``org.cairn-notes.cairn.plist``,
``Cairn.cmd``) is listed too, with the vault it runs; ``enable`` for that vault replaces it, ``disable`` for that
vault removes it.

The templates ship inside the package (``cairn/autostart_templates`` is a link to
``packaging/autostart``). Every value put into a file is escaped for that format (systemd
quoting and ``%``/``$`` specifiers, XML, ``cmd`` ``%``). Folders come from ``HOME`` /
``XDG_CONFIG_HOME`` / ``APPDATA`` in the ``env`` mapping given (default ``os.environ``), so tests
point them at a temp dir. Nothing here runs ``systemctl`` or ``launchctl``: the entry takes
effect at the next login (the CLI says how to start it now).

Errors: :class:`~cairn.errors.ConfigError` when the folder cannot be written or the platform is
unknown; the vault must be configured (``config.require_vault``).
"""

from __future__ import annotations

import hashlib
import os
import string
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from xml.sax.saxutils import escape as xml_escape

from cairn.config import Config
from cairn.errors import ConfigError

PLATFORMS = ("linux", "macos", "windows")
UNIT_NAME = "cairn.service"
LAUNCHD_LABEL = "org.cairn-notes.cairn"
WINDOWS_ENTRY = "Cairn.cmd"
#: Environment variables carried into the entry when set now (the daemon then sees the same folders).
CARRIED_ENV = ("CAIRN_CONFIG_DIR", "CAIRN_DATA_DIR", "CAIRN_LOG_DIR", "CAIRN_PORT", "CAIRN_KEYRING")
_TEMPLATE = {"linux": "cairn.service", "macos": "cairn.plist", "windows": "cairn.cmd"}


@dataclass(frozen=True)
class Entry:
    """One login entry: ``path`` (the file), ``content`` (its text), ``link`` (Linux: the
    ``default.target.wants`` symlink that enables the unit; else ``None``)."""

    platform: str
    path: Path
    content: str
    link: Path | None = None


def current_platform() -> str:
    """``linux``, ``macos`` or ``windows`` for this machine (other Unixes count as ``linux``)."""
    if sys.platform == "darwin":
        return "macos"
    if sys.platform.startswith("win"):
        return "windows"
    return "linux"


def launch_command(config: Config, platform: str | None = None) -> list[str]:
    """The argv the entry runs: the ``cairn`` console script beside this Python when it exists, else
    ``python -m cairn`` (``pythonw`` on Windows: no console window), then ``serve --vault VAULT``."""
    platform = platform or current_platform()
    vault = str(config.require_vault())
    exe_dir = Path(sys.executable).parent
    if platform == "windows":
        pythonw = exe_dir / "pythonw.exe"
        argv = [str(pythonw if pythonw.exists() else sys.executable), "-m", "cairn"]
    else:
        script = exe_dir / "cairn"
        argv = [str(script)] if script.exists() else [sys.executable, "-m", "cairn"]
    return argv + ["serve", "--vault", vault]


def carried_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``CAIRN_*`` folder/port/keyring variables set in ``env`` now (see :data:`CARRIED_ENV`)."""
    env = os.environ if env is None else env
    return {k: env[k] for k in CARRIED_ENV if env.get(k)}


def entry_id(vault: Path) -> str:
    """The name of ``vault``'s entry: its folder name in ASCII letters, digits, ``-`` and ``_`` (at most 40), then
    8 hex of the sha256 of its path (two vaults of one name differ); a word systemd, launchd and Windows accept."""
    safe = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_") else "_" for ch in vault.name)[:40]
    return f"{safe.strip('_') or 'vault'}-{hashlib.sha256(os.fsencode(vault)).hexdigest()[:8]}"


def _folder(platform: str, env: Mapping[str, str] | None) -> Path:
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or env.get("USERPROFILE") or Path.home())
    if platform == "linux":
        base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
        return base / "systemd" / "user"
    if platform == "macos":
        return home / "Library" / "LaunchAgents"
    if platform == "windows":
        appdata = Path(env["APPDATA"]) if env.get("APPDATA") else home / "AppData" / "Roaming"
        return appdata / "Microsoft" / "Windows" / "Start Menu" / "Programs" / "Startup"
    raise ConfigError(f"Unknown platform {platform!r} for start at login; expected one of {', '.join(PLATFORMS)}.")


def _file_name(platform: str, ident: str | None) -> str:
    """The entry's file name; ``ident`` None: the one entry written before entries were per vault."""
    if platform == "linux":
        return f"cairn-{ident}.service" if ident else UNIT_NAME
    if platform == "macos":
        return f"{launchd_label(ident)}.plist"
    return f"Cairn {ident}.cmd" if ident else WINDOWS_ENTRY


def launchd_label(ident: str | None) -> str:
    return f"{LAUNCHD_LABEL}.{ident}" if ident else LAUNCHD_LABEL


def entry_path(
    platform: str, env: Mapping[str, str] | None = None, vault: Path | None = None
) -> tuple[Path, Path | None]:
    """(file, enabling link or None) of ``vault``'s entry for ``platform`` (without ``vault``: the single entry
    of older versions), from ``HOME`` / ``XDG_CONFIG_HOME`` / ``APPDATA``."""
    folder = _folder(platform, env)
    path = folder / _file_name(platform, entry_id(vault) if vault is not None else None)
    return path, (folder / "default.target.wants" / path.name if platform == "linux" else None)


def installed_entries(platform: str, env: Mapping[str, str] | None = None) -> list[tuple[Path, Path | None]]:
    """Every Cairn entry installed for ``platform`` (per-vault ones and the older single one), sorted by path."""
    folder = _folder(platform, env)
    pattern = {"linux": "cairn*.service", "macos": f"{LAUNCHD_LABEL}*.plist", "windows": "Cairn*.cmd"}[platform]
    try:
        found = sorted(p for p in folder.glob(pattern) if p.is_file())
    except OSError:
        return []
    return [(p, folder / "default.target.wants" / p.name if platform == "linux" else None) for p in found]


def template(platform: str) -> str:
    """The text of ``packaging/autostart/<file>`` for ``platform`` (shipped in the package)."""
    if platform not in _TEMPLATE:
        raise ConfigError(f"Unknown platform {platform!r} for start at login; expected one of {', '.join(PLATFORMS)}.")
    return resources.files("cairn").joinpath("autostart_templates", _TEMPLATE[platform]).read_text(encoding="utf-8")


# -- escaping, one function per format --------------------------------------------------------


def _systemd_quote(value: str) -> str:
    """A double-quoted systemd word: ``\\`` and ``"`` escaped, ``%`` specifiers and ``$`` expansion disabled."""
    value = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{value}"'


def _systemd_env(key: str, value: str) -> str:
    value = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'Environment="{key}={value}"\n'


def _cmd_quote(value: str) -> str:
    """A ``cmd.exe`` argument in double quotes; ``%`` doubled (batch-file expansion)."""
    if '"' in value:
        raise ConfigError(
            f"Cannot write a Windows Startup entry for {value!r}: a double quote cannot be quoted for cmd."
        )
    return '"' + value.replace("%", "%%") + '"'


def render(
    platform: str,
    config: Config,
    *,
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    entry_env: Mapping[str, str] | None = None,
) -> Entry:
    """The entry for ``platform`` that runs ``argv`` (default :func:`launch_command`) with ``entry_env``
    (default :func:`carried_env`) set, placed by :func:`entry_path` under ``env``'s home folders."""
    argv = list(argv) if argv is not None else launch_command(config, platform)
    extra = dict(entry_env) if entry_env is not None else carried_env()
    vault = config.require_vault()
    path, link = entry_path(platform, env, vault)
    if platform == "linux":
        values = {
            "vault_name": vault.name.replace("%", "%%").replace("\n", " "),
            "exec_start": " ".join(_systemd_quote(a) for a in argv),
            "environment": "".join(_systemd_env(k, v) for k, v in extra.items()),
        }
        content = string.Template(template(platform)).substitute(values)
    elif platform == "macos":
        args = "".join(f"    <string>{xml_escape(a)}</string>\n" for a in argv)
        env_xml = ""
        if extra:
            env_xml = (
                "  <key>EnvironmentVariables</key>\n  <dict>\n"
                + "".join(
                    f"    <key>{xml_escape(k)}</key>\n    <string>{xml_escape(v)}</string>\n" for k, v in extra.items()
                )
                + "  </dict>\n"
            )
        content = string.Template(template(platform)).substitute(
            {"label": launchd_label(entry_id(vault)), "program_arguments": args, "environment": env_xml}
        )
    elif platform == "windows":
        env_cmd = "".join(f'set "{k}={v.replace("%", "%%")}"\n' for k, v in extra.items())
        content = string.Template(template(platform)).substitute(
            {"environment": env_cmd, "command": " ".join(_cmd_quote(a) for a in argv)}
        )
        content = content.replace("\r\n", "\n").replace("\n", "\r\n")
    else:
        raise ConfigError(f"Unknown platform {platform!r} for start at login; expected one of {', '.join(PLATFORMS)}.")
    return Entry(platform, path, content, link)


# -- installing ----------------------------------------------------------------------------


def _write(path: Path, content: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(content)
        os.chmod(tmp, 0o644)  # launchd refuses group/other-writable agents
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(
            f"Cannot write the start-at-login entry {str(path)!r}: {exc.strerror}; check that the folder is writable."
        ) from None


def enable(config: Config, *, platform: str | None = None, env: Mapping[str, str] | None = None) -> Entry:
    """Install (or replace) the entry of ``config``'s vault for this platform; on Linux also make the enabling
    link. An older single entry that runs this same vault is removed (this one replaces it); other vaults' entries
    stay. Returns what was written. Raises :class:`ConfigError` when a file cannot be written."""
    platform = platform or current_platform()
    entry = render(platform, config, env=env)
    _write(entry.path, entry.content)
    if entry.link is not None:
        try:
            entry.link.parent.mkdir(parents=True, exist_ok=True)
            if entry.link.is_symlink() or entry.link.exists():
                entry.link.unlink()
            entry.link.symlink_to(Path("..") / entry.path.name)
        except OSError as exc:
            raise ConfigError(f"Cannot enable the unit with the link {str(entry.link)!r}: {exc.strerror}.") from None
    old = entry_path(platform, env)
    if old[0] != entry.path and _runs_vault(platform, old[0], config.require_vault()):
        _remove(old)
    return entry


def _runs_vault(platform: str, path: Path, vault: Path) -> bool:
    return path.is_file() and _vault_of(command_in(platform, _read(path))) == str(vault)


def _remove(entry: tuple[Path, Path | None]) -> list[Path]:
    removed = []
    for p in (entry[1], entry[0]):
        if p is not None and (p.is_symlink() or p.exists()):
            try:
                p.unlink()
            except OSError as exc:
                raise ConfigError(f"Cannot remove the start-at-login entry {str(p)!r}: {exc.strerror}.") from None
            removed.append(p)
    return removed


def disable(
    config: Config | None = None, *, platform: str | None = None, env: Mapping[str, str] | None = None
) -> list[Path]:
    """Remove the entry of ``config``'s vault (and its enabling link; an older single entry too when it runs that
    vault); without a vault, every Cairn entry. Returns the paths removed (empty when none existed)."""
    platform = platform or current_platform()
    vault = config.vault if config is not None else None
    if vault is None:
        return [p for entry in installed_entries(platform, env) for p in _remove(entry)]
    removed = _remove(entry_path(platform, env, vault))
    old = entry_path(platform, env)
    if _runs_vault(platform, old[0], vault):
        removed += _remove(old)
    return removed


def command_in(platform: str, content: str) -> list[str] | None:
    """The argv an entry's ``content`` runs (the inverse of :func:`render`'s quoting), or ``None``."""
    import plistlib
    import shlex

    try:
        if platform == "macos":
            return [str(a) for a in plistlib.loads(content.encode("utf-8"))["ProgramArguments"]]
        for line in content.splitlines():
            if platform == "linux" and line.startswith("ExecStart="):
                return [a.replace("%%", "%").replace("$$", "$") for a in shlex.split(line[len("ExecStart=") :])]
            if platform == "windows" and line.startswith('start "Cairn" '):  # cmd: no escapes inside "..."
                words = shlex.split(line[len('start "Cairn" ') :], posix=False)
                return [(w[1:-1] if len(w) > 1 and w[0] == w[-1] == '"' else w).replace("%%", "%") for w in words]
    except (ValueError, KeyError, plistlib.InvalidFileException):
        return None
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _vault_of(command: list[str] | None) -> str | None:
    return command[command.index("--vault") + 1] if command and "--vault" in command[:-1] else None


def _describe(platform: str, path: Path, link: Path | None) -> dict:
    """``{path, installed, enabled, command, vault}`` of the entry file ``path``."""
    installed = path.is_file()
    command = command_in(platform, _read(path)) if installed else None
    enabled = installed and (link is None or (link.is_symlink() and link.resolve() == path.resolve()))
    return {
        "path": str(path),
        "installed": installed,
        "enabled": enabled,
        "command": command,
        "vault": _vault_of(command),
    }


def status(config: Config | None = None, *, platform: str | None = None, env: Mapping[str, str] | None = None) -> dict:
    """``{platform, path, installed, enabled, current, command, vault, entries}`` for ``config``'s vault:
    ``enabled`` — its entry will run at login (Linux: unit file and enabling link both present); ``current`` — the
    file is what ``enable`` would write now (same vault, program and folders; ``None`` without a vault);
    ``command`` / ``vault`` — what the installed entry runs (``None`` when not installed). An older single entry
    that runs this vault stands for it (``current`` false: enable again to update it). ``entries``: every
    installed entry, ``[{path, installed, enabled, command, vault}]``. Without a vault the top level describes the
    only entry when there is one, else says whether any is installed."""
    platform = platform or current_platform()
    entries = [_describe(platform, path, link) for path, link in installed_entries(platform, env)]
    vault = config.vault if config is not None else None
    current = None
    if vault is not None:
        own, link = entry_path(platform, env, vault)
        path, old = own, entry_path(platform, env)
        if not own.is_file() and _runs_vault(platform, old[0], vault):
            path, link = old
        top = _describe(platform, path, link)
        if top["installed"]:
            try:
                wanted = render(platform, config, env=env).content  # type: ignore[arg-type]
                current = path == own and _read(path) == wanted
            except ConfigError:
                current = False
    elif len(entries) == 1:
        top = entries[0]
    else:
        top = {
            "path": str(_folder(platform, env)),
            "installed": bool(entries),
            "enabled": any(e["enabled"] for e in entries),
            "command": None,
            "vault": None,
        }
    return {"platform": platform, **top, "current": current, "entries": entries}
