"""The ``cairn`` argument parser (argparse): the commands, their options, and the contract's limits."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from cairn import __version__, contract
from cairn.contract import LIMITS
from cairn.errors import BadRequestError


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


SEARCH_SYNTAX = """\
Ranked passages for QUERY: every note containing its words, then notes similar in meaning.
QUERY uses Obsidian's search syntax:
  banneton               notes with the word (a word in <= 5 notes puts them first)
  garden compost         notes with both words first, then with one, then similar notes
  "cold proof"           the exact phrase
  garden -tomato         no note containing "tomato"; also -"a phrase", -(a b)
  tag:#kitchen bread     only notes tagged kitchen or kitchen/...
  path:Garden file:sour  only notes whose path / file name contains the text
  file:(bread OR soup)   an operator applies to each term of a group: file:bread OR file:soup
  compost OR mulch       either; OR binds loosest, (parentheses) group
Words match as the index reads them (case, accents, endings ignored). The last word also
matches as a prefix from 3 letters (bannet); a word of 5+ letters matching nothing matches
the nearest words, one edit away, two from 8 letters (banetton). Plain queries of more than
3 words read as a question. Malformed syntax is read as plain words.
A query that starts with "-" goes after "--": cairn search -- -tomato --vault V
(options may still follow it). No QUERY (or ""): the most recently modified notes, newest first."""


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``parser.parse_args(argv)`` where options may also follow the positionals given after ``--``:
    ``cairn search -- -tomato --vault V`` reads QUERY ``-tomato`` and the option ``--vault V``. After ``--``, as
    many words as the command still has positionals for are taken as they are (a query may start with ``-``);
    what follows them is read as options again. Usage errors exit 2 (argparse)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" in args:
        cut = args.index("--")
        head, tail = args[:cut], args[cut + 1 :]
        slots = _open_positionals(parser, head)
        if slots is not None and tail[slots:] and tail[slots:][0].startswith("-"):
            args = head + tail[slots:] + ["--"] + tail[:slots]
    return parser.parse_args(args)


def _open_positionals(parser: argparse.ArgumentParser, head: Sequence[str]) -> int | None:
    """How many positionals the command named in ``head`` (the words before ``--``) still takes; ``None`` when
    it takes any number (then every word after ``--`` is one)."""
    current, seen, words = parser, 0, iter(head)
    for word in words:
        if word.startswith("-") and len(word) > 1:
            action = current._option_string_actions.get(word)
            if action is not None and action.nargs != 0:
                next(words, None)  # the option's value
            continue
        sub = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is not None and seen == 0 and word in sub.choices:
            current = sub.choices[word]
            continue
        seen += 1
    total = 0
    for action in current._actions:
        if action.option_strings or isinstance(action, argparse._SubParsersAction):
            continue
        if action.nargs in (None, "?"):
            total += 1
        elif isinstance(action.nargs, int):
            total += action.nargs
        else:
            return None
    return max(total - seen, 0)


def build_parser() -> argparse.ArgumentParser:
    """The ``cairn`` argument parser: global options, then one sub-command each (docs/design.md, "Interfaces" → CLI)."""
    parser = argparse.ArgumentParser(
        prog="cairn", description="Local search and cited answers over your Obsidian vault."
    )
    parser.add_argument("--version", action="version", version=f"cairn {__version__}")
    _global_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, suppress=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_index_commands(sub, common)
    _add_mcp_commands(sub, common)
    _add_admin_commands(sub, common)
    return parser


def _add_index_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """``serve``, ``index``, ``search``, ``ask``, ``status``."""
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
        p = sub.add_parser(
            name,
            parents=[common],
            help=helptext,
            description=SEARCH_SYNTAX if name == "search" else None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if name == "search":  # no QUERY (or ""): the most recently modified notes
            p.add_argument("text", metavar="QUERY", nargs="?", default="")
        else:
            p.add_argument("text", metavar="QUESTION")
        p.add_argument(
            "--tag", action="append", default=[], help="only notes with this tag (any of; nested tags match)"
        )
        p.add_argument(
            "--top-k",
            type=_top_k_arg,
            default=None,
            help=f"number of results, {LIMITS.top_k_min}..{LIMITS.top_k_max} (default {LIMITS.top_k_default})",
        )
        output = p.add_mutually_exclusive_group()  # --chat prints answers for a person, --json for a program
        output.add_argument("--json", action="store_true", help="print JSON")
        if name == "search":
            p.add_argument("--folder", action="append", default=[], help="only notes under this folder")
        else:
            output.add_argument(
                "--chat",
                action="store_true",
                help="then ask follow-up questions, one per line (an empty line or Ctrl-D ends); each is asked "
                "with the conversation so far",
            )

    p = sub.add_parser(
        "status",
        parents=[common],
        help="index counts, pending work, whether a daemon runs (no vault: every vault's daemon that runs)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def _add_mcp_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """``token``, ``mcp`` (``token``, ``audit``), ``policy check``, ``policy init``, ``policy apply``."""
    p = sub.add_parser("token", parents=[common], help="print the vault's API token (each vault has its own)")
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
    policy_sub = p.add_subparsers(dest="policy_command", required=True, metavar="check|init|apply")
    q = policy_sub.add_parser(
        "check", parents=[common], help="validate a policy; exit 1 with FILE:LINE: reason if invalid"
    )
    q.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="the policy to check (default: your copy in the config folder, created from the default on first use)",
    )
    policy_sub.add_parser(
        "init",
        parents=[common],
        help="write the shipped default policy where `cairn mcp` reads it, if no file is there (never overwrites)",
    )
    policy_sub.add_parser(
        "apply",
        parents=[common],
        help="confirm the policy file as it is now: a change that withholds less takes effect only then "
        "(with --vault: also make it the policy that governs that vault)",
    )


def _add_admin_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """``autostart``, ``doctor``, ``paths``, ``config``, ``plugin install``, ``secret set``."""
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

    p = sub.add_parser(
        "doctor",
        parents=[common],
        help="check the daemon, plugin, tray, keyring, autostart, MCP policy and agents' configs; one line each with "
        "its fix (exit 1 when a check fails)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("paths", parents=[common], help="print the config, data, log and cache folders")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser(
        "config", parents=[common], help="print the settings in effect and where each came from (file, env, flag)"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--markdown", action="store_true", help="print the table of docs/settings.md instead")

    p = sub.add_parser("plugin", parents=[common], help="the Obsidian plugin")
    plugin_sub = p.add_subparsers(dest="plugin_command", required=True, metavar="ACTION")
    q = plugin_sub.add_parser(
        "install",
        parents=[common],
        help="copy the plugin into <vault>/.obsidian/plugins/cairn/ with the vault's token (never touches notes)",
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
