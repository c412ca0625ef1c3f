"""Note and chunk records to write into a :class:`cairn.store.Store` directly."""

from __future__ import annotations

from cairn.store import ChunkRecord, NoteRecord


def _note(path="a.md", title="a", hash_="h1"):
    return NoteRecord(
        path=path,
        kind="markdown",
        title=title,
        aliases=["alias a"],
        frontmatter={"k": 1},
        mtime_ns=1,
        size=10,
        content_hash=hash_,
    )


def _chunks(*texts):
    return [
        ChunkRecord(
            ordinal=i,
            symbol="H",
            text=t,
            line_start=1,
            line_end=2,
            page=None,
            token_count=3,
            kind="prose",
            content_hash=f"c{i}-{t}",
            units=((t, f"u{i}-{t}"),),
        )
        for i, t in enumerate(texts)
    ]
