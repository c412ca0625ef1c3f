"""Helpers shared by the ``cairn`` commands: JSON on stdout, the writer lock, the index opened for a query."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cairn.config import Config


def _config_inputs(args: argparse.Namespace) -> tuple[dict[str, Any], Path | None]:
    """The settings the command line gives (``{setting: value or None}``) and the ``--config`` file, if any."""
    overrides = {
        "vault": getattr(args, "vault", None),
        "data_dir": getattr(args, "data_dir", None),
        "debug": True if getattr(args, "debug", None) else None,
        "port": getattr(args, "port", None),
    }
    return overrides, Path(args.config) if getattr(args, "config", None) else None


def _print_json(data: Any) -> None:
    text = json.dumps(data, ensure_ascii=False, indent=2)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a path with a byte that is not UTF-8 (surrogateescape): "\udce9" keeps it JSON
        text = json.dumps(data, indent=2)
    sys.stdout.write(text + "\n")


def _writer_lock(config: Config):
    """The index's single-writer lock (the one ``cairn serve`` holds), for a one-shot writer (role ``index``)."""
    from cairn.store.recovery import InstanceLock, instance_lock_path

    return InstanceLock(
        instance_lock_path(config.db_path),
        role="index",
        service_file=config.service_file,
        what=f"the vault {str(config.vault)!r} with the data folder {str(config.data_dir)!r}",
    )


def _open_for_query(
    config: Config, progress: Callable[[Any], tuple[Callable[[str, int, int], None], Callable[[], None]]]
):
    """The index of ``config``'s vault opened for a query. On first use (an empty index no daemon writes) the vault
    is indexed first, in the foreground as ``cairn index`` is, saying so on stderr with ``progress(cairn)``'s
    (callback, close): the progress ``cairn index`` shows."""
    from cairn.app import Cairn
    from cairn.store.recovery import AlreadyRunning

    config.require_vault()
    try:
        lock = _writer_lock(config).acquire()
    except AlreadyRunning:  # a daemon (or `cairn index`) writes this index and keeps it fresh: only read it here
        lock = None
    try:
        cairn = Cairn(config)
        if lock is not None and cairn.store.stats().notes == 0:
            # First use: index the vault first. An index whose vectors are not all written (an interrupted
            # `cairn index`) is searched as it is, at once: the result's coverage says what is still pending.
            print(
                f"Indexing {config.vault} first (once; `cairn index` or `cairn serve` keep it up to date):",
                file=sys.stderr,
                flush=True,
            )
            callback, close = progress(cairn)
            try:
                cairn.indexing.index(progress=callback, foreground=True)
            finally:
                close()
    finally:
        if lock is not None:
            lock.release()
    return cairn


def _cairn_command() -> str:
    """How to run this ``cairn`` again: ``cairn`` when that is the one on PATH, else its full path
    (``make run`` starts ``.venv/bin/cairn``, which is usually not on PATH)."""
    me = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    found = shutil.which("cairn")
    if me is None or me.name != "cairn" or (found and Path(found).resolve() == me):
        return "cairn"
    return str(me)
