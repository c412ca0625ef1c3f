"""Subsections brought by their section: an answer's sources may swap a weak source for the part of a source's
section whose heading names the question best.

Why: a chunk is scored by its own sentences, and a subsection's body often leaves out the subject its heading
names ("What encryption do you use?" → "Specifically, we use AES-256 …"). Its section's chunk, with the broader
words, is among the sources while the subsection ranks far below them. A person reading the section would follow its
headings; :func:`with_subsections` does the same with the ask's own ranked candidates.

The rule, for each source with a heading path (best first): its *section* is the path without its last heading (or
the path itself when it has one heading); the source's *family* is every other candidate of the same note whose
heading path is that section or lies under it. The family member whose own heading (the last one of its path) is
closest to the question joins the sources right after that source when its heading is closer to the question than
the source's own heading, and at least :data:`~cairn.config.COSINE_FLOOR` close. At most :data:`MOST` join, the
closest first. Each takes the place of its note's lowest-ranked source when its note already has ``per_note``
sources, else of the lowest-ranked source of all when there are ``top_k`` (never a source that brought one, nor one
that joined): the number of sources stays within ``top_k`` and that of a note within ``per_note``.

A section cut into several chunks reads on (:func:`with_continuations`): the chunk that continues one of the best
sources (same note and heading path, starting where it ends) joins right after it, so a long procedure or a list
of types, one callout each, is whole in the sources.

What it never changes: the candidates are the ask's ranked hits in the caller's view (cosine floor passed, withheld
notes absent, text redacted as the caller is shown it); the answerability verdict is judged before; the context
budget is applied after.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cairn.config import COSINE_FLOOR
from cairn.search import Hit

#: Heading paths join their headings with this (``cairn.chunking``).
SEPARATOR = " › "
#: At most this many subsections join an answer's sources: the ranking's own order keeps most places.
MOST = 2


def heading_of(hit: Hit) -> str:
    """The last heading of a chunk's heading path ("" for a note's opening chunk or a PDF page)."""
    if hit.kind == "pdf" or not hit.symbol:
        return ""
    return hit.symbol.rsplit(SEPARATOR, 1)[-1].strip()


def section_of(symbol: str) -> str:
    """The section a heading path sits in: the path without its last heading, or the path itself when it has one."""
    parts = symbol.split(SEPARATOR)
    return SEPARATOR.join(parts[:-1]) if len(parts) > 1 else symbol


def _in_section(symbol: str, section: str) -> bool:
    return symbol == section or symbol.startswith(section + SEPARATOR)


def with_subsections(
    sources: Sequence[Hit],
    candidates: Sequence[Hit],
    closeness: Callable[[Sequence[str]], Sequence[float]],
    *,
    top_k: int,
    per_note: int,
    floor: float = COSINE_FLOOR,
    most: int = MOST,
) -> list[Hit]:
    """``sources`` (ranked, best first) with at most ``most`` subsections joined (module docstring). ``candidates``:
    the same ranking's hits beyond the sources, best first (any hit already in ``sources`` is skipped).
    ``closeness(headings)``: each heading's cosine similarity to the question (headings are embedded only when a
    family exists). Returns a new list: at most ``top_k`` hits, at most ``per_note`` of one note."""
    chosen = {h.chunk_id for h in sources}
    families: list[tuple[Hit, list[Hit]]] = []
    for source in sources:
        if not heading_of(source):
            continue
        section = section_of(source.symbol)
        family = [
            c
            for c in candidates
            if c.chunk_id not in chosen
            and c.file_path == source.file_path
            and heading_of(c)
            and _in_section(c.symbol, section)
        ]
        if family:
            families.append((source, family))
    if not families:
        return list(sources)
    headings = list(dict.fromkeys(heading_of(h) for s, f in families for h in (s, *f)))
    close = dict(zip(headings, closeness(headings)))
    proposals: dict[int, tuple[float, Hit, Hit]] = {}  # chunk id → (closeness, the source, the subsection)
    for source, family in families:
        best = max(family, key=lambda h: close[heading_of(h)])
        match = close[heading_of(best)]
        if match >= floor and match > close[heading_of(source)] and match > proposals.get(best.chunk_id, (-2.0,))[0]:
            proposals[best.chunk_id] = (match, source, best)
    out = list(sources)
    kept: set[int] = set()  # the sources that brought a subsection, and the subsections
    joined = 0
    for _, source, sub in sorted(proposals.values(), key=lambda p: (-p[0], p[2].chunk_id)):
        if joined >= most or all(h.chunk_id != source.chunk_id for h in out):  # it gave its place to one
            continue
        room, displaced = _place_for(out, sub, kept | {source.chunk_id}, top_k, per_note)
        if not room:
            continue
        if displaced is not None:
            out.remove(displaced)
        kept |= {source.chunk_id, sub.chunk_id}
        out.insert(out.index(source) + 1, sub)
        joined += 1
    return out


def _place_for(out: list[Hit], sub: Hit, kept: set[int], top_k: int, per_note: int) -> tuple[bool, Hit | None]:
    """(whether ``sub`` may join, the source it takes the place of): its note's lowest-ranked one when the note has
    ``per_note`` sources, else the lowest-ranked of all when there are ``top_k``, else none; never one in ``kept``."""
    free = [h for h in out if h.chunk_id not in kept]
    if sum(h.file_path == sub.file_path for h in out) >= per_note:
        free = [h for h in free if h.file_path == sub.file_path]
    elif len(out) < top_k:
        return True, None
    return (True, free[-1]) if free else (False, None)


#: At most this many chunks continuing a source join an answer's sources.
MOST_CONTINUED = 2
#: Only the sources ranked this high bring the chunk that continues them.
CONTINUED_WITHIN = 3


def continues(hit: Hit, other: Hit) -> bool:
    """Whether ``other`` is the chunk that continues ``hit``: the same note and heading path (a section: a note's
    opening is not continued), starting after ``hit`` starts and at most a blank line or two after it ends (chunks of
    one section overlap by a few lines)."""
    if other.file_path != hit.file_path or other.symbol != hit.symbol or hit.kind == "pdf" or not hit.symbol:
        return False
    if hit.lines is None or other.lines is None:
        return False
    return hit.lines[0] < other.lines[0] <= hit.lines[1] + 3


def with_continuations(
    sources: Sequence[Hit],
    candidates: Sequence[Hit],
    *,
    top_k: int,
    most: int = MOST_CONTINUED,
    within: int = CONTINUED_WITHIN,
) -> list[Hit]:
    """``sources`` with the chunks that continue the best ones joined right after them: a section cut into several
    chunks (a long procedure, a list of types each with its example) reads on as a person reads it. For each of the
    first ``within`` sources, best first, the candidate that :func:`continues` it (and then the one continuing that,
    while fewer than ``most`` joined) takes the place of the lowest-ranked source when there are ``top_k``: never one
    that brought a chunk, nor one that joined. A continuation is the same passage read on, so it does not count
    against the sources allowed per note. ``candidates``: the same ranking's hits beyond the sources."""
    out = list(sources)
    kept: set[int] = set()
    joined = 0
    for source in list(sources[:within]):
        at = source
        while joined < most:
            nxt = next((c for c in candidates if continues(at, c) and all(h.chunk_id != c.chunk_id for h in out)), None)
            if nxt is None or all(h.chunk_id != at.chunk_id for h in out):
                break
            kept |= {at.chunk_id, nxt.chunk_id}
            if len(out) >= top_k:
                free = [h for h in out if h.chunk_id not in kept]
                if not free:
                    break
                out.remove(free[-1])
            out.insert(out.index(at) + 1, nxt)
            joined += 1
            at = nxt
    return out
