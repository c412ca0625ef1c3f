"""cairn.notes, the front-matter: YAML as Obsidian reads it (line endings, tabs, YAML 1.2 scalars, repeated keys,
alias bombs), the title, the body's first line, tags and aliases in every form the front-matter allows."""

from __future__ import annotations

import json

import pytest

from cairn.notes import FRONTMATTER_INVALID, parse_note
from support.links import L

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
