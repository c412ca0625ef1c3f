"""Tests for cairn.notes: tags, comments, links, link resolution (the front-matter: tests/test_notes_frontmatter.py)."""

from __future__ import annotations

import pytest

from cairn.notes import LinkResolver, ParsedNote, normalise_tag, parse_note, tag_in_scope
from support.links import L

# -------------------------------------------------------------------------- tags


@pytest.mark.parametrize(
    ("yaml_value", "expected"),
    [
        ("[one, two]", ("one", "two")),
        ("\n  - one\n  - two", ("one", "two")),
        ("one, two", ("one", "two")),
        ("one two", ("one", "two")),
        ("one,two three", ("one", "three", "two")),
        ("single", ("single",)),
        ("", ()),
        ("null", ()),
        ("['#hashed', '#Nested/Child']", ("hashed", "nested/child")),
        ("[Project/Alpha/Beta]", ("project/alpha/beta",)),
        ("[Café, 日本語, 🎉party, ✅]", ("café", "✅", "日本語", "🎉party")),
        ("[2024, y2024, 12/34]", ("y2024",)),
        ("[Dup, dup, DUP]", ("dup",)),
        ("[[nested, list], x]", ("list", "nested", "x")),
        ("[a, null, 3.5, {k: v}]", ("a",)),
    ],
)
def test_front_matter_tags_forms(yaml_value, expected):
    note = parse_note(f"---\ntags: {yaml_value}\n---\n", "n.md")
    assert note.frontmatter_error is None
    assert note.tags == expected


@pytest.mark.parametrize("key", ["tags", "tag", "Tags", "TAGS"])
def test_front_matter_tag_key_variants(key):
    assert parse_note(f"---\n{key}: [x]\n---\n", "n.md").tags == ("x",)


def test_front_matter_and_inline_tags_are_merged_deduped_and_sorted():
    note = parse_note("---\ntags: [zeta, Alpha]\n---\n#alpha #beta #Zeta\n", "n.md")
    assert note.tags == ("alpha", "beta", "zeta")


def test_inline_tags_basic_nested_unicode_emoji():
    text = "Start #one and #Two/Three, #café. #日本語 #🎉 #emoji🎉 #snake_case #kebab-case\n"
    note = parse_note(text, "n.md")
    assert note.tags == ("café", "emoji🎉", "kebab-case", "one", "snake_case", "two/three", "日本語", "🎉")


def test_inline_tag_stops_at_punctuation_and_needs_whitespace_before():
    note = parse_note("a#notag (#paren) x #good! #also? #cjk。句 end#no\n", "n.md")
    assert note.tags == ("also", "cjk", "good")


def test_purely_numeric_inline_tags_are_not_tags():
    assert parse_note("#1984 #y1984 #2024/01\n", "n.md").tags == ("y1984",)


def test_headings_are_not_tags_but_tags_in_headings_are():
    note = parse_note("# Heading\n## Sub heading #intitle\n###### Six\n#notaheading\n", "n.md")
    assert note.tags == ("intitle", "notaheading")


def test_no_tags_inside_fenced_indented_or_inline_code():
    text = (
        "Para #real `#inline` and ``x #double ` y``\n"
        "\n"
        "```python\n"
        "#comment in code\n"
        "```\n"
        "\n"
        "~~~\n"
        "#tilde\n"
        "~~~\n"
        "\n"
        "    #indented code\n"
        "\n"
        "- list item\n"
        "\n"
        "      #code inside list\n"
        "> quote #quoted\n"
        "> ```\n"
        "> #fenced_in_quote\n"
        "> ```\n"
        "\\`not code #escaped_tick`\n"
    )
    note = parse_note(text, "n.md")
    assert note.tags == ("escaped_tick", "quoted", "real")


def test_unclosed_fence_swallows_rest_of_note_like_commonmark():
    note = parse_note("#before\n```\n#after [[x]]\n", "n.md")
    assert note.tags == ("before",)
    assert note.links == ()


def test_unmatched_backtick_is_literal():
    note = parse_note("a ` b #tag\n", "n.md")
    assert note.tags == ("tag",)


def test_no_tags_from_urls_or_wikilink_headings():
    text = "See http://x.com/#anchor and https://x.com/path #real [[Note#Heading]] [[Note #nottag]] www.x.com/#frag\n"
    note = parse_note(text, "n.md")
    assert note.tags == ("real",)


def test_markdown_link_destination_fragment_is_not_a_tag():
    note = parse_note("[jump](#Heading) [x](Other.md#Sec)\n", "n.md")
    assert note.tags == ()


# --------------------------------------------------------------------- comments


def test_inline_comment_is_blanked_in_body_and_ignored_for_tags_and_links():
    note = parse_note("Visible %% hidden #secret [[Hidden]] %% after #shown\n", "n.md")
    assert note.body == "Visible " + " " * len("%% hidden #secret [[Hidden]] %%") + " after #shown\n"
    assert note.tags == ("shown",)
    assert note.links == ()


def test_multiline_comment_keeps_newlines_so_line_numbers_match():
    text = "---\ntags: []\n---\nline4\n%%\nhidden #no\n[[NoLink]]\n%%\n[[Yes]] #yes\n"
    note = parse_note(text, "n.md")
    assert note.body.split("\n") == ["line4", "  ", " " * 10, " " * 10, "  ", "[[Yes]] #yes", ""]
    assert note.tags == ("yes",)
    assert note.links == (L("Yes", line=9),)


def test_unclosed_comment_hides_the_rest_of_the_note():
    note = parse_note("#a\n%% start\n#b [[c]]\n", "n.md")
    assert note.tags == ("a",)
    assert note.links == ()
    assert note.body == "#a\n" + " " * len("%% start") + "\n" + " " * len("#b [[c]]") + "\n"


def test_a_table_cell_is_its_own_inline_text_for_code_spans():
    # As Obsidian renders a table, a lone backtick in one row does not open a code span closed in a later row
    # (which would hide the tag between them); a code span inside one cell still hides its tag.
    text = "| step | note |\n| --- | --- |\n| a ` b | #real |\n| c | `#code` |\n| d ` e | f |\n"
    assert parse_note(text, "t.md").tags == ("real",)


def test_percent_signs_inside_code_are_not_comments():
    note = parse_note("`%%` #kept `%%`\n```\n%%\n```\n#also\n", "n.md")
    assert note.tags == ("also", "kept")
    assert "%%" in note.body


def test_code_fence_inside_a_comment_does_not_hide_following_text():
    note = parse_note("%%\n```\n%%\n#visible [[Seen]]\n", "n.md")
    assert note.tags == ("visible",)
    assert note.links == (L("Seen", line=4),)


def test_line_holding_only_a_comment_does_not_turn_the_next_indented_line_into_code():
    note = parse_note("para\n%% note %%\n    #still_text [[Still]]\n", "n.md")
    assert note.tags == ("still_text",)
    assert note.links == (L("Still", line=3),)


def test_hub_style_comment_with_placeholder_tag_is_ignored():
    text = "%% Uncomment the next line. If they don't, delete the placeholder tag: #placeholder/author %%\n"
    assert parse_note(text, "n.md").tags == ()


# ------------------------------------------------------------------------ links


def test_wikilink_forms():
    text = (
        "[[Plain]]\n"
        "[[Target|Shown text]]\n"
        "[[Target#Heading]]\n"
        "[[Target#^block-id]]\n"
        "[[#Local heading]]\n"
        "[[#^localblock]]\n"
        "[[Target#Heading|Alias]]\n"
        "[[folder/Sub note.md]]\n"
        "| [[Table\\|alias]] |\n"
        "[[ spaced | alias ]]\n"
    )
    note = parse_note(text, "n.md")
    assert note.links == (
        L("Plain", line=1),
        L("Target", alias="Shown text", line=2),
        L("Target", heading="Heading", line=3),
        L("Target", block_id="block-id", line=4),
        L("", heading="Local heading", line=5),
        L("", block_id="localblock", line=6),
        L("Target", heading="Heading", alias="Alias", line=7),
        L("folder/Sub note.md", line=8),
        L("Table", alias="alias", line=9),
        L("spaced", alias="alias", line=10),
    )


def test_embeds_are_flagged():
    note = parse_note("![[image.png]] ![[Note#Section]] ![alt](pics/photo%201.jpg)\n", "n.md")
    assert note.links == (
        L("image.png", is_embed=True),
        L("Note", heading="Section", is_embed=True),
        L("pics/photo 1.jpg", alias="alt", is_embed=True),
    )


def test_markdown_links_to_notes_are_decoded_and_urls_are_not_links():
    text = (
        "[text](Some%20Note.md) [t](folder/note.md#heading) [angle](<With Space.md>)\n"
        "[web](https://example.com/a.md) [mail](mailto:a@b.c) [ob](obsidian://open?x=1)\n"
        '[titled](Note.md "Title") [self](#Local) [](empty.md)\n'
        "[proto](//cdn.example.com/x.md) [doubled]((https://x.com/a#b))\n"
    )
    note = parse_note(text, "n.md")
    assert note.links == (
        L("Some Note.md", alias="text", line=1),
        L("folder/note.md", heading="heading", alias="t", line=1),
        L("With Space.md", alias="angle", line=1),
        L("Note.md", alias="titled", line=3),
        L("", heading="Local", alias="self", line=3),
        L("empty.md", line=3),
    )


def test_links_are_in_document_order_across_kinds():
    note = parse_note("[b](B.md) [[A]] ![[C]]\n[[D]]", "n.md")
    assert [link.target for link in note.links] == ["B.md", "A", "C", "D"]


def test_no_links_from_code():
    text = "`[[NotALink]]` [[Real]]\n```\n[[InFence]] [x](infence.md)\n```\n    [[Indented]]\n"
    note = parse_note(text, "n.md")
    assert note.links == (L("Real"),)


def test_link_line_numbers_count_front_matter_lines():
    text = "---\na: 1\nb: 2\n---\n\n\nText [[Deep]]\n"
    note = parse_note(text, "n.md")
    assert note.body_line == 5
    assert note.links == (L("Deep", line=7),)


def test_nested_heading_and_size_suffix_are_kept_raw():
    note = parse_note("[[Note#H1#H2]] ![[pic.png|200]]", "n.md")
    assert note.links == (L("Note", heading="H1#H2"), L("pic.png", alias="200", is_embed=True))


def test_empty_wikilink_is_ignored():
    assert parse_note("[[ ]] [[|x]] [[#]]", "n.md").links == ()


def test_parsed_note_is_frozen():
    note = parse_note("x", "n.md")
    assert isinstance(note, ParsedNote)
    with pytest.raises(AttributeError):
        note.title = "y"  # type: ignore[misc]


def test_parse_note_never_raises_on_odd_input():
    for text in ["", "---", "---\n", "%%", "```", "[[", "]]", "[](", "#", "\x00", "---\n- [\n---\n", "\ufeff"]:
        parse_note(text, "odd.md")


# --------------------------------------------------------------- normalise_tag


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("#Tag", "tag"),
        ("  #Tag  ", "tag"),
        ("tag", "tag"),
        ("A/B", "a/b"),
        ("/a/b/", "a/b"),
        ("a//b", "a/b"),
        ("ÉTÉ", "été"),
        ("Straße", "strasse"),
        ("🎉", "🎉"),
        ("1984", None),
        ("2024/01", None),
        ("y1984", "y1984"),
        ("", None),
        ("#", None),
        ("/", None),
        ("has space", None),
        ("bad.dot", None),
        ("semi;colon", None),
        ("under_score-dash", "under_score-dash"),
    ],
)
def test_normalise_tag(raw, expected):
    assert normalise_tag(raw) == expected


def test_normalise_tag_nfc():
    assert normalise_tag("cafe\u0301") == "café"


@pytest.mark.parametrize(
    ("tag", "scope", "expected"),
    [
        ("a", "a", True),
        ("a/b", "a", True),
        ("a/b/c", "a/b", True),
        ("A/B", "#a", True),
        ("ab", "a", False),
        ("a", "a/b", False),
        ("b/a", "a", False),
        ("1984", "1984", False),
    ],
)
def test_tag_in_scope(tag, scope, expected):
    assert tag_in_scope(tag, scope) is expected


# --------------------------------------------------------------- LinkResolver


@pytest.fixture()
def resolver() -> LinkResolver:
    files = [
        ("Home.md", ["Start", "Dashboard"]),
        ("notes/Alpha.md", []),
        ("notes/Shared.md", []),
        ("projects/Shared.md", []),
        ("projects/deep/more/Shared.md", []),
        ("archive/2020/Shared.md", []),
        ("x/Dup.md", []),
        ("yy/Dup.md", []),
        ("folder/note.md", []),
        ("other/folder/note.md", []),
        ("attachments/image.png", []),
        ("Some Note.md", ["Alias Note"]),
        ("Café.md", []),
        ("Version 1.2.md", []),
        ("notes/sub/Leaf.md", []),
    ]
    return LinkResolver(files)


@pytest.mark.parametrize(
    ("target", "source", "expected"),
    [
        ("Alpha", "Home.md", "notes/Alpha.md"),
        ("Alpha.md", "Home.md", "notes/Alpha.md"),
        ("alpha", "Home.md", "notes/Alpha.md"),
        ("ALPHA.MD", "Home.md", "notes/Alpha.md"),
        ("Shared", "projects/x.md", "projects/Shared.md"),
        ("Shared", "notes/y.md", "notes/Shared.md"),
        ("Shared", "archive/2020/z.md", "archive/2020/Shared.md"),
        ("Shared", "Home.md", "notes/Shared.md"),
        ("Dup", "Home.md", "x/Dup.md"),
        ("folder/note", "Home.md", "folder/note.md"),
        ("other/folder/note", "Home.md", "other/folder/note.md"),
        ("folder/note.md", "x/a.md", "folder/note.md"),
        ("deep/more/Shared", "Home.md", "projects/deep/more/Shared.md"),
        ("more/Shared", "Home.md", "projects/deep/more/Shared.md"),
        ("/notes/Alpha", "x/a.md", "notes/Alpha.md"),
        ("image.png", "notes/Alpha.md", "attachments/image.png"),
        ("attachments/image.png", "Home.md", "attachments/image.png"),
        ("Image.PNG", "Home.md", "attachments/image.png"),
        ("Start", "notes/Alpha.md", "Home.md"),
        ("dashboard", "notes/Alpha.md", "Home.md"),
        ("alias note", "Home.md", "Some Note.md"),
        ("Some Note", "notes/Alpha.md", "Some Note.md"),
        ("cafe\u0301", "Home.md", "Café.md"),
        ("Version 1.2", "Home.md", "Version 1.2.md"),
        ("./sub/Leaf.md", "notes/Alpha.md", "notes/sub/Leaf.md"),
        ("sub/Leaf.md", "notes/Alpha.md", "notes/sub/Leaf.md"),
        ("../Home.md", "notes/Alpha.md", "Home.md"),
        ("../../outside.md", "notes/Alpha.md", None),
        ("Missing", "Home.md", None),
        ("image", "Home.md", None),
        ("nope/Alpha", "Home.md", None),
        ("", "notes/Alpha.md", "notes/Alpha.md"),
    ],
)
def test_link_resolution(resolver, target, source, expected):
    assert resolver.resolve(target, source) == expected


def test_resolver_prefers_real_note_over_alias():
    r = LinkResolver([("A.md", ["B"]), ("B.md", [])])
    assert r.resolve("B", "A.md") == "B.md"


def test_resolver_with_no_files_resolves_nothing():
    assert LinkResolver([]).resolve("x", "a.md") is None


def test_resolver_resolves_parsed_links_end_to_end():
    note = parse_note("[[Alpha#Sec]] [t](Some%20Note.md) ![[image.png]] [[Nope]]", "Home.md")
    r = LinkResolver([("notes/Alpha.md", []), ("Some Note.md", []), ("img/image.png", []), ("Home.md", [])])
    assert [r.resolve(link.target, "Home.md") for link in note.links] == [
        "notes/Alpha.md",
        "Some Note.md",
        "img/image.png",
        None,
    ]
