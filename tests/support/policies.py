"""MCP policies the tests write: a full one whose first lines alone are a laxer valid policy (a save caught
half-written), and one with a single local agent."""

from __future__ import annotations

#: The policy, in block style so that its first lines alone are a valid (and laxer) policy.
FULL = """\
version: 1
withhold:
  tags: [personal]
  folders: [Private]
default_tools: [get_note, list_notes]
clients:
  claude-desktop: {local: false, tools: [search_notes, get_note, list_notes]}
  my-local-agent: {local: true, tools: all}
audit: {enabled: false}
"""


#: The first write of a save: a policy of its own that withholds the tag but not the folder.
FIRST_WRITE = FULL[: FULL.index("  folders:")]


WITHHELD_BY_FOLDER = "Private/Salary.md"


POLICY = """\
version: 1
withhold: {tags: [personal]}
default_tools: [get_note, list_notes]
clients:
  agent: {local: true, tools: all}
audit: {enabled: false}
"""
