"""cairn.chunking: heading-aware chunks that always fit the embedding window.

Uses the real all-MiniLM-L6-v2 WordPiece tokenizer (``onnx_models/all-MiniLM-L6-v2/tokenizer.json``),
loaded with ``tokenizers`` directly (no onnxruntime), and the real obsidian-help vault.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from cairn.chunking import Chunk, chunk_note, clean_heading, embed_text

REPO = Path(__file__).resolve().parents[1]
TOKENIZER = REPO / "onnx_models" / "all-MiniLM-L6-v2" / "tokenizer.json"
SHARED = Path(os.environ.get("CAIRN_SHARED", REPO.parent / "shared"))
HELP_VAULT = SHARED / "vaults" / "obsidian-help"

MAX = 254


@pytest.fixture(scope="module")
def count():
    assert TOKENIZER.is_file(), f"the shipped tokenizer is missing at {TOKENIZER}"
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER))
    tok.no_truncation()  # the shipped file truncates and pads to 128
    tok.no_padding()

    def count_tokens(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count_tokens


class TokenizedChars:
    """``count`` that also adds up the characters it was asked to tokenize: the work a chunking did."""

    def __init__(self, count) -> None:
        self.count = count
        self.chars = 0

    def __call__(self, text: str) -> int:
        self.chars += len(text)
        return self.count(text)


def chunks_of(body: str, count, title: str = "Note", **kw) -> list[Chunk]:
    return chunk_note(body, title=title, count_tokens=count, **kw)


def lines_of(body: str, c: Chunk, body_line: int = 1) -> str:
    lines = body.split("\n")
    return "\n".join(lines[c.line_start - body_line : c.line_end - body_line + 1])


def assert_well_formed(
    body: str, chunks: list[Chunk], count, title: str = "Note", body_line: int = 1, max_tokens: int = MAX
) -> None:
    """Ordinals, token counts, budget, line ranges, coverage of every non-blank line, no heading-only chunk."""
    covered: set[int] = set()
    for n, c in enumerate(chunks):
        assert c.ordinal == n
        assert c.kind in ("prose", "code", "table")
        assert c.token_count == count(embed_text(title, c.heading_path, c.text)) <= max_tokens
        assert c.text and c.text == c.text.rstrip() and not c.text.startswith("\n")
        assert c.line_start <= c.line_end
        span = lines_of(body, c, body_line)
        text = c.text
        if text not in span:  # a table continuation piece starts with the repeated header rows
            assert c.kind == "table", (c, span)
            text = text.split("\n", 2)[2]
            assert text in span, (c, span)
        first, last = text.split("\n")[0], text.split("\n")[-1]
        assert first.strip() in span.split("\n")[0] and last.strip() in span.split("\n")[-1]
        assert not re.fullmatch(r"\s*#{1,6} [^\n]*", c.text), f"heading-only chunk {c.text!r}"
        covered.update(range(c.line_start, c.line_end + 1))
    for i, line in enumerate(body.split("\n")):
        if line.strip():
            assert i + body_line in covered, f"line {i + body_line} not in any chunk: {line!r}"


def prose(n_sentences: int, seed: str = "alpha") -> str:
    words = [
        "sourdough",
        "starter",
        "needs",
        "feeding",
        "twice",
        "daily",
        "with",
        "rye",
        "flour",
        "and",
        "water",
        "kept",
        "near",
        "the",
        "oven",
        "for",
        "warmth",
        "overnight",
    ]
    out = []
    for i in range(n_sentences):
        ws = [words[(i * 7 + j * 3) % len(words)] for j in range(8 + i % 5)]
        out.append(f"{seed.capitalize()} {i} " + " ".join(ws) + ".")
    return " ".join(out)


# --------------------------------------------------------------------------- basics


def test_empty_and_whitespace_only_bodies_give_no_chunks(count):
    assert chunks_of("", count) == []
    assert chunks_of(" \n\n\t \n", count) == []


def test_embed_text_is_title_then_heading_path_then_text():
    assert embed_text("Bread", ("Sourdough", "Proofing"), "Proof 4 h.") == "Bread › Sourdough › Proofing\nProof 4 h."
    assert embed_text("Bread", (), "Proof 4 h.") == "Bread\nProof 4 h."
    assert embed_text("", (), "text") == "text"
    assert embed_text("Bread", ("A",), "") == "Bread › A"


def test_symbol_joins_the_heading_path():
    c = Chunk(0, ("Callouts", "Foldable callouts"), "x", 1, 1, "prose", 3)
    assert c.symbol == "Callouts › Foldable callouts"
    assert Chunk(0, (), "x", 1, 1, "prose", 1).symbol == ""


def test_a_short_note_is_one_chunk_with_its_heading_line(count):
    body = "# Bread\n\nProof the dough for 4 hours.\n"
    [c] = chunks_of(body, count, title="Sourdough")
    assert c.heading_path == ("Bread",)
    assert c.text == "# Bread\n\nProof the dough for 4 hours."
    assert (c.line_start, c.line_end, c.kind) == (1, 3, "prose")
    assert c.token_count == count("Sourdough › Bread\n# Bread\n\nProof the dough for 4 hours.")


def test_text_before_the_first_heading_has_an_empty_path(count):
    body = "Intro line.\n\n## Later\n\nMore.\n"
    chunks = chunks_of(body, count)
    assert [c.heading_path for c in chunks] == [(), ("Later",)]
    assert chunks[0].text == "Intro line."


def test_invalid_arguments_are_rejected(count):
    with pytest.raises(ValueError, match="max_tokens"):
        chunks_of("x", count, max_tokens=8)
    with pytest.raises(ValueError, match="overlap_tokens"):
        chunks_of("x", count, max_tokens=64, overlap_tokens=40)
    with pytest.raises(ValueError, match="body_line"):
        chunks_of("x", count, body_line=0)


# --------------------------------------------------------------------------- headings


def test_heading_path_pushes_deeper_levels_and_pops_on_same_or_higher(count):
    body = "\n".join(
        [
            "# A",
            "a",
            "## B",
            "b",
            "### C",
            "c",
            "## D",
            "d",
            "#### E",
            "e",
            "# F",
            "f",
            "### G",
            "g",
        ]
    )
    paths = [c.heading_path for c in chunks_of(body, count)]
    assert paths == [("A",), ("A", "B"), ("A", "B", "C"), ("A", "D"), ("A", "D", "E"), ("F",), ("F", "G")]


def test_heading_text_is_cleaned_of_markdown(count):
    assert clean_heading("Use **bold** and _it_ `code`") == "Use bold and it code"
    assert clean_heading("See [the docs](https://x.y) and [[Other note|that note]]") == "See the docs and that note"
    assert clean_heading("[[Note#Part]] and [[Plain]]") == "Note > Part and Plain"
    assert clean_heading("==Marked== ~~old~~ heading ^block-1") == "Marked old heading"
    assert clean_heading("A  <span>tag</span>   spaced") == "A tag spaced"
    body = "## Closing hashes ##\ntext\n"
    assert chunks_of(body, count)[0].heading_path == ("Closing hashes",)


def test_hash_lines_inside_a_code_fence_are_not_headings(count):
    body = "# Script\n\n```bash\n# install it\npip install cairn\n## not a heading either\n```\n"
    [c] = chunks_of(body, count)
    assert c.heading_path == ("Script",)
    assert "# install it" in c.text and c.text.endswith("```")
    assert c.kind == "code"


def test_setext_headings_are_headings(count):
    body = "Title\n=====\n\nIntro.\n\nPart\n----\n\nDetails.\n"
    chunks = chunks_of(body, count)
    assert [c.heading_path for c in chunks] == [("Title",), ("Title", "Part")]
    assert chunks[1].text == "Part\n----\n\nDetails."
    assert (chunks[1].line_start, chunks[1].line_end) == (6, 9)


def test_a_hashtag_at_line_start_is_not_a_heading(count):
    body = "#garden/vegetables #todo\n\nPlant garlic in October.\n"
    [c] = chunks_of(body, count)
    assert c.heading_path == ()


def test_no_heading_only_chunks_an_empty_heading_is_folded_into_the_next(count):
    body = "# Recipes\n\n## Bread\n\nFlour, water, salt.\n\n## Empty\n\n## Soup\n\nLeek and potato.\n"
    chunks = chunks_of(body, count)
    assert [c.heading_path for c in chunks] == [("Recipes", "Bread"), ("Recipes", "Soup")]
    assert chunks[0].text.startswith("# Recipes\n\n## Bread")
    assert chunks[1].text.startswith("## Empty\n\n## Soup")
    assert_well_formed(body, chunks, count)


def test_a_trailing_empty_heading_joins_the_previous_chunk(count):
    body = "## Notes\n\nSome text.\n\n## To do\n"
    [c] = chunks_of(body, count)
    assert c.text == "## Notes\n\nSome text.\n\n## To do" and c.line_end == 5
    assert chunks_of("# Only\n\n## Headings\n", count) == []


# --------------------------------------------------------------------------- blocks


def test_a_table_section_is_kind_table(count):
    body = "## Ratios\n\n| flour | water |\n|---|---|\n| 500 g | 350 g |\n| 1 kg | 700 g |\n"
    [c] = chunks_of(body, count)
    assert c.kind == "table" and c.heading_path == ("Ratios",)


def test_a_long_table_is_split_by_rows_repeating_the_header(count):
    rows = "\n".join(f"| variety {i} | sown in week {i} of spring, harvest after {40 + i} days |" for i in range(120))
    body = f"## Seeds\n\n| name | notes |\n| --- | --- |\n{rows}\n"
    chunks = chunks_of(body, count)
    assert len(chunks) > 3
    assert all(c.kind == "table" for c in chunks)
    for c in chunks:
        lines = c.text.split("\n")
        start = 2 if c.ordinal == 0 else 0
        assert lines[start] == "| name | notes |" and lines[start + 1] == "| --- | --- |"
        assert all(line.startswith("| variety") for line in lines[start + 2 :])  # whole rows only
    seen = [line for c in chunks for line in c.text.split("\n") if line.startswith("| variety")]
    assert seen == rows.split("\n")  # every row once, in order, no overlap for tables
    assert_well_formed(body, chunks, count)


def test_a_long_code_block_is_split_by_lines_without_overlap(count):
    code = "\n".join(f"    total_{i} = compute_value(item_{i}, factor={i}) # step {i}" for i in range(200))
    body = f"## Script\n\n```python\ndef main():\n{code}\n```\n"
    chunks = chunks_of(body, count)
    assert len(chunks) > 3 and all(c.kind == "code" for c in chunks)
    lines = [line for c in chunks for line in c.text.split("\n")]
    assert lines == body.strip().split("\n")  # every line once, in order: no overlap in code
    assert not chunks[0].text.endswith("```python")  # the opening fence stays with the first code line
    assert chunks[-1].text.split("\n")[0] != "```"  # and the closing fence with the last
    assert_well_formed(body, chunks, count)


def test_a_long_list_is_split_between_items(count):
    items = "\n".join(f"- Item {i}: water the tomatoes {i} times and check the leaves for blight" for i in range(80))
    body = f"# Garden\n\n{items}\n"
    chunks = chunks_of(body, count)
    assert len(chunks) > 1
    for c in chunks:
        assert c.kind == "prose"
        body_lines = c.text.split("\n")
        # pieces start at an item (the first one at the heading) or with overlap inside an item
        assert body_lines[-1].endswith("blight")
    assert_well_formed(body, chunks, count)


def test_a_long_section_is_split_at_paragraphs_with_overlap(count):
    paras = [prose(6, seed=f"p{k}") for k in range(12)]
    body = "## Method\n\n" + "\n\n".join(paras) + "\n"
    chunks = chunks_of(body, count, overlap_tokens=32)
    assert len(chunks) >= 3
    assert all(c.heading_path == ("Method",) for c in chunks)
    for prev, nxt in zip(chunks, chunks[1:]):
        # the next piece starts with a tail of the previous one, ~32 tokens
        tail = max((k for k in range(1, len(nxt.text)) if prev.text.endswith(nxt.text[:k])), default=0)
        assert tail > 0, (prev.text[-80:], nxt.text[:80])
        assert 8 <= count(nxt.text[:tail]) <= 32
        assert nxt.line_start <= prev.line_end + 2
    assert_well_formed(body, chunks, count)


def test_overlap_is_whole_trailing_sentences_when_one_fits(count):
    sentences = [f"Step {i} is to fold the dough gently and wait a little." for i in range(60)]
    body = "## Method\n\n" + " ".join(sentences) + "\n"
    chunks = chunks_of(body, count, overlap_tokens=32)
    assert len(chunks) > 2
    for prev, nxt in zip(chunks, chunks[1:]):
        assert nxt.text.startswith("Step ") and nxt.text.endswith(".")
        first = nxt.text.split(". ")[0] + "."
        assert first in prev.text  # the overlap is the previous piece's last sentence(s)


def test_a_batch_counter_gives_identical_chunks(count):
    calls = []

    def batch(texts):
        calls.append(len(texts))
        return [count(t) for t in texts]

    body = "# A\n\n" + "\n\n".join(prose(9, seed=f"b{k}") for k in range(15)) + "\n\n## B\n\nShort.\n"
    assert chunks_of(body, count, count_tokens_batch=batch) == chunks_of(body, count)
    assert calls and max(calls) > 1


def test_overlap_can_be_turned_off(count):
    body = "## Method\n\n" + "\n\n".join(prose(6, seed=f"p{k}") for k in range(12)) + "\n"
    chunks = chunks_of(body, count, overlap_tokens=0)
    joined = "\n\n".join(c.text for c in chunks)
    assert joined == body.strip()


def test_one_huge_paragraph_is_split_at_sentences(count):
    body = prose(80) + "\n"
    chunks = chunks_of(body, count)
    assert len(chunks) > 2
    for c in chunks[:-1]:
        assert c.text.endswith(".")  # pieces end at a sentence end
    assert_well_formed(body, chunks, count)


def test_a_word_longer_than_the_window_is_cut_inside_the_word(count):
    body = "## Blob\n\n" + "x9." * 1000 + "\n"
    chunks = chunks_of(body, count)
    assert len(chunks) > 1
    assert "".join(c.text for c in chunks).replace("## Blob\n\n", "") == "x9." * 1000
    assert_well_formed(body, chunks, count)


def test_a_long_base64_data_uri_is_cut_quickly(count):
    blob = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg/+" * 2000
    body = f"## Picture\n\n![diagram](data:image/png;base64,{blob})\n\nAfter the image.\n"
    tokenized = TokenizedChars(count)
    chunks = chunks_of(body, tokenized)
    assert tokenized.chars <= 4 * len(body)  # linear work: each character is tokenized a bounded number of times
    assert len(chunks) > 10
    assert_well_formed(body, chunks, count)


def test_callouts_and_link_reference_lines_are_covered(count):
    body = "## Tips\n\n> [!tip] Proofing\n> Use the poke test.\n\n[ref]: https://example.com\n\nEnd.\n"
    [c] = chunks_of(body, count)
    assert c.text == body.strip()


# --------------------------------------------------------------------------- budget and lines


def test_the_title_and_heading_prefix_count_against_the_budget(count):
    long_title = "A rather long note title about growing heritage tomatoes in cold northern gardens"
    heading = "Why the greenhouse needs ventilation on sunny spring afternoons"
    body = f"# {heading}\n\n" + "\n\n".join(prose(5, seed=f"s{k}") for k in range(10)) + "\n"
    for max_tokens in (64, 128, 254):
        chunks = chunks_of(body, count, title=long_title, max_tokens=max_tokens, overlap_tokens=16)
        assert_well_formed(body, chunks, count, title=long_title, max_tokens=max_tokens)


def test_a_20k_token_note_is_fully_covered_with_every_chunk_within_budget(count):
    parts = []
    for s in range(30):
        parts.append(f"## Section {s}\n")
        parts.append(prose(20, seed=f"sec{s}") + "\n")
        parts.append("- " + "\n- ".join(prose(2, seed=f"li{s}{i}") for i in range(6)) + "\n")
        if s % 5 == 0:
            parts.append("```js\n" + "\n".join(f"const v{i} = load('{s}-{i}');" for i in range(40)) + "\n```\n")
        if s % 7 == 0:
            parts.append("| a | b |\n|---|---|\n" + "\n".join(f"| r{i} | {prose(1)} |" for i in range(30)) + "\n")
        parts.append(f"### Sub {s}\n\n" + prose(3, seed=f"sub{s}") + "\n")
    body = "\n".join(parts)
    assert count(body) > 20_000
    chunks = chunks_of(body, count, body_line=7)
    assert_well_formed(body, chunks, count, body_line=7)
    assert {c.kind for c in chunks} == {"prose", "code", "table"}
    assert chunks[0].line_start == 7


def test_line_numbers_are_file_lines_offset_by_body_line(count):
    body = "\n\nFirst para.\n\n## H\n\nSecond.\n"
    chunks = chunks_of(body, count, body_line=5)
    assert [(c.line_start, c.line_end) for c in chunks] == [(7, 7), (9, 11)]


def test_carriage_returns_count_as_line_breaks(count):
    body = "# A\r\n\r\ntext\r\n## B\rmore\r\n"
    chunks = chunks_of(body, count)
    assert [(c.text, c.line_start, c.line_end) for c in chunks] == [("# A\n\ntext", 1, 3), ("## B\nmore", 4, 5)]


def test_the_budget_holds_even_with_a_counter_that_is_not_additive(count):
    def lumpy(text: str) -> int:  # a whole can count more than the sum of its parts
        return len(text.split()) + (len(text) // 100) ** 2

    body = "## Long\n\n" + "\n\n".join(prose(8, seed=f"n{k}") for k in range(10)) + "\n\n" + "word " * 900 + "\n"
    chunks = chunk_note(body, title="Lumpy", count_tokens=lumpy, max_tokens=100, overlap_tokens=16)
    for c in chunks:
        assert c.token_count == lumpy(embed_text("Lumpy", c.heading_path, c.text)) <= 100
    assert_well_formed(body, chunks, lumpy, title="Lumpy", max_tokens=100)


def test_a_title_that_leaves_no_room_is_an_error(count):
    with pytest.raises(ValueError, match="title"):
        chunks_of(prose(40), count, title="word " * 200, max_tokens=128, overlap_tokens=8)


def test_chunking_is_deterministic(count):
    body = "# A\n\n" + "\n\n".join(prose(7, seed=f"d{k}") for k in range(20))
    assert chunks_of(body, count) == chunks_of(body, count)


# --------------------------------------------------------------------------- real vault


def _help_notes():
    assert HELP_VAULT.is_dir(), f"obsidian-help vault not found at {HELP_VAULT} (set CAIRN_SHARED)"
    from cairn.notes import parse_note

    for path in sorted(HELP_VAULT.rglob("*.md")):
        if ".obsidian" in path.parts:
            continue
        rel = path.relative_to(HELP_VAULT).as_posix()
        yield rel, parse_note(path.read_text(encoding="utf-8"), rel)


@pytest.mark.shared_data("vaults/obsidian-help")
def test_every_obsidian_help_note_is_fully_covered_within_budget(count):
    n_notes = n_chunks = 0
    for rel, note in _help_notes():
        tokenized = TokenizedChars(count)
        chunks = chunk_note(note.body, title=note.title, body_line=note.body_line, count_tokens=tokenized)
        assert tokenized.chars <= 4 * len(note.body) + 1000, rel  # linear work (+ the title and heading paths)
        if note.body.strip() and not all(re.fullmatch(r"\s*(#{1,6} .*)?", ln) for ln in note.body.split("\n")):
            assert chunks, rel
        # line numbers refer to the file; the body is the file from body_line on (comments blanked)
        try:
            assert_well_formed(note.body, chunks, count, title=note.title, body_line=note.body_line)
        except AssertionError as exc:
            raise AssertionError(f"{rel}: {exc}") from exc
        n_notes += 1
        n_chunks += len(chunks)
    assert n_notes > 100 and n_chunks > n_notes
