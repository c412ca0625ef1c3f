"""cairn.answers.compose: the extractive answer in the note's own shape, from scored units of real markdown."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cairn.answers.compose import Piece, compose, question_shape
from cairn.passages import passage_units
from cairn.prompt import cited_numbers


def pieces(n: int, markdown: str, scores: dict[str, float], note: str = "") -> list[Piece]:
    """The units of ``markdown`` as source ``n``; a unit scores what ``scores`` gives the first key it starts with (0.1
    otherwise; a unit of fewer than 4 words is not scored, as the extractive answer does)."""
    out = []
    for pos, u in enumerate(passage_units(markdown, attach_code=True, all_items=True)):
        score = next((v for k, v in scores.items() if u.text.startswith(k)), 0.1)
        seed = u.kind not in ("question", "heading", "title") and len(u.text.split()) >= 4
        out.append(Piece(n, pos, u, u.text, score, seed, note or f"note{n}.md", 0.5, f"note{n}.md"))
    return out


def where(p: Piece) -> str:
    return f"Note {p.n} › {p.unit.heading or 'top'}"


PROCEDURE = """## Restore a deleted file

1. Open **[[Settings]]**.
2. In the sidebar, select **Sync**.
3. Next to **Deleted files**, select **View**.
4. Choose the note you want to restore.
5. Select the **Restore** button on the right.
"""


@pytest.mark.parametrize(
    "question,shape",
    [
        ("How do I restore a deleted note?", "how_to"),
        ("Can I get my money back for a Catalyst license?", "yes_no"),
        ("Does Sync keep version history?", "yes_no"),
        ("Which callout types are there?", "list"),
        ("callout types", "list"),
        ("Which plugins render Mermaid diagrams?", "list"),
        ("Which plugin has commands for a zettelkasten with Luhmann-style IDs?", "other"),  # one thing asked
        ("In the Dune theme, which font is used for the initial?", "other"),
        ("What is a canvas?", "term"),
        ("Where are snapshots kept", "other"),
    ],
)
def test_the_shape_a_question_asks_for(question, shape):
    assert question_shape(question) == shape


def test_a_procedure_is_quoted_whole_in_order_numbered_as_the_note_numbers_it_and_attributed():
    ps = pieces(1, PROCEDURE, {"Choose the note": 0.9})
    text = compose(ps, "how_to", where).text
    lines = text.splitlines()
    assert lines[0] == "Note 1 › Restore a deleted file:"
    assert [line.split(" ", 1)[0] for line in lines[1:]] == ["1.", "2.", "3.", "4.", "5."]
    assert lines[1] == "1. Open Settings."  # a step of two words is part of its procedure
    assert text.endswith("select the Restore button on the right. [1]".replace("select", "Select"))


def test_a_yes_no_question_gets_the_sentence_that_says_no_first():
    sales = pieces(1, "Once you've purchased a Catalyst license, you can access a range of benefits.\n", {"Once": 0.99})
    policy = pieces(
        2,
        "> [!Warning] Non-refundable purchases\n> Some purchases are **not** refundable:\n>\n"
        "> - Catalyst licenses are not refundable. They are intended to support development.\n"
        "> - Obsidian Credit is not refundable.\n",
        {"Catalyst licenses": 0.8},
    )
    text = compose([*sales, *policy], "yes_no", where).text
    assert text.startswith("Catalyst licenses are not refundable. They are intended to support development. [2]")
    assert "Once you've purchased" in text  # still quoted, after the sentence that decides


def test_which_gets_the_list_itself():
    text = compose(
        pieces(
            1, "We offer full refunds for the following services:\n\n- Obsidian Publish\n- Obsidian Sync\n", {"We": 0.9}
        ),
        "list",
        where,
    ).text
    assert text.splitlines()[1:] == [
        "We offer full refunds for the following services:",
        "- Obsidian Publish",
        "- Obsidian Sync [1]",
    ]


def test_callouts_one_per_type_are_listed_by_the_type_each_shows():
    section = "### Supported types\n\nYou can use several callout types and aliases.\n\n" + "".join(
        f"> [!{t}]-\n> ```md\n> > [!{t}]\n> ```\n\n---\n\n" for t in ("note", "abstract", "info", "todo")
    )
    text = compose(pieces(1, section, {"You can use": 0.9}), "list", where).text
    assert text.splitlines() == [
        "You can use several callout types and aliases.",
        "- Note",
        "- Abstract",
        "- Info",
        "- Todo [1]",
    ]


def test_a_sentence_referring_back_comes_with_what_it_refers_to_or_under_the_place_it_comes_from():
    tip = pieces(
        1,
        "Tip - practical advice for the workflow. Use for shortcuts and workarounds. "
        "These callouts start out collapsed.\n",
        {"These": 0.9},
    )
    assert compose(tip, "other", where).text.startswith("Tip - practical advice for the workflow.")
    # Opening its paragraph, it refers to its heading's subject: said after the place, so it reads.
    opening = pieces(1, "## Foldable callouts\n\nThese callouts start out collapsed and stay so.\n", {"These": 0.9})
    assert compose(opening, "other", where).text == (
        "Note 1 › Foldable callouts:\nThese callouts start out collapsed and stay so. [1]"
    )
    # Three in a row that each refer back, the first of them not opening the paragraph: nothing to hang them on.
    chain = pieces(
        1,
        "Tomato plants need water every day. They drink a lot in summer. They grow fast in the heat. "
        "They are green until July. These leaves turn red in the autumn.\n",
        {"These": 0.9},
    )
    assert "These leaves" not in compose(chain, "other", where).text


def test_a_sentence_ending_in_a_colon_whose_list_is_cut_off_is_quoted_up_to_its_last_whole_sentence():
    rule = pieces(
        1,
        'The golden rule for asking questions is: "Don\'t ask to ask, just ask." Here is why that is important:\n',
        {"The golden": 0.9},
    )
    assert compose(rule, "term", where).text == (
        'The golden rule for asking questions is: "Don\'t ask to ask, just ask." [1]'
    )


def test_a_sentence_introducing_a_list_the_passage_does_not_hold_is_not_quoted():
    cut = pieces(
        1,
        "Plants need water daily in the summer.\n\nTo extract text into a new note:\n",
        {"To extract": 0.9, "Plants": 0.5},
    )
    assert compose(cut, "how_to", where).text == "Plants need water daily in the summer. [1]"


def test_one_passage_answers_when_no_other_comes_close_and_nothing_is_quoted_twice():
    first = pieces(1, "Snapshots are kept for seven days by default.\n", {"Snapshots": 0.9})
    twin = pieces(2, "Snapshots are kept for seven days by default.\n", {"Snapshots": 0.9})
    stray = pieces(3, "The graph view shows links between notes.\n", {"The graph": 0.3})
    composed = compose([*first, *twin, *stray], "other", where)
    assert composed.text == "Snapshots are kept for seven days by default. [1]"
    assert cited_numbers(composed.text) == [1] and composed.cited == frozenset({1})


def test_a_unit_holding_none_of_the_questions_words_does_not_join_however_close_its_score():
    best = pieces(1, "Tomato sauce keeps for five days in the fridge.\n", {"Tomato": 0.8})
    stray = [replace(p, held=0.0) for p in pieces(2, "Roast at 200 degrees for forty minutes.\n", {"Roast": 0.78})]
    composed = compose([*best, *stray], "other", where)
    assert composed.text == "Tomato sauce keeps for five days in the fridge. [1]"
    holding = [replace(p, held=0.2) for p in stray]
    assert "Roast at 200" in compose([*best, *holding], "other", where).text


def test_a_faq_question_is_never_the_answer():
    faq = pieces(
        1, "**Will I lose my remote vault data?**\nNo, your data is retained for 30 days.\n", {"Will": 0.95, "No,": 0.8}
    )
    text = compose(faq, "yes_no", where).text
    assert text == "Will I lose my remote vault data? No, your data is retained for 30 days. [1]"
