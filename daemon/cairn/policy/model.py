"""The policy as Cairn uses it: the tools a client is served and what is withheld from it (layer 0, pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cairn.errors import BadRequestError, CairnError
from cairn.policy.withhold import NOTHING_WITHHELD, Withhold

#: Every MCP tool Cairn has (docs/design.md, "Interfaces" → MCP tools), in the order ``tools/list`` shows them.
ALL_TOOLS: tuple[str, ...] = ("search_notes", "get_note", "get_related_notes", "list_notes", "ask")
#: Reads that return only what the caller names or lists: served by default (docs/design.md, "Contract" → MCP default).
CONTAINED_READS = frozenset({"get_note", "list_notes"})
#: The policy format this Cairn reads; a file with a higher ``version`` is refused.
POLICY_VERSION = 1
DEFAULT_POLICY_NAME = "mcp-serve.yaml"
SCHEMA_NAME = "mcp-serve.schema.json"
#: The one code clients not declared local (and the unauthenticated ``/health``) get while the owner's policy is
#: unusable: the reason itself (``file:line: reason``) can quote a withheld folder or the owner's home path.
POLICY_UNUSABLE = "policy_unusable"
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

    def hints(self, client: str | None, requested: Iterable[str]) -> list[str]:
        """What the owner should know before ``client`` is served: one message when it is not declared in the
        policy, one per tool in ``requested`` the policy does not give it (dropped, not served). Each names the
        client, the tool and the policy line to write (:func:`client_line`). The same text for ``cairn mcp``,
        ``cairn mcp token`` and the daemon's MCP HTTP log (one edge contract)."""
        tools = [t for t in dict.fromkeys(requested) if t in ALL_TOOLS]
        if self.fail_closed_reason is not None:
            return []  # the owner is told why the policy is unusable instead
        if not client:
            denied = [t for t in tools if t not in self.default_tools]
            return (
                [
                    f"MCP: no --client given, so {_names(denied)} {'is' if len(denied) == 1 else 'are'} not served "
                    f"(only the default tools: {_names(sorted(self.default_tools))}); pass --client NAME, with NAME "
                    f"declared under `clients:` in {self.source}."
                ]
                if denied
                else []
            )
        out: list[str] = []
        declared = self.clients.get(client)
        if declared is None:
            wanted = [t for t in tools if t not in self.default_tools]
            out.append(
                f"MCP client {client!r} is not declared in the policy {self.source}: it gets the default tools only "
                f"({_names(sorted(self.default_tools))}){_not_served(wanted)} and is not local (withheld notes stay "
                f"hidden from it). To declare it, add under `clients:`: {client_line(client, False, wanted)}"
            )
            declared = ClientPolicy(client, local=False, tools=frozenset())
        for tool in tools:
            if tool not in declared.tools and tool not in self.default_tools and client in self.clients:
                out.append(
                    f"MCP client {client!r} asked for the tool {tool!r}, which the policy {self.source} does not "
                    f"give it, so it is not served. To allow it, make its line under `clients:` read: "
                    f"{client_line(client, declared.local, [*declared.tools, tool])}"
                )
        return out


def _names(tools: Iterable[str]) -> str:
    return ", ".join(tools) or "none"


def _not_served(tools: list[str]) -> str:
    return f", so {_names(tools)} {'is' if len(tools) == 1 else 'are'} not served" if tools else ""


def client_line(name: str, local: bool, tools: Iterable[str]) -> str:
    """The policy's YAML line declaring client ``name``: ``  name: {local: false, tools: [a, b]}`` (tools in the
    order of ALL_TOOLS)."""
    have = [t for t in ALL_TOOLS if t in set(tools)]
    return f"  {name}: {{local: {'true' if local else 'false'}, tools: [{', '.join(have)}]}}"


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
