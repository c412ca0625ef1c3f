#!/usr/bin/env python3
"""A synthetic vault for the scale benchmark: perturbed copies of real vaults, ``--notes N`` notes in all.

Copy ``k`` of the sources (obsidian-hub and obsidian-help by default) goes to the folder ``c{k:02d}/<source folder
name>/``, every file's name given the suffix `` c{k:02d}`` (``Foo.md`` → ``Foo c03.md``, ``a.png`` → ``a c03.png``),
so each name is unique to its copy. In each note:

- a seeded, per-copy substitution of a share of the vocabulary (words of 3+ ASCII letters, case kept: ``Vault`` →
  ``Garden``) rewrites the body's words, heading texts and inline tags included (a tag stays a tag), so a passage of
  one copy is not the text of another's and nothing is shared through the embedding cache (the file name's suffix
  also goes into every chunk's title);
- left as written: the front-matter (its YAML, tags and aliases), fence lines (```` ```lang ````), URLs, HTML tags
  and entities, callout types (``[!note]``), block ids (``^id``);
- wikilinks, embeds and Markdown links that resolve in the source (:class:`cairn.notes.LinkResolver`, as Obsidian
  resolves them) are rewritten to the copied target: its new name when that resolves to it from the new note, else
  its vault path; a heading fragment and a link's shown text get the substitution the text they name got.

The last copy is partial (the first notes in path order) when N is not a multiple of the sources' notes; its links
to notes left out point to names that do not exist. Attachments are hard links to the source files (copies across
file systems). Usage: ``synth_vault.py OUT --notes 40000 [--source VAULT]... [--seed 19] [--share 0.3]``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

from cairn.notes import LinkResolver  # noqa: E402
from cairn.notes.frontmatter import load_frontmatter, split_frontmatter  # noqa: E402
from cairn.notes.links import BARE_URL_RE, MDLINK_RE, URL_SCHEME_RE, WIKILINK_RE, split_fragment  # noqa: E402
from cairn.notes.tags import frontmatter_tags_and_aliases  # noqa: E402
from cairn.vault import list_all_files  # noqa: E402

DEFAULT_SOURCES = ("obsidian-hub", "obsidian-help")
WORD_RE = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z]{3,}(?![A-Za-z0-9_])")
#: What is copied as written: fence lines, URLs, HTML tags, entities, callout types, block ids.
_KEEP = "|".join(
    [
        r"^[ \t]*(?:`{3,}|~{3,}).*$",
        BARE_URL_RE.pattern,
        r"</?[A-Za-z][^<>\n]*>",
        r"&#?[A-Za-z0-9]+;",
        r"\[![^\]\n]*\]",
        r"\^[A-Za-z0-9-]+[ \t]*$",
    ]
)
SPAN_RE = re.compile(f"(?P<wiki>{WIKILINK_RE.pattern})|(?P<md>{MDLINK_RE.pattern})|(?P<keep>{_KEEP})", re.M)


@dataclass
class Source:
    """One source vault: its files (vault-relative, notes and attachments), its notes' text and aliases, and the
    resolver of its links."""

    name: str
    root: Path
    files: list[str]
    notes: list[str]
    texts: dict[str, str]
    aliases: dict[str, list[str]]
    resolver: LinkResolver


def load_source(root: Path) -> Source:
    """Read the vault at ``root`` (the files Cairn would see: hidden ones left out)."""
    files = list(list_all_files(root))
    notes = [f for f in files if f.lower().endswith(".md")]
    texts, aliases = {}, {}
    for rel in notes:
        text = (root / rel).read_text(encoding="utf-8", errors="replace")  # universal newlines: LF
        texts[rel] = text
        yaml_text, _, _ = split_frontmatter(text)
        mapping = load_frontmatter(yaml_text, 2)[0] if yaml_text is not None else {}
        aliases[rel] = frontmatter_tags_and_aliases(mapping)[1]
    resolver = LinkResolver((f, aliases.get(f, [])) for f in files)
    return Source(root.name, root, files, notes, texts, aliases, resolver)


def vocabulary(sources: Sequence[Source]) -> list[str]:
    """The distinct lower-case words (3+ ASCII letters) of the sources' notes, sorted."""
    words: set[str] = set()
    for source in sources:
        for text in source.texts.values():
            words.update(w.lower() for w in WORD_RE.findall(text))
    return sorted(words)


class Substitution:
    """A word map for one copy: each word of ``vocab`` is replaced, with probability ``share``, by another word of
    ``vocab`` drawn with ``random.Random(seed)``; :meth:`text` applies it keeping each word's case pattern and counts
    the words seen and replaced."""

    def __init__(self, vocab: Sequence[str], share: float, seed: str) -> None:
        rng = random.Random(seed)
        self.mapping: dict[str, str] = {}
        for word in vocab:
            if rng.random() < share:
                other = vocab[rng.randrange(len(vocab))]
                if other != word:
                    self.mapping[word] = other
        self.words = self.replaced = 0

    def word(self, word: str) -> str:
        self.words += 1
        other = self.mapping.get(word.lower())
        if other is None:
            return word
        self.replaced += 1
        if len(word) > 1 and word.isupper():
            return other.upper()
        return other[0].upper() + other[1:] if word[0].isupper() else other

    def text(self, text: str) -> str:
        return WORD_RE.sub(lambda m: self.word(m.group()), text)


def copy_tag(k: int) -> str:
    return f"c{k:02d}"


def renamed(rel: str, tag: str) -> str:
    """``folder/Name.ext`` → ``folder/Name TAG.ext`` (``Name TAG`` without an extension)."""
    folder, slash, name = rel.rpartition("/")
    stem, dot, ext = name.rpartition(".")
    new = f"{stem} {tag}.{ext}" if dot and stem else f"{name} {tag}"
    return folder + slash + new


def _strip_md(path: str) -> str:
    return path[:-3] if path.lower().endswith(".md") else path


@dataclass
class Stats:
    """What the generator did: counts over every copy, and the seconds it took."""

    notes: int = 0
    copies: int = 0
    attachments: int = 0
    words: int = 0
    words_replaced: int = 0
    lines: int = 0
    lines_changed: int = 0
    links: int = 0
    links_rewritten: int = 0
    seconds: float = 0.0
    folders: list[str] = field(default_factory=list)

    def lines_changed_share(self) -> float:
        return self.lines_changed / max(1, self.lines)

    def words_replaced_share(self) -> float:
        return self.words_replaced / max(1, self.words)


class Copy:
    """Copy number ``k`` of the sources: the new path of each copied file and the rewriting of one note."""

    def __init__(self, k: int, sources: Sequence[Source], notes: set[tuple[str, str]], subst: Substitution) -> None:
        self.tag = copy_tag(k)
        self.subst = subst
        self.new_path: dict[tuple[str, str], str] = {}
        entries: list[tuple[str, list[str]]] = []
        for source in sources:
            for rel in source.files:
                is_note = rel.lower().endswith(".md")
                if is_note and (source.name, rel) not in notes:
                    continue
                new = f"{self.tag}/{source.name}/{renamed(rel, self.tag)}"
                self.new_path[(source.name, rel)] = new
                entries.append((new, source.aliases.get(rel, []) if is_note else []))
        self.resolver = LinkResolver(entries)
        self.links = self.rewritten = 0

    def target(self, source: Source, target: str, rel: str) -> str | None:
        """The copied path of what ``target`` (written in ``rel``) resolves to in ``source``; a name of the copy for
        a note the copy left out; None when it resolves to nothing."""
        found = source.resolver.resolve(target, rel)
        if found is None:
            return None
        return self.new_path.get((source.name, found), f"{self.tag}/{source.name}/{renamed(found, self.tag)}")

    def link_form(self, new_target: str, new_rel: str) -> str:
        """How a wikilink in ``new_rel`` names ``new_target``: its bare name when that resolves to it, else its path
        (``.md`` left out)."""
        bare = _strip_md(new_target.rsplit("/", 1)[-1])
        return bare if self.resolver.resolve(bare, new_rel) == new_target else _strip_md(new_target)

    def wikilink(self, source: Source, rel: str, new_rel: str, link: str) -> str:
        m = WIKILINK_RE.fullmatch(link)
        assert m is not None
        bang, inner = m.group(1), m.group(2)
        ref, bar, shown = inner.partition("|")
        escape = "\\" if bar and ref.endswith("\\") else ""  # `[[a\|b]]` inside a table
        ref = ref[: len(ref) - len(escape)]
        target, hash_, frag = ref.partition("#")
        self.links += 1
        new_target = target
        if target.strip():
            found = self.target(source, target.strip(), rel)
            if found is not None:
                new_target = self.link_form(found, new_rel)
                self.rewritten += 1
        if hash_ and not frag.strip().startswith("^"):
            frag = self.subst.text(frag)
        return f"{bang}[[{new_target}{hash_}{frag}{escape}{bar}{self.subst.text(shown)}]]"

    def mdlink(self, source: Source, rel: str, link: str) -> str:
        m = MDLINK_RE.fullmatch(link)
        assert m is not None
        bang, text, dest = m.group(1), m.group(2), m.group(3)
        plain = dest[1:-1] if dest.startswith("<") and dest.endswith(">") else dest
        if not plain.strip() or URL_SCHEME_RE.match(plain) or "://" in plain or plain.startswith("//"):
            return f"{bang}[{self.subst.text(text)}]{link[m.end(2) + 1 :]}"  # a URL: not a link to a file
        self.links += 1
        target, heading, block = split_fragment(unquote(plain))
        found = self.target(source, target, rel) if target else None
        if found is None:
            return f"{bang}[{self.subst.text(text)}]{link[m.end(2) + 1 :]}"
        self.rewritten += 1
        frag = f"#^{block}" if block else (f"#{quote(self.subst.text(heading))}" if heading else "")
        return f"{bang}[{self.subst.text(text)}]({quote(found, safe='/')}{frag})"

    def body(self, source: Source, rel: str, body: str) -> str:
        """``body`` with its words substituted and its links rewritten (see the module docstring)."""
        new_rel = self.new_path[(source.name, rel)]
        out: list[str] = []
        pos = 0
        for m in SPAN_RE.finditer(body):
            out.append(self.subst.text(body[pos : m.start()]))
            if m.group("wiki") is not None:
                out.append(self.wikilink(source, rel, new_rel, m.group()))
            elif m.group("md") is not None:
                out.append(self.mdlink(source, rel, m.group()))
            else:
                out.append(m.group())
            pos = m.end()
        out.append(self.subst.text(body[pos:]))
        return "".join(out)


def _count_lines(stats: Stats, before: str, after: str) -> None:
    for old, new in zip(before.split("\n"), after.split("\n")):
        if old.strip():
            stats.lines += 1
            stats.lines_changed += old != new


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def write_copy(out: Path, copy: Copy, sources: Sequence[Source], stats: Stats) -> None:
    """Write every file of ``copy`` under ``out``."""
    by_name = {s.name: s for s in sources}
    for (name, rel), new in copy.new_path.items():
        source = by_name[name]
        dst = out / new
        dst.parent.mkdir(parents=True, exist_ok=True)
        if rel not in source.texts:
            _link_or_copy(source.root / rel, dst)
            stats.attachments += 1
            continue
        text = source.texts[rel]
        yaml_text, body, _ = split_frontmatter(text)
        head = text[: len(text) - len(body)] if yaml_text is not None else ""
        new_body = copy.body(source, rel, body)
        _count_lines(stats, body, new_body)
        dst.write_text(head + new_body, encoding="utf-8")
        stats.notes += 1


def generate(out: Path, notes: int, sources: Sequence[Path], *, seed: int = 19, share: float = 0.3, log=None) -> Stats:
    """Write a vault of ``notes`` notes under ``out`` (created; must not exist or be empty) from copies of the
    vaults ``sources``. Raises ValueError when the sources hold no note."""
    started = time.perf_counter()
    loaded = [load_source(Path(s)) for s in sources]
    per_copy = [(s.name, rel) for s in loaded for rel in s.notes]
    if not per_copy:
        raise ValueError(f"no notes in {', '.join(map(str, sources))}")
    vocab = vocabulary(loaded)
    out.mkdir(parents=True, exist_ok=True)
    stats = Stats()
    k = 0
    while stats.notes < notes:
        chosen = set(per_copy[: notes - stats.notes])
        subst = Substitution(vocab, share, f"{seed}:{k}")
        copy = Copy(k, loaded, chosen, subst)
        write_copy(out, copy, loaded, stats)
        stats.words += subst.words
        stats.words_replaced += subst.replaced
        stats.links += copy.links
        stats.links_rewritten += copy.rewritten
        stats.folders.append(copy.tag)
        k += 1
        if log is not None:
            log(f"  copy {copy.tag}: {stats.notes} notes so far, {time.perf_counter() - started:.0f} s")
    stats.copies = k
    stats.seconds = time.perf_counter() - started
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--notes", type=int, default=40000)
    ap.add_argument("--source", type=Path, action="append", help="a source vault (default: obsidian-hub and -help)")
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--share", type=float, default=0.3, help="share of the vocabulary replaced in each copy")
    args = ap.parse_args(argv)
    sources = args.source or [REPO.parent / "shared" / "vaults" / name for name in DEFAULT_SOURCES]
    stats = generate(args.out, args.notes, sources, seed=args.seed, share=args.share, log=print)
    print(
        f"{stats.notes} notes in {stats.copies} copies, {stats.attachments} attachments, in {stats.seconds:.1f} s; "
        f"words replaced {stats.words_replaced_share():.0%}, lines changed {stats.lines_changed_share():.0%}, "
        f"links resolved in the source and rewritten {stats.links_rewritten} of {stats.links}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
