"""Tests for cairn.notes: front-matter, tags, aliases, links, comments, link resolution."""

from __future__ import annotations

import json

import pytest

from cairn.notes import FRONTMATTER_INVALID, Link, LinkResolver, ParsedNote, normalise_tag, parse_note, tag_in_scope


def L(target, heading=None, block_id=None, alias=None, is_embed=False, line=1) -> Link:
    return Link(target, heading, block_id, alias, is_embed, line)


# ------------------------------------------------------------------ front-matter


def test_title_is_the_file_stem_of_the_vault_relative_path():
    assert parse_note("", "folder/My Note.md").title == "My Note"
    assert parse_note("", "a.b.md").title == "a.b"
    assert parse_note("", "Drawing.excalidraw.md").title == "Drawing.excalidraw"


def test_note_without_front_matter_has_empty_mapping_and_body_from_line_one():
    note = parse_note("# Title\n\nText #tag\n", "n.md")
    assert note.frontmatter == {}
    assert note.frontmatter_error is None
    assert note.body == "# Title\n\nText #tag\n"
    assert note.body_line == 1
    assert note.tags == ("tag",)


def test_front_matter_is_parsed_and_body_starts_after_closing_line():
    text = "---\ntitle: Hello\ntags: [a, b]\n---\nBody line\n#c\n"
    note = parse_note(text, "n.md")
    assert note.frontmatter == {"title": "Hello", "tags": ["a", "b"]}
    assert note.frontmatter_error is None
    assert note.body == "Body line\n#c\n"
    assert note.body_line == 5
    assert note.tags == ("a", "b", "c")


def test_bom_is_stripped_before_front_matter():
    note = parse_note("\ufeff---\ntags: x\n---\nbody", "n.md")
    assert note.frontmatter == {"tags": "x"}
    assert note.tags == ("x",)
    assert note.body == "body"
    assert note.body_line == 4


def test_crlf_and_cr_line_endings_become_lf_and_lines_stay_right():
    text = "---\r\naliases: [A]\r\n---\r\nfirst\r\n[[Link]]\rthird [[Other]]\r\n"
    note = parse_note(text, "n.md")
    assert note.aliases == ("A",)
    assert note.body == "first\n[[Link]]\nthird [[Other]]\n"
    assert note.body_line == 4
    assert note.links == (L("Link", line=5), L("Other", line=6))


def test_tabs_that_only_separate_in_front_matter_are_accepted_like_obsidian():
    text = "---\ntitle:\tTabbed\ntags:\n  -\tone\n  - two\n---\nx"
    note = parse_note(text, "n.md")
    assert note.frontmatter_error is None
    assert note.frontmatter == {"title": "Tabbed", "tags": ["one", "two"]}
    assert note.tags == ("one", "two")


@pytest.mark.parametrize("yaml_text", ["tags:\n\t- one\n\t- two", "tags:\n- one\n\t- two", "tags:\n  - one\n\t- two"])
def test_a_tab_indented_front_matter_line_is_reported_and_no_tags_are_guessed(yaml_text):
    note = parse_note(f"---\n{yaml_text}\n---\nx #body", "n.md")
    assert note.frontmatter == {} and note.tags == ("body",)
    assert note.frontmatter_error_code == FRONTMATTER_INVALID
    assert "indented with a tab" in (note.frontmatter_error or "")


def test_dashes_inside_quoted_and_block_values_do_not_close_front_matter():
    text = '---\ntitle: "---"\nsummary: |\n  line one\n  ---\n  line three\ntags: [kept]\n---\nBody #b\n'
    note = parse_note(text, "n.md")
    assert note.frontmatter_error is None
    assert note.frontmatter["title"] == "---"
    assert note.frontmatter["summary"] == "line one\n---\nline three\n"
    assert note.tags == ("b", "kept")
    assert note.body == "Body #b\n"
    assert note.body_line == 9


def test_empty_front_matter_gives_empty_mapping_without_error():
    note = parse_note("---\n---\nBody", "n.md")
    assert note.frontmatter == {}
    assert note.frontmatter_error is None
    assert note.body == "Body"
    assert note.body_line == 3


def test_invalid_yaml_records_a_reason_and_body_is_still_parsed():
    text = "---\ntitle: [unclosed\ntags: [a\n---\nBody #inline [[Link]]\n"
    note = parse_note(text, "n.md")
    assert note.frontmatter == {}
    assert note.frontmatter_error is not None
    assert "invalid YAML" in note.frontmatter_error
    assert "line" in note.frontmatter_error
    assert note.tags == ("inline",)
    assert note.links == (L("Link", line=5),)
    assert note.body_line == 5


@pytest.mark.parametrize(
    ("yaml_text", "expected_word"),
    [("- a\n- b", "list"), ("just a string", "str"), ("42", "int")],
)
def test_front_matter_that_is_not_a_mapping_is_reported(yaml_text, expected_word):
    note = parse_note(f"---\n{yaml_text}\n---\nBody #t", "n.md")
    assert note.frontmatter == {}
    assert note.frontmatter_error is not None
    assert "not a mapping" in note.frontmatter_error
    assert expected_word in note.frontmatter_error
    assert note.tags == ("t",)


def test_a_repeated_tags_key_keeps_the_tags_of_both_and_is_reported():
    # PyYAML keeps only the last value of a repeated key: `tags: [personal]` would be lost (a withheld note served).
    note = parse_note("---\ntags: [personal]\ntags: [work]\n---\n# Therapy\nsession notes\n", "therapy.md")
    assert note.tags == ("personal", "work")
    assert note.frontmatter["tags"] == ["personal", "work"]
    assert note.frontmatter_error is not None
    assert note.frontmatter_error.startswith("front-matter repeats a property")
    assert "'tags' at line 3 (first at line 2)" in note.frontmatter_error


@pytest.mark.parametrize(
    "yaml_text, tags, aliases",
    [
        ("tag: personal\ntag: work", ("personal", "work"), ()),
        ("tags: personal, health\ntags:\n  - work", ("health", "personal", "work"), ()),
        ("tags: [personal]\ntags:", ("personal",), ()),
        ("aliases: Dr Smith, GP\naliases: [Therapist]", (), ("Dr Smith", "GP", "Therapist")),
        ("alias: [A]\nalias: B", (), ("A", "B")),
    ],
)
def test_repeated_tag_and_alias_keys_keep_the_union_of_their_values(yaml_text, tags, aliases):
    note = parse_note(f"---\n{yaml_text}\n---\nBody", "n.md")
    assert note.tags == tags
    assert note.aliases == aliases
    assert "repeats a property" in note.frontmatter_error


def test_another_repeated_property_keeps_its_last_value_with_a_warning_naming_it():
    note = parse_note("---\ndate: 2024-01-01\nstatus: draft\nstatus: done\n---\nBody", "n.md")
    assert note.frontmatter == {"date": "2024-01-01", "status": "done"}
    assert "'status' at line 4 (first at line 3): only the last value is used" in note.frontmatter_error


def test_a_key_overriding_a_yaml_merge_is_not_a_repeat():
    note = parse_note("---\nbase: &b {x: 1}\nm:\n  <<: *b\n  x: 2\ntags: [a]\n---\nBody", "n.md")
    assert note.frontmatter["m"] == {"x": 2}
    assert note.frontmatter_error is None
    assert note.tags == ("a",)


def test_front_matter_only_note_has_empty_body():
    note = parse_note("---\ntags: [solo]\naliases: Only\n---", "n.md")
    assert note.tags == ("solo",)
    assert note.aliases == ("Only",)
    assert note.body == ""
    assert note.body_line == 5  # the line after the closing `---`, even when the file ends there
    note2 = parse_note("---\ntags: [solo]\n---\n", "n.md")
    assert note2.body == ""
    assert note2.body_line == 4


def test_unclosed_front_matter_is_body_text():
    note = parse_note("---\ntags: [x]\nno closing line #y\n", "n.md")
    assert note.frontmatter == {}
    assert note.frontmatter_error is None
    assert note.body_line == 1
    assert note.body.startswith("---\n")
    assert note.tags == ("y",)


def test_front_matter_must_start_on_the_first_line():
    note = parse_note("\n---\ntags: [x]\n---\n", "n.md")
    assert note.frontmatter == {}
    assert note.tags == ()


def test_front_matter_values_are_json_serialisable_dates_and_keys_included():
    text = (
        "---\n"
        "created: 2024-03-05\n"
        "updated: 2024-03-05 10:20:30\n"
        "2023-01-01: dated key\n"
        "1: one\n"
        "true: yes-key\n"
        "nested: {when: 2020-01-01, list: [2021-02-03]}\n"
        "nan: .nan\n"
        "---\n"
    )
    note = parse_note(text, "n.md")
    assert note.frontmatter_error is None
    fm = note.frontmatter
    assert fm["created"] == "2024-03-05"
    assert fm["updated"] == "2024-03-05T10:20:30"
    assert fm["2023-01-01"] == "dated key"
    assert fm["1"] == "one"
    assert fm["true"] == "yes-key"
    assert fm["nested"] == {"when": "2020-01-01", "list": ["2021-02-03"]}
    assert fm["nan"] == "nan"
    json.dumps(fm, allow_nan=False)


def test_yaml_scalars_follow_yaml_1_2_like_obsidian():
    text = (
        "---\n"
        "draft: no\n"
        "published: yes\n"
        "ok: true\n"
        "time: 12:30\n"
        "code: 010\n"
        "hex: 0x1F\n"
        "ratio: 1.5\n"
        "bad_date: 2024-02-30\n"
        "tags: [yes, no, on, off]\n"
        "---\n"
    )
    note = parse_note(text, "n.md")
    assert note.frontmatter_error is None
    assert note.frontmatter == {
        "draft": "no",
        "published": "yes",
        "ok": True,
        "time": "12:30",
        "code": 10,
        "hex": 31,
        "ratio": 1.5,
        "bad_date": "2024-02-30",
        "tags": ["yes", "no", "on", "off"],
    }
    assert note.tags == ("no", "off", "on", "yes")


def test_recursive_yaml_anchor_does_not_hang_and_stays_serialisable():
    note = parse_note("---\na: &x [1, *x]\n---\n", "n.md")
    json.dumps(note.frontmatter)
    assert note.frontmatter["a"][0] == 1


def test_yaml_alias_bomb_is_refused_with_a_reason():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    note = parse_note("---\n" + "\n".join(lines) + "\n---\nbody #ok", "n.md")
    assert note.frontmatter == {}
    assert "more than" in (note.frontmatter_error or "")
    assert note.tags == ("ok",)


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


# ---------------------------------------------------------------------- aliases


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("aliases: [One, Two]", ("One", "Two")),
        ("aliases:\n  - One\n  - Two", ("One", "Two")),
        ("aliases: One", ("One",)),
        ("aliases: One, Two", ("One", "Two")),
        ("alias: Solo", ("Solo",)),
        ("Aliases: [X]", ("X",)),
        ("aliases: [A, A, 2024, null]", ("A", "2024")),
        ("aliases:", ()),
        ("aliases: ['Comma, inside']", ("Comma, inside",)),
    ],
)
def test_aliases_forms(yaml_text, expected):
    note = parse_note(f"---\n{yaml_text}\n---\n", "n.md")
    assert note.frontmatter_error is None
    assert note.aliases == expected


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
