"""pulldown-cmark (pyromark) against markdown-it-py, the parser it replaced, note by note over both shared vaults.

For every note, what the note parser and the chunker make of it with the shipped parser must equal what they made
with markdown-it-py (:mod:`support.markdown_oracle`): the parsed note (tags, links, body, front-matter), the body
with its code blanked (what links and tags are read from), the headings (level, line, text), tables and code blocks
(their lines), and the chunks (heading path, text, lines, token count, kind).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import cairn.chunking.blocks as blocks_module
from cairn.chunking import clean_heading
from cairn.embedder import load_tokenizer
from cairn.index import prepare_note
from cairn.notes.markdown import parse_blocks
from cairn.notes.markup import blank, strip_comments
from support.markdown_oracle import oracle_path
from support.vaults import SHARED


def _notes(vault: Path) -> list[tuple[str, str]]:
    notes = []
    for f in sorted(vault.rglob("*.md")):
        rel = f.relative_to(vault)
        if not any(part.startswith(".") for part in rel.parts):
            notes.append((rel.as_posix(), f.read_text(encoding="utf-8", errors="replace")))
    return notes


def _what_cairn_makes(text: str, path: str, tokenizer) -> dict:
    prepared = prepare_note(text, path, tokenizer.count_tokens, tokenizer.count_tokens_many)
    body = prepared.note.body
    _, code = strip_comments(body)
    tokens = blocks_module.block_tokens(body)
    return {
        "note": prepared.note,
        "text without code": blank(body, code),
        "headings": [
            (t.tag, t.map, clean_heading(tokens[i + 1].content))
            for i, t in enumerate(tokens)
            if t.type == "heading_open"
        ],
        "tables": [t.map for t in tokens if t.type == "table_open"],
        "code blocks": [(t.type, t.map) for t in tokens if t.type in ("fence", "code_block")],
        "chunks": [(c.symbol, c.text, c.line_start, c.line_end, c.token_count, c.kind) for c in prepared.chunks],
    }


@pytest.mark.parametrize(
    "vault",
    [
        pytest.param("obsidian-help", marks=pytest.mark.shared_data("vaults/obsidian-help")),
        # 3,879 notes parsed and chunked twice: ~30 CPU-s, so left to `make test`
        pytest.param("obsidian-hub", marks=[pytest.mark.shared_data("vaults/obsidian-hub"), pytest.mark.slow]),
    ],
)
def test_every_note_parses_and_chunks_as_with_markdown_it(vault: str) -> None:
    folder = SHARED / "vaults" / vault
    tokenizer = load_tokenizer()
    notes = _notes(folder)
    assert len(notes) > 100
    differ: dict[str, list[str]] = {}
    for path, text in notes:
        new = _what_cairn_makes(text, path, tokenizer)
        with oracle_path():
            old = _what_cairn_makes(text, path, tokenizer)
        for part, value in new.items():
            if value != old[part]:
                differ.setdefault(part, []).append(path)
    assert not differ, {part: (len(paths), paths[:5]) for part, paths in differ.items()}


def test_code_spans_are_character_offsets_past_non_ascii_text() -> None:
    body = "Café `naïve` — and `x`\n\n| é | `ü|v` |\n|---|---|\n| ß `q` | 1 |\n"
    spans = parse_blocks(body).code_spans
    assert [body[a:b] for a, b in spans] == ["`naïve`", "`x`", "`ü|v`", "`q`"]


def test_a_tight_list_item_has_a_paragraph_and_nested_items_start_on_their_own_line() -> None:
    body = "- one\n\t- two\n\t  more\n- three\n"
    tokens = parse_blocks(body).tokens
    items = [t.map for t in tokens if t.type == "list_item_open"]
    paragraphs = [t.map for t in tokens if t.type == "paragraph_open"]
    assert items == [[0, 3], [1, 3], [3, 4]]
    assert paragraphs == [[0, 1], [1, 3], [3, 4]]
