"""Obsidian note parsing: front-matter, tags, aliases, wikilinks and link resolution.

Layer 0 (pure core): no I/O. :func:`parse_note` turns the decoded text of one
Markdown file into a :class:`ParsedNote`; :class:`LinkResolver` maps a link
target to a vault-relative path the way Obsidian does.

Rules follow Obsidian's documentation (help.obsidian.md):

- *Properties*: YAML front-matter between a ``---`` first line and the next
  ``---`` line; ``tags``/``aliases`` as lists (the older comma-separated string
  forms and the singular ``tag``/``alias`` keys are still honoured).
- *Tags*: ``#`` then letters, digits, ``_``, ``-`` and ``/`` (nesting); at least
  one non-digit (``#1984`` is not a tag); case-insensitive. Unicode letters and
  emoji are accepted, as Obsidian does.
- *Comments*: ``%% ... %%`` (inline or multi-line) is hidden; its text is not
  indexed and its tags and links do not count.
- *Internal links*: ``[[target#heading|alias]]``, ``[[target#^block]]``,
  ``![[embed]]`` and Markdown links ``[text](Some%20Note.md)``.

Code (fenced and indented blocks, inline code spans) never yields tags or links.
Block structure comes from markdown-it-py (CommonMark); code spans are found
with CommonMark's backtick-string rule inside each inline block, because
markdown-it-py's inline tokens carry no column positions.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import math
import posixpath
import re
import string
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import yaml
from markdown_it import MarkdownIt

__all__ = [
    "PARSER_VERSION",
    "Link",
    "ParsedNote",
    "parse_note",
    "normalise_tag",
    "tag_in_scope",
    "LinkResolver",
]


#: Bumped whenever parsing changes what a note's tags, aliases, links, front-matter or body are: an index made
#: by another version re-reads every note at its next full run (``Indexer.index``; vectors of unchanged text
#: come from the cache). 2: a repeated front-matter key keeps the union of tags/aliases and is reported (before,
#: ``tags: [personal]`` then ``tags: [work]`` was indexed as ``[work]``).
PARSER_VERSION = 2

#: Stable codes of :attr:`ParsedNote.frontmatter_error_code`: the front-matter was dropped (invalid YAML, not a
#: mapping, too many values), or kept with a repeated property. Either way the note's tags are uncertain, so
#: withholding by tag withholds it (``notes.error_code`` in the index; the messages may be reworded freely).
FRONTMATTER_INVALID = "frontmatter_invalid"
FRONTMATTER_REPEATED_PROPERTY = "frontmatter_repeated_property"
FRONTMATTER_ERROR_CODES = (FRONTMATTER_INVALID, FRONTMATTER_REPEATED_PROPERTY)


@dataclass(frozen=True, slots=True)
class Link:
    """One outgoing link of a note, as written.

    ``target`` is the raw target without ``#heading``, ``#^block`` or ``|alias``
    (URL-decoded for Markdown links); it is ``""`` for a link to a heading or
    block of the same note (``[[#Heading]]``). ``is_embed`` is true for
    ``![[...]]`` and ``![](...)``. ``line`` is the 1-based line in the file
    (front-matter lines included).
    """

    target: str
    heading: str | None
    block_id: str | None
    alias: str | None
    is_embed: bool
    line: int


@dataclass(frozen=True, slots=True)
class ParsedNote:
    """Everything Cairn needs from one Markdown note.

    - ``title``: the file stem (Obsidian's note title).
    - ``frontmatter``: the YAML mapping, JSON-serialisable (dates become ISO
      strings, keys become strings); ``{}`` when absent, empty or invalid.
    - ``frontmatter_error``: why the front-matter was dropped (invalid YAML, not
      a mapping), or a warning about front-matter kept despite a problem (a
      repeated property: tags and aliases keep the union of the values), else
      ``None``. The body is parsed either way.
    - ``frontmatter_error_code``: the stable code of ``frontmatter_error``
      (:data:`FRONTMATTER_INVALID`, :data:`FRONTMATTER_REPEATED_PROPERTY`), else
      ``None``: what withholding keys on, never the message.
    - ``tags``: front-matter and inline tags, normalised by
      :func:`normalise_tag`, deduplicated and sorted.
    - ``aliases``: from ``aliases``/``alias``, in written order, deduplicated.
    - ``links``: wikilinks, embeds and Markdown links to files, in document order.
    - ``body``: the text after the front-matter, LF line endings, with Obsidian
      comments replaced by spaces (newlines kept, so line numbers still match).
    - ``body_line``: 1-based file line of the first line of ``body``.
    """

    title: str
    frontmatter: dict
    frontmatter_error: str | None
    tags: tuple[str, ...]
    aliases: tuple[str, ...]
    links: tuple[Link, ...]
    body: str
    body_line: int
    frontmatter_error_code: str | None = None


# --------------------------------------------------------------------------- tags

#: ASCII punctuation that ends a tag; ``-``, ``_`` and ``/`` belong to tags.
_TAG_STOP_ASCII = frozenset(string.punctuation) - {"-", "_", "/"}
#: An inline tag candidate: ``#`` at line start or after whitespace, then no
#: whitespace or ASCII stop character. Unicode punctuation is cut afterwards.
_INLINE_TAG_RE = re.compile(r"(?<!\S)#([^\s!\"#$%&'()*+,.:;<=>?@\[\\\]^`{|}~]+)")


def _tag_char_ok(ch: str) -> bool:
    if ch in "-_/":
        return True
    if ch.isspace() or ch in _TAG_STOP_ASCII:
        return False
    # Unicode punctuation (e.g. "。", "–", "«") ends a tag; letters, digits,
    # marks, symbols (emoji) and format characters (emoji ZWJ) belong to it.
    return not unicodedata.category(ch).startswith(("P", "Z", "Cc"))


def normalise_tag(raw: str) -> str | None:
    """Normalise a tag as Cairn stores it, or ``None`` when it is not a tag.

    Strips surrounding whitespace and leading ``#``, NFC-normalises, case-folds
    (Obsidian tags are case-insensitive), keeps nesting ``a/b`` while dropping
    leading/trailing and doubled ``/``. Returns ``None`` for an empty tag, one
    containing a character Obsidian does not allow (space, punctuation other than
    ``-``, ``_``, ``/``), or a purely numeric one (``#1984`` is not a tag,
    ``#y1984`` is: Obsidian help, "Tags").
    """
    if not isinstance(raw, str):
        return None
    tag = unicodedata.normalize("NFC", raw.strip()).lstrip("#").strip()
    if not tag or not all(_tag_char_ok(ch) for ch in tag):
        return None
    parts = [p for p in tag.split("/") if p]
    if not parts:
        return None
    tag = "/".join(parts).casefold()
    if all(ch.isdigit() or ch == "/" for ch in tag):
        return None
    return tag


def tag_in_scope(tag: str, scope: str) -> bool:
    """True when ``tag`` is ``scope`` or nested below it (``a/b`` is in ``a``; ``ab`` is not).

    Both are normalised first; an invalid tag or scope is never in scope.
    """
    t, s = normalise_tag(tag), normalise_tag(scope)
    if t is None or s is None:
        return False
    return t == s or t.startswith(s + "/")


def _split_tag_string(value: str) -> list[str]:
    return [p for p in re.split(r"[,\s]+", value) if p]


def _frontmatter_tags(value: Any) -> list[str]:
    """Tags from a front-matter ``tags`` value: list, comma/space-separated string, scalar or null."""
    out: list[str] = []
    if value is None:
        return out
    if isinstance(value, (list, tuple)):
        for item in value:
            out.extend(_frontmatter_tags(item))
        return out
    if isinstance(value, dict):
        return out
    if isinstance(value, bool):
        return out
    for piece in _split_tag_string(str(value)):
        tag = normalise_tag(piece)
        if tag:
            out.append(tag)
    return out


def _frontmatter_aliases(value: Any) -> list[str]:
    """Aliases from a front-matter ``aliases`` value: a list, or a (legacy comma-separated) string."""
    if value is None or isinstance(value, dict):
        return []
    items = value if isinstance(value, (list, tuple)) else [p for p in str(value).split(",")]
    out: list[str] = []
    for item in items:
        if item is None or isinstance(item, (dict, list, tuple)):
            continue
        text = str(item).strip()
        if text:
            out.append(unicodedata.normalize("NFC", text))
    return out


# -------------------------------------------------------------------- front-matter

_FM_DELIM_RE = re.compile(r"---[ \t]*")
#: Guard against "billion laughs" alias expansion while converting the YAML tree.
_MAX_YAML_NODES = 200_000


class _TooBig(Exception):
    pass


_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _FrontMatterLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """PyYAML's safe loader with YAML 1.2 core-schema scalars, as Obsidian reads properties.

    PyYAML implements YAML 1.1, where ``yes``/``no``/``on``/``off`` are booleans,
    ``12:30`` is the sexagesimal number 750 and ``010`` is octal 8; Obsidian
    (YAML 1.2) keeps the first two as text and reads ``010`` as 10. Mapping keys
    become strings as they are built, so ``1:`` and ``true:`` cannot collide.
    Impossible dates (``2024-02-30``) stay text instead of failing the note.
    """


_FrontMatterLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag.rsplit(":", 1)[-1] not in ("bool", "int", "float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_FrontMatterLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_FrontMatterLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_FrontMatterLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    value = loader.construct_scalar(node)
    if value[:2] in ("0o", "0x"):
        return int(value, 0)
    return int(value, 10)


def _construct_timestamp(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    try:
        return yaml.SafeLoader.construct_yaml_timestamp(loader, node)
    except (ValueError, OverflowError):
        return loader.construct_scalar(node)


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    if not isinstance(node, yaml.MappingNode):
        raise yaml.constructor.ConstructorError(
            None, None, f"expected a mapping node, but found {node.id}", node.start_mark
        )
    written = {id(k) for k, _ in node.value}  # keys written here, not brought in by a `<<` merge
    loader.flatten_mapping(node)
    mapping: dict[str, Any] = {}
    first_line: dict[str, int] = {}
    for key_node, value_node in node.value:
        key = _key_str(loader.construct_object(key_node, deep=True))
        # deep for tags/aliases: a shallow list is only filled in later, too late to merge a repeat into
        value = loader.construct_object(value_node, deep=deep or key.strip().casefold() in _UNION_KEYS)
        line = key_node.start_mark.line if key_node.start_mark is not None else 0
        if key in first_line and id(key_node) in written:
            # PyYAML silently keeps the last value of a repeated key. A repeated tags/aliases key keeps the
            # union of its values instead (`tags: [personal]` then `tags: [work]` must still withhold the
            # note: fail closed), and every repeat is reported (see _load_frontmatter).
            merged = key.strip().casefold() in _UNION_KEYS
            if merged:
                value = _union_values(mapping[key], value, split_commas=key.strip().casefold() in ("aliases", "alias"))
            found = getattr(loader, "duplicate_keys", None)
            if found is not None:
                found.append((key, first_line[key], line, merged))
        elif id(key_node) in written:
            first_line[key] = line
        mapping[key] = value
    return mapping


#: Front-matter keys whose values are merged (not replaced) when the key is repeated.
_UNION_KEYS = frozenset({"tags", "tag", "aliases", "alias"})


def _union_values(old: Any, new: Any, *, split_commas: bool) -> Any:
    """The values of a repeated tags/aliases key as one list (``[personal]`` + ``work`` → ``[personal, work]``);
    legacy comma-separated alias strings are split first so each alias stays whole."""
    out: list[Any] = []
    for value in (old, new):
        if value is None:
            continue
        if isinstance(value, str) and split_commas:
            out.extend(p.strip() for p in value.split(",") if p.strip())
        elif isinstance(value, (list, tuple)):
            out.extend(value)
        else:
            out.append(value)
    return out


_FrontMatterLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_FrontMatterLoader.add_constructor("tag:yaml.org,2002:timestamp", _construct_timestamp)
_FrontMatterLoader.construct_mapping = _construct_mapping  # type: ignore[method-assign,assignment]


def _to_json(value: Any, budget: list[int], stack: tuple[int, ...] = ()) -> Any:
    """Make a safe_load result JSON-serialisable: dates to ISO strings, keys to strings."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooBig()
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        if id(value) in stack:  # recursive anchor: `a: &x [*x]`
            return None
        inner = stack + (id(value),)
        if isinstance(value, dict):
            return {_key_str(k): _to_json(v, budget, inner) for k, v in value.items()}
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return [_to_json(v, budget, inner) for v in items]
    return str(value)


def _key_str(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, (_dt.date, _dt.datetime)):
        return key.isoformat()
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return str(key)


def _untab_yaml(text: str) -> str:
    """Replace tabs YAML forbids (indentation, after ``key:`` or ``-``) with spaces.

    Obsidian's YAML parser accepts these; PyYAML does not. Only used on a retry.
    """
    lines = []
    for line in text.split("\n"):
        stripped = line.lstrip(" \t")
        indent = line[: len(line) - len(stripped)].replace("\t", "    ")
        stripped = re.sub(r"^-\t+", "- ", stripped)
        stripped = re.sub(r"^([^\s\"'#][^:\"']*?):\t+", r"\1: ", stripped)
        lines.append(indent + stripped)
    return "\n".join(lines)


def _yaml_error_reason(exc: yaml.YAMLError, first_line: int) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).split("\n")[0]
    if mark is not None:
        return f"invalid YAML front-matter at line {first_line + mark.line}: {problem}"
    return f"invalid YAML front-matter: {problem}"


def _yaml_load(text: str, duplicates: list[tuple[str, int, int, bool]]) -> Any:
    """``yaml.load`` with :class:`_FrontMatterLoader`; repeated mapping keys are appended to ``duplicates``
    as (key, first line, repeat line, values merged), lines 0-based within ``text``."""
    loader = _FrontMatterLoader(text)
    loader.duplicate_keys = duplicates
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _duplicates_warning(duplicates: list[tuple[str, int, int, bool]], first_line: int) -> str | None:
    """The front-matter warning for repeated keys (None when there are none)."""
    if not duplicates:
        return None
    parts = []
    for key, first, again, merged in duplicates:
        effect = "the values of both were merged" if merged else "only the last value is used"
        parts.append(f"{key!r} at line {first_line + again} (first at line {first_line + first}): {effect}")
    return (
        "front-matter repeats a property: "
        + "; ".join(parts)
        + ". Write each property once (Obsidian refuses repeated properties)"
    )


def _load_frontmatter(yaml_text: str, first_line: int) -> tuple[dict, str | None, str | None]:
    """Parse front-matter YAML; ``first_line`` is the file line of its first line (for messages).
    Returns (mapping, problem, the problem's stable code: :data:`FRONTMATTER_INVALID` or
    :data:`FRONTMATTER_REPEATED_PROPERTY`, None without a problem). A repeated key keeps the mapping
    (tags/aliases: the union of the values) and returns a problem starting ``front-matter repeats a property`` —
    a warning that, like invalid front-matter, withholds the note from clients that are withheld tags (fail
    closed)."""
    if not yaml_text.strip():
        return {}, None, None
    duplicates: list[tuple[str, int, int, bool]] = []
    try:
        data = _yaml_load(yaml_text, duplicates)
    except yaml.YAMLError as exc:
        if "\t" not in yaml_text:
            return {}, _yaml_error_reason(exc, first_line), FRONTMATTER_INVALID
        try:
            duplicates.clear()
            data = _yaml_load(_untab_yaml(yaml_text), duplicates)
        except yaml.YAMLError:
            return {}, _yaml_error_reason(exc, first_line), FRONTMATTER_INVALID
    except (ValueError, TypeError, RecursionError) as exc:  # e.g. a date PyYAML cannot build
        return {}, f"invalid YAML front-matter: {exc}", FRONTMATTER_INVALID
    if data is None:
        return {}, None, None
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single {type(data).__name__} value"
        return {}, f"front-matter is {kind}, not a mapping of property names to values", FRONTMATTER_INVALID
    try:
        warning = _duplicates_warning(duplicates, first_line)
        return _to_json(data, [_MAX_YAML_NODES]), warning, FRONTMATTER_REPEATED_PROPERTY if warning else None
    except (_TooBig, RecursionError):
        message = f"front-matter expands to more than {_MAX_YAML_NODES:,} values (YAML aliases?)"
        return {}, message, FRONTMATTER_INVALID


def _split_frontmatter(text: str) -> tuple[str | None, str, int]:
    """Return (yaml text or None, body, body_line). ``text`` has LF line endings.

    Obsidian: the first line is exactly ``---``; the front-matter ends at the next
    line that is exactly ``---`` (trailing spaces tolerated). Without a closing
    line there is no front-matter.
    """
    if not text.startswith("---"):
        return None, text, 1
    first_nl = text.find("\n")
    first = text if first_nl < 0 else text[:first_nl]
    if not _FM_DELIM_RE.fullmatch(first) or first_nl < 0:
        return None, text, 1
    pos = first_nl + 1
    line_no = 2
    while pos <= len(text):
        nl = text.find("\n", pos)
        line = text[pos:] if nl < 0 else text[pos:nl]
        if _FM_DELIM_RE.fullmatch(line):
            yaml_text = text[first_nl + 1 : pos]
            body = "" if nl < 0 else text[nl + 1 :]
            return yaml_text, body, line_no + 1
        if nl < 0:
            break
        pos = nl + 1
        line_no += 1
    return None, text, 1


# ------------------------------------------------------------- code and comments

_MD = MarkdownIt("commonmark").disable(["inline", "text_join"])
_BACKTICKS_RE = re.compile(r"`+")
_MAYBE_INDENTED_RE = re.compile(r"^(?: {0,3}\t| {4})", re.MULTILINE)


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for m in re.finditer("\n", text):
        starts.append(m.end())
    return starts


def _code_ranges(text: str) -> list[tuple[int, int]]:
    """Character ranges of code in ``text``: fenced/indented blocks and inline code spans."""
    if "`" not in text and "~~~" not in text and not _MAYBE_INDENTED_RE.search(text):
        return []  # no fence, code span or indented line: nothing for markdown-it to find
    starts = _line_starts(text)
    n_lines = len(starts)

    def offset(line: int) -> int:
        return starts[line] if line < n_lines else len(text)

    ranges: list[tuple[int, int]] = []
    for tok in _MD.parse(text):
        if tok.map is None:
            continue
        if tok.type in ("fence", "code_block"):
            ranges.append((offset(tok.map[0]), offset(tok.map[1])))
        elif tok.type == "inline":
            a, b = offset(tok.map[0]), offset(tok.map[1])
            ranges.extend(_code_spans(text, a, b))
    ranges.sort()
    return ranges


def _code_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """CommonMark code spans in text[start:end]: a backtick run closed by a run of the same length."""
    spans: list[tuple[int, int]] = []
    runs = [(m.start(), m.end()) for m in _BACKTICKS_RE.finditer(text, start, end)]
    i = 0
    while i < len(runs):
        a, b = runs[i]
        # A backslash-escaped first backtick is literal (backslashes count outside spans only).
        k, slashes = a - 1, 0
        while k >= start and text[k] == "\\":
            slashes += 1
            k -= 1
        if slashes % 2 == 1:
            a += 1
            if a == b:
                i += 1
                continue
        length = b - a
        for j in range(i + 1, len(runs)):
            if runs[j][1] - runs[j][0] == length:
                spans.append((a, runs[j][1]))
                i = j + 1
                break
        else:
            i += 1
    return spans


def _in_ranges(pos: int, ranges: list[tuple[int, int]], starts: list[int]) -> bool:
    k = bisect.bisect_right(starts, pos) - 1
    return k >= 0 and ranges[k][0] <= pos < ranges[k][1]


def _strip_comments(body: str) -> tuple[str, list[tuple[int, int]]]:
    """Blank Obsidian comments; return (blanked body, code ranges).

    In document order, whichever comes first wins: a ``%%`` inside code is
    literal, and inside a comment nothing is parsed (a code fence in a comment
    does not hide the text after it). A comment runs to the next ``%%``; an
    unclosed one hides the rest of the note, as in Obsidian's reading view.

    Code structure is taken from the text as written (a line holding only a
    comment is not a blank line, so it does not turn a following indented line
    into a code block). Only when a comment contains backticks or tildes, which
    could open a fence, is the structure found again, on a copy where the
    comment is a run of ``x`` of the same shape.
    """
    code = _code_ranges(body)
    if "%%" not in body:
        return body, code
    structure = body
    comments: list[tuple[int, int]] = []
    starts = [r[0] for r in code]
    pos = 0
    while True:
        i = body.find("%%", pos)
        if i < 0:
            break
        if _in_ranges(i, code, starts):
            pos = i + 1
            continue
        close = body.find("%%", i + 2)
        end = len(body) if close < 0 else close + 2
        comments.append((i, end))
        if "`" in body[i:end] or "~" in body[i:end]:
            structure = _blank(structure, [(i, end)], "x")
            code = _code_ranges(structure)
            starts = [r[0] for r in code]
        pos = end
    return _blank(body, comments), code


_NOT_NEWLINE_RE = re.compile(r"[^\n]")


def _blank(text: str, ranges: Iterable[tuple[int, int]], fill: str = " ") -> str:
    """Replace every character in ``ranges`` with ``fill`` (a space), keeping newlines."""
    parts: list[str] = []
    last = 0
    for a, b in sorted(ranges):
        a = max(a, last)
        if b <= a:
            continue
        parts.append(text[last:a])
        parts.append(_NOT_NEWLINE_RE.sub(fill, text[a:b]))
        last = b
    parts.append(text[last:])
    return "".join(parts)


# -------------------------------------------------------------------------- links

_WIKILINK_RE = re.compile(r"(!?)\[\[([^\[\]\n]+?)\]\]")
#: [text](destination "title"): destination is <...> or a run without spaces with balanced parens.
_MDLINK_RE = re.compile(
    r"(!?)\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]"
    r"\(\s*(<[^<>\n]*>|(?:[^\s()]|\([^\s()]*\))+)(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?\s*\)"
)
_URL_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_BARE_URL_RE = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s<>]*|\bmailto:[^\s<>]*|\bwww\.[^\s<>]*")


def _split_fragment(ref: str) -> tuple[str, str | None, str | None]:
    """``note#heading`` / ``note#^block`` -> (target, heading, block_id)."""
    target, sep, frag = ref.partition("#")
    heading = block = None
    if sep:
        frag = frag.strip()
        if frag.startswith("^"):
            block = frag[1:].strip() or None
        else:
            heading = frag or None
    return target.strip(), heading, block


def _parse_wikilink(inner: str) -> tuple[str, str | None, str | None, str | None]:
    ref, bar, alias = inner.partition("|")
    if bar and ref.endswith("\\"):  # `[[a\|b]]` inside a table
        ref = ref[:-1]
    target, heading, block = _split_fragment(ref)
    alias = alias.strip() if bar else None
    return target, heading, block, alias or None


# -------------------------------------------------------------------------- parse


def parse_note(text: str, path: str) -> ParsedNote:
    """Parse one note. ``path`` is vault-relative POSIX (used for the title only).

    ``text`` is decoded text; a leading BOM is stripped and CRLF/CR become LF.
    Never raises for malformed content: invalid front-matter is reported in
    ``frontmatter_error`` and the body is still parsed.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    title = posixpath.splitext(posixpath.basename(path))[0] if path else ""

    yaml_text, body, body_line = _split_frontmatter(text)
    frontmatter: dict = {}
    fm_error: str | None = None
    fm_error_code: str | None = None
    if yaml_text is not None:
        frontmatter, fm_error, fm_error_code = _load_frontmatter(yaml_text, 2)

    tags: set[str] = set()
    aliases: list[str] = []
    for key, value in frontmatter.items():
        k = key.strip().casefold()
        if k in ("tags", "tag"):
            tags.update(_frontmatter_tags(value))
        elif k in ("aliases", "alias"):
            aliases.extend(_frontmatter_aliases(value))
    aliases = list(dict.fromkeys(aliases))

    body, code = _strip_comments(body)
    scan = _blank(body, code) if code else body

    starts = _line_starts(body)

    def line_of(pos: int) -> int:
        return body_line + bisect.bisect_right(starts, pos) - 1

    found: list[tuple[int, Link]] = []
    masked: list[tuple[int, int]] = []
    for m in _WIKILINK_RE.finditer(scan):
        target, heading, block, alias = _parse_wikilink(m.group(2))
        masked.append(m.span())
        if not target and not heading and not block:
            continue
        found.append((m.start(), Link(target, heading, block, alias, m.group(1) == "!", line_of(m.start()))))
    scan_md = _blank(scan, masked) if masked else scan
    for m in _MDLINK_RE.finditer(scan_md):
        dest = m.group(3)
        masked.append((m.start(3), m.end(3)))
        if dest.startswith("<") and dest.endswith(">"):
            dest = dest[1:-1]
        dest = dest.strip()
        if not dest or _URL_SCHEME_RE.match(dest) or dest.startswith("//") or "://" in dest:
            continue
        target, heading, block = _split_fragment(unquote(dest))
        if not target and not heading and not block:
            continue
        alias = m.group(2).strip() or None
        found.append((m.start(), Link(target, heading, block, alias, m.group(1) == "!", line_of(m.start()))))
    found.sort(key=lambda item: item[0])

    tag_scan = _blank(scan, masked) if masked else scan
    tag_scan = _BARE_URL_RE.sub(lambda mm: " " * len(mm.group(0)), tag_scan)
    for m in _INLINE_TAG_RE.finditer(tag_scan):
        raw = m.group(1)
        cut = next((i for i, ch in enumerate(raw) if not _tag_char_ok(ch)), len(raw))
        tag = normalise_tag(raw[:cut])
        if tag:
            tags.add(tag)

    return ParsedNote(
        title=title,
        frontmatter=frontmatter,
        frontmatter_error=fm_error,
        frontmatter_error_code=fm_error_code,
        tags=tuple(sorted(tags)),
        aliases=tuple(aliases),
        links=tuple(link for _, link in found),
        body=body,
        body_line=body_line,
    )


# ---------------------------------------------------------------- link resolution


def _fold(s: str) -> str:
    return unicodedata.normalize("NFC", s).casefold()


def _strip_md(s: str) -> str:
    return s[:-3] if s.casefold().endswith(".md") else s


class LinkResolver:
    """Resolve link targets to vault-relative paths the way Obsidian does.

    Built from ``(path, aliases)`` for every file of the vault, attachments
    included (``aliases`` empty for them). :meth:`resolve` is case-insensitive
    and accepts targets with or without the ``.md`` extension.
    """

    def __init__(self, files: Iterable[tuple[str, Sequence[str]]]) -> None:
        self._by_path: dict[str, str] = {}
        self._by_name: dict[str, list[str]] = defaultdict(list)
        self._by_alias: dict[str, list[str]] = defaultdict(list)
        for path, aliases in files:
            path = unicodedata.normalize("NFC", path)
            key = _fold(path)
            self._by_path.setdefault(key, path)
            name = key.rsplit("/", 1)[-1]
            self._by_name[name].append(path)
            if name.endswith(".md"):
                self._by_path.setdefault(key[:-3], path)
                self._by_name[name[:-3]].append(path)
            for alias in aliases or ():
                if isinstance(alias, str) and alias.strip():
                    self._by_alias[_fold(alias.strip())].append(path)

    @staticmethod
    def _prefer(candidates: Sequence[str], source_path: str) -> str:
        """Same folder as the source first, else the shortest path (then alphabetical)."""
        unique = sorted(set(candidates), key=lambda p: (len(p), p))
        source_dir = posixpath.dirname(source_path)
        for path in unique:
            if posixpath.dirname(path) == source_dir:
                return path
        return unique[0]

    def resolve(self, target: str, source_path: str) -> str | None:
        """Vault-relative path the link ``target`` (written in ``source_path``) points to, or ``None``.

        Order (Obsidian's link resolution): ``""`` is the source note itself; a
        ``./``/``../`` target is relative to the source's folder; an exact
        vault path (with or without ``.md``, leading ``/`` allowed); a
        path-qualified target (``folder/note``) matches files whose path ends
        with it; a bare name matches by file name; among several matches the
        one in the source's folder wins, else the shortest path; finally note
        aliases. Unresolvable targets give ``None``.
        """
        target = unicodedata.normalize("NFC", (target or "").strip()).replace("\\", "/")
        if not target:
            return source_path
        source_dir = posixpath.dirname(source_path)
        if target.startswith(("./", "../")):
            joined = posixpath.normpath(posixpath.join(source_dir, target))
            if joined.startswith("../") or joined == "..":
                return None
            return self._by_path.get(_fold(joined))
        target = target.lstrip("/")
        while target.startswith("./"):
            target = target[2:]
        if not target:
            return None
        key = _fold(target)
        hit = self._by_path.get(key)
        if hit is not None:
            return hit
        if "/" in key:
            # A Markdown link written relative to the source's folder.
            if source_dir:
                hit = self._by_path.get(_fold(posixpath.join(source_dir, target)))
                if hit is not None:
                    return hit
            name = key.rsplit("/", 1)[-1]
            suffix = "/" + key
            candidates = [
                p
                for p in self._by_name.get(name, ())
                if _fold(p).endswith(suffix) or _fold(_strip_md(p)).endswith(suffix)
            ]
            return self._prefer(candidates, source_path) if candidates else None
        candidates = self._by_name.get(key)
        if candidates:
            return self._prefer(candidates, source_path)
        candidates = self._by_alias.get(key) or self._by_alias.get(_fold(_strip_md(target)))
        if candidates:
            return self._prefer(candidates, source_path)
        return None
