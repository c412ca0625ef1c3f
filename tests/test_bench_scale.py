"""The scale benchmark's synthetic vault (tests/bench/synth_vault.py), made from the sample vault: N notes in
per-copy folders, words perturbed per copy, links resolving inside their own copy, front-matter as it was."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

from synth_vault import generate, load_source  # noqa: E402

from cairn.notes import LinkResolver, parse_note  # noqa: E402
from cairn.notes.tags import frontmatter_tags_and_aliases, inline_tags  # noqa: E402
from cairn.vault import list_all_files  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "vault"
NOTES = 40  # the sample vault has 17: two whole copies and a partial third


@pytest.fixture(scope="module")
def vault(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "vault"
    generate(out, NOTES, [SAMPLE], seed=5, share=0.3)
    return out


def _notes(root: Path) -> dict[str, str]:
    return {rel: (root / rel).read_text(encoding="utf-8") for rel in list_all_files(root) if rel.endswith(".md")}


def _words(body: str) -> list[str]:
    """The words of ``body`` outside its wikilinks (a rewritten link is not a perturbed word)."""
    return re.findall(r"[A-Za-z]{3,}", re.sub(r"\[\[[^\]]*\]\]", " ", body))


def _source_of(rel: str) -> str:
    """``c01/vault/Kitchen/Sourdough c01.md`` → ``Kitchen/Sourdough.md``."""
    copy, _, inner = rel.split("/", 2)
    return inner.replace(f" {copy}.md", ".md")


def test_the_vault_has_the_notes_asked_for_in_per_copy_folders(vault: Path) -> None:
    notes = _notes(vault)
    assert len(notes) == NOTES
    copies = sorted({rel.split("/", 1)[0] for rel in notes})
    assert copies == ["c00", "c01", "c02"]
    source = set(load_source(SAMPLE).notes)
    for rel in notes:
        copy = rel.split("/", 1)[0]
        assert rel.startswith(f"{copy}/vault/") and rel.endswith(f" {copy}.md")
        assert _source_of(rel) in source
    titles = [parse_note(text, rel).title for rel, text in notes.items()]
    assert len(set(titles)) == NOTES  # every note's name is its copy's own


def test_each_copy_perturbs_the_words_differently(vault: Path) -> None:
    notes = _notes(vault)
    source = load_source(SAMPLE)
    bodies: dict[str, set[str]] = {}
    words = replaced = 0
    for rel, text in notes.items():
        original = parse_note(source.texts[_source_of(rel)], _source_of(rel)).body
        body = parse_note(text, rel).body
        if len(re.findall(r"[A-Za-z]{3,}", original)) >= 20:
            assert body != original, rel
            old, new = _words(original), _words(body)
            assert len(old) == len(new)
            words += len(old)
            replaced += sum(a != b for a, b in zip(old, new))
        bodies.setdefault(_source_of(rel), set()).add(body)
    assert 0.15 < replaced / words < 0.5  # a share of the words, not all of them
    for src, seen in bodies.items():
        copies = sum(1 for rel in notes if _source_of(rel) == src)
        if len(re.findall(r"[A-Za-z]{3,}", source.texts[src])) >= 20:
            assert len(seen) == copies, src  # no two copies of a note have the same text


def test_links_resolve_inside_their_own_copy(vault: Path) -> None:
    notes = _notes(vault)
    source = load_source(SAMPLE)
    parsed = {rel: parse_note(text, rel) for rel, text in notes.items()}
    resolver = LinkResolver((rel, parsed[rel].aliases if rel in parsed else ()) for rel in list_all_files(vault))
    checked = headings = 0
    for rel, note in parsed.items():
        copy = rel.split("/", 1)[0]
        src = _source_of(rel)
        wanted = [source.resolver.resolve(link.target, src) for link in parse_note(source.texts[src], src).links]
        assert len(note.links) == len(wanted)
        for link, target in zip(note.links, wanted):
            if target is None:
                continue
            copied = f"{copy}/vault/{target[:-3]} {copy}.md"
            found = resolver.resolve(link.target, rel)
            if copied in notes:
                assert found == copied, (rel, link)
                checked += 1
                if link.heading:
                    assert link.heading in {h.lstrip("#").strip() for h in notes[copied].splitlines() if h[:1] == "#"}
                    headings += 1
            else:  # a note the partial last copy left out: never another copy's note
                assert found is None, (rel, link)
    assert checked > 60 and headings >= 4


def test_front_matter_parses_as_in_the_source(vault: Path) -> None:
    source = load_source(SAMPLE)
    with_front_matter = 0
    for rel, text in _notes(vault).items():
        note = parse_note(text, rel)
        original = parse_note(source.texts[_source_of(rel)], _source_of(rel))
        assert note.frontmatter_error is None
        assert note.frontmatter == original.frontmatter
        assert note.aliases == original.aliases
        assert frontmatter_tags_and_aliases(original.frontmatter)[0] <= set(note.tags)
        assert bool(inline_tags(note.body)) == bool(inline_tags(original.body))  # a perturbed tag is still a tag
        with_front_matter += bool(note.frontmatter)
    assert with_front_matter >= 10
