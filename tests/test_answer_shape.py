"""The answer a person reads carries the fact, in the note's own shape: the extractive answer (no model) over a real
index of a copy of ``shared/vaults/obsidian-help``, asked through the one ask path as a new user asks.

- "callout types" lists the types;
- a note deleted by accident gets the restore steps whole, in order, said to be Sync's, and File recovery;
- "can I get my money back for a Catalyst license?" opens with the sentence that decides it (not refundable);
- a question the notes do not answer (Zotero) is not answered as found.
"""

from __future__ import annotations

import asyncio
import re
import shutil

import pytest

from cairn.answers import AnswerService
from cairn.prompt import CITATION
from support.cairns import indexed_cairn
from support.requests import ask_request
from support.vaults import HELP_VAULT

pytestmark = [pytest.mark.shared_data("vaults/obsidian-help"), pytest.mark.slow, pytest.mark.timeout(1200)]

CALLOUT_TYPES = (
    "note",
    "abstract",
    "info",
    "todo",
    "tip",
    "success",
    "question",
    "warning",
    "failure",
    "danger",
    "bug",
    "example",
    "quote",
)


@pytest.fixture(scope="module")
def help_copy(tmp_path_factory, embedder):
    """A Cairn over a copy of the whole help vault, indexed with the real model; no language model."""
    vault = tmp_path_factory.mktemp("help-copy") / "obsidian-help"
    shutil.copytree(HELP_VAULT, vault)
    yield from indexed_cairn(vault, tmp_path_factory.mktemp("help-copy-data"), embedder)


def ask(cairn, question: str):
    return asyncio.run(AnswerService(cairn.query).answer(ask_request(question)))


def first_sentence(text: str) -> str:
    return re.split(r"(?<=[.!?])\s", CITATION.sub("", text).strip(), maxsplit=1)[0]


def test_callout_types_are_listed(help_copy):
    answer = ask(help_copy, "callout types")
    assert not answer.not_found and not answer.weak, answer.text
    listed = {
        line.removeprefix("- ").strip(" [0-9]").lower() for line in answer.text.splitlines() if line.startswith("- ")
    }
    named = [t for t in CALLOUT_TYPES if t in listed]
    assert len(named) >= 10, answer.text  # the list itself, not "refer to Supported types"


def test_a_note_deleted_by_accident_gets_the_restore_steps_in_order_said_to_be_syncs(help_copy):
    answer = ask(help_copy, "I deleted a note by accident, how do I get it back?")
    text = answer.text
    assert not answer.not_found and not answer.weak, text
    lines = text.splitlines()
    steps = [i for i, line in enumerate(lines) if re.match(r"\d+\. ", line)]
    assert steps, text
    first = steps[0]
    run = [lines[i] for i in range(first, len(lines)) if re.match(r"\d+\. ", lines[i])][:7]
    assert [int(line.split(".", 1)[0]) for line in run] == list(range(1, len(run) + 1)), text  # whole, in order
    assert len(run) >= 5, text
    assert "Sync" in lines[first - 1] or "Sync" in " ".join(lines[max(0, first - 2) : first]), text  # said to be Sync's
    assert "File recovery" in text, text


def test_a_yes_no_question_opens_with_the_fact_that_decides_it(help_copy):
    answer = ask(help_copy, "can I get my money back for a Catalyst license?")
    assert not answer.not_found, answer.text
    opening = first_sentence(answer.text)
    assert "Catalyst" in opening and "not refundable" in opening, answer.text


def test_a_question_the_notes_do_not_answer_is_not_answered_as_found(help_copy):
    answer = ask(help_copy, "How do I connect Obsidian to Zotero so I can insert citations?")
    assert answer.not_found or answer.weak, answer.text
