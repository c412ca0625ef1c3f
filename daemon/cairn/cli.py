"""The ``cairn`` command line (DESIGN.md, Interfaces → CLI).

Exit codes: 0 ok, 1 error (``Error: …`` on stderr), 2 usage. ``--json`` prints one JSON
document on stdout. Logs go to stderr, never stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cairn import __version__, contract
from cairn.config import Config, load_config
from cairn.contract import LIMITS
from cairn.errors import BadRequestError, CairnError

log = logging.getLogger("cairn.cli")


def _global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument("--vault", default=default, help="the Obsidian vault folder (env CAIRN_VAULT)")
    parser.add_argument("--config", default=default, metavar="FILE", help="a TOML config file")
    parser.add_argument("--data-dir", default=default, metavar="DIR", help="where indexes live (env CAIRN_DATA_DIR)")
    parser.add_argument("--debug", action="store_true", default=default, help="verbose logging")


def _top_k_arg(text: str) -> int:
    """``--top-k``: the contract's ``top_k`` range (out of range, or not a number, is a usage error: exit 2)."""
    try:
        return contract.parse_top_k(text, text=True)
    except BadRequestError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cairn", description="Local search and cited answers over your Obsidian vault."
    )
    parser.add_argument("--version", action="version", version=f"cairn {__version__}")
    _global_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, suppress=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", parents=[common], help="run the daemon: index, watch, HTTP API on 127.0.0.1, tray icon")
    p.add_argument("--port", type=int, help="HTTP port (env CAIRN_PORT; 0 picks a free one)")
    p.add_argument(
        "--no-tray",
        action="store_true",
        help="run without a tray icon (also automatic when there is no display or tray backend)",
    )

    p = sub.add_parser("index", parents=[common], help="index the vault incrementally, then exit")
    p.add_argument("--full", action="store_true", help="re-read every note (unchanged text still comes from the cache)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    for name, helptext in (("search", "ranked chunks for a query"), ("ask", "an answer with [n] citations")):
        p = sub.add_parser(name, parents=[common], help=helptext)
        p.add_argument("text", metavar="QUERY" if name == "search" else "QUESTION")
        p.add_argument(
            "--tag", action="append", default=[], help="only notes with this tag (any of; nested tags match)"
        )
        if name == "search":
            p.add_argument("--folder", action="append", default=[], help="only notes under this folder")
        p.add_argument(
            "--top-k",
            type=_top_k_arg,
            default=None,
            help=f"number of results, {LIMITS.top_k_min}..{LIMITS.top_k_max} (default {LIMITS.top_k_default})",
        )
        p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("status", parents=[common], help="index counts, pending work, whether a daemon runs")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("token", parents=[common], help="print the API token the Obsidian plugin uses")
    p.add_argument("--rotate", action="store_true", help="make a new token (the old one stops working)")

    p = sub.add_parser(
        "mcp",
        parents=[common],
        help="governed MCP server for AI agents (stdio by default)",
        description="Serve the vault to an AI agent over MCP, under the governance policy. Over stdio "
        "(the default) the agent launches `cairn mcp --client NAME`; over HTTP the daemon serves "
        "/mcp and each client presents its own token (`cairn mcp token NAME`).",
    )
    p.add_argument(
        "--client", metavar="NAME", help="who this agent is, as named in the policy (never taken from the agent)"
    )
    p.add_argument(
        "--tool",
        action="append",
        default=[],
        metavar="NAME",
        help="serve this tool too, if the client's policy allows it (repeatable)",
    )
    p.add_argument(
        "--http",
        action="store_true",
        help="serve streamable HTTP on loopback in the foreground instead of stdio (as `cairn serve` does)",
    )
    mcp_sub = p.add_subparsers(dest="mcp_command", metavar="ACTION")
    q = mcp_sub.add_parser("token", parents=[common], help="print (or rotate) the HTTP bearer token of one MCP client")
    q.add_argument("name", metavar="NAME", help="the client's name in the policy, e.g. claude-desktop")
    q.add_argument("--rotate", action="store_true", help="make a new token (the old one stops working at once)")
    q = mcp_sub.add_parser("audit", parents=[common], help="print the MCP audit log (one line per tool call)")
    q.add_argument("--client", dest="audit_client", metavar="NAME", help="only this client's calls")
    q.add_argument("--json", action="store_true", help="print the JSON lines as they are stored")

    p = sub.add_parser("policy", parents=[common], help="the MCP governance policy")
    policy_sub = p.add_subparsers(dest="policy_command", required=True, metavar="check")
    q = policy_sub.add_parser(
        "check", parents=[common], help="validate a policy; exit 1 with FILE:LINE: reason if invalid"
    )
    q.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="the policy to check (default: your copy in the config folder, created from the default)",
    )

    p = sub.add_parser(
        "autostart",
        parents=[common],
        help="start `cairn serve` at login (systemd user unit, macOS LaunchAgent, Windows Startup entry)",
    )
    p.add_argument(
        "autostart_action",
        choices=["enable", "disable", "status"],
        metavar="ACTION",
        help="enable (for the vault given), disable or status",
    )
    p.add_argument("--json", action="store_true", help="print the status as JSON")

    p = sub.add_parser("paths", parents=[common], help="print the config, data, log and cache folders")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("plugin", parents=[common], help="the Obsidian plugin")
    plugin_sub = p.add_subparsers(dest="plugin_command", required=True, metavar="ACTION")
    q = plugin_sub.add_parser(
        "install", parents=[common], help="copy the plugin into <vault>/.obsidian/plugins/cairn/ (never touches notes)"
    )
    q.add_argument(
        "--from",
        dest="plugin_source",
        metavar="DIR",
        help="a folder with a fresh build (main.js, manifest.json, styles.css) instead of the shipped one",
    )

    p = sub.add_parser("secret", parents=[common], help="store a secret (the LLM API key) in the OS keyring")
    secret_sub = p.add_subparsers(dest="secret_command", required=True, metavar="ACTION")
    q = secret_sub.add_parser("set", help="read the value from stdin (or a hidden prompt) and store it")
    q.add_argument("name", choices=["llm-api-key"], help="which secret")
    return parser


def _config(args: argparse.Namespace) -> Config:
    overrides = {
        "vault": getattr(args, "vault", None),
        "data_dir": getattr(args, "data_dir", None),
        "debug": True if getattr(args, "debug", None) else None,
        "port": getattr(args, "port", None),
    }
    config_file = Path(args.config) if getattr(args, "config", None) else None
    return load_config(overrides, config_file=config_file)


def _print_json(data: Any) -> None:
    text = json.dumps(data, ensure_ascii=False, indent=2)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a path with a byte that is not UTF-8 (surrogateescape): "\udce9" keeps it JSON
        text = json.dumps(data, indent=2)
    sys.stdout.write(text + "\n")


def _progress_bar():
    """A tqdm progress callback on a terminal (stderr), else None."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from tqdm import tqdm

    bars: dict[str, Any] = {}

    def progress(phase: str, done: int, total: int) -> None:
        bar = bars.get(phase)
        if bar is None:
            label = {"scan": "scanning", "index": "indexing", "embed": "embedding", "pdf": "PDFs"}.get(phase, phase)
            unit = {"embed": "chunk", "pdf": "file"}.get(phase, "note")
            bar = bars[phase] = tqdm(
                total=total, desc=label, unit=unit, file=sys.stderr, leave=True, dynamic_ncols=True
            )
        bar.total = total
        bar.n = done
        bar.refresh()

    def close() -> None:
        for bar in bars.values():
            bar.close()

    return progress, close


def _writer_lock(config: Config):
    """The index's single-writer lock (the one ``cairn serve`` holds), for a one-shot writer (role ``index``)."""
    from cairn.store.recovery import InstanceLock, instance_lock_path

    return InstanceLock(
        instance_lock_path(config.db_path),
        role="index",
        service_file=config.service_file,
        what=f"the vault {str(config.vault)!r} with the data folder {str(config.data_dir)!r}",
    )


def cmd_index(args: argparse.Namespace, config: Config) -> int:
    """One-shot index. Refused (``AlreadyRunning``, exit 1) while a daemon or another ``cairn index`` writes this
    index: the message names it (pid, URL from service.json) and says to use ``POST /index/reindex`` / the tray."""
    from cairn.app import Cairn

    config.require_vault()
    lock = _writer_lock(config).acquire()
    try:
        cairn = Cairn(config)
        progress, close = _progress_bar()
        try:
            report = cairn.index(full=args.full, progress=progress)
        finally:
            close()
            stats = cairn.stats()
            cairn.close()
    finally:
        lock.release()
    if args.json:
        _print_json({**report.to_json(), "stats": {k: stats[k] for k in ("notes", "chunks", "vectors", "pending")}})
        return 0
    print(
        f"Indexed {config.vault}: {report.scanned} files scanned — {report.added} added, {report.updated} updated, "
        f"{report.unchanged} unchanged, {report.deleted} removed, {len(report.skipped)} skipped."
    )
    pdfs = f" (of them {stats['pdfs']} PDFs)" if stats.get("pdfs") else ""
    print(
        f"{stats['notes']} notes{pdfs}, {stats['chunks']} chunks, {stats['vectors']} vectors; "
        f"{report.texts_embedded} texts embedded; keyword-ready in {report.keyword_ready_s:.1f} s, "
        f"done in {report.elapsed_s:.1f} s."
    )
    if report.cache_pruned:
        print(f"Dropped {report.cache_pruned} cached vectors of text no note uses any more (cached over 30 days ago).")
    for path, reason in report.skipped:
        print(f"  skipped {path}: {reason}")
    for path, reason in report.warnings:
        print(f"  warning {path}: {reason}")
    told = {p for p, _ in report.skipped}
    earlier = [e for e in stats.get("errors", []) if e.get("skipped") and e["filePath"] not in told]
    if earlier:  # unchanged since an earlier run skipped them: still not in the index, so say so again
        print(f"Still not indexed (unchanged since an earlier run skipped them): {len(earlier)} file(s).")
        for e in earlier:
            print(f"  skipped {e['filePath']}: {e['reason']}")
    return 0


def _open_for_query(config: Config):
    from cairn.app import Cairn
    from cairn.store.recovery import AlreadyRunning

    config.require_vault()
    try:
        lock = _writer_lock(config).acquire()
    except AlreadyRunning:  # a daemon (or `cairn index`) writes this index and keeps it fresh: only read it here
        lock = None
    try:
        cairn = Cairn(config)
        if lock is not None and (cairn.store.stats().notes == 0 or cairn.store.count_pending()):
            # First use, or vectors missing: bring the index up to date first (incremental, usually instant).
            cairn.index()
    finally:
        if lock is not None:
            lock.release()
    return cairn


def cmd_search(args: argparse.Namespace, config: Config) -> int:
    wanted = contract.SearchRequest.parse(
        {"query": args.text, "top_k": args.top_k, "tags": args.tag, "folders": args.folder}, default_top_k=config.top_k
    )
    cairn = _open_for_query(config)
    try:
        result = cairn.query.search(wanted.query, top_k=wanted.top_k, tags=wanted.tags, folders=wanted.folders)
    finally:
        cairn.close()
    if args.json:
        _print_json(contract.search_json(result))
        return 0
    if not result.hits:
        print("No results above the similarity floor.")
    for i, h in enumerate(result.hits, 1):
        where = f"p.{h.page}" if h.page else (f"lines {h.lines[0]}–{h.lines[1]}" if h.lines else "")
        print(
            f"{i}. {h.file_path}"
            + (f" › {h.symbol}" if h.symbol else "")
            + f"  ({where}, score {h.score:.4f}, cos {h.cosine:.2f})"
        )
        print(f"   {h.snippet}")
    return 0


def cmd_ask(args: argparse.Namespace, config: Config) -> int:
    wanted = contract.AskRequest.parse(
        {"question": args.text, "top_k": args.top_k, "tags": args.tag}, default_top_k=config.top_k
    )
    cairn = _open_for_query(config)
    try:
        if config.llm.configured:
            from cairn.answer import AnswerService
            from cairn.app import remote_model_withhold
            from cairn.llm import OpenAIChatModel
            from cairn.secrets import LLM_API_KEY, get_secret

            model = OpenAIChatModel(config.llm, api_key=get_secret(config, LLM_API_KEY))
            service = AnswerService(
                cairn.query,
                model,
                withhold_tags=remote_model_withhold(config) if model.remote else config.llm.withhold_tags,
            )
            answer = asyncio.run(service.answer(wanted.question, top_k=wanted.top_k, tags=wanted.tags))
        else:
            answer = cairn.query.ask(wanted.question, top_k=wanted.top_k, tags=wanted.tags)
    finally:
        cairn.close()
    if args.json:
        _print_json(contract.agent_answer_json(answer))
        return 0
    print(answer.text)
    if not answer.not_found and not answer.grounded:
        print(
            "\n(Built from your notes' own sentences: "
            + ("the language model did not answer.)" if config.llm.configured else "no language model is configured.)")
        )
    return 0


def _daemon_probe(config: Config) -> dict | None:
    """This vault's daemon ``{url, pid, health}`` from its ``service-<index>.json`` (else from a ``service.json``
    that names this vault, or no vault: a daemon from before per-vault files), when it answers /health."""
    try:
        try:
            info = json.loads(config.service_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            info = json.loads(config.shared_service_file.read_text(encoding="utf-8"))
            if info.get("vault", str(config.vault)) != str(config.vault):
                return None
        with urllib.request.urlopen(info["url"] + "/health", timeout=2) as resp:
            return {"url": info["url"], "pid": info.get("pid"), "health": json.loads(resp.read())}
    except (OSError, ValueError, KeyError, AttributeError, TypeError, urllib.error.URLError):
        return None


def cmd_status(args: argparse.Namespace, config: Config) -> int:
    from cairn.indexing import index_stats_json
    from cairn.store import IndexStats, Store

    out: dict[str, Any] = {"vault": str(config.require_vault()), "database": str(config.db_path)}
    if config.db_path.exists():
        store = Store(config.db_path, readonly=True)
        try:
            out.update(index_stats_json(store.stats()))
        finally:
            store.close()
    else:
        out.update(index_stats_json(IndexStats()))
    daemon = _daemon_probe(config)
    out["daemon"] = {"running": daemon is not None, **({"url": daemon["url"], "pid": daemon["pid"]} if daemon else {})}
    if args.json:
        _print_json(out)
        return 0
    import datetime as _dt

    last = out.get("lastIngestedAt")
    last_s = _dt.datetime.fromtimestamp(last).isoformat(timespec="seconds") if last else "never"
    print(f"Vault:    {out['vault']}")
    print(f"Index:    {out['notes']} notes, {out['chunks']} chunks, {out['vectors']} vectors, {out['pending']} pending")
    print(f"Updated:  {last_s}")
    partial = len(out["errors"]) - out["skipped"]
    print(
        f"Skipped:  {out['skipped']} file(s)"
        + (f"; {partial} more indexed in part or with a warning" if partial else "")
        + " (cairn status --json lists them)"
        if out["errors"]
        else "Skipped:  none"
    )
    print(f"Daemon:   running at {daemon['url']}" if daemon else "Daemon:   not running (start it with `cairn serve`)")
    return 0


def cmd_token(args: argparse.Namespace, config: Config) -> int:
    from cairn.secrets import get_or_create_token, rotate_token

    token = rotate_token(config) if args.rotate else get_or_create_token(config)
    print(token)
    if args.rotate:
        print(
            "New token made; a running daemon refuses the old one from now on. Paste the new one into the "
            "plugin settings.",
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


def cmd_policy(args: argparse.Namespace, config: Config) -> int:
    """``cairn policy check [FILE]``: ``ok: FILE`` (exit 0), or ``Error: FILE:LINE: reason`` on stderr (exit 1).
    Without FILE it checks the policy `cairn mcp` uses: ``mcp_policy`` when configured, else the owner's copy in
    the config folder (created from the shipped default first)."""
    from cairn.app import mcp_policy_path
    from cairn.policy_file import load_policy

    path = Path(args.file) if args.file else mcp_policy_path(config)
    load_policy(path)  # PolicyError → `Error: FILE:LINE: reason`, exit 1 (main)
    print(f"ok: {path}")
    return 0


def cmd_autostart(args: argparse.Namespace, config: Config) -> int:
    """``cairn autostart enable|disable|status``: the login entry of :mod:`cairn.autostart`."""
    from cairn import autostart

    if args.autostart_action == "enable":
        entry = autostart.enable(config)
        print(f"Start at login enabled: {entry.path} runs `cairn serve --vault {config.vault}`.")
        if entry.platform == "linux":
            print(
                "It starts at your next login; to start it now: systemctl --user daemon-reload && "
                "systemctl --user start cairn"
            )
        return 0
    if args.autostart_action == "disable":
        removed = autostart.disable()
        print(
            "Start at login disabled: removed " + ", ".join(str(p) for p in removed)
            if removed
            else "Start at login was not enabled; nothing to remove."
        )
        return 0
    out = autostart.status(config if config.vault is not None else None)
    if args.json:
        _print_json(out)
        return 0
    if not out["installed"]:
        print(
            f"Start at login: disabled (no entry at {out['path']}). Enable it with: cairn autostart enable --vault PATH"
        )
    else:
        state = "enabled" if out["enabled"] else "installed but not enabled"
        print(f"Start at login: {state} ({out['path']})")
        if out["vault"]:
            print(f"Runs:           cairn serve --vault {out['vault']}")
        if out["current"] is False:
            print(
                "The entry was written for another vault, program or folders; run `cairn autostart enable` again "
                "to update it."
            )
    return 0


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
        print(f"Get the API token for the Obsidian plugin with: {_cairn_command()} token", file=sys.stderr)
        print("Stop with Ctrl-C.", file=sys.stderr)
        sys.stderr.flush()

    return serve(config, tray=not args.no_tray, ready=ready)


PLUGIN_FILES = ("main.js", "manifest.json", "styles.css")


def cmd_plugin(args: argparse.Namespace, config: Config) -> int:
    """``cairn plugin install --vault PATH [--from DIR]``: copy the built plugin (``main.js``, ``manifest.json``,
    ``styles.css``; shipped in the package as ``cairn/obsidian_plugin/``) into ``<vault>/.obsidian/plugins/cairn/``.
    The one write into a vault, asked for by its owner: only those three files, never a note, never the plugin's
    ``data.json`` (its settings and token). Raises ConfigError for a folder that is not an Obsidian vault (no
    ``.obsidian``), missing plugin files, or a plugin folder that leads outside the vault (a symlink)."""
    import os
    from importlib import resources

    from cairn.errors import ConfigError

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
        p.is_symlink() for p in (obsidian / "plugins", dest, *(dest / n for n in PLUGIN_FILES))
    ) or not dest.resolve().is_relative_to(vault.resolve()):
        raise ConfigError(
            f"{dest} (or a file in it) is a symbolic link; Cairn does not write through links. "
            "Remove the link, or copy the plugin files there yourself."
        )
    dest.mkdir(parents=True, exist_ok=True)
    for name in PLUGIN_FILES:
        tmp = dest / f".{name}.cairn-tmp"
        tmp.write_bytes(source.joinpath(name).read_bytes())
        os.replace(tmp, dest / name)
    version = json.loads((dest / "manifest.json").read_text(encoding="utf-8")).get("version", "?")
    print(f"Installed the Cairn plugin {version} into {dest}")
    print(
        "In Obsidian: Settings → Community plugins → turn on Cairn (reload the list if Obsidian was open), "
        "then paste the output of `cairn token` into Settings → Cairn."
    )
    return 0


COMMANDS = {
    "serve": cmd_serve,
    "index": cmd_index,
    "search": cmd_search,
    "ask": cmd_ask,
    "status": cmd_status,
    "token": cmd_token,
    "secret": cmd_secret,
    "mcp": cmd_mcp,
    "policy": cmd_policy,
    "autostart": cmd_autostart,
    "paths": cmd_paths,
    "plugin": cmd_plugin,
}


def _cairn_command() -> str:
    """How to run this ``cairn`` again: ``cairn`` when that is the one on PATH, else its full path
    (``make run`` starts ``.venv/bin/cairn``, which is usually not on PATH)."""
    me = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    found = shutil.which("cairn")
    if me is None or me.name != "cairn" or (found and Path(found).resolve() == me):
        return "cairn"
    return str(me)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cairn`` console script. Returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = _config(args)
        if args.command not in ("serve", "mcp") or getattr(args, "mcp_command", None):
            logging.basicConfig(
                level=logging.DEBUG if config.debug else logging.WARNING,
                stream=sys.stderr,
                format="%(levelname)s %(name)s: %(message)s",
            )
        code = COMMANDS[args.command](args, config)
        sys.stdout.flush()  # a closed pipe shows up here, inside the try, not at interpreter exit
        return code
    except CairnError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `cairn … | head`: the reader left; not an error (Python docs, "Note on SIGPIPE")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:  # a bug, but still one `Error: …` line and exit 1 (the traceback with --debug)
        if getattr(args, "debug", None):
            raise
        print(
            f"Error: unexpected {type(exc).__name__}: {exc} (run again with --debug for the traceback)", file=sys.stderr
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
