"""``cairn doctor``: what a new user gets wrong, one line each with its fix.

Each check asks the module that owns the thing, as the daemon would: the vault and its index (:mod:`cairn.store`),
the daemon (:func:`cairn.discovery.own_daemon`: a record is believed only while its daemon proves the vault), the
plugin (its files and token as ``cairn plugin install`` writes them, then one authenticated request with that token
from Obsidian's origin), the tray (:mod:`cairn.tray`: the backend ``cairn serve`` would pick and whether it has a
menu), the keyring (:mod:`cairn.secrets`), start at login (:mod:`cairn.autostart`), the MCP policy (``cairn policy
check``: :func:`cairn.cli.admin.check_policy`) and the MCP clients' configs that name Cairn
(:mod:`cairn.cli.doctor_mcp`).

A check is ``ok``, ``info`` (nothing to check: no agent is set up), ``warn`` (works, but not as it could: an optional
part missing) or ``fail`` (broken: the fix is needed); ``cairn doctor`` exits 1 when one fails. It reads and never
writes, but for what ``cairn policy check`` itself writes on the very first use (the owner's policy from the default,
the record of the policy confirmed).
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any

from cairn.cli.common import _cairn_command, _print_json
from cairn.cli.doctor_check import Check
from cairn.config import Config
from cairn.errors import CairnError

#: The origin Obsidian's pages have: the plugin's request is made from it, so ``cors_origins`` is checked too.
OBSIDIAN_ORIGIN = "app://obsidian.md"
REQUEST_TIMEOUT_S = 10.0


@contextlib.contextmanager
def _quiet(*loggers: str) -> Iterator[None]:
    """The warnings of ``loggers`` held back: the report says the same, once, with its fix."""
    saved = [(logging.getLogger(name), logging.getLogger(name).level) for name in loggers]
    for logger, _ in saved:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)


def _cmd(config: Config, *words: str) -> str:
    """``cairn WORDS… --vault VAULT``: a command to run, spelled as this ``cairn`` is called."""
    vault = f" --vault {json.dumps(str(config.vault)) if ' ' in str(config.vault) else config.vault}"
    return " ".join([_cairn_command(), *words]) + (vault if config.vault is not None else "")


# -- the vault and the daemon -------------------------------------------------------------------------


def check_vault(config: Config) -> Check:
    """The folder is an Obsidian vault and has an index (how many notes)."""
    from cairn.store import Store

    vault = config.require_vault()
    if not (vault / ".obsidian").is_dir():
        return Check(
            "vault", "fail", f"{vault} has no .obsidian folder: it is not an Obsidian vault", "open it in Obsidian once"
        )
    if not config.db_path.exists():
        return Check("vault", "warn", f"{vault} is not indexed yet", _cmd(config, "index"))
    store = Store(config.db_path, readonly=True)
    try:
        notes = store.stats().notes
    finally:
        store.close()
    if not notes:
        return Check("vault", "warn", f"{vault}: the index holds no note (no Markdown files?)", _cmd(config, "index"))
    return Check("vault", "ok", f"{vault}: {notes} notes indexed")


def check_daemon(config: Config) -> tuple[Check, dict[str, Any] | None]:
    """This vault's daemon runs and proves it serves this vault (:func:`cairn.discovery.own_daemon`); a stale
    record is named. Returns the check and the daemon's record (None when it does not run)."""
    from cairn import __version__
    from cairn.discovery import own_daemon, running_daemons

    record, why = own_daemon(config)
    if record is not None:
        where = f"running for {config.vault} at {record['url']} (pid {record.get('pid')})"
        if record.get("version") not in (None, __version__):
            fix = "restart it (the tray's Quit, then `cairn serve`)"
            return Check("daemon", "warn", f"{where}, Cairn {record['version']}; this is {__version__}", fix), record
        return Check("daemon", "ok", where), record
    others = [r["vault"] for r in running_daemons(config.data_dir)]
    text = f"not running for {config.vault}"
    text += f" (a stale record was ignored: {why})" if why else ""
    text += f"; daemons run for {', '.join(others)}" if others else ""
    fix = f"{_cmd(config, 'serve')} (or `{_cmd(config, 'autostart', 'enable')}` to start it at login)"
    return Check("daemon", "fail", text, fix), None


def check_daemons(config: Config) -> Check:
    """Without a vault: the daemons that run, whatever their vault."""
    from cairn.discovery import running_daemons

    found = running_daemons(config.data_dir)
    if not found:
        return Check("daemon", "warn", "no Cairn daemon runs", f"{_cairn_command()} serve --vault PATH")
    return Check("daemon", "ok", "running for " + ", ".join(f"{r['vault']} at {r['url']}" for r in found))


# -- the plugin -----------------------------------------------------------------------------------------


def _plugin_dir(config: Config) -> Path:
    return config.require_vault() / ".obsidian" / "plugins" / "cairn"


def _shipped_version() -> str:
    manifest = resources.files("cairn").joinpath("obsidian_plugin", "manifest.json").read_text("utf-8")
    return str(json.loads(manifest).get("version", "?"))


def _read_json(path: Path) -> Any:
    """``path`` as JSON; None when it is missing or is not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def check_plugin(config: Config, daemon: dict[str, Any] | None) -> list[Check]:
    """The plugin is installed (``cairn plugin install``'s files), this Cairn's version, turned on in Obsidian, and
    holds this vault's token; with the daemon running, that token opens it from Obsidian's origin."""
    from cairn.cli.admin import PLUGIN_FILES

    install = _cmd(config, "plugin", "install")
    dest = _plugin_dir(config)
    if not (config.require_vault() / ".obsidian").is_dir():
        return []  # the vault's own check says so
    missing = [name for name in PLUGIN_FILES if not (dest / name).is_file()]
    if missing:
        what = "not installed" if len(missing) == len(PLUGIN_FILES) else f"incomplete ({', '.join(missing)} missing)"
        return [Check("plugin", "fail", f"{what} in {dest}", install)]
    checks = []
    version, shipped = (_read_json(dest / "manifest.json") or {}).get("version", "?"), _shipped_version()
    if version != shipped:
        checks.append(Check("plugin", "warn", f"version {version} installed; this Cairn ships {shipped}", install))
    enabled = _read_json(config.require_vault() / ".obsidian" / "community-plugins.json")
    if not (isinstance(enabled, list) and "cairn" in enabled):
        checks.append(
            Check(
                "plugin",
                "warn",
                "installed but not turned on in Obsidian",
                "in Obsidian, Settings → Community plugins → turn on Cairn",
            )
        )
    checks.append(_plugin_token(config, dest, daemon, install))
    return checks


def _plugin_token(config: Config, dest: Path, daemon: dict[str, Any] | None, install: str) -> Check:
    """The token in the plugin's ``data.json`` is this vault's, and (the daemon running) opens it."""
    from cairn.secrets import read_token

    settings = _read_json(dest / "data.json")
    token = settings.get("token") if isinstance(settings, dict) else None
    if not isinstance(token, str) or not token.strip():
        return Check("plugin", "fail", f"installed in {dest} without a token", install)
    try:
        with _quiet("cairn.secrets"):
            own = read_token(config)
    except CairnError as exc:
        return Check("plugin", "fail", f"this vault's token cannot be read: {exc.message}", None)
    if own is None or not hmac.compare_digest(token.strip().encode(), own.encode()):
        why = "this vault has no token yet" if own is None else "it is not this vault's token (rotated, or copied)"
        return Check("plugin", "fail", f"its token will be refused: {why}", install)
    if daemon is None:
        return Check("plugin", "ok", f"installed in {dest} with this vault's token (not tried: no daemon runs)")
    status = _authorised_status(daemon["url"], token.strip()) or 0
    if status == 200:
        return Check("plugin", "ok", f"installed in {dest}; its token opens the daemon at {daemon['url']}")
    why = {
        401: "the daemon refuses its token",
        403: f"the daemon refuses Obsidian's origin {OBSIDIAN_ORIGIN}",
        429: "the daemon is throttling wrong tokens; try again in a few seconds",
    }.get(status, f"the daemon answered HTTP {status}" if status else "the daemon did not answer")
    fix = {401: install, 403: f'keep "{OBSIDIAN_ORIGIN}" in cors_origins (config.toml), then restart the daemon'}
    return Check("plugin", "fail", f"its token was tried at {daemon['url']}: {why}", fix.get(status))


def _authorised_status(url: str, token: str) -> int | None:
    """The HTTP status of ``GET <url>/index/stats`` sent as the plugin sends it (the token, Obsidian's origin);
    None when nothing answers. ``url`` is a discovery record's, which answered as this vault's daemon."""
    request = urllib.request.Request(
        url.rstrip("/") + "/index/stats", headers={"Authorization": f"Bearer {token}", "Origin": OBSIDIAN_ORIGIN}
    )
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as resp:  # noqa: S310 (a loopback record)
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, urllib.error.URLError):
        return None


# -- the desktop: tray, keyring, start at login ------------------------------------------------------


def check_tray() -> Check:
    """The backend ``cairn serve`` would show its icon with (:mod:`cairn.tray.backend`) and whether it has a menu."""
    from cairn.tray.backend import MENU_HINT, TrayUnavailable, choose_backend
    from cairn.tray.status import unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        return Check("tray", "warn", f"no tray icon: {reason}; `cairn serve` runs without one", None)
    try:
        backend = choose_backend()
    except TrayUnavailable as exc:  # pragma: no cover - unavailable_reason said it would load
        return Check("tray", "warn", f"no tray icon: {exc}", None)
    if backend.has_menu:
        return Check("tray", "ok", f"pystray's {backend.name} backend, with its menu")
    return Check("tray", "warn", f"pystray's {backend.name} backend shows the icon but no menu", MENU_HINT)


def check_keyring(config: Config) -> Check:
    """Where the tokens are kept (:func:`cairn.secrets.keyring_state`), and whether this vault's token can be read."""
    from cairn.secrets import keyring_state, read_token

    mode, backend = keyring_state(config)
    files = config.config_dir / "api-tokens"
    if backend is None and mode == "required":
        return Check(
            "keyring",
            "fail",
            'keyring = "required" but no OS keyring backend is usable: `cairn serve` and `cairn token` refuse to start',
            "install and unlock one (Secret Service: GNOME Keyring or KWallet), or drop the setting",
        )
    if config.vault is not None:
        try:
            with _quiet("cairn.secrets"):
                read_token(config)
        except CairnError as exc:
            return Check("keyring", "fail", f"this vault's token cannot be read: {exc.message}", None)
    if mode == "file":
        return Check("keyring", "ok", f'tokens in 0600 files in {files}, as keyring = "file" asks')
    if backend is None:
        return Check(
            "keyring",
            "warn",
            f"no OS keyring backend: tokens are kept in 0600 files in {files}",
            'install one (Secret Service: GNOME Keyring or KWallet), or set keyring = "file" to say that is meant',
        )
    return Check("keyring", "ok", f"the OS keyring ({backend}) keeps the tokens")


def check_autostart(config: Config) -> Check:
    """This vault's login entry (:func:`cairn.autostart.status`): there, enabled, and running a program that is
    still there with this Cairn's folders."""
    from cairn import autostart

    enable = _cmd(config, "autostart", "enable")
    out = autostart.status(config)
    if not out["installed"]:
        return Check("autostart", "warn", f"off for {config.vault}: the daemon starts only by hand", enable)
    command = out.get("command") or []
    program = Path(command[0]) if command else None
    if program is not None and program.is_absolute() and not program.exists():
        return Check("autostart", "fail", f"{out['path']} runs {program}, which is gone", enable)
    if out["current"] is False:
        return Check("autostart", "fail", f"{out['path']} was written for another program or other folders", enable)
    if not out["enabled"]:
        return Check("autostart", "fail", f"{out['path']} is there but not enabled", enable)
    return Check("autostart", "ok", f"on: {out['path']} starts the daemon at login")


def check_autostarts() -> Check:
    """Without a vault: every login entry and the vault it serves."""
    from cairn import autostart

    entries = autostart.status(None)["entries"]
    if not entries:
        return Check(
            "autostart",
            "warn",
            "no login entry: no daemon starts at login",
            f"{_cairn_command()} autostart enable --vault PATH",
        )
    return Check("autostart", "ok", "login entries for " + ", ".join(str(e["vault"] or "?") for e in entries))


# -- the MCP policy -----------------------------------------------------------------------------------


def check_policy(config: Config) -> tuple[Check, Any]:
    """The policy in force (``cairn policy check``) and what waits for ``cairn policy apply``. Returns the check and
    the policy (None when it cannot be used)."""
    from cairn.cli.admin import check_policy as policy_check
    from cairn.cli.admin import waiting_text

    try:
        path, policy, waiting = policy_check(config)
    except CairnError as exc:
        return Check("policy", "fail", exc.message, "fix the file or the record named, then `cairn policy check`"), None
    withheld = [f"tag {t}" for t in policy.withhold.tags] + [f"folder {f}" for f in policy.withhold.folders]
    local = sorted(name for name, client in policy.clients.items() if client.local)
    text = f"{path} withholds {', '.join(withheld) or 'nothing'} from clients not declared local" + (
        f"; local: {', '.join(local)}" if local else ""
    )
    if waiting:
        return Check(
            "policy", "warn", f"{text}. {waiting_text(path, waiting)}", f"{_cairn_command()} policy apply"
        ), policy
    return Check("policy", "ok", text), policy


# -- the report ---------------------------------------------------------------------------------------


def run_checks(config: Config) -> list[Check]:
    """Every check, in the order a new user sets Cairn up."""
    from cairn.cli.doctor_mcp import check_mcp_clients

    checks: list[Check] = []
    daemon = None
    if config.vault is not None:
        checks.append(check_vault(config))
        daemon_check, daemon = check_daemon(config)
        checks += [daemon_check, *check_plugin(config, daemon)]
    else:
        checks.append(check_daemons(config))
    checks += [check_tray(), check_keyring(config)]
    checks.append(check_autostart(config) if config.vault is not None else check_autostarts())
    policy_line, policy = check_policy(config)
    checks += [policy_line, *check_mcp_clients(config, policy)]
    return checks


def cmd_doctor(args: argparse.Namespace, config: Config) -> int:
    """``cairn doctor [--vault PATH] [--json]``: one line per check (``ok``, ``warn``, ``FAIL``) with its fix; exit
    1 when a check fails. ``--json``: ``{"ok": bool, "checks": [{name, status, text, fix}]}``."""
    checks = run_checks(config)
    failed = any(c.status == "fail" for c in checks)
    if args.json:
        _print_json({"ok": not failed, "checks": [asdict(c) for c in checks]})
    else:
        for check in checks:
            print(check.line())
        if config.vault is None:
            print(f"(no vault given: `{_cairn_command()} doctor --vault PATH` checks its index, daemon and plugin too)")
    return 1 if failed else 0
