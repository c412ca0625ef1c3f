"""Exact words honoured: a query's words as typed (case aside, punctuation included) rank the notes holding them
first, and the relevance labels say what matched.

On a tiny vault written here (``C++``, ``AES-256``, ``ubuntu 20.04`` beside notes holding only their tokens), on
the real Obsidian help vault (``.obsidian``, ``[!info]``, ``publish-main.obsidian.md``, ``kindle highlights``) and
on the sample vault (the README's sourdough question), all through the real query service and the edge contract's
JSON; the literal matching rules on their own.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cairn import contract
from cairn.search.literal import literal_count, literal_form, passage_share, query_literals
from cairn.search.syntax import parse
from support.cairns import open_cairn, services_of
from support.requests import ask_request, search_request
from support.vaults import HELP_VAULT, SAMPLE_VAULT

NOTES = {
    "Languages/Cpp.md": "# Cpp\n\nI write C++ every day: templates, RAII and the C++ standard library.\n",
    "Languages/C.md": (
        "# C\n\nThe C language: c compilers, c pointers and c strings. A C program starts in main; "
        "c is small and c is fast.\n"
    ),
    "Security/Disk encryption.md": "# Disk encryption\n\nThe disk is encrypted with AES-256 in XTS mode.\n",
    "Security/Ciphers.md": (
        "# Ciphers\n\nAES has key sizes of 128, 192 and 256 bits; aes 256 and aes 128 are both common. "
        "The 256 colour palette is unrelated.\n"
    ),
    "Servers/Web server.md": "# Web server\n\nThe web server runs Ubuntu 20.04 with nginx.\n",
    "Servers/Backups.md": (
        "# Backups\n\nUbuntu backups run nightly; the ubuntu box kept the 20-04 tape and the 20 04 label.\n"
    ),
    "Kitchen/Copy.md": "# Copy\n\nCopy the recipe card, then copy it again. A copy of a copy.\n",
    "Kitchen/Photocopier.md": "# Photocopier\n\nCopying recipes on the office machine.\n",
}


def _write(root: Path) -> Path:
    for rel, text in NOTES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def tiny_cairn(tmp_path_factory, embedder):

    vault = _write(tmp_path_factory.mktemp("literal-vault"))
    cairn = open_cairn(vault, tmp_path_factory.mktemp("literal-data"), embedder)
    cairn.indexing.index()
    yield cairn
    cairn.close()


def results(cairn, query: str, top_k: int = 8) -> list[dict]:
    """The JSON results of a search, as HTTP, MCP and the CLI show them."""
    return contract.search_json(cairn.query.search(search_request(query, top_k=top_k)))["results"]


# ------------------------------------------------------------------ the rules
def test_a_literal_is_the_word_as_typed_case_folded_without_sentence_punctuation():
    assert literal_form("C++") == "c++"
    assert literal_form(".Obsidian") == ".obsidian"
    assert literal_form("fridge?") == "fridge"
    assert literal_form("++") is None


def test_a_literal_counts_only_with_no_word_character_beside_it():
    text = "see the `.obsidian` folder, not help.obsidian.md; c++ and c++17; copying, copy"
    assert literal_count(text, ".obsidian") == 1
    assert literal_count(text, "c++") == 1
    assert literal_count(text, "copying") == 1 and literal_count(text, "cop") == 0


def test_query_literals_keep_the_positive_words_and_phrases_that_carry_meaning():
    literals = [lit for _, lit in query_literals(parse('How do I use "AES-256" -tomato C++?').root)]
    assert literals == ["aes-256", "c++"]


def test_passage_share_is_the_share_of_words_held_as_typed():
    assert passage_share("Kindle notes and highlights", ["kindle", "highlights"]) == 1.0
    assert passage_share("kind highlights", ["kindle", "highlights"]) == 0.5


# ------------------------------------------------------------------ a tiny vault
@pytest.mark.parametrize(
    ("query", "holder", "other"),
    [
        ("C++", "Languages/Cpp.md", "Languages/C.md"),
        ("AES-256", "Security/Disk encryption.md", "Security/Ciphers.md"),
        ("ubuntu 20.04", "Servers/Web server.md", "Servers/Backups.md"),
        ("copying", "Kitchen/Photocopier.md", "Kitchen/Copy.md"),
    ],
)
def test_the_note_holding_the_words_as_typed_comes_first(tiny_cairn, query, holder, other):
    found = results(tiny_cairn, query)
    assert found and found[0]["filePath"] == holder, found
    labels = {r["filePath"]: r["relevance"] for r in found}
    assert labels[holder] in ("strong", "good", "keyword"), labels
    assert labels.get(other) != "keyword", labels


def test_a_note_holding_the_words_only_in_another_form_is_labelled_similar_not_exact(tiny_cairn):
    labels = {r["filePath"]: r["relevance"] for r in results(tiny_cairn, "ubuntu 20.04")}
    assert labels.get("Servers/Backups.md") == "similar", labels  # "20-04", "20 04": not 20.04 as typed
    assert labels.get("Servers/Web server.md") in ("strong", "good", "keyword"), labels


# ------------------------------------------------------------------ the help vault
@pytest.mark.parametrize(
    ("query", "literal", "note"),
    [
        (".obsidian", ".obsidian", "Files and folders/Configuration folder.md"),
        ("[!info]", "[!info]", None),
        ("publish-main.obsidian.md", "publish-main.obsidian.md", None),
    ],
)
def test_help_vault_punctuated_words_put_a_note_holding_them_first(help_cairn, query, literal, note):
    found = results(help_cairn, query)
    first = found[0]["filePath"]
    assert literal in (HELP_VAULT / first).read_text(encoding="utf-8").casefold(), found[:3]
    if note is not None:
        assert first == note, [r["filePath"] for r in found]


def test_help_vault_callout_syntax_finds_callouts_first(help_cairn):
    found = results(help_cairn, "[!info]")
    assert found[0]["filePath"] == "Editing and formatting/Callouts.md", [r["filePath"] for r in found]


def test_help_vault_a_typo_neighbour_is_never_exact_words(help_cairn):
    found = results(help_cairn, "kindle highlights")
    assert found and not [r for r in found if r["relevance"] == "keyword"], found
    assert any(r["relevance"] == "similar" for r in found), found


# ------------------------------------------------------------------ the sample vault
def test_the_readme_sourdough_question_labels_its_answer_above_weak(sample_cairn):
    answer = asyncio.run(
        services_of(sample_cairn).answers.answer(
            ask_request("How long do I proof the sourdough in the fridge?", top_k=8)
        )
    )
    sources = [contract.source_json(s) for s in answer.sources]
    method = [s for s in sources if s["filePath"] == "Kitchen/Sourdough.md" and s["symbol"].endswith("Method")]
    assert method and method[0]["relevance"] != "weak", sources
    assert "fridge" in (SAMPLE_VAULT / "Kitchen/Sourdough.md").read_text(encoding="utf-8")
