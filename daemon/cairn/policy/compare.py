"""Comparing two policies: what a change withholds less, and the stricter of two (layer 0, pure).

A change that withholds less (a withheld tag or folder no longer covered, a client newly declared local) is
used only once the owner confirms it; meanwhile :func:`stricter_of` the confirmed policy and the file is in
force (docs/design.md, Governance). Tools and audit settings are not part of this rule: they never decide
whether a note is withheld.
"""

from __future__ import annotations

import unicodedata

from cairn.policy.model import ClientPolicy, Policy
from cairn.policy.withhold import Withhold


def _fold(folder: str) -> str:
    return unicodedata.normalize("NFC", folder).casefold()


def _tag_covered(tag: str, by: tuple[str, ...]) -> bool:
    """True when ``tag`` (normalised) is withheld by one of ``by``: the same tag or a tag it is nested below."""
    return any(tag == w or tag.startswith(w + "/") for w in by)


def _folder_covered(folder: str, by: tuple[str, ...]) -> bool:
    """True when every note under ``folder`` lies under one of ``by`` (case-insensitive, whole segments)."""
    f = _fold(folder)
    return any(f == _fold(w) or f.startswith(_fold(w) + "/") for w in by)


def loosened(before: Policy, after: Policy) -> list[str]:
    """What ``after`` withholds less than ``before``, sorted: ``"tag T"`` and ``"folder F"`` no longer withheld
    (a tag or folder still covered by a broader one does not count), ``"client C now local"``. Empty when
    ``after`` withholds at least as much (it may withhold more). A fail-closed ``before`` counts as its stand-in
    (``personal``, no client local)."""
    tags = [f"tag {t}" for t in before.withhold.tags if not _tag_covered(t, after.withhold.tags)]
    folders = [f"folder {f}" for f in before.withhold.folders if not _folder_covered(f, after.withhold.folders)]
    local = [f"client {c} now local" for c, p in after.clients.items() if p.local and not before.is_local(c)]
    return sorted(dict.fromkeys([*tags, *folders, *local]))


def stricter_of(confirmed: Policy, file: Policy) -> Policy:
    """The policy in force while ``file`` waits for the owner's confirmation: ``file``'s tools, clients and audit
    setting, withholding every tag and folder either withholds, and a client local only when local in both."""
    withhold = Withhold(
        tuple(dict.fromkeys([*confirmed.withhold.tags, *file.withhold.tags])),
        tuple(dict.fromkeys([*confirmed.withhold.folders, *file.withhold.folders])),
    )
    clients = {
        name: ClientPolicy(name, local=p.local and confirmed.is_local(name), tools=p.tools)
        for name, p in file.clients.items()
    }
    return Policy(
        version=file.version,
        withhold=withhold,
        default_tools=file.default_tools,
        clients=clients,
        audit_enabled=file.audit_enabled or confirmed.audit_enabled,
        source=file.source,
    )
