"""A :class:`cairn.app.Cairn` over a vault, its configuration, and the services the daemon wires over it."""

from __future__ import annotations

import dataclasses
from pathlib import Path


def make_config(vault: Path, data_dir: Path):
    """The configuration of a Cairn over ``vault`` with its index in ``data_dir`` (its config folder inside it), from
    defaults alone (no environment, no config file)."""
    from cairn.config import load_config

    return load_config({"vault": str(vault), "data_dir": str(data_dir), "config_dir": str(data_dir / "config")}, env={})


def indexed_cairn(vault, data_dir, embedder):
    """Yield a Cairn over ``vault`` with its index in ``data_dir``, fully indexed; closed afterwards."""
    from cairn.app import Cairn

    cairn = Cairn(make_config(vault, data_dir), embedder=embedder)
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
