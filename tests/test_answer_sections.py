"""Subsections brought by their section into an answer's sources (cairn.answers.sections): the rule on hand-made
hits, then the ask path over a tiny vault indexed with the real model (no shared data needed)."""

from __future__ import annotations

import pytest

from cairn.answers.sections import MOST, with_subsections
from cairn.app import build_services
from cairn.policy import Withhold
from cairn.search import Hit
from support.cairns import indexed_cairn
from support.requests import ask_request
from support.waits import run

SECURITY = "Sync/Security.md"


def hit(cid: int, path: str, symbol: str = "", score: float = 1.0) -> Hit:
    return Hit(chunk_id=cid, file_path=path, title=path, symbol=symbol, score=score, cosine=0.6, snippet="", text="")


#: How close each heading is to a question about the cipher Sync uses.
CLOSENESS = {
    "Encryption": 0.49,
    "What does end-to-end encryption mean?": 0.32,
    "What encryption do you use?": 0.60,
    "Can I verify that my data is encrypted?": 0.45,
    "What if I forget my password?": 0.30,
    "Where are the servers?": 0.20,
    "Create a remote vault": 0.55,
}


def closeness(headings):
    return [CLOSENESS[h] for h in headings]


SECTION = hit(10, SECURITY, "Encryption")
E2E = hit(11, SECURITY, "Encryption › What does end-to-end encryption mean?")
CIPHER = hit(12, SECURITY, "Encryption › What encryption do you use?")
VERIFY = hit(13, SECURITY, "Encryption › Can I verify that my data is encrypted?")
FORGET = hit(14, SECURITY, "Encryption › What if I forget my password?")
SERVERS = hit(15, SECURITY, "Hosting › Where are the servers?")
UPGRADE = hit(20, "Sync/Upgrade.md")
REMOTE = hit(30, "Sync/Remote vaults.md", "Create a remote vault")
OTHER = hit(40, "Sync/Other.md", "Encryption › What encryption do you use?")


def ids(hits):
    return [h.chunk_id for h in hits]


def test_a_section_brings_its_subsection_whose_heading_names_the_question_and_the_weakest_source_gives_way():
    out = with_subsections([UPGRADE, SECTION, REMOTE], [E2E, CIPHER, FORGET], closeness, top_k=3, per_note=3)
    assert ids(out) == [UPGRADE.chunk_id, SECTION.chunk_id, CIPHER.chunk_id]


def test_with_room_left_the_subsection_joins_without_displacing_any_source():
    out = with_subsections([UPGRADE, SECTION], [CIPHER], closeness, top_k=8, per_note=3)
    assert ids(out) == [UPGRADE.chunk_id, SECTION.chunk_id, CIPHER.chunk_id]


def test_a_subsection_brings_its_sibling_and_its_note_keeps_its_number_of_sources():
    # the note already has per_note sources: its own weakest one gives way, the other notes keep theirs
    sources = [VERIFY, UPGRADE, E2E, SERVERS, REMOTE]
    out = with_subsections(sources, [SECTION, CIPHER], closeness, top_k=5, per_note=3)
    assert ids(out) == [VERIFY.chunk_id, CIPHER.chunk_id, UPGRADE.chunk_id, E2E.chunk_id, REMOTE.chunk_id]


def test_no_subsection_joins_when_its_heading_is_not_closer_than_the_sources_own_or_is_below_the_floor():
    sources = [UPGRADE, SECTION, REMOTE]
    assert with_subsections(sources, [E2E, FORGET], closeness, top_k=3, per_note=3) == sources
    assert with_subsections(sources, [CIPHER], closeness, top_k=3, per_note=3, floor=0.65) == sources


def test_only_the_same_notes_chunks_under_the_same_section_can_join_and_an_opening_chunk_brings_nothing():
    sources = [UPGRADE, SECTION, REMOTE]
    assert with_subsections(sources, [OTHER, SERVERS], closeness, top_k=3, per_note=3) == sources
    assert with_subsections([UPGRADE], [hit(21, "Sync/Upgrade.md", "Create a remote vault")], closeness, top_k=1,
                            per_note=3) == [UPGRADE]  # fmt: skip


def test_at_most_a_few_subsections_join_and_never_more_sources_than_top_k():
    sections = [hit(100 + i, f"N{i}.md", "Encryption") for i in range(MOST + 2)]
    subs = [hit(200 + i, f"N{i}.md", "Encryption › What encryption do you use?") for i in range(MOST + 2)]
    out = with_subsections(sections, subs, closeness, top_k=len(sections), per_note=3)
    assert len(out) == len(sections)
    assert len(set(ids(out)) & set(ids(subs))) == MOST
    for sub in (h for h in out if h in subs):  # each right after the section that brought it
        assert out[out.index(sub) - 1].file_path == sub.file_path


# -- the ask path over a tiny vault ----------------------------------------------------------------------------------

NOTES = {
    "Security.md": "## Encryption\n\nSync encrypts your remote vault and all communication with the sync servers. "
    "When you create a remote vault you choose end-to-end encryption or standard encryption.\n\n"
    "### What does end-to-end encryption mean?\n\nYour data is encrypted before it leaves your device, and only "
    "your devices hold the key.\n\n"
    "### What encryption do you use?\n\nWe use AES-256 in Galois/Counter Mode. The key comes from your password "
    "through scrypt with a salt.\n\n"
    "### What if I forget my password?\n\nNobody can recover it: make a new remote vault and upload your notes "
    "again.\n",
    "Upgrade encryption.md": "Sync encrypts your vault end to end by default. When a newer encryption version is "
    "available, upgrade your remote vault from the Sync settings.\n\n## Upgrade your vault encryption\n\nBack up "
    "your vault first. Then choose Upgrade vault encryption, enter your encryption password and wait until every "
    "device syncs the vault again.\n",
    "Remote vaults.md": "A remote vault is the copy of your vault that Sync keeps on its servers, encrypted with your "
    "encryption password.\n\n## Create a remote vault\n\nOpen the Sync settings, choose Create, name the remote vault "
    "and set an encryption password for it.\n",
    "Private/Safe.md": "---\ntags: [personal]\n---\n## Home safe\n\nThe home safe stands in the cellar behind the "
    "wine rack.\n\n### What is the safe code?\n\nThe code is 4711, then the hash key.\n\n"
    "### Where is the spare key?\n\nThe spare key hangs in the garden shed.\n",
}
QUESTION = "What encryption does Sync use?"


@pytest.fixture(scope="module")
def sync_vault(tmp_path_factory, embedder):
    vault = tmp_path_factory.mktemp("sections-vault")
    for rel, text in NOTES.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(text, encoding="utf-8")
    yield from indexed_cairn(vault, tmp_path_factory.mktemp("sections-data"), embedder)


def test_the_subsection_that_names_the_cipher_comes_with_its_section_into_the_sources(sync_vault):
    answers = build_services(sync_vault).answers
    ranked = [h.symbol for h in answers.retrieve(ask_request(QUESTION, top_k=3))]
    assert "Encryption" in ranked and "Encryption › What encryption do you use?" not in ranked  # ranks below
    sources = answers.context(ask_request(QUESTION, top_k=3))
    symbols = [(s.hit.file_path, s.hit.symbol) for s in sources]
    assert len(sources) == 3
    at = symbols.index(("Security.md", "Encryption"))
    assert symbols[at + 1] == ("Security.md", "Encryption › What encryption do you use?")
    assert "AES-256" in sources[at + 1].hit.text


def test_a_withheld_notes_sections_and_subsections_never_reach_a_withheld_caller(sync_vault):
    answers = build_services(sync_vault).answers
    question = "What is the code of the home safe?"
    owner = run(answers.answer(ask_request(question, top_k=2)))
    assert any(s.hit.file_path == "Private/Safe.md" for s in owner.sources)
    caller = run(answers.answer(ask_request(question, top_k=2), answers.search.views.of(Withhold(("personal",)))))
    assert all(s.hit.file_path != "Private/Safe.md" for s in caller.sources)
    assert "4711" not in caller.text and "cellar" not in caller.text


def test_the_answer_from_the_passages_quotes_the_faq_answer_under_the_heading_that_asks_the_question(sync_vault):
    # "We use AES-256 …" says neither "encryption" nor "Sync": its heading asks the question
    answer = run(build_services(sync_vault).answers.answer(ask_request(QUESTION, top_k=3)))
    assert not answer.not_found and not answer.weak
    cited = {s.hit.symbol for s in answer.sources if s.cited}
    assert "Encryption › What encryption do you use?" in cited
    assert "AES-256" in answer.text
