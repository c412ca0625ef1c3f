"""Search finds a note by its name as the quick switcher does: the query's small words
count as evidence of a name, an exact word beats a word it begins, a query of small words only names notes, and a
named note is a candidate however many other notes hold the same words.

On a small vault written here (real index, real ONNX model, the real query service).
"""

from __future__ import annotations

import pytest

from support.cairns import open_cairn
from support.requests import search_request


def _write(root, name: str, text: str) -> None:
    path = root / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def named_cairn(tmp_path_factory, embedder):

    root = tmp_path_factory.mktemp("names")
    vault = root / "vault"
    _write(vault, "Plugins/Plugins for Chess", "A list of community plugins to study chess openings and games.")
    _write(vault, "Plugins/chess-study", "Study chess positions from PGN files inside your vault.")
    _write(vault, "Plugins/chesser", "Play and record chess games.")
    _write(vault, "Themes/Shiba Uni", "A calm theme with rounded corners and soft colours.")
    _write(vault, "Themes/Universitario", "A theme for academic writing with serif fonts.")
    _write(vault, "Plugins/univer", "Spreadsheets and documents embedded in notes.")
    _write(vault, "About the project", "Who maintains this vault, and how to contribute to it.")
    _write(vault, "Guides/Plugins to navigate notes", "Move between linked pages quickly from the keyboard.")
    for i in range(130):  # notes holding "plugins" and "notes" often: the BM25 top and its extras would be theirs
        _write(vault, f"Roundup/Week {i:03d}", f"Plugins notes plugins notes, plugins for notes, week {i}.")
    cairn = open_cairn(vault, root / "data", embedder)
    cairn.indexing.index()
    yield cairn
    cairn.close()


def first(cairn, text: str) -> str:
    return cairn.query.search(search_request(text, top_k=3)).hits[0].file_path


def test_a_small_word_of_the_query_in_a_title_makes_that_title_the_closer_name(named_cairn):
    assert first(named_cairn, "for Chess") == "Plugins/Plugins for Chess.md"


def test_a_title_holding_the_word_beats_titles_holding_longer_words_it_begins(named_cairn):
    assert first(named_cairn, "Uni") == "Themes/Shiba Uni.md"


def test_a_query_of_small_words_only_finds_the_note_it_names(named_cairn):
    assert first(named_cairn, "About") == "About the project.md"


def test_a_named_note_is_found_however_many_notes_hold_its_words(named_cairn):
    assert first(named_cairn, "Plugins to notes") == "Guides/Plugins to navigate notes.md"
