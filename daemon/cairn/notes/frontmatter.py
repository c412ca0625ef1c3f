"""Obsidian properties: the YAML front-matter of a note, read as Obsidian reads it (layer 0, pure).

A ``---`` first line opens the front-matter and the next ``---`` line closes it; the YAML is read with
YAML 1.2 core-schema scalars, a repeated ``tags``/``aliases`` key keeps the union of its values, and a
problem is reported with a stable code (never raised): the note's body is parsed either way.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from typing import Any

import yaml

#: Stable codes of :attr:`ParsedNote.frontmatter_error_code`: the front-matter was dropped (invalid YAML, not a
#: mapping, too many values), or kept with a repeated property. Either way the note's tags are uncertain, so
#: withholding by tag withholds it (``notes.error_code`` in the index; the messages may be reworded freely).
FRONTMATTER_INVALID = "frontmatter_invalid"
FRONTMATTER_REPEATED_PROPERTY = "frontmatter_repeated_property"
FRONTMATTER_ERROR_CODES = (FRONTMATTER_INVALID, FRONTMATTER_REPEATED_PROPERTY)

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
            # note: fail closed), and every repeat is reported (see load_frontmatter).
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
_FrontMatterLoader.construct_mapping = _construct_mapping


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
    """Replace the tabs that only separate (after ``key:`` or ``-``) with a space; used on a retry.

    PyYAML refuses these where Obsidian reads them. Tabs in the indentation are left as they are: an indent
    decides the structure, a tab has no defined width, and reading one as some number of spaces is a guess
    (a tab-indented list item then reads as text: ``tags: [one - two]``, tags ``-``, ``one``, ``two``)."""
    lines = []
    for line in text.split("\n"):
        stripped = line.lstrip(" \t")
        indent = line[: len(line) - len(stripped)]
        stripped = re.sub(r"^-\t+", "- ", stripped)
        stripped = re.sub(r"^([^\s\"'#][^:\"']*?):\t+", r"\1: ", stripped)
        lines.append(indent + stripped)
    return "\n".join(lines)


def _tab_indent_reason(text: str, first_line: int) -> str | None:
    """The problem to report when a line of ``text`` is indented with a tab (None when none is)."""
    for i, line in enumerate(text.split("\n")):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent and line.strip():
            return (
                f"invalid YAML front-matter at line {first_line + i}: indented with a tab (YAML indents with "
                "spaces only); the properties were not read — re-indent that line with spaces"
            )
    return None


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


def load_frontmatter(yaml_text: str, first_line: int) -> tuple[dict, str | None, str | None]:
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
        tabbed = _tab_indent_reason(yaml_text, first_line)
        if tabbed is not None:
            return {}, tabbed, FRONTMATTER_INVALID
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


def split_frontmatter(text: str) -> tuple[str | None, str, int]:
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
