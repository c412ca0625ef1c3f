"""The MCP governance policy: which tools a client is served and which notes it never sees.

Layer 0 (pure core): the policy model (:mod:`.model`), withholding and link masking (:mod:`.withhold`) and
parsing (:mod:`.parse`). The owner's file, and the live holder that reloads it, are
:mod:`cairn.policy_file` (layer 1). The shipped default is ``governance/mcp-serve.yaml`` (also inside the
package, so an installed ``cairn`` finds it), validated against ``governance/mcp-serve.schema.json``
(JSON Schema 2020-12, checked with ``jsonschema``). Rules (docs/design.md, "Contract" → Governance):

- Served tools = ``default_tools`` ∪ (``--tool`` names ∩ the client's ``tools``).
- A note carrying a withheld tag (in any form; nested tags below it count) or under a withheld folder
  is withheld from every client not declared ``local: true``. Unknown clients are not local.
- Client identity comes from the owner (``--client`` / the token's name), never from ``clientInfo``.
- Missing, unreadable, invalid or newer-version policy: :func:`cairn.policy_file.load_policy` raises
  :class:`PolicyError` naming the file, the line and the reason; the daemon fails closed
  (:func:`fail_closed_policy`).
- A change that withholds less (:func:`loosened`) waits for the owner's confirmation; meanwhile
  :func:`stricter_of` the confirmed policy and the file is in force (:mod:`cairn.policy_file`).
"""

from cairn.policy.compare import loosened, stricter_of
from cairn.policy.model import (
    ALL_TOOLS,
    CONTAINED_READS,
    DEFAULT_POLICY_NAME,
    MAX_POLICY_BYTES,
    POLICY_UNUSABLE,
    POLICY_VERSION,
    SCHEMA_NAME,
    ClientPolicy,
    Policy,
    PolicyError,
    fail_closed_policy,
)
from cairn.policy.parse import default_policy_text, parse_policy, policy_schema
from cairn.policy.withhold import NOTHING_WITHHELD, WITHHELD_LINK, LinkRedactor, WithheldTally, Withhold

__all__ = [
    "ALL_TOOLS",
    "CONTAINED_READS",
    "POLICY_VERSION",
    "POLICY_UNUSABLE",
    "DEFAULT_POLICY_NAME",
    "MAX_POLICY_BYTES",
    "SCHEMA_NAME",
    "PolicyError",
    "Withhold",
    "WithheldTally",
    "LinkRedactor",
    "WITHHELD_LINK",
    "NOTHING_WITHHELD",
    "ClientPolicy",
    "Policy",
    "parse_policy",
    "fail_closed_policy",
    "default_policy_text",
    "policy_schema",
    "loosened",
    "stricter_of",
]
