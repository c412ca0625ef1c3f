"""The extractive answer (no model) on real passages of the Obsidian help vault: notes copied from
``shared/vaults/obsidian-help`` into a temporary vault, indexed with the real model, asked through the one ask path.

A person reads these answers as text: a FAQ answer quotes only the entry whose question was asked, a link keeps its
display text, a callout's title is not run into its first sentence, and a sentence that refers back ("These callouts
start out collapsed.") comes with what it refers to. Every quoted sentence is one of its cited passage's own.
"""

from __future__ import annotations

import asyncio
import re
import shutil

import pytest

from cairn.answers import AnswerService
from cairn.passages import passage_units
from cairn.prompt import CITATION, cited_numbers
from support.cairns import indexed_cairn
from support.requests import ask_request
from support.vaults import HELP_VAULT

pytestmark = pytest.mark.shared_data("vaults/obsidian-help")

NOTES = (
    "Licenses and payment/Refund policy.md",
    "Obsidian Sync/Version history.md",
    "Editing and formatting/Callouts.md",
)
#: The style guide's section on callout types (the whole guide is long: only this section is copied).
STYLE_GUIDE = "Contributing to Obsidian/Style guide.md"


def style_guide_section() -> str:
    text = (HELP_VAULT / STYLE_GUIDE).read_text(encoding="utf-8")
    return "### Callout types" + text.split("### Callout types", 1)[1].split("### Lists vs. prose", 1)[0]


@pytest.fixture(scope="module")
def help_notes(tmp_path_factory, embedder):
    """A Cairn over a vault of a few notes copied from the help vault, indexed with the real model."""
    vault = tmp_path_factory.mktemp("help-notes")
    for rel in NOTES:
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HELP_VAULT / rel, vault / rel)
    (vault / "Style guide.md").write_text(style_guide_section(), encoding="utf-8")
    yield from indexed_cairn(vault, tmp_path_factory.mktemp("help-notes-data"), embedder)


def ask(cairn, question: str):
    answer = asyncio.run(AnswerService(cairn.query).answer(ask_request(question)))
    assert not answer.not_found, question
    return answer


def sentences(text: str) -> list[str]:
    """The answer's sentences, citations and list markers left out."""
    parts = re.split(r"(?<=[.!?:])\s+|\n", CITATION.sub("", text))
    return [p.strip().removeprefix("- ").strip() for p in parts if p.strip()]


def test_a_faq_answer_quotes_only_the_entry_whose_question_was_asked(help_notes):
    answer = ask(help_notes, "What happens to my remote vault if I refund my service?")
    text = answer.text
    assert "Refunding an Obsidian Sync or Obsidian Publish subscription results in the deletion" in text, text
    assert not sentences(text)[0].endswith("?"), text  # it does not open with a question, this one or another
    for other_entry in ("miss a payment", "Will I lose my remote vault data", "retained in such cases", "discount"):
        assert other_entry not in text, text


def test_another_entry_of_the_same_faq_is_answered_from_that_entry(help_notes):
    text = ask(help_notes, "Will I lose my remote vault data if I miss a payment and my subscription expires?").text
    assert "30 days" in text or "resubscribe within that period" in text, text
    assert "Refunding an Obsidian Sync" not in text and "assess your options" not in text, text


def test_a_link_keeps_its_display_text(help_notes):
    text = ask(help_notes, "Besides Sync history, what does Obsidian keep to restore notes and attachments?").text
    assert "In addition to the Sync history, Obsidian also maintains a version history" in text, text
    assert not re.search(r"\s[,.;:](\s|$)", CITATION.sub("", text)), text  # no gap where a link's text was lost


def test_a_callout_title_is_not_run_into_the_next_sentence(help_notes):
    text = ask(help_notes, "Who do I talk to if I need a refund past 7 days after purchase?").text
    assert "If you have any trouble with a transaction" in text, text
    assert "Talk to a human If" not in text and "human If you" not in text, text


def test_a_sentence_referring_back_comes_with_what_it_refers_to(help_notes):
    text = ask(help_notes, "Which callouts start out collapsed in the help docs?").text
    assert "start out collapsed" in text, text
    assert not text.startswith("These callouts"), text
    assert "] These callouts" not in text and "\nThese callouts" not in text, text
    for m in re.finditer(r"These callouts start out collapsed\.", text):
        before = text[: m.start()]
        assert before.rstrip().endswith("."), text  # quoted after the sentences of its own paragraph
        assert "Tip (`[!tip]-`)" in before or "Example (`[!example]-`)" in before, text


@pytest.mark.parametrize(
    "question",
    [
        "What happens to my remote vault if I refund my service?",
        "How long does Obsidian keep the version history of my notes?",
        "How do I make a callout foldable?",
        "Which callouts start out collapsed in the help docs?",
    ],
)
def test_every_quoted_sentence_is_one_of_its_cited_passages_own(help_notes, question):
    answer = ask(help_notes, question)
    by_n = {s.n: s for s in answer.sources}
    cited = cited_numbers(answer.text)
    assert cited and set(cited) == {s.n for s in answer.sources if s.cited}
    pos = 0
    for m in CITATION.finditer(answer.text):  # each run of quoted text ends with the [n] of its passage
        run, pos = answer.text[pos : m.start()], m.end()
        own = " ".join(u.text for u in passage_units(by_n[int(m.group(1))].hit.text, attach_code=True))
        for line in run.strip().splitlines():
            line = line.strip().removeprefix("- ")
            assert re.sub(r"\s*\^[\w-]+$", "", line) in own or line in own, (line, own)
