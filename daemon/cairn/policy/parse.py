"""Parsing and validating a policy's YAML text, with ``file:line: reason`` errors (layer 0, pure).

The JSON schema and the shipped default policy are package data (``cairn/governance/``), read on first use.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from cairn.notes import normalise_tag
from cairn.policy.model import (
    ALL_TOOLS,
    CONTAINED_READS,
    DEFAULT_POLICY_NAME,
    POLICY_VERSION,
    SCHEMA_NAME,
    ClientPolicy,
    Policy,
    PolicyError,
)
from cairn.policy.withhold import Withhold, norm_folder


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
        return path, f"{where} must be {_type_phrase(expected)}, got {_describe(inst)}", False
    if v == "minimum":
        return path, f"{where} must be at least {err.validator_value}, got {inst!r}", False
    if v in ("minLength", "maxLength"):
        return path, f"{where}: {err.message}", False
    return path, f"{where}: {err.message}", False


def _type_phrase(expected: Any) -> str:
    names = {
        "object": "a mapping",
        "array": "a list",
        "string": "a string",
        "integer": "an integer",
        "boolean": "true or false",
        "number": "a number",
    }
    if isinstance(expected, list):
        return " or ".join(names.get(e, str(e)) for e in expected)
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
    data, nodes = _load_yaml(text, source)
    _check(data, nodes, source)
    withhold = data["withhold"]
    clients = {}
    for name, spec in (data.get("clients") or {}).items():
        tools = spec.get("tools", [])
        clients[name] = ClientPolicy(
            name=name, local=bool(spec["local"]), tools=frozenset(ALL_TOOLS) if tools == "all" else frozenset(tools)
        )
    default_tools = data.get("default_tools")
    return Policy(
        version=int(data["version"]),
        withhold=Withhold(
            tuple(dict.fromkeys(_withheld_tags(withhold, nodes, source))),
            tuple(dict.fromkeys(_withheld_folders(withhold, nodes, source))),
        ),
        default_tools=CONTAINED_READS if default_tools is None else frozenset(default_tools),
        clients=clients,
        audit_enabled=bool((data.get("audit") or {}).get("enabled", True)),
        source=source,
    )


def _load_yaml(text: str, source: str) -> tuple[Any, _Nodes]:
    """The YAML document of ``text`` and its nodes' lines. Raises :class:`PolicyError` for invalid YAML,
    a duplicate key or a merge key."""
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
    return data, nodes


def _check(data: Any, nodes: _Nodes, source: str) -> None:
    """Raise :class:`PolicyError` unless ``data`` is a mapping of a known version that the schema accepts
    (the first error in file order is reported)."""
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


def _withheld_tags(withhold: dict, nodes: _Nodes, source: str) -> list[str]:
    """``withhold.tags`` normalised; raises :class:`PolicyError` at the first that is not a tag."""
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
    return tags


def _withheld_folders(withhold: dict, nodes: _Nodes, source: str) -> list[str]:
    """``withhold.folders`` normalised; raises :class:`PolicyError` at the first that is not a vault folder."""
    folders: list[str] = []
    for i, raw in enumerate(withhold.get("folders") or []):
        try:
            folders.append(norm_folder(raw))
        except ValueError as exc:
            raise PolicyError(source, nodes.line(("withhold", "folders", i)), f"withhold.folders[{i}]: {exc}") from None
    return folders
