"""cairn.passages: a chunk's markdown read as quotable units, as Obsidian shows it."""

from __future__ import annotations

import pytest

from cairn.passages import clean_markdown_line, passage_units, refers_back


def texts(text: str, **kw) -> list[tuple[str, str]]:
    return [(u.kind, u.text) for u in passage_units(text, **kw)]


@pytest.mark.parametrize(
    "line,shown",
    [
        (
            "In addition to the [[#Sync history]], Obsidian keeps versions.",
            "In addition to the Sync history, Obsidian keeps versions.",
        ),
        ("See [[Internal links|links]] and [[Callouts]].", "See links and Callouts."),
        ("Read [[Internal links#Link to a heading]] first.", "Read Internal links first."),
        ("Open [your account](https://obsidian.md/account) now.", "Open your account now."),
        ("It supports embeds! ![[Engelbart.jpg]]", "It supports embeds!"),
        ("A picture ![diagram](img/d.png) of it.", "A picture of it."),
        (
            "Use `[Display text](Link URL)` and `**bold**` as written.",
            "Use `[Display text](Link URL)` and `**bold**` as written.",
        ),
    ],
)
def test_links_show_their_display_text_and_embedded_files_nothing(line, shown):
    assert clean_markdown_line(line) == shown


def test_a_callout_title_is_a_unit_of_its_own():
    text = "> [!tip] Talk to a human\n> If you have any trouble with a transaction, contact Obsidian support.\n"
    assert texts(text) == [
        ("title", "Talk to a human"),
        ("sentence", "If you have any trouble with a transaction, contact Obsidian support."),
    ]


def test_a_bold_title_line_is_not_run_into_the_paragraph_after_it():
    text = "**Linking to a heading within the same note**\n\nTo link to a heading within the same note, type `[[#`.\n"
    assert [k for k, _ in texts(text)] == ["title", "sentence"]


def test_list_items_stay_items_and_trailing_tags_are_left_out():
    text = (
        "To exclude a folder:\n\n1. Open Settings → Sync.\n2. Next to Excluded folders, select Manage.\n\n"
        "Done and dusted here. #garden/harvest\n"
    )
    assert texts(text, min_words=2) == [
        ("sentence", "To exclude a folder:"),
        ("item", "Open Settings → Sync."),
        ("item", "Next to Excluded folders, select Manage."),
        ("sentence", "Done and dusted here."),
    ]


def test_faq_questions_open_entries_and_their_answers_follow_in_the_same_paragraph():
    text = (
        "## Frequently asked questions\n\n"
        "**What happens if I refund my service?**\nRefunding a subscription deletes your remote vaults.\n\n"
        "**What if I miss a payment? Will I lose my data?**\nNo, your data is retained for 30 days.\n"
    )
    units = passage_units(text)
    assert [(u.kind, u.entry) for u in units] == [("question", 1), ("sentence", 1), ("question", 2), ("sentence", 2)]
    assert units[2].text == "What if I miss a payment? Will I lose my data?"
    assert units[3].paragraph == units[2].paragraph and units[3].refers_back


def test_a_question_heading_opens_an_entry():
    text = "### Do you keep my data if I refund?\n\nWe delete remote vaults after a refund is made.\n"
    units = passage_units(text)
    assert [(u.kind, u.entry) for u in units] == [("heading", 1), ("sentence", 1)]


def test_a_chunk_cut_inside_a_sentence_or_a_code_block_starts_with_no_quotable_fragment():
    units = passage_units("be an icon ID from lucide, or an SVG element.\n\nCallouts can be nested in many levels.\n")
    assert [u.kind for u in units] == ["fragment", "sentence"]
    code_tail = (
        "svg...</svg>';\n> ```\n\n> [!tip]- Further customization of callouts\n> You are not limited to colours.\n"
    )
    assert texts(code_tail) == [
        ("title", "Further customization of callouts"),
        ("sentence", "You are not limited to colours."),
    ]


def test_a_code_block_inside_a_callout_is_code():
    text = "> For example, hide the title:\n> ```css\n> .callout-title { display: none; }\n> ```\n"
    assert texts(text, attach_code=True) == [
        ("sentence", "For example, hide the title: `.callout-title { display: none; }`")
    ]


@pytest.mark.parametrize(
    "sentence,back",
    [
        ("These callouts start out collapsed.", True),
        ("It roots along the stem.", True),
        ("However, your local data will remain unaffected.", True),
        ("No, your data is retained for 30 days.", True),
        ("Items in the list are sorted.", False),
        ("Nothing is deleted.", False),
        ("Theseus is a name.", False),
    ],
)
def test_sentences_that_refer_back(sentence, back):
    assert refers_back(sentence) is back


def test_a_unit_read_otherwise_is_scored_as_the_sentence_the_index_embedded_for_it():
    from cairn.answers.extractive import IndexedSentences

    indexed = IndexedSentences(
        [
            "Talk to a human If you have any trouble, contact support.",
            "In addition to the , Obsidian also maintains a version history.",
            "What if I miss a payment?",
            "Plant cloves in October.",
        ]
    )
    assert indexed.counterpart("Plant cloves in October.") == "Plant cloves in October."
    assert indexed.counterpart("If you have any trouble, contact support.").startswith("Talk to a human")
    assert indexed.counterpart("What if I miss a payment? Will I lose data?") == "What if I miss a payment?"
    link = "In addition to the Sync history, Obsidian also maintains a version history."
    assert indexed.counterpart(link) == "In addition to the , Obsidian also maintains a version history."
    assert indexed.counterpart("Nothing like any of them.") == "Nothing like any of them."


def test_short_list_items_are_quoted_with_the_sentence_that_introduces_them():
    text = (
        "We offer full refunds within 7 days for the following services:\n\n"
        "- [[Introduction to Obsidian Publish|Obsidian Publish]]\n- [[Introduction to Obsidian Sync|Obsidian Sync]]\n"
    )
    assert texts(text, attach_code=True) == [
        ("sentence", "We offer full refunds within 7 days for the following services: Obsidian Publish, Obsidian Sync.")
    ]
    assert texts(text) == [("sentence", "We offer full refunds within 7 days for the following services:")]


def test_a_sentence_saying_in_such_cases_refers_back():
    assert refers_back("Unfortunately, we do not offer refunds in such cases.")


def test_list_items_carry_their_list_marker_nesting_and_the_title_over_them():
    text = (
        "#### Restore a deleted file\n\n**Desktop/Tablet** ![[icon.svg#icon]]\n"
        "1. Open **[[Settings]]**.\n2. Select the snapshot.\n    1. Select **Copy**.\n3. Done, it is back.\n\n"
        "Another paragraph ends the list here.\n"
    )
    units = passage_units(text, all_items=True)
    items = [(u.marker, u.depth, u.text) for u in units if u.kind == "item"]
    assert items == [
        ("1.", 0, "Open Settings."),
        ("2.", 0, "Select the snapshot."),
        ("1.", 1, "Select Copy."),
        ("3.", 0, "Done, it is back."),
    ]
    assert {u.block for u in units if u.kind == "item"} == {0}
    assert all(u.heading == "Restore a deleted file" and u.label == "Desktop/Tablet" for u in units if u.kind == "item")
    assert units[-1].kind == "sentence" and units[-1].block == -1 and units[-1].label == ""
    # without all_items, a step of two words is no unit
    assert [u.text for u in passage_units(text) if u.kind == "item"] == ["Done, it is back."]


def test_a_callout_without_a_title_shows_its_type():
    units = passage_units(
        "> [!abstract]-\n> ```md\n> > [!abstract]\n> ```\n\n> [!tip] Talk to a human\n> Hi.\n", all_items=True
    )
    assert [(u.kind, u.text) for u in units if u.kind == "title"] == [
        ("title", "Abstract"),
        ("title", "Talk to a human"),
    ]
