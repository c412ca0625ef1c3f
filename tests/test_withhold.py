"""Withholding inside the use cases: over the canary vault indexed with the real model, a
caller withheld from ``personal`` notes (the default policy) and the ``Private`` folder never gets the
canary or a withheld path from search, ask, note, related, list or tags — with queries that match those
notes — while ``top_k``/``limit`` are still filled with allowed notes, and the owner (no withhold) finds
everything as before."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator, Sequence
from pathlib import PurePosixPath
from typing import Any

import pytest

from cairn.answers import AnswerService
from cairn.app import build_services
from cairn.errors import NotFoundError
from cairn.policy import WITHHELD_LINK, Policy, Withhold, default_policy_text, parse_policy
from cairn.store import SCHEMA_VERSION
from support.cairns import build_index, make_config, open_cairn
from support.requests import ask_request, caller_of, search_request
from support.vaults import CANARY, CANARY_TAGGED, CANARY_VAULT, CANARY_WITHHELD

#: A query that matches each withheld note (its distinctive topic).
MATCHING = {
    "Health/Blood pressure.md": "blood pressure readings systolic cuff",
    "Health/Sleep.md": "sleep diary insomnia melatonin",
    "Journal/2024-03-01.md": "argument with my sister about the inheritance",
    "Journal/Therapy.md": "therapy session anxiety before presentations",
    "Notes/Allergies.md": "allergic to penicillin and peanuts",
    "Notes/Dream log.md": "recurring dream flying over a flooded city",
    "Notes/Passwords hint.md": "password hints for the home router and the bank",
    "Private/Salary.md": "salary negotiation raise signing bonus",
    "Notes/Mood tracker.md": "mood tracker low energy winter",
}
QUERIES = [*MATCHING.values(), CANARY, "personal", "health", "journal", "private salary"]
ALLOWED = (
    "Projects/Budget.md",
    "Projects/Garden plan.md",
    "Reading list.md",
    "Recipes/Bread.md",
    "Recipes/Lentil soup.md",
    "Travel/Lighthouse trip.md",
    "Work/Meeting notes.md",
)


@pytest.fixture(scope="module")
def policy() -> Policy:
    """The shipped default policy, with the Private folder withheld too."""
    return parse_policy(default_policy_text().replace("folders: []", "folders: [Private]"), "test-policy")


@pytest.fixture(scope="module")
def withhold(policy) -> Withhold:
    w = policy.withhold_for("claude-desktop")
    assert w == Withhold(("personal",), ("Private",))
    return w


def leaks(result: Any) -> list[str]:
    """The canary and withheld paths (with or without ``.md``) found anywhere in ``result``'s JSON."""
    text = json.dumps(result, default=lambda o: o.to_json() if hasattr(o, "to_json") else repr(o), ensure_ascii=False)
    found = [CANARY] if CANARY in text else []
    for path in CANARY_WITHHELD:
        stem = str(PurePosixPath(path).with_suffix(""))
        found += [p for p in (path, stem) if p in text]
    return found


# ------------------------------------------------------------------------------ the fixture itself
def test_the_canary_is_only_in_withheld_notes_and_each_withheld_form_is_indexed_as_personal(canary_cairn):
    vault = canary_cairn.config.require_vault()
    holding = sorted(str(p.relative_to(vault).as_posix()) for p in vault.rglob("*.md") if CANARY in p.read_text())
    assert holding == sorted(CANARY_WITHHELD)
    for path in CANARY_TAGGED:
        tags = canary_cairn.store.note_tags(path)
        assert any(t == "personal" or t.startswith("personal/") for t in tags), (path, tags)
    assert canary_cairn.store.note_tags("Private/Salary.md") == []
    assert canary_cairn.store.note_tags("Notes/Mood tracker.md") == []  # its front-matter cannot be read
    assert "invalid YAML front-matter" in canary_cairn.store.note_by_path("Notes/Mood tracker.md").error


# ------------------------------------------------------------------------------ the owner sees everything
def test_without_withholding_every_withheld_note_is_found_by_its_query(canary_cairn):
    for path, query in MATCHING.items():
        hits = canary_cairn.query.search(search_request(query, top_k=3)).hits
        assert path in [h.file_path for h in hits], (query, [h.file_path for h in hits])
    note = canary_cairn.library.note("Health/Blood pressure.md")
    assert CANARY in note["content"]
    listed = canary_cairn.library.list_notes(limit=50)
    assert set(CANARY_WITHHELD) <= {n["filePath"] for n in listed["notes"]}
    assert listed["total"] == len(CANARY_WITHHELD) + len(ALLOWED)
    assert "personal" in {t["tag"] for t in canary_cairn.library.tags()["tags"]}
    garden = canary_cairn.library.note("Projects/Garden plan.md")
    assert "[[Blood pressure]]" in garden["content"] and WITHHELD_LINK not in garden["content"]


def test_a_client_declared_local_is_withheld_nothing(canary_cairn, policy):
    w = policy.withhold_for("my-local-agent")
    assert not w
    hits = canary_cairn.query.search(
        search_request(MATCHING["Private/Salary.md"], top_k=3), caller_of(canary_cairn, w)
    ).hits
    assert hits[0].file_path == "Private/Salary.md"


# ------------------------------------------------------------------------------ search and ask
@pytest.mark.parametrize("query", QUERIES)
def test_search_never_returns_a_withheld_note_or_the_canary(canary_cairn, withhold, query):
    result = canary_cairn.query.search(search_request(query, top_k=10), caller_of(canary_cairn, withhold))
    assert not leaks(result.to_json()), query
    assert not leaks([h.text for h in result.hits] + [h.symbol for h in result.hits])


def test_search_scoped_to_a_withheld_tag_or_folder_finds_nothing(canary_cairn, withhold):
    for tags, folders in ((["personal"], []), (["Personal/Health"], []), ([], ["Private"]), ([], ["Health"])):
        result = canary_cairn.query.search(
            search_request("notes", top_k=10, tags=tags, folders=folders), caller_of(canary_cairn, withhold)
        )
        assert result.hits == [], (tags, folders)


@pytest.mark.parametrize(
    "query, withheld_top, allowed_top",
    [
        ("salary", "Private/Salary.md", "Projects/Budget.md"),
        ("lighthouse dream stairs", "Notes/Dream log.md", "Travel/Lighthouse trip.md"),
        ("anxiety before presentations at work", "Journal/Therapy.md", "Work/Meeting notes.md"),
    ],
)
def test_top_k_is_filled_with_allowed_notes_when_the_best_match_is_withheld(
    canary_cairn, withhold, query, withheld_top, allowed_top
):
    owner = canary_cairn.query.search(search_request(query, top_k=1)).hits
    assert [h.file_path for h in owner] == [withheld_top]
    caller = caller_of(canary_cairn, withhold)
    tally = caller.tally
    result = canary_cairn.query.search(search_request(query, top_k=1), caller)
    assert [h.file_path for h in result.hits] == [allowed_top]
    assert withheld_top in tally.paths and result.withheld == tally.count >= 1


def test_a_snippet_of_an_allowed_note_shows_its_embed_of_a_withheld_note_as_a_withheld_link(canary_cairn, withhold):
    hit = canary_cairn.query.search(search_request("salary", top_k=1), caller_of(canary_cairn, withhold)).hits[0]
    assert hit.file_path == "Projects/Budget.md"
    assert WITHHELD_LINK in hit.text and "[[Salary]]" not in hit.text
    owner_hit = next(
        h
        for h in canary_cairn.query.search(search_request("salary", top_k=3)).hits
        if h.file_path == "Projects/Budget.md"
    )
    assert "![[Salary]]" in owner_hit.text


@pytest.mark.parametrize("query", list(MATCHING.values()) + [CANARY])
def test_the_extractive_answer_and_its_sources_never_hold_a_withheld_note(canary_cairn, withhold, query):
    answer = asyncio.run(
        build_services(canary_cairn).answers.answer(ask_request(query, top_k=8), caller_of(canary_cairn, withhold))
    )
    assert not leaks(answer.to_json()), (query, answer.text)
    assert answer.withheld >= 1


class RecordingModel:
    """A fake chat model (an LLM cannot run here) that records the prompt and cites source 1."""

    def __init__(self, remote: bool) -> None:
        self.remote = remote
        self.prompts: list[Sequence[dict[str, str]]] = []

    async def stream(self, messages: Sequence[dict[str, str]]) -> AsyncIterator[str]:
        self.prompts.append(messages)
        for piece in ("From your notes ", "[1]."):
            yield piece


@pytest.mark.parametrize("remote", [False, True])
def test_a_withheld_caller_never_gets_withheld_notes_in_the_prompt_answer_or_sources(canary_cairn, withhold, remote):
    model = RecordingModel(remote)
    service = AnswerService(canary_cairn.query, model, withhold_tags=())  # the caller's withhold alone must do it
    for query in [*MATCHING.values(), "money, health and work", "how long do the red lentils simmer in the soup"]:
        answer = asyncio.run(service.answer(ask_request(query, top_k=8), caller_of(canary_cairn, withhold)))
        assert not leaks(answer.to_json()), query
    assert model.prompts, "some question should have reached the model"
    assert not leaks(model.prompts)


def test_the_owners_local_model_still_sees_personal_notes(canary_cairn):
    model = RecordingModel(remote=False)
    service = AnswerService(canary_cairn.query, model)
    answer = asyncio.run(service.answer(ask_request(MATCHING["Health/Blood pressure.md"], top_k=8)))
    assert answer.sources and answer.sources[0].hit.file_path == "Health/Blood pressure.md"
    assert CANARY in json.dumps(model.prompts)


def test_a_remote_model_is_withheld_the_policys_folders_too(canary_cairn, withhold):
    model = RecordingModel(remote=True)
    service = AnswerService(canary_cairn.query, model, withhold_tags=withhold)
    asyncio.run(service.answer(ask_request(MATCHING["Private/Salary.md"], top_k=8)))
    assert CANARY not in json.dumps(model.prompts)


# ------------------------------------------------------------------------------ browse
@pytest.mark.parametrize("path", CANARY_WITHHELD)
def test_getting_a_withheld_note_gives_exactly_the_answer_for_a_missing_note(canary_cairn, withhold, path):
    def message(p: str) -> str:
        with pytest.raises(NotFoundError) as info:
            canary_cairn.library.note(p, caller=caller_of(canary_cairn, withhold))
        return str(info.value)

    missing = path.replace(".md", " (missing).md")
    assert message(path) == message(missing).replace(missing, path)
    caller = caller_of(canary_cairn, withhold)
    tally = caller.tally
    with pytest.raises(NotFoundError):
        canary_cairn.library.note(path, caller=caller)
    assert tally.paths == {path}
    with pytest.raises(NotFoundError):
        canary_cairn.library.related(path, caller=caller_of(canary_cairn, withhold))


def test_a_path_in_another_case_does_not_reach_a_withheld_note(canary_cairn, withhold):
    for path in ("private/salary.md", "PRIVATE/Salary.md", "health/blood pressure.md"):
        with pytest.raises(NotFoundError):
            canary_cairn.library.note(path, caller=caller_of(canary_cairn, withhold))


@pytest.mark.parametrize("path", ALLOWED)
def test_an_allowed_note_and_its_related_notes_never_name_a_withheld_note(canary_cairn, withhold, path):
    note = canary_cairn.library.note(path, caller=caller_of(canary_cairn, withhold))
    related = canary_cairn.library.related(path, limit=20, caller=caller_of(canary_cairn, withhold))
    assert not leaks(note) and not leaks(related), path


def test_links_to_withheld_notes_are_dropped_and_replaced_in_the_content(canary_cairn, withhold):
    caller = caller_of(canary_cairn, withhold)
    tally = caller.tally
    garden = canary_cairn.library.note("Projects/Garden plan.md", caller=caller)
    assert (
        garden["content"].count(WITHHELD_LINK) == 2
    )  # [[Blood pressure]] and [my allergy list](../Notes/Allergies.md)
    assert garden["links"] == []
    assert tally.paths == {"Health/Blood pressure.md", "Notes/Allergies.md"}
    reading = canary_cairn.library.note("Reading list.md", caller=caller_of(canary_cairn, withhold))
    assert WITHHELD_LINK in reading["content"] and "my dreams" not in reading["content"]
    assert [link["targetPath"] for link in reading["links"]] == ["Recipes/Bread.md", "Projects/Garden plan.md"]
    meeting = canary_cairn.library.note("Work/Meeting notes.md", caller=caller_of(canary_cairn, withhold))
    assert meeting["frontmatter"]["related"] == WITHHELD_LINK  # a link in a property too


def test_backlinks_and_similar_notes_leave_out_withheld_notes_yet_keep_allowed_ones(canary_cairn, withhold):
    owner = canary_cairn.library.related("Travel/Lighthouse trip.md", limit=20)
    assert "Journal/2024-03-01.md" in [b["filePath"] for b in owner["backlinks"]]
    assert "Notes/Dream log.md" in [s["filePath"] for s in owner["similar"]]
    caller = caller_of(canary_cairn, withhold)
    tally = caller.tally
    withheld = canary_cairn.library.related("Travel/Lighthouse trip.md", limit=20, caller=caller)
    assert withheld["backlinks"] == []
    assert not leaks(withheld)
    assert {"Journal/2024-03-01.md", "Notes/Dream log.md"} <= tally.paths
    owner_allowed = [s for s in owner["similar"] if s["filePath"] not in CANARY_WITHHELD]
    assert withheld["similar"] == owner_allowed


def test_similar_notes_still_fill_the_limit_with_allowed_notes(canary_copy, tmp_path, embedder, withhold):
    """Withheld notes nearer than allowed ones do not use up the limit: an allowed note holding the end of a withheld
    dream note (without its tag) is similar to the lighthouse trip, a little less than the original."""

    (canary_copy / "Travel" / "Dream notes.md").write_text(
        "# Dream notes\n\nThe dream ends at the lighthouse stairs.\n"
    )
    cairn = open_cairn(canary_copy, tmp_path / "data", embedder)
    try:
        cairn.indexing.index()
        owner = cairn.library.related("Travel/Lighthouse trip.md", limit=50)["similar"]
        allowed = [s["filePath"] for s in owner if s["filePath"] not in CANARY_WITHHELD]
        assert allowed and len(allowed) < len(owner)  # withheld notes are among the owner's similar notes
        assert [s["filePath"] for s in owner].index(allowed[-1]) >= len(allowed)  # one ranks above an allowed one
        got = cairn.library.related("Travel/Lighthouse trip.md", limit=len(allowed), caller=caller_of(cairn, withhold))[
            "similar"
        ]
        assert [s["filePath"] for s in got] == allowed
    finally:
        cairn.close()


@pytest.mark.parametrize(
    "tag, folder",
    [
        (None, None),
        ("personal", None),
        ("PERSONAL", None),
        ("#Personal/Health", None),
        ("personal/sleep", None),
        ("work", None),
        (None, "Private"),
        (None, "Health"),
        (None, "Journal"),
        (None, "Notes"),
    ],
)
def test_listing_never_shows_or_counts_a_withheld_note(canary_cairn, withhold, tag, folder):
    result = canary_cairn.library.list_notes(tag=tag, folder=folder, limit=50, caller=caller_of(canary_cairn, withhold))
    assert not leaks(result)
    assert result["total"] == len(result["notes"])
    assert all(n["filePath"] in ALLOWED for n in result["notes"])


def test_a_tag_shared_with_a_withheld_note_lists_and_counts_only_the_allowed_ones(canary_cairn, withhold):
    owner = canary_cairn.library.list_notes(tag="work")
    assert {n["filePath"] for n in owner["notes"]} == {"Journal/Therapy.md", "Work/Meeting notes.md"}
    caller = caller_of(canary_cairn, withhold)
    tally = caller.tally
    result = canary_cairn.library.list_notes(tag="work", caller=caller)
    assert [n["filePath"] for n in result["notes"]] == ["Work/Meeting notes.md"] and result["total"] == 1
    assert tally.paths == {"Journal/Therapy.md"}


def test_the_limit_of_a_list_is_filled_with_allowed_notes(canary_cairn, withhold):
    result = canary_cairn.library.list_notes(limit=3, caller=caller_of(canary_cairn, withhold))
    assert [n["filePath"] for n in result["notes"]] == sorted(ALLOWED)[:3]
    assert result["total"] == len(ALLOWED)


def test_tags_count_only_allowed_notes_and_never_list_a_withheld_tag(canary_cairn, withhold):
    tags = {t["tag"]: t["count"] for t in canary_cairn.library.tags(caller=caller_of(canary_cairn, withhold))["tags"]}
    assert not any(t == "personal" or t.startswith("personal/") for t in tags)
    assert tags["work"] == 1  # Journal/Therapy.md also carries `work`, but it is withheld
    owner = {t["tag"]: t["count"] for t in canary_cairn.library.tags()["tags"]}
    assert owner["work"] == 2 and owner["personal"] >= 5


def test_a_note_whose_front_matter_cannot_be_read_is_withheld_only_when_tags_are(canary_cairn):
    path = "Notes/Mood tracker.md"
    with pytest.raises(NotFoundError):
        canary_cairn.library.note(path, caller=caller_of(canary_cairn, Withhold.of(["personal"])))
    assert (
        canary_cairn.library.note(path, caller=caller_of(canary_cairn, Withhold.of(folders=["Private"])))["filePath"]
        == path
    )
    hits = canary_cairn.query.search(
        search_request(MATCHING[path], top_k=3), caller_of(canary_cairn, Withhold.of(folders=["Private"]))
    ).hits
    assert path in [h.file_path for h in hits]


def test_a_note_tagged_personal_on_disk_but_not_reindexed_yet_is_already_withheld(tmp_path, embedder, withhold):
    import shutil

    from support.vaults import CANARY_VAULT

    vault = tmp_path / "vault"
    shutil.copytree(CANARY_VAULT, vault)
    cairn = open_cairn(vault, tmp_path / "data", embedder)
    try:
        cairn.indexing.index()
        bread = vault / "Recipes" / "Bread.md"
        bread.write_text(bread.read_text(encoding="utf-8") + "\nMy grandmother's secret: #personal\n", encoding="utf-8")
        assert "personal" not in cairn.store.note_tags("Recipes/Bread.md")  # the index has not seen the edit
        assert "grandmother" in cairn.library.note("Recipes/Bread.md")["content"]  # the owner reads the file as it is
        caller = caller_of(cairn, withhold)
        tally = caller.tally
        with pytest.raises(NotFoundError):
            cairn.library.note("Recipes/Bread.md", caller=caller)
        assert tally.paths == {"Recipes/Bread.md"}
    finally:
        cairn.close()


# ------------------------------------------------------------------------------ withholding keys on a stable code
MOOD = "Notes/Mood tracker.md"


def _found(cairn, withhold=None) -> list[str]:
    return [
        h.file_path
        for h in cairn.query.search(search_request(MATCHING[MOOD], top_k=10), caller_of(cairn, withhold)).hits
    ]


@pytest.fixture
def canary_copy(tmp_path):
    dest = tmp_path / "vault"
    shutil.copytree(CANARY_VAULT, dest)
    return dest


@pytest.mark.slow
def test_a_note_with_unreadable_front_matter_stays_withheld_when_the_message_is_reworded(
    canary_copy, tmp_path, embedder, withhold, monkeypatch
):
    from cairn.notes import frontmatter

    monkeypatch.setattr(
        frontmatter, "_yaml_error_reason", lambda exc, first_line: "the properties block does not parse"
    )
    cairn = open_cairn(canary_copy, tmp_path / "data", embedder)
    try:
        cairn.indexing.index()
        error = cairn.store.conn.execute("SELECT error FROM notes WHERE path = ?", (MOOD,)).fetchone()[0]
        assert error == "the properties block does not parse"
        assert MOOD in _found(cairn)
        assert MOOD not in _found(cairn, withhold)
    finally:
        cairn.close()


@pytest.mark.slow
def test_an_index_of_schema_version_3_keeps_withholding_the_note_read_only_and_once_migrated(
    canary_copy, tmp_path, embedder, withhold
):
    import apsw

    from cairn.notes import FRONTMATTER_INVALID

    build_index(canary_copy, tmp_path / "data", embedder)
    config = make_config(canary_copy, tmp_path / "data")
    conn = apsw.Connection(str(config.db_path))  # what Cairn wrote before schema version 4
    conn.execute("ALTER TABLE notes DROP COLUMN error_code; DROP INDEX chunks_unrefined; PRAGMA user_version=3")
    conn.execute("DROP INDEX chunks_pending_notes; DROP INDEX chunks_unrefined_notes")
    conn.close()
    # an MCP server of this version beside an older daemon
    reader = open_cairn(canary_copy, tmp_path / "data", embedder, readonly=True)
    try:
        assert reader.store.schema_version == 3
        assert MOOD in _found(reader)
        assert MOOD not in _found(reader, withhold)
    finally:
        reader.close()
    cairn = open_cairn(canary_copy, tmp_path / "data", embedder)
    try:
        assert cairn.store.schema_version == SCHEMA_VERSION
        code = cairn.store.conn.execute("SELECT error_code FROM notes WHERE path = ?", (MOOD,)).fetchone()[0]
        assert code == FRONTMATTER_INVALID
        assert MOOD in _found(cairn)
        assert MOOD not in _found(cairn, withhold)
    finally:
        cairn.close()
