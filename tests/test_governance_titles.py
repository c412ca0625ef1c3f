"""``LinkRedactor.redact_symbol``: the names of withheld notes masked in heading paths (break report defect 4).

A stored heading path has lost its link brackets (``## Meeting with [[Dr Smith]]`` → ``Meeting with Dr Smith``),
so masking by link syntax alone let a withheld note's title through to MCP clients and remote models.
"""

from __future__ import annotations

import pytest

from cairn.policy import WITHHELD_LINK, LinkRedactor

REDACTOR = LinkRedactor(
    [("People/Dr Smith psychiatrist.md", ["The Shrink"]), ("HIV diagnosis 2026.md", []), ("Journal/Straße.md", ())]
)
W = WITHHELD_LINK


@pytest.mark.parametrize(
    "symbol, masked",
    [
        ("Weekly log › Meeting with Dr Smith psychiatrist", f"Weekly log › Meeting with {W}"),
        ("Log › dr smith  PSYCHIATRIST › After", f"Log › {W} › After"),  # any case, any spacing
        ("Plan › see People/Dr Smith psychiatrist.md", f"Plan › see {W}"),  # a path, with .md
        ("Plan › HIV diagnosis 2026 > Viral load", f"Plan › {W}"),  # [[Note#Heading]]
        ("Ask the shrink › Later", f"Ask {W} › Later"),  # an alias
        ("Walk down › straße", f"Walk down › {W}"),
        ("Meeting [[Dr Smith psychiatrist|x]]", f"Meeting {W}"),  # link syntax left over
    ],
)
def test_a_withheld_notes_name_in_a_heading_path_is_masked_as_a_whole_phrase(symbol, masked):
    assert REDACTOR.redact_symbol(symbol) == masked


@pytest.mark.parametrize(
    "symbol",
    [
        "Dr Smith psychiatrists",
        "Smith › psychiatrist",
        "HIV diagnosis 20261",
        "Weekly plan",
        "",
        "page 3",
    ],
)
def test_words_that_only_resemble_a_withheld_name_are_kept(symbol):
    assert REDACTOR.redact_symbol(symbol) == symbol


def test_the_shown_text_of_a_piped_link_is_masked_when_the_note_says_it_links_to_a_withheld_note():
    assert REDACTOR.redact_symbol("Log › Call my doctor again", ["my doctor"]) == f"Log › Call {W} again"
    assert REDACTOR.redact_symbol("Log › Call my doctor again") == "Log › Call my doctor again"


def test_nothing_withheld_masks_nothing():
    assert LinkRedactor(()).redact_symbol("Meeting with Dr Smith psychiatrist") == "Meeting with Dr Smith psychiatrist"
