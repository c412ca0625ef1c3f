"""Parsed links (:class:`cairn.notes.Link`) written briefly, to compare with what the parser gives."""

from __future__ import annotations

from cairn.notes import Link


def L(target, heading=None, block_id=None, alias=None, is_embed=False, line=1) -> Link:
    return Link(target, heading, block_id, alias, is_embed, line)
