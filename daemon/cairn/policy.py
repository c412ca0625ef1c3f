"""The MCP governance policy: which tools a client is served and which notes it never sees.

Layer 0 (pure core apart from reading the policy file itself). The shipped default is
``governance/mcp-serve.yaml`` (also inside the package, so an installed ``cairn`` finds it), validated
against ``governance/mcp-serve.schema.json`` (JSON Schema 2020-12, checked with ``jsonschema``). The
owner's copy lives in the config folder (:func:`owner_policy_path`), created from the default on first
use. Rules (issue 5, DESIGN.md "Governance"):

- Served tools = ``default_tools`` ∪ (``--tool`` names ∩ the client's ``tools``).
- A note carrying a withheld tag (in any form; nested tags below it count) or under a withheld folder
  is withheld from every client not declared ``local: true``. Unknown clients are not local.
- Client identity comes from the owner (``--client`` / the token's name), never from ``clientInfo``.
- Missing, unreadable, invalid or newer-version policy: :func:`load_policy` raises
  :class:`PolicyError` naming the file, the line and the reason; the daemon fails closed
  (:func:`fail_closed_policy`).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import threading
import time
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from cairn.errors import BadRequestError, CairnError
from cairn.notes import normalise_tag

log = logging.getLogger(__name__)

__all__ = [
    "ALL_TOOLS",
    "CONTAINED_READS",
    "POLICY_VERSION",
    "DEFAULT_POLICY_NAME",
    "SCHEMA_NAME",
    "PolicyError",
    "Withhold",
    "WithheldTally",
    "LinkRedactor",
    "WITHHELD_LINK",
    "NOTHING_WITHHELD",
    "ClientPolicy",
    "Policy",
    "PolicyHolder",
    "parse_policy",
    "load_policy",
    "fail_closed_policy",
    "default_policy_text",
    "policy_schema",
    "owner_policy_path",
    "ensure_owner_policy",
]

#: Every MCP tool Cairn has (DESIGN.md, MCP tools), in the order ``tools/list`` shows them.
ALL_TOOLS: tuple[str, ...] = ("search_notes", "get_note", "get_related_notes", "list_notes", "ask")
#: Reads that return only what the caller names or lists: served by default (DESIGN.md, MCP default).
CONTAINED_READS = frozenset({"get_note", "list_notes"})
#: The policy format this Cairn reads; a file with a higher ``version`` is refused.
POLICY_VERSION = 1
DEFAULT_POLICY_NAME = "mcp-serve.yaml"
SCHEMA_NAME = "mcp-serve.schema.json"
#: A policy file larger than this is refused (bytes); the shipped one is ~1.5 KB.
MAX_POLICY_BYTES = 1_000_000


class PolicyError(CairnError):
    """A policy file that cannot be used. ``str(err) == f"{file}:{line}: {reason}"`` (``f"{file}: {reason}"``
    when no line applies, e.g. a missing file). ``line`` is 1-based."""

    code = "invalid_policy"
    http_status = 500

    def __init__(self, file: str, line: int | None, reason: str) -> None:
        self.file = str(file)
        self.line = line
        self.reason = reason
        super().__init__(f"{self.file}:{line}: {reason}" if line is not None else f"{self.file}: {reason}")


# ------------------------------------------------------------------------------------ withholding
def _fold_path(path: str) -> str:
    return unicodedata.normalize("NFC", path).casefold()


@dataclass(frozen=True)
class Withhold:
    """What a client must never see. ``tags``: normalised like ``note_tags`` (no ``#``, case-folded,
    nested kept as ``a/b``); a tag nested below one of them counts too. ``folders``: vault-relative
    POSIX folder prefixes without surrounding ``/``, compared case-insensitively (``Private`` withholds
    ``private/x.md`` and ``Private/a/b.md``, not ``Private.md`` nor ``Privateer/x.md``).
    ``Withhold()`` withholds nothing and is falsy."""

    tags: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()

    @classmethod
    def of(cls, tags: Iterable[str] = (), folders: Iterable[str] = ()) -> Withhold:
        """A Withhold from raw tags (``#Personal`` → ``personal``) and folders (``/Private/`` → ``Private``).
        Raises :class:`ValueError` for a string that is not a tag, or a folder that is absolute or holds ``..``."""
        norm_tags = []
        for t in tags:
            n = normalise_tag(str(t))
            if n is None:
                raise ValueError(f"{t!r} is not a tag; expected e.g. 'personal' or 'personal/health'")
            norm_tags.append(n)
        return cls(tuple(dict.fromkeys(norm_tags)), tuple(dict.fromkeys(_norm_folder(f) for f in folders)))

    def tag_withheld(self, tags: Iterable[str]) -> bool:
        """True when any of ``tags`` (raw or normalised) is a withheld tag or nested below one."""
        if not self.tags:
            return False
        for raw in tags:
            t = normalise_tag(str(raw))
            if t is None:
                continue
            for w in self.tags:
                if t == w or t.startswith(w + "/"):
                    return True
        return False

    def path_withheld(self, path: str) -> bool:
        """True when the vault-relative ``path`` lies under a withheld folder (case-insensitive)."""
        if not self.folders:
            return False
        p = _fold_path(path.lstrip("/"))
        return any(p.startswith(_fold_path(f) + "/") for f in self.folders)

    def note_withheld(self, path: str, tags: Iterable[str]) -> bool:
        """True when the note at ``path`` with ``tags`` is withheld (by folder or by tag)."""
        return self.path_withheld(path) or self.tag_withheld(tags)

    def __bool__(self) -> bool:
        return bool(self.tags or self.folders)


NOTHING_WITHHELD = Withhold()


@dataclass
class WithheldTally:
    """Out-parameter of the withholding use-case calls: the distinct withheld notes a call would
    otherwise have touched (search candidates removed, a withheld note asked for, links and list
    entries dropped). For the audit log only — never shown to the client (a count is a leak too)."""

    paths: set[str] = field(default_factory=set)

    def add(self, paths: Iterable[str]) -> None:
        self.paths.update(paths)

    @property
    def count(self) -> int:
        return len(self.paths)


#: What a link to a withheld note becomes in returned content, snippets and prompts.
WITHHELD_LINK = "[withheld link]"


class LinkRedactor:
    """Replaces wikilinks, embeds and Markdown links that point to a withheld note by
    :data:`WITHHELD_LINK`. Built from the withheld notes' ``(path, aliases)``; a link matches when its
    target (without ``#heading``, ``|alias``, ``.md``, leading ``./``/``../``/``/``; case-insensitive) is a
    withheld note's path, ends in its file name, or is one of its aliases. That errs on the side of
    redacting: a link to an allowed note with the same file name as a withheld one is redacted too."""

    def __init__(self, notes: Iterable[tuple[str, Iterable[str]]]) -> None:
        self.names: set[str] = set()
        self.aliases: set[str] = set()
        #: what a link to a withheld note shows once its brackets are gone: file names (with and without
        #: ``.md``), vault paths without ``.md``, aliases — as written (NFC), for :meth:`redact_symbol`
        self.phrases: set[str] = set()
        for path, aliases in notes:
            folded = _fold_path(path)
            base = folded.rsplit("/", 1)[-1]
            self.names.update({folded, base})
            if folded.endswith(".md"):
                self.names.update({folded[:-3], base[:-3]})
            self.aliases.update(_fold_path(a).strip() for a in aliases or () if isinstance(a, str) and a.strip())
            written = unicodedata.normalize("NFC", path)
            stem = written[:-3] if written.lower().endswith(".md") else written
            self.phrases.update({stem, stem.rsplit("/", 1)[-1]})
            self.phrases.update(
                unicodedata.normalize("NFC", a).strip() for a in aliases or () if isinstance(a, str) and a.strip()
            )
        self.phrases.discard("")
        self._phrase_re: re.Pattern[str] | None | bool = False  # built on first use

    def __bool__(self) -> bool:
        return bool(self.names)

    def matches(self, target: str) -> bool:
        """True when the link target ``target`` (as written, fragment already removed) may name a withheld note."""
        t = _fold_path(target.strip()).replace("\\", "/")
        if not t:
            return False
        if t in self.aliases:
            return True
        t = t.lstrip("/")
        while t.startswith(("./", "../")):
            t = t.split("/", 1)[1]
        base = t.rsplit("/", 1)[-1]
        return t in self.names or base in self.names

    def redact(self, text: str) -> str:
        """``text`` with every link to a withheld note replaced by :data:`WITHHELD_LINK`."""
        if not self.names or not text or ("[" not in text):
            return text
        from urllib.parse import unquote

        from cairn.notes.links import MDLINK_RE, URL_SCHEME_RE, WIKILINK_RE, parse_wikilink, split_fragment

        def wiki(m: re.Match[str]) -> str:
            target = parse_wikilink(m.group(2))[0]
            return WITHHELD_LINK if target and self.matches(target) else m.group(0)

        def md(m: re.Match[str]) -> str:
            dest = m.group(3)
            if dest.startswith("<") and dest.endswith(">"):
                dest = dest[1:-1]
            dest = dest.strip()
            if not dest or URL_SCHEME_RE.match(dest) or dest.startswith("//"):
                return m.group(0)
            target = split_fragment(unquote(dest))[0]
            return WITHHELD_LINK if target and self.matches(target) else m.group(0)

        return MDLINK_RE.sub(md, WIKILINK_RE.sub(wiki, text))

    def redact_symbol(self, symbol: str, displays: Iterable[str] = ()) -> str:
        """A heading path (``symbol``, ``A › B``) with every mention of a withheld note replaced by
        :data:`WITHHELD_LINK`. A stored heading has lost its link brackets (``## Meeting with [[Dr Smith]]``
        is stored as ``Meeting with Dr Smith``; ``[[Dr Smith#Plan]]`` as ``Dr Smith > Plan``), so link syntax
        cannot be relied on: every withheld note's file name, vault path (without ``.md``) and alias is
        masked as a whole phrase, case-insensitively, with a folder prefix, a ``.md`` suffix and a
        ``> heading`` part that follows it; ``displays`` adds the shown texts of links to withheld notes
        (``[[Dr Smith|my doctor]]`` is stored as ``my doctor``: the note's links know it). Remaining link
        syntax is redacted first, as in :meth:`redact`. Errs on the side of masking: a plain word equal to a
        withheld note's name is masked too (only in headings: body text keeps its plain words)."""
        if not symbol or not (self.phrases or displays):
            return symbol
        text = self.redact(unicodedata.normalize("NFC", symbol))
        extra = sorted(
            {unicodedata.normalize("NFC", d).strip() for d in displays if d and d.strip()}, key=len, reverse=True
        )
        if extra:
            text = re.compile(r"(?<!\w)(?:" + "|".join(map(_phrase, extra)) + r")(?!\w)", re.IGNORECASE).sub(
                WITHHELD_LINK, text
            )
        if self._phrase_re is False:
            names = sorted(self.phrases, key=len, reverse=True)
            self._phrase_re = (
                re.compile(
                    r"(?<!\w)(?:[^\s›/]+/)*(?:"
                    + "|".join(map(_phrase, names))
                    + r")(?:\.md)?(?:\s+>\s+[^›]*[^\s›])?(?!\w)",
                    re.IGNORECASE,
                )
                if names
                else None
            )
        if self._phrase_re is not None:
            text = self._phrase_re.sub(WITHHELD_LINK, text)  # type: ignore[union-attr]
        return text


def _phrase(text: str) -> str:
    """A regex for ``text`` as written, any run of whitespace matching any other."""
    return r"\s+".join(re.escape(part) for part in text.split())


def _norm_folder(raw: str) -> str:
    folder = unicodedata.normalize("NFC", str(raw).strip()).strip("/")
    if not folder or "\\" in folder or "\x00" in folder:
        raise ValueError(
            f"{raw!r} is not a vault folder; expected a vault-relative path such as 'Private' or 'Journal/2024'"
        )
    parts = folder.split("/")
    if any(p in ("", ".", "..") for p in parts) or (len(folder) > 1 and folder[1] == ":"):
        raise ValueError(
            f"{raw!r} is not a vault folder; expected a vault-relative path without '..' such as "
            "'Private' or 'Journal/2024'"
        )
    return posixpath.normpath(folder)


# ------------------------------------------------------------------------------------ policy
@dataclass(frozen=True)
class ClientPolicy:
    """One client's rights: ``local`` (nothing withheld from it) and the ``tools`` that ``--tool`` may add."""

    name: str
    local: bool
    tools: frozenset[str]


@dataclass(frozen=True)
class Policy:
    """A validated policy. ``source`` is where it came from (a path, or ``<fail-closed>``);
    ``fail_closed_reason`` is set when this is the fail-closed stand-in for a broken policy."""

    version: int
    withhold: Withhold
    default_tools: frozenset[str]
    clients: Mapping[str, ClientPolicy]
    audit_enabled: bool
    source: str
    fail_closed_reason: str | None = None

    def client(self, name: str | None) -> ClientPolicy:
        """The declared client ``name`` (exact match), or an unknown client: not local, no extra tools."""
        declared = self.clients.get(name) if name else None
        return declared or ClientPolicy(name or "unknown", local=False, tools=frozenset())

    def served_tools(self, client: str | None, requested: Iterable[str]) -> frozenset[str]:
        """``default_tools`` ∪ (``requested`` ∩ the client's tools). Raises :class:`~cairn.errors.BadRequestError`
        naming an unknown tool in ``requested`` and the valid names."""
        requested = list(requested)
        unknown = [t for t in requested if t not in ALL_TOOLS]
        if unknown:
            raise BadRequestError(f"Unknown MCP tool {unknown[0]!r}; expected one of {', '.join(ALL_TOOLS)}.")
        return frozenset(self.default_tools | (set(requested) & self.client(client).tools))

    def withhold_for(self, client: str | None) -> Withhold:
        """Nothing for a client declared ``local: true``; the policy's :class:`Withhold` for everyone else."""
        return NOTHING_WITHHELD if self.client(client).local else self.withhold

    def is_local(self, client: str | None) -> bool:
        return self.client(client).local


def fail_closed_policy(reason: str) -> Policy:
    """The stand-in used when the owner's policy cannot be used: ``personal`` withheld from everyone
    (no client is declared, so none is local), contained reads only, audit on."""
    return Policy(
        version=POLICY_VERSION,
        withhold=Withhold(("personal",), ()),
        default_tools=CONTAINED_READS,
        clients={},
        audit_enabled=True,
        source="<fail-closed>",
        fail_closed_reason=reason,
    )


# ------------------------------------------------------------------------------------ files
def _package_file(name: str) -> str:
    return resources.files("cairn").joinpath("governance", name).read_text(encoding="utf-8")


def default_policy_text() -> str:
    """The shipped default policy (``governance/mcp-serve.yaml``, package data) as text."""
    return _package_file(DEFAULT_POLICY_NAME)


@lru_cache(maxsize=1)
def policy_schema() -> dict:
    """The JSON schema of the policy (``governance/mcp-serve.schema.json``, package data)."""
    return json.loads(_package_file(SCHEMA_NAME))


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema

    schema = policy_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def owner_policy_path(config_dir: Path) -> Path:
    """Where the owner's policy lives: ``config_dir / "mcp-serve.yaml"``."""
    return Path(config_dir) / DEFAULT_POLICY_NAME


def ensure_owner_policy(config_dir: Path) -> Path:
    """The owner's policy path, created from the shipped default (mode 0600) if it does not exist yet.
    An existing file is never touched. Raises :class:`PolicyError` when it cannot be created."""
    path = owner_policy_path(config_dir)
    if path.exists():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    except OSError as exc:
        raise PolicyError(
            str(path),
            None,
            f"cannot create the policy from the default ({exc.strerror or exc}); check the config folder's permissions",
        ) from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(default_policy_text())
    log.info("created the MCP policy %s from the shipped default", path)
    return path


# ------------------------------------------------------------------------------------ parsing
class _Nodes:
    """Line numbers of the YAML nodes by path: {(key, key, index...): (key node or None, value node)}."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.by_path: dict[tuple, tuple[yaml.Node | None, yaml.Node]] = {}

    def walk(self, node: yaml.Node, path: tuple = (), key_node: yaml.Node | None = None) -> None:
        self.by_path[path] = (key_node, node)
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for k, v in node.value:
                key = k.value if isinstance(k, yaml.ScalarNode) else None
                if key == "<<":
                    raise PolicyError(
                        self.source,
                        k.start_mark.line + 1,
                        "YAML merge keys ('<<') are not allowed in a policy; write the keys out",
                    )
                if key in seen:
                    raise PolicyError(
                        self.source,
                        k.start_mark.line + 1,
                        f"duplicate key {key!r} (first at line {seen[key]}); each key may appear once",
                    )
                seen[key] = k.start_mark.line + 1
                self.walk(v, path + (key,), k)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.walk(item, path + (i,), None)

    def line(self, path: Iterable[Any], *, key: bool = False) -> int:
        path = tuple(path)
        while path not in self.by_path and path:
            path = path[:-1]
        key_node, value_node = self.by_path.get(path, (None, None))
        node = key_node if key and key_node is not None else value_node
        return node.start_mark.line + 1 if node is not None else 1


def _where(path: Iterable[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "the policy"


def _schema_reason(err: Any) -> tuple[tuple, str, bool]:
    """(path of the offending node, reason, point at the key) for a jsonschema ValidationError."""
    path = tuple(err.absolute_path)
    where = _where(path)
    inst = err.instance
    v = err.validator
    if v == "additionalProperties" and isinstance(inst, dict):
        allowed = sorted((err.schema.get("properties") or {}).keys())
        extra = sorted(k for k in inst if k not in allowed)
        name = extra[0] if extra else "?"
        expected = f"; expected one of: {', '.join(allowed)}" if allowed else ""
        return path + (name,), f"unknown key {name!r} in {where}{expected}", True
    if v == "required":
        missing = [k for k in err.validator_value if not isinstance(inst, dict) or k not in inst] or ["?"]
        hint = " (e.g. 'local: false')" if missing[0] == "local" else ""
        return path, f"{where} is missing the required key {missing[0]!r}{hint}", False
    if v in ("propertyNames", "pattern") and path == ("clients",):
        bad = inst if isinstance(inst, str) else "?"
        return (
            path + (bad,),
            (
                f"client name {bad!r} is not allowed; expected letters, digits, '.', '_' or '-' "
                "(starting with a letter or digit), at most 64 characters"
            ),
            True,
        )
    if v == "enum" and err.schema.get("enum") and set(err.schema["enum"]) == set(ALL_TOOLS):
        return path, f"{where}: unknown tool {inst!r}; expected one of: {', '.join(ALL_TOOLS)}", False
    if v == "anyOf" and path and path[-1] == "tools":
        if isinstance(inst, list):  # the list branch failed: name the bad item
            deeper = [e for e in err.context if e.validator == "enum" and e.relative_path]
            if deeper:
                i = deeper[0].relative_path[-1]
                return (
                    path + (i,),
                    f"{where}[{i}]: unknown tool {inst[i]!r}; expected one of: {', '.join(ALL_TOOLS)}",
                    False,
                )
        return path, f'{where} must be a list of tool names or "all", got {inst!r}', False
    if v == "type":
        expected = err.validator_value
        return path, f"{where} must be {_a(expected)}, got {_describe(inst)}", False
    if v == "minimum":
        return path, f"{where} must be at least {err.validator_value}, got {inst!r}", False
    if v in ("minLength", "maxLength"):
        return path, f"{where}: {err.message}", False
    return path, f"{where}: {err.message}", False


def _a(expected: Any) -> str:
    names = {
        "object": "a mapping",
        "array": "a list",
        "string": "a string",
        "integer": "an integer",
        "boolean": "true or false",
        "number": "a number",
    }
    if isinstance(expected, list):
        return " or ".join(names.get(e, e) for e in expected)
    return names.get(expected, str(expected))


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    kind = {dict: "a mapping", list: "a list", str: "the string", bool: "", int: "the number", float: "the number"}
    prefix = kind.get(type(value), type(value).__name__)
    shown = repr(value) if not isinstance(value, (dict, list)) else ""
    return f"{prefix} {shown}".strip()


def parse_policy(text: str, source: str) -> Policy:
    """Parse and validate policy ``text`` (YAML); ``source`` names the file in errors and in
    ``Policy.source``. Raises :class:`PolicyError` (``source:line: reason``) for YAML syntax errors,
    duplicate keys, a ``version`` newer than :data:`POLICY_VERSION`, anything the JSON schema refuses,
    and tags/folders that are not tags/vault folders."""
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            nodes = _Nodes(source)
            if node is not None:
                nodes.walk(node)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        raise PolicyError(source, line, f"invalid YAML: {reason}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(source, None, f"invalid YAML: {exc}") from None
    if data is None:
        raise PolicyError(
            source,
            1,
            "the policy is empty; expected a mapping starting with 'version: 1' "
            "(see the shipped governance/mcp-serve.yaml)",
        )
    if not isinstance(data, dict):
        raise PolicyError(
            source,
            1,
            f"the policy must be a mapping of keys (version, withhold, default_tools, "
            f"clients, audit), got {_describe(data)}",
        )
    version = data.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > POLICY_VERSION:
        raise PolicyError(
            source,
            nodes.line(("version",)),
            f"policy version {version} is newer than this Cairn understands (up to {POLICY_VERSION}); "
            "upgrade Cairn or write a version 1 policy",
        )
    errors = list(_validator().iter_errors(data))
    if errors:
        found = []
        for err in errors:
            path, reason, at_key = _schema_reason(err)
            found.append((nodes.line(path, key=at_key), reason))
        line, reason = min(found)
        raise PolicyError(source, line, reason)

    withhold = data["withhold"]
    tags: list[str] = []
    for i, raw in enumerate(withhold.get("tags") or []):
        tag = normalise_tag(raw)
        if tag is None:
            raise PolicyError(
                source,
                nodes.line(("withhold", "tags", i)),
                f"withhold.tags[{i}]: {raw!r} is not a tag; expected e.g. 'personal' or 'personal/health'",
            )
        tags.append(tag)
    folders: list[str] = []
    for i, raw in enumerate(withhold.get("folders") or []):
        try:
            folders.append(_norm_folder(raw))
        except ValueError as exc:
            raise PolicyError(source, nodes.line(("withhold", "folders", i)), f"withhold.folders[{i}]: {exc}") from None
    clients = {}
    for name, spec in (data.get("clients") or {}).items():
        tools = spec.get("tools", [])
        clients[name] = ClientPolicy(
            name=name, local=bool(spec["local"]), tools=frozenset(ALL_TOOLS) if tools == "all" else frozenset(tools)
        )
    default_tools = data.get("default_tools")
    return Policy(
        version=int(data["version"]),
        withhold=Withhold(tuple(dict.fromkeys(tags)), tuple(dict.fromkeys(folders))),
        default_tools=CONTAINED_READS if default_tools is None else frozenset(default_tools),
        clients=clients,
        audit_enabled=bool((data.get("audit") or {}).get("enabled", True)),
        source=source,
    )


def load_policy(path: Path) -> Policy:
    """Read and validate the policy file at ``path``. Raises :class:`PolicyError` when it is missing,
    unreadable, too large, not UTF-8, invalid or of a newer version (``path:line: reason``)."""
    path = Path(path)
    source = str(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_POLICY_BYTES + 1)
    except FileNotFoundError:
        raise PolicyError(
            source,
            None,
            "no policy file here; check the path (`cairn policy check` without FILE "
            "creates your copy in the config folder from the shipped default)",
        ) from None
    except IsADirectoryError:
        raise PolicyError(source, None, "this is a folder, not a policy file") from None
    except OSError as exc:
        raise PolicyError(source, None, f"cannot read the policy ({exc.strerror or exc})") from None
    if len(raw) > MAX_POLICY_BYTES:
        raise PolicyError(
            source, None, f"the policy is larger than {MAX_POLICY_BYTES:,} bytes; expected a short YAML file"
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise PolicyError(source, line, "the policy is not UTF-8 text") from None
    return parse_policy(text, source)


# ------------------------------------------------------------------------------------ live policy
@dataclass
class _Loaded:
    policy: Policy
    stamp: tuple[int, int] | None  # (mtime_ns, size) of the file it came from; None when missing
    checked_at: float = field(default=0.0)


class PolicyHolder:
    """Thread-safe current policy; reloads when the file's (mtime_ns, size) changes, at most every
    ``check_interval_s`` (1 s) — validating first and swapping atomically, so a caller always gets a
    whole policy. ``strict=True`` (``cairn mcp``): an initial load error raises :class:`PolicyError`;
    a later invalid edit makes the holder fail closed (logged with ``file:line: reason``) until the
    file is fixed. ``strict=False`` (daemon HTTP): a missing/invalid file → :func:`fail_closed_policy`
    (its ``fail_closed_reason`` is the PolicyError text), logged, re-checked the same way."""

    def __init__(self, path: Path, *, strict: bool, check_interval_s: float = 1.0) -> None:
        self.path = Path(path)
        self.strict = strict
        self.check_interval_s = check_interval_s
        self._lock = threading.Lock()
        stamp = self._stamp()
        try:
            policy = load_policy(self.path)
        except PolicyError as exc:
            if strict:
                raise
            log.error(
                "MCP policy unusable, failing closed (no note goes to an MCP client or a remote model until "
                "it is fixed): %s",
                exc,
            )
            policy = fail_closed_policy(str(exc))
        self._loaded = _Loaded(policy, stamp, time.monotonic())

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def current(self) -> Policy:
        """The policy in force now (a reload is attempted when the file changed and the last check
        is older than ``check_interval_s``). Never raises after construction."""
        loaded = self._loaded
        now = time.monotonic()
        if now - loaded.checked_at < self.check_interval_s:
            return loaded.policy
        with self._lock:
            loaded = self._loaded
            if now - loaded.checked_at < self.check_interval_s:
                return loaded.policy
            stamp = self._stamp()
            if stamp == loaded.stamp:
                loaded.checked_at = now
                return loaded.policy
            try:
                policy = load_policy(self.path)
                if loaded.policy.fail_closed_reason:
                    log.warning("MCP policy %s is valid again; fail-closed mode ended", self.path)
                else:
                    log.info("MCP policy %s reloaded", self.path)
            except PolicyError as exc:
                log.error("MCP policy edit refused, failing closed until it is fixed: %s", exc)
                policy = fail_closed_policy(str(exc))
            self._loaded = _Loaded(policy, stamp, now)
            return policy

    def reload(self) -> Policy:
        """Check the file now, whatever the interval (for tests and explicit reload requests)."""
        with self._lock:
            self._loaded.checked_at = float("-inf")
        return self.current()
