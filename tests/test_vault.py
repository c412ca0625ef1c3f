"""Tests for cairn.vault: scanning, ignore rules, symlinks, reading notes, path containment."""

from __future__ import annotations

import hashlib
import os
import time
import unicodedata
from pathlib import Path

import pytest

from cairn.errors import FileOpenError, NoteReadError, NotFoundError, PathOutsideVaultError
from cairn.notes import LinkResolver, parse_note
from cairn.vault import (
    IgnoreRules,
    VaultFile,
    duplicate_reason,
    list_all_files,
    normalise_rel_path,
    paths_under,
    read_note_text,
    resolve_in_vault,
    scan_vault,
    stat_hint,
)

REPO = Path(__file__).resolve().parents[1]
SHARED_VAULTS = Path(os.environ.get("CAIRN_SHARED", REPO.parent / "shared")) / "vaults"
MB = 1024 * 1024


def write(root: Path, rel: str, content: str | bytes = "x") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def paths(root: Path, ignore=(), **kw) -> list[str]:
    return [f.path for f in scan_vault(root, ignore, **kw)]


# ----------------------------------------------------------------- scanning


def test_scan_yields_markdown_files_with_metadata(tmp_path):
    p = write(tmp_path, "folder/Note.md", "hello")
    write(tmp_path, "image.png", b"\x89PNG")
    files = list(scan_vault(tmp_path))
    assert files == [VaultFile("folder/Note.md", p, p.stat().st_mtime_ns, 5, "markdown")]


def test_scan_order_is_sorted_by_vault_relative_path(tmp_path):
    for rel in ["b.md", "a/z.md", "a.md", "a b.md", "A/c.md", "a-b/x.md", "ä.md"]:
        write(tmp_path, rel)
    result = paths(tmp_path)
    assert result == sorted(result)
    assert len(result) == 7


def test_scan_extension_match_is_case_insensitive_and_extensions_are_configurable(tmp_path):
    write(tmp_path, "Upper.MD")
    write(tmp_path, "doc.pdf", b"%PDF")
    write(tmp_path, "board.canvas", "{}")
    assert paths(tmp_path) == ["Upper.MD"]
    kinds = {f.path: f.kind for f in scan_vault(tmp_path, extensions=(".md", ".pdf", "canvas"))}
    assert kinds == {"Upper.MD": "markdown", "doc.pdf": "pdf", "board.canvas": "canvas"}


def test_scan_skips_obsidian_trash_git_and_any_hidden_file_or_folder(tmp_path):
    write(tmp_path, "keep.md")
    write(tmp_path, ".obsidian/workspace.md")
    write(tmp_path, ".trash/deleted.md")
    write(tmp_path, ".git/x.md")
    write(tmp_path, "sub/.hidden/x.md")
    write(tmp_path, "sub/.dotfile.md")
    write(tmp_path, "sub/visible.md")
    assert paths(tmp_path) == ["keep.md", "sub/visible.md"]


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        (
            [],
            [
                "Notes/a.md",
                "Templates/t.md",
                "archive/2020/old.md",
                "archive/top.md",
                "d.excalidraw.md",
                "x/Templates/n.md",
            ],
        ),
        (["Templates/"], ["Notes/a.md", "archive/2020/old.md", "archive/top.md", "d.excalidraw.md"]),
        (
            ["/Templates/"],
            ["Notes/a.md", "archive/2020/old.md", "archive/top.md", "d.excalidraw.md", "x/Templates/n.md"],
        ),
        (
            ["*.excalidraw.md"],
            ["Notes/a.md", "Templates/t.md", "archive/2020/old.md", "archive/top.md", "x/Templates/n.md"],
        ),
        (["archive/**"], ["Notes/a.md", "Templates/t.md", "d.excalidraw.md", "x/Templates/n.md"]),
        (["archive/*"], ["Notes/a.md", "Templates/t.md", "d.excalidraw.md", "x/Templates/n.md"]),
        (
            ["archive/*.md"],
            ["Notes/a.md", "Templates/t.md", "archive/2020/old.md", "d.excalidraw.md", "x/Templates/n.md"],
        ),
        (["**/old.md"], ["Notes/a.md", "Templates/t.md", "archive/top.md", "d.excalidraw.md", "x/Templates/n.md"]),
        (
            ["archive/**/old.md"],
            ["Notes/a.md", "Templates/t.md", "archive/top.md", "d.excalidraw.md", "x/Templates/n.md"],
        ),
        (["archive", "!archive/top.md"], ["Notes/a.md", "Templates/t.md", "d.excalidraw.md", "x/Templates/n.md"]),
        (["*.md", "!Notes/a.md"], ["Notes/a.md"]),
        (
            ["# a comment", "", "?otes/"],
            ["Templates/t.md", "archive/2020/old.md", "archive/top.md", "d.excalidraw.md", "x/Templates/n.md"],
        ),
        (["[NT]*/"], ["archive/2020/old.md", "archive/top.md", "d.excalidraw.md"]),
        (
            ["notes/"],
            [
                "Notes/a.md",
                "Templates/t.md",
                "archive/2020/old.md",
                "archive/top.md",
                "d.excalidraw.md",
                "x/Templates/n.md",
            ],
        ),
    ],
)
def test_ignore_globs_are_gitignore_style(tmp_path, patterns, expected):
    for rel in [
        "Notes/a.md",
        "Templates/t.md",
        "x/Templates/n.md",
        "archive/top.md",
        "archive/2020/old.md",
        "d.excalidraw.md",
    ]:
        write(tmp_path, rel)
    assert paths(tmp_path, patterns) == expected


def test_trailing_slash_pattern_matches_folders_only(tmp_path):
    write(tmp_path, "Templates")  # a file named like the folder pattern
    rules = IgnoreRules(["Templates/"])
    assert rules.ignored("Templates", is_dir=True)
    assert not rules.ignored("Templates", is_dir=False)
    assert list(list_all_files(tmp_path, ["Templates/"])) == ["Templates"]


def test_a_symlinked_folder_inside_the_vault_is_not_followed_so_its_notes_appear_once_and_loops_end(tmp_path):
    write(tmp_path, "real/a.md")
    os.symlink(tmp_path / "real", tmp_path / "zlink")  # same folder reached twice
    os.symlink(tmp_path, tmp_path / "real/loop")  # a loop back to the root
    os.symlink("..", tmp_path / "real/up")  # relative loop
    assert paths(tmp_path) == ["real/a.md"]


def test_a_folder_symlink_that_sorts_first_does_not_take_the_notes_away_from_their_real_path(tmp_path):
    # Changed deliberately: the scan used to follow in-vault symlinks once and index "alias/n.md" (the real folder
    # was then "already scanned"), so a policy withholding the folder "store" did not cover the notes.
    vault = tmp_path / "vault"
    write(vault, "store/deep/n.md")
    os.symlink(vault / "store/deep", vault / "alias")
    assert paths(vault) == ["store/deep/n.md"]
    assert list(list_all_files(vault)) == ["store/deep/n.md"]


def test_symlink_pointing_outside_the_vault_is_skipped(tmp_path):
    vault = tmp_path / "vault"
    outside = tmp_path / "outside"
    write(vault, "in.md")
    write(outside, "secret.md")
    os.symlink(outside, vault / "linkdir")
    os.symlink(outside / "secret.md", vault / "linkfile.md")
    assert paths(vault) == ["in.md"]
    assert list(list_all_files(vault)) == ["in.md"]


def test_a_file_symlink_inside_the_vault_and_a_broken_one_are_skipped_and_logged(tmp_path, caplog):
    # Changed deliberately: "b.md -> a.md" used to be indexed as a second note with a's text (an alias path that
    # escapes withhold.folders when a.md lies in a withheld folder).
    write(tmp_path, "a.md", "abc")
    os.symlink(tmp_path / "a.md", tmp_path / "b.md")
    os.symlink(tmp_path / "missing.md", tmp_path / "c.md")
    with caplog.at_level("INFO", logger="cairn.vault"):
        files = list(scan_vault(tmp_path))
    assert [f.path for f in files] == ["a.md"]
    assert "Skipping 'b.md': symlink to 'a.md' inside the vault" in caplog.text
    assert "Skipping 'c.md': broken symlink" in caplog.text


def test_vault_root_reached_through_a_symlink(tmp_path):
    write(tmp_path / "real", "n.md")
    os.symlink(tmp_path / "real", tmp_path / "linkroot")
    assert paths(tmp_path / "linkroot") == ["n.md"]


def test_nfd_file_names_are_yielded_as_nfc_and_stay_readable(tmp_path):
    nfd = unicodedata.normalize("NFD", "Café/Résumé.md")
    write(tmp_path, nfd, "#tag")
    files = list(scan_vault(tmp_path))
    assert [f.path for f in files] == [unicodedata.normalize("NFC", "Café/Résumé.md")]
    assert files[0].path != nfd
    text, _ = read_note_text(files[0].abs_path, max_bytes=MB)
    assert text == "#tag"
    assert resolve_in_vault(tmp_path, files[0].path).read_text() == "#tag"


def test_scan_of_missing_root_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(scan_vault(tmp_path / "nope"))


def test_list_all_files_includes_attachments_and_feeds_link_resolver(tmp_path):
    write(tmp_path, "notes/a.md", "![[pic.png]] [[b]]")
    write(tmp_path, "att/pic.png", b"\x89PNG\x00")
    write(tmp_path, "b.md")
    write(tmp_path, ".obsidian/app.json", "{}")
    all_files = list(list_all_files(tmp_path))
    assert all_files == ["att/pic.png", "b.md", "notes/a.md"]
    resolver = LinkResolver((p, ()) for p in all_files)
    note = parse_note((tmp_path / "notes/a.md").read_text(), "notes/a.md")
    assert [resolver.resolve(link.target, "notes/a.md") for link in note.links] == ["att/pic.png", "b.md"]


def test_scan_reports_mtime_changes(tmp_path):
    p = write(tmp_path, "a.md", "one")
    first = next(scan_vault(tmp_path))
    later = time.time() + 10
    os.utime(p, (later, later))
    second = next(scan_vault(tmp_path))
    assert second.mtime_ns != first.mtime_ns


# ---------------------------------------------- hinted paths: the scan's rules


NFC_NAME = unicodedata.normalize("NFC", "Résumé.md")
NFD_NAME = unicodedata.normalize("NFD", "Résumé.md")


def tricky_vault(tmp_path: Path) -> Path:
    """A vault holding each thing the scan has a rule for (symlinks in and out, loops, a folder named like a
    note, ignored and hidden places, names equal in NFC, names differing only in case, a fifo)."""
    vault, outside = tmp_path / "vault", tmp_path / "outside"
    write(outside, "secret.md", "outside")
    write(outside, "deck.pdf", b"%PDF-1.4")
    write(vault, "inside.md")
    write(vault, "Private/salary.md")
    write(vault, "Projects.md/plan.md")
    write(vault, "Projects.md/deep/b.md")
    write(vault, "Projects.md/deep/slides.pdf", b"%PDF-1.4")
    write(vault, "Templates/t.md")
    write(vault, ".hidden/h.md")
    write(vault, NFC_NAME, "composed")
    write(vault, NFD_NAME, "decomposed")
    write(vault, unicodedata.normalize("NFC", "Café/a.md"))
    write(vault, unicodedata.normalize("NFD", "Café/a.md"), "other a")
    write(vault, unicodedata.normalize("NFD", "Café/b.md"))
    write(vault, "Case/Note.md")
    write(vault, "Case/note.md")
    os.symlink(outside, vault / "ext")
    os.symlink(outside / "secret.md", vault / "out.md")
    os.symlink("Private", vault / "Attic")
    os.symlink("Private/salary.md", vault / "zz-alias.md")
    os.symlink("..", vault / "Projects.md/deep/up")
    os.symlink("../Projects.md", vault / "Case/again")
    os.mkfifo(vault / "pipe.md")
    return vault


def every_rel_path(vault: Path) -> set[str]:
    """Every vault-relative path on disk (NFC), symlinks and hidden ones included, without following symlinks."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(vault):
        for name in dirnames + filenames:
            out.add(unicodedata.normalize("NFC", (Path(dirpath) / name).relative_to(vault).as_posix()))
    return out


@pytest.mark.parametrize("extensions", [(".md",), (".pdf",)])
def test_a_hinted_path_yields_exactly_what_the_full_scan_yields_at_or_under_it(tmp_path, extensions):
    vault = tricky_vault(tmp_path)
    rules = IgnoreRules(["Templates/"])
    scanned = list(scan_vault(vault, ["Templates/"], extensions=extensions))
    rels = every_rel_path(vault) | {"Projects.md/deep/up/inside.md", "ext/secret.md", "Attic/salary.md", "gone.md"}
    assert {"ext", "Attic", "Projects.md", "Case/again"} <= rels
    for rel in sorted(rels):
        expected = [
            f
            for f in scanned
            if unicodedata.normalize("NFC", f.path) == rel or unicodedata.normalize("NFC", f.path).startswith(rel + "/")
        ]
        assert stat_hint(vault, rel, rules, extensions=extensions) == expected, rel


def test_the_scan_of_the_tricky_vault_reads_each_real_file_once_under_its_real_path(tmp_path):
    vault = tricky_vault(tmp_path)
    got = [(f.path, f.duplicate_of) for f in scan_vault(vault, ["Templates/"])]
    cafe_a = unicodedata.normalize("NFC", "Café/a.md")
    assert got == [
        (cafe_a, None),
        (unicodedata.normalize("NFD", "Café/a.md"), cafe_a),
        (unicodedata.normalize("NFC", "Café/b.md"), None),
        ("Case/Note.md", None),
        ("Case/note.md", None),
        ("Private/salary.md", None),
        ("Projects.md/deep/b.md", None),
        ("Projects.md/plan.md", None),
        (NFC_NAME, None),
        (NFD_NAME, NFC_NAME),
        ("inside.md", None),
    ]
    assert [f.path for f in scan_vault(vault, extensions=(".pdf",))] == ["Projects.md/deep/slides.pdf"]


def test_a_hint_for_a_folder_named_like_a_note_yields_the_notes_under_it(tmp_path):
    vault = tricky_vault(tmp_path)
    assert [f.path for f in stat_hint(vault, "Projects.md", IgnoreRules())] == [
        "Projects.md/deep/b.md",
        "Projects.md/plan.md",
    ]


@pytest.mark.parametrize("order", ["nfc first", "nfd first"])
def test_two_files_equal_in_nfc_give_the_composed_one_whatever_the_order_and_report_the_other(tmp_path, order):
    names = [NFC_NAME, NFD_NAME] if order == "nfc first" else [NFD_NAME, NFC_NAME]
    for name in names:
        write(tmp_path, name, name)
    files = list(scan_vault(tmp_path))
    assert [(f.path, f.duplicate_of) for f in files] == [(NFC_NAME, None), (NFD_NAME, NFC_NAME)]
    assert files[0].abs_path.read_text() == NFC_NAME  # the composed spelling's own bytes
    assert files[1].abs_path.read_text() == NFD_NAME
    assert list(list_all_files(tmp_path)) == [NFC_NAME]
    assert NFC_NAME in duplicate_reason(files[1]) and "NFD" in duplicate_reason(files[1])


def test_two_non_nfc_spellings_of_one_name_give_the_one_sorting_first_and_stay_stable(tmp_path):
    # "ḍ̇" (d + dot below + dot above) can be decomposed in two orders that are both not NFC.
    a = "d\u0323\u0307.md"
    b = "d\u0307\u0323.md"
    assert unicodedata.normalize("NFC", a) == unicodedata.normalize("NFC", b) and a != b
    write(tmp_path, b, "b")
    write(tmp_path, a, "a")
    nfc = unicodedata.normalize("NFC", a)
    runs = [[(f.path, f.duplicate_of) for f in scan_vault(tmp_path)] for _ in range(3)]
    assert runs[0] == runs[1] == runs[2] == [(nfc, None), (a, nfc)]  # b sorts first: U+0307 < U+0323


def test_paths_under_finds_the_indexed_paths_at_or_under_a_hint_in_nfc(tmp_path):
    known = [
        "Projects.md",
        "Projects.md/plan.md",
        "Projects.md/deep/b.md",
        "Projects.mdx",
        "Projects.md-old/c.md",
        "Projects",
        NFC_NAME,
        NFD_NAME,
        "other.md",
    ]
    assert paths_under(known, ["Projects.md"]) == {"Projects.md", "Projects.md/plan.md", "Projects.md/deep/b.md"}
    assert paths_under(known, [NFC_NAME]) == {NFC_NAME, NFD_NAME}
    assert paths_under(known, ["nothing", "other.md"]) == {"other.md"}
    assert paths_under(known, []) == set()


# ------------------------------------------------------------------ reading


def test_read_returns_text_and_sha256_of_raw_bytes(tmp_path):
    raw = "# Title\nCafé ☕\n".encode()
    p = write(tmp_path, "n.md", raw)
    text, digest = read_note_text(p, max_bytes=MB)
    assert text == "# Title\nCafé ☕\n"
    assert digest == hashlib.sha256(raw).hexdigest()


def test_read_strips_bom_but_hashes_raw_bytes(tmp_path):
    raw = b"\xef\xbb\xbf---\ntags: [x]\n---\nbody"
    p = write(tmp_path, "n.md", raw)
    text, digest = read_note_text(p, max_bytes=MB)
    assert text == "---\ntags: [x]\n---\nbody"
    assert digest == hashlib.sha256(raw).hexdigest()
    assert parse_note(text, "n.md").tags == ("x",)


def test_read_refuses_too_large_file_with_sizes_in_message(tmp_path):
    p = write(tmp_path, "big.md", b"a" * int(7.2 * MB))
    with pytest.raises(NoteReadError) as info:
        read_note_text(p, max_bytes=5 * MB)
    assert "file is 7.2 MB, limit 5 MB" in info.value.message
    assert info.value.code == "note_unreadable"


def test_read_accepts_file_exactly_at_the_limit(tmp_path):
    p = write(tmp_path, "edge.md", b"a" * 100)
    assert read_note_text(p, max_bytes=100)[0] == "a" * 100
    with pytest.raises(NoteReadError, match="file is 101 bytes, limit 100 bytes"):
        read_note_text(write(tmp_path, "over.md", b"a" * 101), max_bytes=100)


def test_read_refuses_binary_file(tmp_path):
    p = write(tmp_path, "bin.md", b"PK\x03\x04\x00\x00garbage")
    with pytest.raises(NoteReadError, match=r"binary \(NUL byte at offset 4\)"):
        read_note_text(p, max_bytes=MB)


def test_read_refuses_utf16_naming_it(tmp_path):
    p = write(tmp_path, "u16.md", "hello".encode("utf-16"))
    with pytest.raises(NoteReadError, match="UTF-16"):
        read_note_text(p, max_bytes=MB)


def test_read_refuses_latin1_with_byte_offset_and_line(tmp_path):
    p = write(tmp_path, "latin.md", "line one\nCaf\u00e9\n".encode("latin-1"))
    with pytest.raises(NoteReadError) as info:
        read_note_text(p, max_bytes=MB)
    assert "not valid UTF-8" in info.value.message
    assert "byte 0xE9 at offset 12 (line 2)" in info.value.message


def test_a_file_that_cannot_be_opened_now_raises_file_open_error_not_a_skip_reason(tmp_path):
    # FileOpenError (a NoteReadError): the indexer keeps the note's indexed version and looks again later
    with pytest.raises(FileOpenError, match="cannot open or read the file now"):
        read_note_text(tmp_path / "missing.md", max_bytes=MB)
    with pytest.raises(FileOpenError, match="cannot open or read the file now"):
        read_note_text(tmp_path, max_bytes=MB)  # a folder


# ------------------------------------------------------------- containment


def test_resolve_in_vault_returns_absolute_path_inside(tmp_path):
    write(tmp_path, "a/b.md")
    root = tmp_path.resolve()
    assert resolve_in_vault(tmp_path, "a/b.md") == root / "a/b.md"
    assert resolve_in_vault(tmp_path, "./a//b.md") == root / "a/b.md"
    assert resolve_in_vault(tmp_path, "a/../a/b.md") == root / "a/b.md"
    assert resolve_in_vault(tmp_path, "a\\b.md") == root / "a/b.md"
    assert resolve_in_vault(tmp_path, "new/not-yet.md") == root / "new/not-yet.md"


def test_names_with_leading_or_trailing_spaces_resolve_to_their_own_files(tmp_path):
    write(tmp_path, " lead.md")
    write(tmp_path, " spaced dir /d.md")
    write(tmp_path, "lead.md")
    root = tmp_path.resolve()
    assert resolve_in_vault(tmp_path, " lead.md") == root / " lead.md"
    assert resolve_in_vault(tmp_path, " spaced dir /d.md") == root / " spaced dir /d.md"
    assert resolve_in_vault(tmp_path, " /etc/passwd") == root / " /etc/passwd"  # a folder named ' ', inside


@pytest.mark.parametrize(
    "bad",
    ["/etc/passwd", "\\\\server\\share", "C:\\Windows", "c:/x.md", "../x.md", "a/../../x.md", "..", "a\x00b.md"],
)
def test_resolve_in_vault_refuses_escapes(tmp_path, bad):
    with pytest.raises(PathOutsideVaultError) as info:
        resolve_in_vault(tmp_path, bad)
    assert info.value.code == "path_outside_vault"


def test_resolve_in_vault_refuses_symlink_leading_outside(tmp_path):
    vault = tmp_path / "vault"
    vault.mkdir()
    write(tmp_path, "outside/secret.md")
    os.symlink(tmp_path / "outside", vault / "link")
    os.symlink(tmp_path / "outside/secret.md", vault / "s.md")
    for rel in ["link/secret.md", "s.md", "link"]:
        with pytest.raises(PathOutsideVaultError):
            resolve_in_vault(vault, rel)


def test_resolve_in_vault_refuses_a_path_through_a_symlink_inside_the_vault_without_naming_its_target(tmp_path):
    write(tmp_path, "Private/salary.md")
    os.symlink("Private", tmp_path / "Attic")
    os.symlink("Private/salary.md", tmp_path / "alias.md")
    for rel in ["Attic/salary.md", "alias.md", "Attic"]:
        with pytest.raises(NotFoundError) as info:
            resolve_in_vault(tmp_path, rel)
        assert "symlink" in info.value.message and "salary" not in info.value.message.replace(rel, "")
    assert resolve_in_vault(tmp_path, "Private/salary.md") == tmp_path.resolve() / "Private/salary.md"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a/b.md", "a/b.md"),
        ("./a/b.md", "a/b.md"),
        ("././a", "a"),
        ("a//b/./c.md", "a/b/c.md"),
        ("a\\b.md", "a/b.md"),
        ("folder/", "folder"),
        (unicodedata.normalize("NFD", "é.md"), "é.md"),
        ("../x", "../x"),
        ("/abs", "/abs"),
    ],
)
def test_normalise_rel_path(raw, expected):
    assert normalise_rel_path(raw) == expected


# --------------------------------------------------- real vault (read-only)


@pytest.mark.shared_data("vaults/obsidian-help")
def test_obsidian_help_vault_scans_173_notes_and_all_parse():
    root = SHARED_VAULTS / "obsidian-help"
    assert root.is_dir(), f"{root} missing (CI lays shared/ beside the clone; else set CAIRN_SHARED)"
    files = list(scan_vault(root))
    assert len(files) == 173
    assert all(f.kind == "markdown" and f.path.endswith(".md") for f in files)
    all_paths = list(list_all_files(root))
    assert len(all_paths) > len(files)  # attachments too
    parsed = {}
    for f in files:
        text, _ = read_note_text(f.abs_path, max_bytes=5 * MB)
        note = parse_note(text, f.path)
        parsed[f.path] = note
        if note.body:  # body lines line up with the file's lines (comments aside)
            file_lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
            body_lines = note.body.split("\n")
            assert len(file_lines) == note.body_line - 1 + len(body_lines), f.path
            for i, line in enumerate(body_lines):
                original = file_lines[note.body_line - 1 + i]
                assert line == original or "%%" in text, (f.path, i)
    resolver = LinkResolver((p, parsed[p].aliases if p in parsed else ()) for p in all_paths)
    links = [(path, link) for path, note in parsed.items() for link in note.links]
    assert len(links) > 500
    resolved = sum(resolver.resolve(link.target, path) is not None for path, link in links)
    assert resolved / len(links) > 0.9
