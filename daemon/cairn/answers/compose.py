"""The extractive answer in the note's own shape: from the units of the sources, each scored for how well it answers
the question (:mod:`cairn.answers.extractive`), the text a person reads. Pure: no I/O.

The unit that answers best opens the answer's first **block**, quoted in the shape its note gives it:

- a step of a numbered list (a procedure), or the sentence ending in ``:`` that introduces a list: the whole list,
  in order, numbered as the note numbers it, after the place it comes from ("Obsidian Sync › Version history ›
  Restore a deleted file:", so the steps are said to be that feature's) and its introducing sentence;
- an item of a bulleted list or a table row: the whole list when the question asks for one ("which…", "what
  kinds…"), else the item (with the sentence introducing it when the item is short or refers back);
- prose: the sentence, with the one opening its paragraph when that answers nearly as well ("An alias is an
  alternative name for a note."), the sentences before it when it refers back ("They are…") — or, when it opens its
  paragraph, the place it comes from before it ("This bookmarklet…" refers to its heading) — and the ones after it
  while they still answer; a last sentence ending in ``:`` whose list the passage does not hold is left out; the
  answer of a FAQ entry is quoted as its author wrote it; for a question asking for a list, the titles of the blocks
  that follow it in its section ("Note", "Abstract", … a callout per type).

Other blocks join when a unit of another passage (or another part of the same note, :data:`PER_NOTE` blocks a note
at most) answers nearly as well (:data:`SECOND_MARGIN`) and holds some of the question's words (a unit holding none,
"Roast at 200 °C for 40 minutes" for "How long does it keep?", is a stray); those holding most of them first
(:data:`SECOND_HELD`), at most :data:`MAX_BLOCKS` in all and within :data:`MAX_CHARS` (the first block is always
quoted whole, a procedure too). Two blocks of one paragraph are one, in reading order; nothing is quoted twice; a
FAQ question is never quoted as an answer. A yes/no question gets the block that decides it first (one that says no
while holding the question's words, :func:`_decider`). Each block ends with the ``[n]`` of its sources.

The constants were chosen by 5-fold cross-validation on the dev files and the paraphrase set (docs/extractive.md).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from cairn.passages import Unit

Shape = Literal["yes_no", "how_to", "list", "term", "other"]

#: A block of another passage joins when its best unit scores at least the best unit's score minus this.
SECOND_MARGIN = 0.4
#: Blocks from one note at most.
PER_NOTE = 2
#: Other blocks are taken by their score plus this times the share of the question's words their unit holds.
SECOND_HELD = 0.3
#: Blocks in an answer at most.
MAX_BLOCKS = 3
#: Characters beyond which no other block joins (the first block is quoted whole).
MAX_CHARS = 1000
#: Items of a list quoted at most (a longer list is quoted around the item that answers).
MAX_ITEMS = 15
#: A following sentence of the same paragraph is quoted while it scores at least this share of the first one's.
EXTEND_RATIO = 0.6
#: The sentence before the first of a prose block (in its paragraph) is quoted when it scores this share of it.
BACK_RATIO = 0.85
#: Sentences after the first of a prose block at most.
MAX_FOLLOWING = 2
#: An item this short (words) is quoted with the sentence that introduces its list.
SHORT_ITEM = 6

_YES_NO = re.compile(
    r"^(?:(?:so|and|but|also|ok|okay|hi|hey)[, ]+)?(?:can|could|does|do|did|is|are|was|were|will|would|should|"
    r"shall|may|might|must|has|have|had|am|isn't|aren't|doesn't|don't|can't|won't)\b",
    re.IGNORECASE,
)
_HOW_TO = re.compile(
    r"\bhow (?:do|can|should|would|could|to|does|did)\b|\bhow\b.*\b(?:set up|install|enable|configure|turn)\b"
    r"|\bsteps?\b|\bwhat (?:do|should) (?:i|we) (?:need to )?do\b|\bwalk me through\b",
    re.IGNORECASE,
)
_LIST = re.compile(
    r"\bwhich\s+(?!(?:is|was|has|does)\b)\w*[^s\W]s\b|\bwhich (?:ones|of)\b"
    r"|\bwhat (?:are the|kinds?|types?|sorts?|options|ways|formats|services|plugins|themes|commands|"
    r"variables|settings)\b|\blist (?:of|all|the)\b|\btypes\b|\bkinds\b|\boptions\b",
    re.IGNORECASE,
)
_TERM = re.compile(r"^\s*(?:what(?:'s| is| are| does)|define|meaning of|who is|who are)\b", re.IGNORECASE)


def question_shape(text: str) -> Shape:
    """What kind of answer ``text`` asks for: ``how_to`` (a procedure), ``list`` ("which plugins", "what kinds",
    "types"; "which plugin …" asks for one thing), ``yes_no`` (a question opening with an auxiliary: "Can I…",
    "Does…"), ``term`` ("what is…", "what does … mean") or ``other``. A how-to question that is also yes/no ("Can I…
    and how?") is a how-to one."""
    t = text.strip()
    if _HOW_TO.search(t):
        return "how_to"
    if _YES_NO.match(t):
        return "yes_no"
    if _LIST.search(t):
        return "list"
    if _TERM.match(t):
        return "term"
    return "other"


@dataclass(frozen=True, slots=True)
class Piece:
    """A unit of source ``n`` at ``position`` (its index among the source's units) with its ``score`` for the
    question; ``text`` as quoted; ``seed``: whether it may answer on its own (long enough, not a question, not a
    title: short items and FAQ questions are only quoted with their list or their answer)."""

    n: int
    position: int
    unit: Unit
    text: str
    score: float
    seed: bool = True
    note: str = ""
    held: float = 0.0
    section: str = ""


@dataclass(frozen=True, slots=True)
class Block:
    """What one block quotes: ``lead`` (a line before it: where a list comes from; ``""`` for none), the pieces in
    the order quoted, and whether they are a list (each on a line of its own)."""

    n: int
    lead: str
    pieces: tuple[Piece, ...]
    listed: bool
    seed: Piece | None = None


@dataclass(frozen=True, slots=True)
class Composed:
    """The answer's ``text``, the numbers of the sources it cites, and ``best``: the unit that answers best (None when
    no unit could be quoted)."""

    text: str
    cited: frozenset[int]
    best: Piece | None


#: The text when nothing could be quoted.
NOTHING_QUOTED = "These passages from your notes look relevant:"


def compose(pieces: Sequence[Piece], shape: Shape, where: Callable[[Piece], str]) -> Composed:
    """The answer (module docstring) from ``pieces`` (every unit of the sources, scored), for a question of
    ``shape``. ``where(piece)``: the place a list comes from, shown before it ("Obsidian Sync › Version history ›
    Restore a deleted file")."""
    at = {(p.n, p.position): p for p in pieces}
    pieces = [_cut_dangling(p, at) for p in pieces]
    at = {(p.n, p.position): p for p in pieces}
    seeds = sorted(
        (p for p in pieces if p.seed and not _dangling(p, at) and _context(p, at) is not None),
        key=lambda p: (-p.score, p.n, p.position),
    )
    if not seeds:
        return Composed(NOTHING_QUOTED, frozenset(), None)
    best = seeds[0]
    others = [p for p in seeds[1:] if p.score >= best.score - SECOND_MARGIN and p.held > 0.0]
    decider = _decider(best, others) if shape == "yes_no" else None
    first = [decider, best] if decider is not None else [best]
    blocks = [_block(first[0], shape, at, where)]
    if len(first) > 1 and all((p.n, p.position) != (best.n, best.position) for p in blocks[0].pieces):
        blocks.append(_block(best, shape, at, where))
    taken = {(p.n, p.position) for b in blocks for p in b.pieces}
    texts = {_key(p.text) for b in blocks for p in b.pieces}
    for seed in sorted(others, key=lambda p: (-(p.score + SECOND_HELD * p.held), p.n, p.position)):
        if len(blocks) >= MAX_BLOCKS:
            break
        if (seed.n, seed.position) in taken or _key(seed.text) in texts:
            continue
        if sum(b.pieces[0].note == seed.note for b in blocks) >= PER_NOTE:
            continue
        block = _block(seed, shape, at, where)
        fresh = [p for p in block.pieces if (p.n, p.position) not in taken and _key(p.text) not in texts]
        if len(fresh) < len(block.pieces) or _chars(blocks) + _chars([block]) > MAX_CHARS:
            continue
        blocks.append(block)
        taken |= {(p.n, p.position) for p in block.pieces}
        texts |= {_key(p.text) for p in block.pieces}
    blocks = _merged(blocks)
    return Composed(render(blocks), frozenset(p.n for b in blocks for p in b.pieces), best)


def _merged(blocks: list[Block]) -> list[Block]:
    """``blocks`` with two prose blocks of one paragraph made one, its sentences in reading order, where the first of
    them stood: a paragraph is never quoted out of order."""
    out: list[Block] = []
    for b in blocks:
        same = next((i for i, o in enumerate(out) if _one_paragraph(o, b)), None)
        if same is None:
            out.append(b)
            continue
        o = out[same]
        pieces = tuple(sorted((*o.pieces, *b.pieces), key=lambda p: p.position))
        out[same] = Block(o.n, o.lead, pieces, o.listed, o.seed)
    return out


def _one_paragraph(a: Block, b: Block) -> bool:
    if a.listed or b.listed or a.n != b.n:
        return False
    return {p.unit.paragraph for p in a.pieces} == {p.unit.paragraph for p in b.pieces}


_SAYS_NO = re.compile(
    r"\b(?:not|no|cannot|can't|don't|doesn't|isn't|aren't|won't|never|only|unavailable|unsupported)\b", re.IGNORECASE
)


def _decider(best: Piece, others: Sequence[Piece]) -> Piece | None:
    """For a yes/no question: the unit that decides it when the best one does not: the best-scoring of ``others`` (the
    units answering nearly as well) that says no ("… are not refundable", "only on desktop") while holding as much of
    the question's words as the best one. It is quoted first: the best-scoring unit is often only about the question's
    subject ("Once you've purchased a Catalyst license, …")."""
    if _SAYS_NO.search(best.text):
        return None
    return next((p for p in others if _SAYS_NO.search(p.text) and p.held >= best.held), None)


def _dangling(p: Piece, at: dict[tuple[int, int], Piece]) -> bool:
    """A sentence ending in ``:`` whose list is not in its passage (the chunk ends there): it says nothing alone."""
    if not p.text.endswith(":") or p.unit.kind != "sentence":
        return False
    following = at.get((p.n, p.position + 1))
    return following is None or following.unit.kind not in ("item", "title") and not following.text.startswith("`")


def _opens_paragraph(p: Piece, at: dict[tuple[int, int], Piece]) -> bool:
    """Whether sentence ``p`` opens a paragraph of its passage (its first, a cut-off start aside, or one after
    another): what it refers back to is then the subject of its heading or note ("This bookmarklet…" under
    "Bookmarklet"), not a sentence before it."""
    prev = at.get((p.n, p.position - 1))
    return p.unit.kind == "sentence" and (prev is None or prev.unit.paragraph != p.unit.paragraph)


#: The end of a sentence inside a unit, before the next one opens ("… just ask." Here is why:").
_SENTENCE_END = re.compile(r"[.!?][\"”')\]]?\s+(?=[A-Z])")


def _cut_dangling(p: Piece, at: dict[tuple[int, int], Piece]) -> Piece:
    """``p`` without a last sentence that leaves it saying nothing alone (:func:`_dangling`): "The golden rule
    is: 'Don't ask, just ask.' Here is why:" with the explanation not in the passage is quoted up to "just ask.'".
    Unchanged otherwise."""
    if not _dangling(p, at):
        return p
    ends = list(_SENTENCE_END.finditer(p.text))
    if not ends:
        return p
    return dataclasses.replace(p, text=p.text[: ends[-1].end()].rstrip())


def _key(text: str) -> str:
    return " ".join(text.lower().split())


def _context(p: Piece, at: dict[tuple[int, int], Piece], max_back: int = 2) -> list[Piece] | None:
    """``p`` with what it needs to make sense, in reading order: a sentence that refers back comes with the
    sentences before it in its paragraph (to the paragraph's start when within ``max_back``, else to the nearest
    one that does not refer back; a FAQ question counts as the start only right before it). None when that is not
    possible."""
    if not p.unit.refers_back:
        return [p]
    before: list[Piece] = []
    while len(before) <= max_back:
        prev = at.get((p.n, p.position - len(before) - 1))
        if prev is None or prev.unit.paragraph != p.unit.paragraph or (before and prev.unit.kind in _OPENERS):
            break
        before.append(prev)
    if not before:
        if p.unit.kind == "item" and not p.unit.marker and p.unit.block >= 0:
            return [p]  # an item's later sentence: its item is quoted with it (:func:`_item`)
        if _opens_paragraph(p, at):
            return [p]  # "This bookmarklet creates…" under its heading: quoted after the place it comes from
        return None
    if len(before) <= max_back:
        return [*reversed(before), p]
    for i, prev in enumerate(before[:max_back]):
        if not prev.unit.refers_back:
            return [*reversed(before[: i + 1]), p]
    return None


_OPENERS = ("question", "heading")


def _block(seed: Piece, shape: Shape, at: dict[tuple[int, int], Piece], where: Callable[[Piece], str]) -> Block:
    """The block that quotes ``seed`` (module docstring)."""
    block = _shaped(seed, shape, at, where)
    return Block(block.n, block.lead, block.pieces, block.listed, seed)


def _shaped(seed: Piece, shape: Shape, at: dict[tuple[int, int], Piece], where: Callable[[Piece], str]) -> Block:
    items = _list_of(seed, at)
    if items is None and seed.text.endswith(":"):
        following = at.get((seed.n, seed.position + 1))
        if following is not None and following.unit.kind == "item" and following.unit.block >= 0:
            items = _list_of(following, at)
            if items is not None:
                return _list_block(seed, items, seed, where)
    if items is not None:
        return _item_block(seed, items, shape, at, where)
    group = _context(seed, at) or [seed]
    lead = where(seed) if group == [seed] and seed.unit.refers_back and _opens_paragraph(seed, at) else ""
    if shape == "list" and len(titles := _titled_series(seed, at)) >= _SERIES:
        return Block(seed.n, "", (*group, *titles[:MAX_ITEMS]), True)
    before = at.get((seed.n, seed.position - 1))
    if (
        shape != "yes_no"
        and group == [seed]
        and before is not None
        and before.unit.paragraph == seed.unit.paragraph
        and before.unit.kind == "sentence"
        and not before.unit.refers_back
        and before.score >= seed.score * BACK_RATIO
    ):
        group.insert(0, before)  # the sentence that opens the topic ("An alias is an alternative name for a note.")
    last = group[-1]
    faq = _answers_entry(seed, at)  # the answer of a FAQ entry is quoted as its author wrote it
    for _ in range(MAX_FAQ if faq else MAX_FOLLOWING):
        nxt = at.get((seed.n, last.position + 1))
        if nxt is None or nxt.unit.paragraph != seed.unit.paragraph or nxt.unit.kind in _OPENERS:
            break
        if nxt.score < seed.score * EXTEND_RATIO and not last.text.endswith(":") and not faq:
            break
        group.append(nxt)
        last = nxt
    if last.text.endswith(":") and (items := _list_of_next(last, at)):
        return Block(seed.n, lead, (*group, *items), True)
    return Block(seed.n, lead, tuple(group), False)


def _item_block(
    seed: Piece, items: list[Piece], shape: Shape, at: dict[tuple[int, int], Piece], where: Callable[[Piece], str]
) -> Block:
    """The block of a list item: the whole list for a procedure, or when the question asks for a list (a table too,
    but for a yes/no question); else the item, after the sentence introducing its list when the item is short or
    refers back (not for a yes/no question: its deciding item comes first)."""
    ordered = any(p.unit.ordered for p in items)
    if ordered or shape == "list" or seed.unit.marker == "|" and shape != "yes_no":
        return _list_block(seed, items, _intro(items[0], at), where)
    own = _item(seed, at)
    intro = _intro(items[0], at)
    short = len(" ".join(p.text for p in own).split()) < SHORT_ITEM
    if intro is not None and (short or own[0].unit.refers_back) and shape != "yes_no":
        return Block(seed.n, "", (intro, *own), True)
    return Block(seed.n, "", tuple(own), False)


#: Sentences of a FAQ entry's answer quoted at most.
MAX_FAQ = 4


def _answers_entry(p: Piece, at: dict[tuple[int, int], Piece]) -> bool:
    """Whether ``p`` opens the answer of a FAQ entry (the unit before it is the entry's question)."""
    prev = at.get((p.n, p.position - 1))
    return p.unit.entry > 0 and prev is not None and prev.unit.kind in _OPENERS and prev.unit.entry == p.unit.entry


def _list_of_next(p: Piece, at: dict[tuple[int, int], Piece]) -> list[Piece]:
    """The list right after ``p`` (a sentence ending in ``:``), at most :data:`MAX_ITEMS` items; [] for none."""
    following = at.get((p.n, p.position + 1))
    if following is None or following.unit.kind != "item":
        return []
    items = _list_of(following, at) or []
    return (
        items[: MAX_ITEMS * 2] if len([i for i in items if i.unit.marker]) <= MAX_ITEMS else _around(following, items)
    )


#: Titled blocks that make a list (a section of callouts, one per type).
_SERIES = 3


def _titled_series(seed: Piece, at: dict[tuple[int, int], Piece]) -> list[Piece]:
    """The titles of the blocks that follow ``seed`` in its section, through the sources that continue it (callouts
    one after the other, each showing its type: "Note", "Abstract", "Info", …): a list the note writes as blocks.
    Each title once."""
    out: list[Piece] = []
    seen: set[str] = set()
    for (n, position), p in sorted(at.items()):
        if p.unit.kind != "title" or p.section != seed.section or (n, position) <= (seed.n, seed.position):
            continue
        if _key(p.text) not in seen:
            seen.add(_key(p.text))
            out.append(p)
    return out


def _list_of(p: Piece, at: dict[tuple[int, int], Piece]) -> list[Piece] | None:
    """The pieces of the list (or table) ``p`` belongs to, in order; None when it is not an item."""
    u = p.unit
    if u.kind != "item" or u.block < 0:
        return None
    out = [p]
    pos = p.position - 1
    while (prev := at.get((p.n, pos))) is not None and prev.unit.kind == "item" and prev.unit.block == u.block:
        out.insert(0, prev)
        pos -= 1
    pos = p.position + 1
    while (nxt := at.get((p.n, pos))) is not None and nxt.unit.kind == "item" and nxt.unit.block == u.block:
        out.append(nxt)
        pos += 1
    return out


def _item(p: Piece, at: dict[tuple[int, int], Piece]) -> list[Piece]:
    """The pieces of the list item ``p`` is part of (its sentences: the one with the marker and those after it)."""
    start = p
    while not start.unit.marker and (prev := at.get((p.n, start.position - 1))) is not None:
        if prev.unit.block != p.unit.block or prev.unit.paragraph != p.unit.paragraph:
            break
        start = prev
    out = [start]
    while (nxt := at.get((p.n, out[-1].position + 1))) is not None and not nxt.unit.marker:
        if nxt.unit.block != p.unit.block or nxt.unit.paragraph != p.unit.paragraph:
            break
        out.append(nxt)
    return out


def _intro(first_item: Piece, at: dict[tuple[int, int], Piece]) -> Piece | None:
    """The sentence introducing the list whose first item is ``first_item``: the unit right before it, when it is a
    sentence ending in ``:`` under the same heading."""
    prev = at.get((first_item.n, first_item.position - 1))
    if prev is None or prev.unit.kind != "sentence" or not prev.text.endswith(":"):
        return None
    return prev if prev.unit.heading == first_item.unit.heading else None


def _list_block(seed: Piece, items: list[Piece], intro: Piece | None, where: Callable[[Piece], str]) -> Block:
    """A whole list, after its introducing sentence; the place it comes from as its lead."""
    if len([p for p in items if p.unit.marker]) > MAX_ITEMS:
        items = _around(seed, items)
    head = (intro,) if intro is not None else ()
    return Block(items[0].n, where(items[0]), (*head, *items), True)


def _around(seed: Piece, items: list[Piece]) -> list[Piece]:
    """At most :data:`MAX_ITEMS` items of a long list: those around ``seed`` (or the first ones)."""
    starts = [i for i, p in enumerate(items) if p.unit.marker]
    at = max((k for k, i in enumerate(starts) if items[i].position <= seed.position), default=0)
    first = max(0, min(at - MAX_ITEMS // 2, len(starts) - MAX_ITEMS))
    lo = starts[first]
    hi = starts[first + MAX_ITEMS] if first + MAX_ITEMS < len(starts) else len(items)
    return items[lo:hi]


def _chars(blocks: Sequence[Block]) -> int:
    return sum(len(b.lead) + sum(len(p.text) + 1 for p in b.pieces) for b in blocks)


def _runs_on(before: Piece, p: Piece, listed: bool) -> bool:
    """Whether prose ``p`` goes on the line of ``before``: in a list's block, a sentence of the same paragraph; in
    prose, any sentence, unless the one before introduces something with ``:``."""
    if before.text.endswith(":") or before.unit.kind == "title":
        return False
    return not listed or before.unit.kind != "item" and before.unit.paragraph == p.unit.paragraph


def render(blocks: Sequence[Block]) -> str:
    """The text of ``blocks``: each block a paragraph ending in the ``[n]`` of its sources; a list's lead and
    introducing sentence on lines of their own, then one line per item (its marker as the note writes it, ``-`` for a
    table row or a block's title, indented by its nesting), an item's later sentences on its line."""
    out = []
    for b in blocks:
        lines: list[str] = [b.lead + ":"] if b.lead else []
        before: Piece | None = None
        for p in b.pieces:
            u = p.unit
            if b.listed and (u.kind == "title" or (u.kind == "item" and (u.marker or before is None))):
                marker = u.marker if u.ordered else "-"
                lines.append("    " * u.depth + f"{marker} {p.text}")
            elif before is not None and (u.kind == "item" and b.listed or _runs_on(before, p, b.listed)):
                lines[-1] += " " + p.text
            else:
                lines.append(p.text)
            before = p
        cited = "".join(f"[{n}]" for n in dict.fromkeys(p.n for p in b.pieces))
        out.append("\n".join(lines) + f" {cited}")
    return "\n\n".join(out) if out else NOTHING_QUOTED
