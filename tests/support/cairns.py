"""A :class:`cairn.app.Cairn` over a vault, its configuration, and the services the daemon wires over it.

:func:`open_cairn` is the one way a test builds a Cairn in this process: over a vault, its index in a data folder,
with the embedder the test module uses (the real model, or the stand-in of :mod:`support.embedders`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def make_config(vault: Path, data_dir: Path):
    """The configuration of a Cairn over ``vault`` with its index in ``data_dir`` (its config folder inside it), from
    defaults alone (no environment, no config file)."""
    from cairn.config import load_config

    return load_config({"vault": str(vault), "data_dir": str(data_dir), "config_dir": str(data_dir / "config")}, env={})


def open_cairn(
    vault: Path,
    data_dir: Path,
    embedder: Any,
    *,
    config_dir: Path | None = None,
    verify: bool = False,
    readonly: bool = False,
    **settings: Any,
) -> Any:
    """A :class:`cairn.app.Cairn` over ``vault`` with its index in ``data_dir`` and its config folder ``config_dir``
    (default: inside ``data_dir``), embedding with ``embedder``; ``settings`` replace defaults of the configuration
    (``max_note_bytes=10``, ``ignore=(...)``); ``verify`` and ``readonly`` as the daemon and ``cairn mcp`` open it.
    The caller closes it (or uses :func:`opened_cairn`)."""
    from cairn.app import Cairn

    config = make_config(vault, data_dir)
    if config_dir is not None:
        settings["config_dir"] = config_dir
    if settings:
        config = config.replace(**settings)
    return Cairn(config, embedder=embedder, verify=verify, readonly=readonly)


@contextmanager
def opened_cairn(vault: Path, data_dir: Path, embedder: Any, **kw: Any) -> Iterator[Any]:
    """:func:`open_cairn`, closed when the block ends."""
    cairn = open_cairn(vault, data_dir, embedder, **kw)
    try:
        yield cairn
    finally:
        cairn.close()


def build_index(vault: Path, data_dir: Path, embedder: Any, **kw: Any) -> Any:
    """Index ``vault`` into ``data_dir`` and close, as ``cairn index`` leaves it (for a daemon or ``cairn mcp`` started
    afterwards): the run's :class:`~cairn.index.IndexReport`. ``kw`` as for :func:`open_cairn`."""
    with opened_cairn(vault, data_dir, embedder, **kw) as cairn:
        return cairn.indexing.index()


def indexed_cairn(vault, data_dir, embedder):
    """Yield a Cairn over ``vault`` with its index in ``data_dir``, fully indexed; closed afterwards."""
    cairn = open_cairn(vault, data_dir, embedder)
    cairn.indexing.index()
    yield cairn
    cairn.close()


def services_of(cairn, *, answers=None, indexing=None, events=None):
    """The :class:`~cairn.services.Services` the daemon wires over a real :class:`cairn.app.Cairn`
    (:func:`cairn.app.build_services`: answers from the passages, no model), with ``answers``, ``indexing`` or
    ``events`` put in their place when given."""
    from cairn.app import build_services

    services = build_services(cairn)
    given = {"answers": answers, "indexing": indexing, "events": events}
    return dataclasses.replace(services, **{k: v for k, v in given.items() if v is not None})
