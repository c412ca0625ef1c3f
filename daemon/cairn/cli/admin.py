"""The owner's ``cairn`` commands: ``serve``, ``token``, ``secret``, ``mcp``, ``policy``, ``autostart``,
``paths`` and ``plugin``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.cli.common import _cairn_command, _print_json
from cairn.config import Config

if TYPE_CHECKING:
    from cairn.policy import Policy


def cmd_token(args: argparse.Namespace, config: Config) -> int:
    """``cairn token [--rotate]``: the vault's API token (each vault has its own: it opens that vault's daemon
    only). Raises ConfigError when no vault is given."""
    from cairn.errors import ConfigError
    from cairn.secrets import get_or_create_token, rotate_token

    if config.vault is None:
        raise ConfigError(
            "Each vault has its own API token: pass --vault PATH (or set CAIRN_VAULT) to say whose. "
            f"`{_cairn_command()} plugin install --vault PATH` gives a vault's plugin its token."
        )
    config.require_vault()
    token = rotate_token(config) if args.rotate else get_or_create_token(config)
    print(token)
    if args.rotate:
        print(
            "New token made; a running daemon refuses the old one from now on. Give the plugin the new one: "
            f"`{_cairn_command()} plugin install --vault {config.vault}`.",
            file=sys.stderr,
        )
    return 0


def cmd_secret(args: argparse.Namespace, config: Config) -> int:
    """``cairn secret set llm-api-key``: the value from stdin when piped, else a hidden prompt; never an argument
    (it would land in the shell history and the process list)."""
    from cairn.secrets import set_secret

    if sys.stdin.isatty():
        import getpass

        value = getpass.getpass(f"{args.name}: ")
    else:
        value = sys.stdin.readline()
    where = set_secret(config, args.name, value)
    print(
        f"Stored {args.name} in {'the OS keyring' if where == 'keyring' else where + ' (mode 0600)'}; "
        "restart `cairn serve` to use it.",
        file=sys.stderr,
    )
    return 0


def cmd_mcp(args: argparse.Namespace, config: Config) -> int:
    """``cairn mcp``: stdio (or ``--http``) MCP server; ``cairn mcp token NAME``; ``cairn mcp audit``."""
    action = getattr(args, "mcp_command", None)
    if action == "token":
        from cairn.secrets import mcp_token

        print(mcp_token(config, args.name, rotate=args.rotate))
        if args.rotate:
            print(f"New MCP token for {args.name}; a running daemon refuses the old one from now on.", file=sys.stderr)
        _policy_hints(config, args.name)
        return 0
    if action == "audit":
        from cairn.audit import audit_path, read_audit

        path = audit_path(config.data_dir)
        seen = 0
        for entry in read_audit(path, client=args.audit_client):
            seen += 1
            if args.json:
                sys.stdout.write(json.dumps(entry, ensure_ascii=False) + "\n")
            else:
                paths = ", ".join(entry.get("paths") or []) or "-"
                print(
                    f"{entry.get('time')}  {entry.get('client')}  {entry.get('transport')}  {entry.get('tool')}  "
                    f"{entry.get('decision')}  withheld={entry.get('withheld')}  {paths}"
                )
        if not seen:
            who = f" by {args.audit_client}" if args.audit_client else ""
            print(f"No MCP tool calls{who} are recorded in {path}.", file=sys.stderr)
        return 0
    from cairn.app import run_mcp_http, run_mcp_stdio, setup_logging

    if args.http:
        if args.client or args.tool:
            print(
                "Error: with --http the client is the owner of the bearer token (`cairn mcp token NAME`) and extra "
                "tools are asked for in the URL (/mcp?tool=NAME); drop --client/--tool.",
                file=sys.stderr,
            )
            return 2
        setup_logging(config)

        def ready(url: str) -> None:
            print(
                f"Cairn serves MCP (streamable HTTP) for {config.vault} at {url}; each client sends "
                "'Authorization: Bearer <token>' from `cairn mcp token NAME`. Stop with Ctrl-C.",
                file=sys.stderr,
            )

        return asyncio.run(run_mcp_http(config, ready=ready))
    setup_logging(config)  # stderr and the log file; stdout carries only the protocol
    return asyncio.run(run_mcp_stdio(config, client=args.client, tools=args.tool))


def _policy_hints(config: Config, client: str) -> None:
    """``Warning: …`` on stderr when ``client`` is not declared in the policy ``cairn mcp`` uses (or that policy
    cannot be read), with the line to add (:meth:`cairn.policy.Policy.hints`)."""
    from cairn.policy import PolicyError
    from cairn.policy_file import load_policy, mcp_policy_path

    try:
        hints = load_policy(mcp_policy_path(config)).hints(client, ())
    except PolicyError as exc:
        hints = [f"the MCP policy cannot be used, so every client gets the fail-closed default: {exc.message}"]
    for hint in hints:
        print(f"Warning: {hint}", file=sys.stderr)


def cmd_policy(args: argparse.Namespace, config: Config) -> int:
    """``cairn policy check [FILE]``: ``ok: FILE`` (exit 0), or ``Error: FILE:LINE: reason`` on stderr (exit 1).
    Without FILE it checks the policy `cairn mcp` uses: with ``--vault``, the one that governs the vault (its
    record damaged or missing: exit 1 naming it); else ``mcp_policy`` when configured, else the owner's copy in
    the config folder (created from the shipped default on the true first use only). A change waiting for the
    owner's confirmation is named on stderr; a damaged or vanished record of the confirmed policy is an error.
    ``cairn policy init``: writes the shipped default there when no file is there (exit 1 when one is).
    ``cairn policy apply``: :func:`_policy_apply`."""
    from cairn.errors import ConfigError
    from cairn.policy_file import create_policy, owner_policy_path

    if args.policy_command == "apply":
        return _policy_apply(config)
    if args.policy_command == "init":
        path = config.mcp_policy or owner_policy_path(config.config_dir)
        if not create_policy(path, config.data_dir):
            raise ConfigError(f"{path} already exists; edit it (then `cairn policy check`), or move it away first.")
        print(
            f"Created {path} from the shipped default (it withholds notes tagged personal from clients not declared "
            "local); edit it to add your withheld folders and clients."
        )
        return 0
    path, _, waiting = check_policy(config, Path(args.file) if args.file else None)
    print(f"ok: {path}")
    if waiting:
        print(f"{waiting_text(path, waiting)} Run `cairn policy apply` to confirm it.", file=sys.stderr)
    return 0


def check_policy(config: Config, path: Path | None = None) -> tuple[Path, Policy, list[str]]:
    """``cairn policy check``: the policy at ``path`` (default: the one ``cairn mcp`` uses, :func:`_policy_in_use`),
    loaded, and what it withholds less than the policy last confirmed (waiting for ``cairn policy apply``). Raises
    :class:`~cairn.policy.PolicyError` (``FILE:LINE: reason``) for an invalid policy, or naming the governance record
    that is damaged or gone."""
    from cairn.policy_file import awaiting_confirmation, load_policy

    path = path or _policy_in_use(config)
    policy = load_policy(path)
    return path, policy, awaiting_confirmation(path)


def waiting_text(path: Path, waiting: list[str]) -> str:
    """What a policy change waiting for ``cairn policy apply`` means, in one sentence."""
    link = f" (a link to {path.resolve()})" if path.is_symlink() else ""
    return (
        f"Not in force yet: {path}{link} withholds less than the policy you last confirmed ({', '.join(waiting)}); "
        "meanwhile the stricter of the two is in force."
    )


def _policy_in_use(config: Config) -> Path:
    """The policy ``cairn mcp`` would use: with a vault whose index exists, the one that governs it (PolicyError
    when its record is damaged or names another policy); else the configured one."""
    from cairn.policy_file import mcp_policy_path
    from cairn.policy_vault import governing_policy

    if config.vault is not None and config.vault.is_dir() and config.db_path.exists():
        return governing_policy(config)
    return mcp_policy_path(config)


def _policy_apply(config: Config) -> int:
    """``cairn policy apply``: confirm the policy file as it is now (every Cairn process reading it uses it within
    a second); with ``--vault``, also record it as the policy that governs that vault's index."""
    from cairn.policy_file import apply_policy, mcp_policy_path
    from cairn.policy_vault import record_vault_policy

    path = mcp_policy_path(config)
    _, less = apply_policy(path)  # PolicyError → `Error: FILE:LINE: reason`, exit 1
    print(f"Applied {path}: Cairn uses it as it is now (running servers within a second).")
    if less:
        print(f"It withholds less than the policy before: {', '.join(less)}.")
    if config.vault is not None:
        config.require_vault()
        if not config.db_path.exists():
            print(f"No index of {config.vault} in {config.data_dir} yet; `cairn index` records this policy for it.")
        elif record_vault_policy(config, force=True) is not None:
            print(f"It governs {config.vault} from now on (recorded beside its index in {config.data_dir}).")
    return 0


def cmd_autostart(args: argparse.Namespace, config: Config) -> int:
    """``cairn autostart enable|disable|status``: the login entries of :mod:`cairn.autostart`, one per vault.
    ``enable`` needs ``--vault``; ``disable --vault`` removes that vault's entry, ``disable`` alone every one."""
    from cairn import autostart

    if args.autostart_action == "enable":
        entry = autostart.enable(config)
        print(f"Start at login enabled: {entry.path} runs `cairn serve --vault {config.vault}`.")
        if entry.platform == "linux":
            print(
                "It starts at your next login; to start it now: systemctl --user daemon-reload && "
                f"systemctl --user start {entry.path.stem}"
            )
        return 0
    if args.autostart_action == "disable":
        removed = autostart.disable(config)
        whose = f" for {config.vault}" if config.vault is not None else ""
        print(
            "Start at login disabled: removed " + ", ".join(str(p) for p in removed)
            if removed
            else f"Start at login was not enabled{whose}; nothing to remove."
        )
        return 0
    out = autostart.status(config if config.vault is not None else None)
    if args.json:
        _print_json(out)
        return 0
    _print_autostart(out, config)
    return 0


def _print_autostart(out: dict, config: Config) -> None:
    """``cairn autostart status``: this vault's entry (with ``--vault``), then every entry installed."""
    if config.vault is not None:
        if not out["installed"]:
            print(f"Start at login: disabled for {config.vault}. Enable it with: cairn autostart enable --vault PATH")
        else:
            state = "enabled" if out["enabled"] else "installed but not enabled"
            print(f"Start at login: {state} for {config.vault} ({out['path']})")
            if out["current"] is False:
                print(
                    "The entry was written for another program, folders or Cairn version; run `cairn autostart "
                    "enable` again to update it."
                )
    entries = out["entries"]
    if not entries:
        if config.vault is None:
            print("Start at login: disabled (no entry). Enable it with: cairn autostart enable --vault PATH")
        return
    print(f"Start at login entries ({len(entries)}):")
    for e in entries:
        state = "enabled" if e["enabled"] else "not enabled"
        print(f"  {state:<12} cairn serve --vault {e['vault'] or '?'}  ({e['path']})")


def cmd_paths(args: argparse.Namespace, config: Config) -> int:
    """``cairn paths``: where Cairn keeps its config, data (indexes, service.json), log and cache files."""
    import platformdirs

    out = {
        "config": str(config.config_dir),
        "data": str(config.data_dir),
        "log": str(config.log_dir),
        "cache": platformdirs.user_cache_dir("cairn"),
    }
    if args.json:
        _print_json(out)
        return 0
    for key, value in out.items():
        print(f"{key + ':':<8}{value}")
    return 0


def cmd_serve(args: argparse.Namespace, config: Config) -> int:
    from cairn.app import serve, setup_logging

    setup_logging(config)

    def ready(url: str) -> None:
        print(f"Cairn is serving {config.vault} at {url}", file=sys.stderr)
        mcp_url = _own_record(config).get("mcpUrl")
        if mcp_url:
            print(
                f"MCP (streamable HTTP) for agents at {mcp_url}; each client's bearer token: "
                f"{_cairn_command()} mcp token NAME",
                file=sys.stderr,
            )
        print(
            f"The Obsidian plugin, with this vault's token: {_cairn_command()} plugin install --vault {config.vault}",
            file=sys.stderr,
        )
        print("Stop with Ctrl-C.", file=sys.stderr)
        sys.stderr.flush()

    return serve(config, tray=not args.no_tray, ready=ready)


def _own_record(config: Config) -> dict:
    """This process's discovery record (``service-<index>.json``, written before ``ready``), or ``{}``."""
    import os

    try:
        info = json.loads(config.service_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) and info.get("pid") == os.getpid() else {}


PLUGIN_FILES = ("main.js", "manifest.json", "styles.css")


def cmd_plugin(args: argparse.Namespace, config: Config) -> int:
    """``cairn plugin install --vault PATH [--from DIR]``: copy the built plugin (``main.js``, ``manifest.json``,
    ``styles.css``; shipped in the package as ``cairn/obsidian_plugin/``) into ``<vault>/.obsidian/plugins/cairn/``
    and put the vault's API token into the plugin's ``data.json`` (mode 0600, its other settings kept), so the
    sidebar works without pasting it. The one write into a vault, asked for by its owner: only those four files, never a
    note. Raises ConfigError for a folder that is not an Obsidian vault (no ``.obsidian``), missing plugin files,
    a plugin folder that leads outside the vault (a symlink), or a ``data.json`` that is not a JSON object."""
    import os
    from importlib import resources

    from cairn.errors import ConfigError
    from cairn.private_files import users_umask
    from cairn.secrets import get_or_create_token

    vault = config.require_vault()
    obsidian = vault / ".obsidian"
    if not obsidian.is_dir():
        raise ConfigError(
            f"{str(vault)!r} has no .obsidian folder, so it is not an Obsidian vault (or was never "
            "opened in Obsidian); open it in Obsidian once, or pass the right --vault."
        )
    source = Path(args.plugin_source) if args.plugin_source else resources.files("cairn").joinpath("obsidian_plugin")
    missing = [name for name in PLUGIN_FILES if not source.joinpath(name).is_file()]
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} missing from {source}; build the plugin with `npm ci && npm run build` "
            "in packaging/obsidian-plugin and pass --from that folder."
        )
    dest = obsidian / "plugins" / "cairn"
    if any(
        p.is_symlink() for p in (obsidian / "plugins", dest, *(dest / n for n in (*PLUGIN_FILES, "data.json")))
    ) or not dest.resolve().is_relative_to(vault.resolve()):
        raise ConfigError(
            f"{dest} (or a file in it) is a symbolic link; Cairn does not write through links. "
            "Remove the link, or copy the plugin files there yourself."
        )
    settings = _plugin_settings(dest / "data.json")
    settings["token"] = get_or_create_token(config)  # before any write: a refused keyring leaves the vault alone
    with users_umask():  # the vault's files keep the user's usual modes, not Cairn's private ones
        dest.mkdir(parents=True, exist_ok=True)
        for name in PLUGIN_FILES:
            tmp = dest / f".{name}.cairn-tmp"
            tmp.write_bytes(source.joinpath(name).read_bytes())
            os.replace(tmp, dest / name)
    _write_private(dest / "data.json", json.dumps(settings, indent=2) + "\n")
    version = json.loads((dest / "manifest.json").read_text(encoding="utf-8")).get("version", "?")
    print(f"Installed the Cairn plugin {version} into {dest}, with this vault's API token in its data.json")
    print(
        "In Obsidian: Settings → Community plugins → turn on Cairn (reload the list if Obsidian was open). "
        "The token travels with the vault when it is synced; it opens only this vault's daemon."
    )
    return 0


def _plugin_settings(path: Path) -> dict:
    """The plugin's settings in ``data.json`` (``{}`` when there is none yet), kept as they are but the token.
    Raises ConfigError naming the file when it is not a JSON object (nothing is overwritten then)."""
    from cairn.errors import ConfigError

    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path} cannot be read as JSON ({exc}); fix it or delete it (it holds the plugin's settings), "
            "then run `cairn plugin install` again."
        ) from None
    if not isinstance(settings, dict):
        raise ConfigError(f"{path} is not a JSON object; fix it or delete it, then run `cairn plugin install` again.")
    return settings


def _write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically with ``text``, mode 0600 (it holds the vault's token)."""
    import os

    tmp = path.with_name(f".{path.name}.cairn-tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(tmp, path)
