"""The ``cairn`` command line (docs/design.md, "Interfaces" → CLI).

Exit codes: 0 ok, 1 error (``Error: …`` on stderr), 2 usage. ``--json`` prints one JSON
document on stdout. Logs go to stderr, never stdout.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from cairn.cli.admin import (
    PLUGIN_FILES,
    cmd_autostart,
    cmd_mcp,
    cmd_paths,
    cmd_plugin,
    cmd_policy,
    cmd_secret,
    cmd_serve,
    cmd_token,
)
from cairn.cli.common import _cairn_command, _config_inputs
from cairn.cli.doctor import cmd_doctor
from cairn.cli.parser import build_parser, parse_args
from cairn.cli.query import cmd_ask, cmd_index, cmd_search, cmd_status
from cairn.cli.settings import cmd_config
from cairn.config import Config, load_config
from cairn.errors import CairnError
from cairn.private_files import set_private_umask, tighten_install

log = logging.getLogger("cairn.cli")


def _config(args: argparse.Namespace) -> Config:
    overrides, config_file = _config_inputs(args)
    return load_config(overrides, config_file=config_file)


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
    "config": cmd_config,
    "plugin": cmd_plugin,
    "doctor": cmd_doctor,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cairn`` console script. Returns the exit code. Every file and folder Cairn creates is
    its user's alone (umask 077, :mod:`cairn.private_files`); an older install's are made so at start."""
    set_private_umask()
    parser = build_parser()
    args = parse_args(parser, argv)
    try:
        config = _config(args)
        if args.command not in ("serve", "mcp") or getattr(args, "mcp_command", None):
            logging.basicConfig(
                level=logging.DEBUG if config.debug else logging.WARNING,
                stream=sys.stderr,
                format="%(levelname)s %(name)s: %(message)s",
            )
            tighten_install(config)  # `serve` and `mcp` do it once their log file is open (app.setup_logging)
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


__all__ = ["COMMANDS", "PLUGIN_FILES", "_cairn_command", "build_parser", "main"]


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
