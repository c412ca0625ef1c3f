"""The MCP governance policy (cairn.policy, cairn.policy_file): parsing with file:line errors, the
served-tools and withholding rules (docs/design.md, "Contract" → Governance), the owner's copy, and live reloading that
fails closed."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from cairn.errors import BadRequestError
from cairn.policy import (
    ALL_TOOLS,
    CONTAINED_READS,
    PolicyError,
    Withhold,
    default_policy_text,
    fail_closed_policy,
    parse_policy,
    policy_schema,
)
from cairn.policy_file import apply_policy, ensure_owner_policy, load_policy, owner_policy_path
from cairn.policy_live import PolicyHolder

REPO = Path(__file__).resolve().parents[1]
GOOD = """\
version: 1
withhold: {tags: [personal], folders: [Private]}
default_tools: [get_note, list_notes]
clients:
  claude-desktop: {local: false, tools: [search_notes, get_note, get_related_notes, list_notes]}
  my-local-agent: {local: true, tools: all}
audit: {enabled: true}
"""


def error_of(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "policy.yaml")
    return info.value


# ------------------------------------------------------------------------------ the shipped files
def test_the_shipped_default_is_the_governance_file_and_is_valid():
    assert default_policy_text() == (REPO / "governance" / "mcp-serve.yaml").read_text(encoding="utf-8")
    policy = parse_policy(default_policy_text(), "default")
    assert policy.version == 1
    assert policy.withhold == Withhold(("personal",), ())
    assert policy.default_tools == {"get_note", "list_notes"} == CONTAINED_READS
    assert policy.clients["claude-desktop"].tools == {"search_notes", "get_note", "get_related_notes", "list_notes"}
    assert not policy.clients["claude-desktop"].local
    assert policy.clients["my-local-agent"].local and policy.clients["my-local-agent"].tools == set(ALL_TOOLS)
    assert policy.audit_enabled


def test_the_packaged_schema_is_the_governance_schema_and_a_valid_json_schema():
    import jsonschema

    schema = json.loads((REPO / "governance" / "mcp-serve.schema.json").read_text(encoding="utf-8"))
    assert policy_schema() == schema
    jsonschema.validators.validator_for(schema).check_schema(schema)
    assert schema["$defs"]["tool"]["enum"] == list(ALL_TOOLS)


# ------------------------------------------------------------------------------ served tools
def test_without_tool_flags_a_client_is_served_only_the_contained_reads():
    policy = parse_policy(GOOD, "p")
    assert policy.served_tools("claude-desktop", []) == {"get_note", "list_notes"}
    assert policy.served_tools(None, []) == {"get_note", "list_notes"}


def test_a_requested_tool_is_served_only_when_the_clients_policy_allows_it():
    policy = parse_policy(GOOD, "p")
    assert "search_notes" in policy.served_tools("claude-desktop", ["search_notes"])
    assert "ask" not in policy.served_tools("claude-desktop", ["ask"])
    assert policy.served_tools("my-local-agent", ["ask", "search_notes"]) == {
        "ask",
        "search_notes",
        "get_note",
        "list_notes",
    }


def test_an_unknown_client_gets_the_default_tools_whatever_it_requests_and_is_not_local():
    policy = parse_policy(GOOD, "p")
    assert policy.served_tools("stranger", list(ALL_TOOLS)) == {"get_note", "list_notes"}
    assert policy.client("stranger").local is False
    assert policy.withhold_for("stranger") == Withhold(("personal",), ("Private",))


def test_client_names_match_exactly_so_a_lookalike_name_is_not_the_local_client():
    policy = parse_policy(GOOD, "p")
    assert policy.client("My-Local-Agent").local is False
    assert policy.withhold_for("my-local-agent ") == policy.withhold


def test_requesting_a_tool_that_does_not_exist_is_a_bad_request_naming_it_and_the_valid_names():
    with pytest.raises(BadRequestError) as info:
        parse_policy(GOOD, "p").served_tools("claude-desktop", ["search"])
    assert "'search'" in str(info.value) and "search_notes" in str(info.value)


def test_nothing_is_withheld_from_a_local_client():
    policy = parse_policy(GOOD, "p")
    assert not policy.withhold_for("my-local-agent")
    assert policy.withhold_for("claude-desktop") == Withhold(("personal",), ("Private",))


def test_the_fail_closed_policy_withholds_personal_from_everyone_and_serves_contained_reads():
    policy = fail_closed_policy("mcp-serve.yaml:3: broken")
    assert policy.fail_closed_reason == "mcp-serve.yaml:3: broken"
    assert policy.served_tools("my-local-agent", ["search_notes", "ask"]) == CONTAINED_READS
    assert policy.withhold_for("my-local-agent").tag_withheld(["personal"])


# ------------------------------------------------------------------------------ withholding rules
def test_a_withheld_tag_matches_in_any_case_with_or_without_hash_and_nested_below_it():
    w = Withhold.of(["Personal"])
    assert w.tags == ("personal",)
    for tags in (["personal"], ["#PERSONAL"], ["Personal/Health"], ["work", "personal/a/b"]):
        assert w.tag_withheld(tags), tags
    for tags in ([], ["work"], ["personality"], ["impersonal"], ["work/personal"]):
        assert not w.tag_withheld(tags), tags


def test_a_withheld_folder_matches_its_notes_in_any_case_but_not_a_lookalike_folder_or_note():
    w = Withhold.of(folders=["/Private/", "Journal/2024"])
    assert w.folders == ("Private", "Journal/2024")
    for path in ("Private/Salary.md", "private/a/b.md", "PRIVATE/x.pdf", "journal/2024/03.md"):
        assert w.path_withheld(path), path
    for path in ("Private.md", "Privateer/x.md", "Notes/Private/x.md", "Journal/2023/x.md", "Journal/2024.md"):
        assert not w.path_withheld(path), path


def test_a_note_is_withheld_by_tag_or_by_folder_and_an_empty_withhold_is_falsy():
    w = Withhold.of(["personal"], ["Private"])
    assert w.note_withheld("Private/Salary.md", [])
    assert w.note_withheld("Notes/x.md", ["personal/health"])
    assert not w.note_withheld("Notes/x.md", ["health"])
    assert not Withhold() and not Withhold.of([], []) and w


def test_withhold_of_refuses_a_string_that_is_not_a_tag_or_a_folder_escaping_the_vault():
    with pytest.raises(ValueError):
        Withhold.of(["#1984"])
    with pytest.raises(ValueError):
        Withhold.of(folders=["../outside"])


# ------------------------------------------------------------------------------ errors with lines
@pytest.mark.parametrize(
    "text, line, words",
    [
        (
            "version: 1\nwithhold: {tags: [personal]}\nclients:\n  a: {local: yes please}\n",
            4,
            ["clients.a.local", "true or false", "'yes please'"],
        ),
        (
            "version: 1\nwithhold: {tags: [personal]}\nclients:\n"
            "  a: {local: true, tools: [get_note,\n    serch_notes]}\n",
            5,
            ["unknown tool 'serch_notes'", "search_notes"],
        ),
        (
            "version: 1\nwithhold: {tags: [personal]}\nclients:\n  a: {local: true, tools: everything}\n",
            4,
            ['"all"', "'everything'"],
        ),
        ("version: 1\nwithhold: {tags: [personal]}\n\nclientz: {}\n", 4, ["unknown key 'clientz'", "clients"]),
        ("version: 1\n", 1, ["missing the required key 'withhold'"]),
        (
            "version: 1\nwithhold: {tags: [personal]}\nclients:\n  a: {tools: all}\n",
            4,
            ["missing the required key 'local'"],
        ),
        ("version: 1\nwithhold: {tags: [personal]\n", 3, ["invalid YAML"]),
        ("version: 1\nwithhold:\n  tags: ['#1984']\n", 3, ["'#1984' is not a tag"]),
        ("version: 1\nwithhold:\n  tags: [x]\n  folders: [ok, ../x]\n", 4, ["'../x'", "without '..'"]),
        ("version: 1\nwithhold: {tags: [x]}\nversion: 1\n", 3, ["duplicate key 'version'", "line 1"]),
        (
            "version: 1\nwithhold: {tags: [x]}\nclients:\n  ok: {local: true}\n  bad name: {local: true}\n",
            5,
            ["client name 'bad name'"],
        ),
        ("version: '1'\nwithhold: {tags: [x]}\n", 1, ["version must be an integer", "'1'"]),
        ("", 1, ["empty"]),
        ("- a\n", 1, ["must be a mapping"]),
        ("version: 1\nwithhold:\n  tags: personal\n", 3, ["withhold.tags must be a list"]),
        (
            "version: 1\nwithhold: {tags: [x]}\ndefault_tools: [get_note, ask, fetch]\n",
            3,
            ["default_tools[2]", "'fetch'"],
        ),
        ("version: 2\nwithhold: {tags: [x]}\nsomething_new: true\n", 1, ["version 2 is newer", "up to 1"]),
    ],
)
def test_an_invalid_policy_names_the_file_the_line_and_the_reason(text, line, words):
    err = error_of(text)
    assert (err.file, err.line) == ("policy.yaml", line)
    assert str(err) == f"policy.yaml:{line}: {err.reason}"
    assert err.code == "invalid_policy"
    for w in words:
        assert w in err.reason, (w, err.reason)


def test_a_duplicated_client_cannot_quietly_override_an_earlier_declaration():
    err = error_of("version: 1\nwithhold: {tags: [x]}\nclients:\n  a: {local: false}\n  a: {local: true}\n")
    assert err.line == 5 and "duplicate key 'a'" in err.reason


def test_loading_a_missing_or_unreadable_policy_names_the_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(PolicyError) as info:
        load_policy(missing)
    assert str(info.value).startswith(f"{missing}: ") and "no policy file" in str(info.value)
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path)
    assert "folder" in info.value.reason
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"version: 1\n\xff\xfe\n")
    with pytest.raises(PolicyError) as info:
        load_policy(binary)
    assert info.value.line == 2 and "UTF-8" in info.value.reason


def test_a_policy_file_loads_with_its_path_as_source(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(GOOD, encoding="utf-8")
    policy = load_policy(path)
    assert policy.source == str(path) and policy.withhold.folders == ("Private",)


# ------------------------------------------------------------------------------ the owner's copy
def test_the_owners_policy_is_created_from_the_default_readable_only_by_the_owner(tmp_path):
    config = tmp_path / "config"
    path = ensure_owner_policy(config, tmp_path / "data")
    assert path == owner_policy_path(config) == config / "mcp-serve.yaml"
    assert path.read_text(encoding="utf-8") == default_policy_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_existing_owners_policy_is_never_overwritten(tmp_path):
    path = owner_policy_path(tmp_path)
    path.write_text(GOOD, encoding="utf-8")
    ensure_owner_policy(tmp_path, tmp_path / "data")
    assert path.read_text(encoding="utf-8") == GOOD


def test_a_policy_created_or_found_once_is_never_recreated_when_deleted(tmp_path):
    created, found = tmp_path / "created", tmp_path / "found"
    ensure_owner_policy(created, created / "data")  # the true first use
    owner_policy_path(found).parent.mkdir()
    owner_policy_path(found).write_text(GOOD, encoding="utf-8")  # an install from before the record
    ensure_owner_policy(found, found / "data")
    for config in (created, found):
        owner_policy_path(config).unlink()
        with pytest.raises(PolicyError) as info:
            ensure_owner_policy(config, config / "data")
        assert info.value.file == str(owner_policy_path(config)) and "the policy file is gone" in info.value.reason
        assert not owner_policy_path(config).exists()


def test_a_data_folder_that_served_mcp_before_counts_as_a_policy_created(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "mcp-audit.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(PolicyError, match="served MCP from this data folder before"):
        ensure_owner_policy(tmp_path / "config", tmp_path / "data")
    assert not owner_policy_path(tmp_path / "config").exists()


# ------------------------------------------------------------------------------ live reload
def _write(path: Path, text: str) -> None:
    """Replace ``path`` atomically (as editors do) and make sure its stamp changes."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.utime(tmp, ns=(before + 10_000_000, before + 10_000_000))
    os.replace(tmp, path)


def test_a_strict_holder_refuses_an_invalid_policy_at_start(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nwithhold: {tags: [x]}\nclients: {a: {local: maybe}}\n", encoding="utf-8")
    with pytest.raises(PolicyError) as info:
        PolicyHolder(path, strict=True)
    assert info.value.file == str(path) and info.value.line == 3


def test_a_lenient_holder_fails_closed_on_a_missing_policy_and_says_why(tmp_path):
    holder = PolicyHolder(tmp_path / "missing.yaml", strict=False)
    policy = holder.current()
    assert policy.fail_closed_reason and "missing.yaml" in policy.fail_closed_reason
    assert not policy.is_local("my-local-agent")
    assert policy.served_tools("my-local-agent", ["search_notes"]) == CONTAINED_READS


def test_an_edit_is_picked_up_without_restart_and_an_invalid_edit_fails_closed_until_fixed(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(GOOD, encoding="utf-8")
    holder = PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=0.0)  # an edit is used at once
    assert holder.current().is_local("my-local-agent")

    _write(path, GOOD.replace("my-local-agent: {local: true", "my-local-agent: {local: false"))
    assert not holder.current().is_local("my-local-agent")
    assert holder.current().fail_closed_reason is None

    _write(path, GOOD.replace("my-local-agent: {local: true", "my-local-agent: {local: tru"))
    broken = holder.current()
    assert broken.fail_closed_reason and f"{path}:6:" in broken.fail_closed_reason
    assert broken.withhold_for("my-local-agent").tag_withheld(["personal"])

    _write(path, GOOD)  # valid again, and it makes my-local-agent local again: that waits for the owner
    waiting = holder.current()
    assert waiting.fail_closed_reason is None and not waiting.is_local("my-local-agent")
    apply_policy(path)  # `cairn policy apply`
    fixed = holder.current()
    assert fixed.fail_closed_reason is None and fixed.is_local("my-local-agent")


def test_the_holder_checks_the_file_at_most_once_per_interval(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(GOOD, encoding="utf-8")
    holder = PolicyHolder(path, strict=True, check_interval_s=3600.0, settle_s=0.0)
    _write(path, GOOD.replace("local: true", "local: false"))
    assert holder.current().is_local("my-local-agent")  # not re-read yet
    assert not holder.reload().is_local("my-local-agent")


def test_readers_always_see_a_whole_policy_while_it_is_edited(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(GOOD, encoding="utf-8")
    holder = PolicyHolder(path, strict=True, check_interval_s=0.0, settle_s=0.0)
    variants = [GOOD, GOOD.replace("folders: [Private]", "folders: [Private, Journal]")]
    seen: set[tuple] = set()
    stop = threading.Event()

    def read():
        while not stop.is_set():
            p = holder.current()
            seen.add((p.fail_closed_reason is None, p.withhold.folders))

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    for i in range(30):
        _write(path, variants[i % 2])
    stop.set()
    for t in readers:
        t.join(timeout=10)
    assert seen <= {(True, ("Private",)), (True, ("Private", "Journal"))}
