"""The docs hold together: every relative link in README.md and docs/*.md (text and images) names a file of the
repository, and a link with an anchor names a heading of that page, slugged as GitHub renders it. Links are read
with markdown-it-py (CommonMark), so a `[x](y)` inside code is not a link. The README is the front page and stays
one: it keeps the quick start's two commands and a link to each docs page.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MD = MarkdownIt("commonmark").enable("table")


def _tokens(page: Path) -> list:
    return MD.parse(page.read_text(encoding="utf-8"))


def _links(page: Path) -> list[str]:
    """Every link and image target of ``page``, in order."""
    out = []
    for token in _tokens(page):
        for child in token.children or ():
            if child.type == "link_open":
                out.append(str(child.attrs["href"]))
            elif child.type == "image":
                out.append(str(child.attrs["src"]))
    return out


def github_slug(text: str) -> str:
    """A heading's anchor as GitHub makes it (github-slugger): lower case, every character that is not a letter,
    digit, space, ``-`` or ``_`` dropped, spaces made ``-``."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings; a repeated slug gets ``-1``, ``-2``… as on GitHub."""
    seen: dict[str, int] = {}
    tokens = _tokens(page)
    for i, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        text = "".join(c.content for c in tokens[i + 1].children or () if c.type in ("text", "code_inline"))
        slug = github_slug(text)
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def _relative(target: str) -> bool:
    parts = urlsplit(target)
    return not parts.scheme and not parts.netloc


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_names_a_file_and_a_heading_that_exist(page):
    broken = []
    for target in filter(_relative, _links(page)):
        parts = urlsplit(target)
        dest = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif parts.fragment and dest.suffix == ".md" and parts.fragment not in anchors(dest):
            broken.append(f"{target}: no heading #{parts.fragment} in {dest.relative_to(REPO)}")
        elif dest != page and REPO not in dest.parents:
            broken.append(f"{target}: outside the repository")
    assert broken == []


def test_the_slugs_follow_github():
    assert github_slug("Excluding files and folders (ignore)") == "excluding-files-and-folders-ignore"
    assert github_slug("The policy: who is local, which tools") == "the-policy-who-is-local-which-tools"
    assert github_slug("Language model (optional)") == "language-model-optional"


def test_the_readme_is_a_front_page_that_links_every_docs_page():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "make run " in text and "make test " in text  # the quick start, stated as the Makefile spells it
    linked = {urlsplit(t).path for t in _links(REPO / "README.md") if _relative(t)}
    assert [p.name for p in PAGES[1:] if f"docs/{p.name}" not in linked] == []
