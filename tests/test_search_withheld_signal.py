"""Search gives a client not declared local no signal of the notes withheld from it.

Item 3: a public note's link, embed, heading or front-matter alias naming a withheld note never makes it match,
by keyword or by meaning: ``divorce lawyer`` does not return the public note whose only match is
``[[Divorce lawyer Hartmann]]`` (shown to that client as ``[withheld link]``), while the note's own words still
find it. The strong form: a vault and the same vault as that client sees it (withheld notes gone, every link to
them written as ``[withheld link]``) give it the same results: paths, order, scores, snippets.

Item 5: two vaults that differ only in notes withheld from the client give it identical results (the BM25
statistics and ranks are those of what it may see).

The real ``cairn mcp`` subprocess over stdio, driven by the SDK's client, over vaults written here and indexed
with the real model; the owner's local client still finds the linking note by the name.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from cairn.policy import LinkRedactor
from support.cairns import build_index, open_cairn
from support.cli import cairn_env, cairn_executable
from support.mcp_client import CALL_TIMEOUT_S, make_home
from support.requests import caller_of
from support.waits import run

TOOLS = ["--tool", "search_notes", "--tool", "get_related_notes", "--tool", "ask"]
NON_LOCAL, LOCAL = "claude-desktop", "my-local-agent"

#: Withheld from NON_LOCAL (tag personal, or the Private folder), holding the public notes' words too.
WITHHELD = {
    "People/Divorce lawyer Hartmann.md": "---\ntags: [personal]\naliases: [Hartmann]\n---\n"
    "# Divorce lawyer Hartmann\nFees, the custody hearing and the settlement draft.\n",
    "Journal/Diary.md": "---\ntags: [personal]\n---\n# Diary\nTomatoes, tomatoes and more tomatoes from the garden "
    "today; the tomatoes split in the rain. Sourdough bread again.\n",
    "Private/Allotment rent.md": "# Allotment rent\nThe allotment rent went up; tomatoes and compost cost more.\n",
}
#: Public notes that name no withheld note (item 5).
PUBLIC = {
    "garden.md": "# Garden\nThe tomatoes need staking and the basil wants sun; stake the tomatoes early.\n"
    "Compost the beds in autumn.\n",
    "herbs.md": "# Herbs\nBasil, basil and more basil on the windowsill; a few tomatoes next to the basil.\n",
    "bread.md": "# Bread\nA sourdough loaf: levain, flour, water, salt. Bake the bread at 250 degrees.\n",
    "lease.md": "# Lease\nA lawyer reviewed the lease of the allotment before we signed it.\n",
    "shed.md": "# Shed\nThe garden shed needs a new lock and a shelf for the compost bags.\n",
}
#: Public notes naming a withheld note: by a link, an embed, a heading and front-matter (item 3).
LINKING = {
    "weekly.md": "# Weekly plan\nCall [[Divorce lawyer Hartmann]] on Tuesday.\nRepot the basil on the balcony.\n",
    "embeds.md": "# Papers\n![[Divorce lawyer Hartmann]]\nFile the council tax letters in the blue folder.\n",
    "meeting.md": "# Meetings\n## Meeting with [[Hartmann]]\nBring the receipts for the new bicycle.\n",
    "front.md": '---\naliases: ["[[Divorce lawyer Hartmann]]", Seeds]\nup: "[[Divorce lawyer Hartmann]]"\n---\n'
    "# Seed catalogue\nOrder the bean and pea seeds for spring.\n",
}
QUERIES = [
    "divorce lawyer",
    "hartmann",
    "divorce lawyer hartmann",
    "custody hearing lawyer",
    "tomatoes",
    "basil tomatoes",
    "tomatoes compost",
    "sourdough bread",
    "allotment lawyer",
    "garden shed",
    "repot the basil",
    "council tax letters",
    "receipts bicycle",
    "seed catalogue",
    '"new lock"',
    "tomat",
    "What should I do with the tomatoes?",
]
#: Questions for ``ask`` (no model configured: the extractive answer), some reaching withheld notes by name.
QUESTIONS = [
    "Who do I call on Tuesday about the divorce?",
    "What did the lawyer review?",
    "What should I bring to the meeting with Hartmann?",
    "When do the tomatoes need staking?",
    "What are the fees for the custody hearing?",
]


def write_vault(root: Path, notes: dict[str, str]) -> Path:
    for rel, text in notes.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def as_seen(notes: dict[str, str]) -> dict[str, str]:
    """``notes`` as NON_LOCAL is shown them: every link to a WITHHELD note written as ``[withheld link]``."""
    redactor = LinkRedactor([(p, ["Hartmann"] if "Hartmann" in p else []) for p in WITHHELD])
    return {rel: redactor.redact(text) for rel, text in notes.items()}


@pytest.fixture(scope="module")
def vaults(tmp_path_factory, embedder) -> dict[str, tuple[Path, Path]]:
    """name → (home with the test policy and the index, vault), each indexed with the real model."""

    base = tmp_path_factory.mktemp("withheld-signal")
    layouts = {
        "public+withheld": {**PUBLIC, **WITHHELD},
        "public": PUBLIC,
        "linking+withheld": {**PUBLIC, **LINKING, **WITHHELD},
        "linking as seen": {**PUBLIC, **as_seen(LINKING)},
    }
    out = {}
    for i, (name, notes) in enumerate(layouts.items()):
        vault = write_vault(base / f"vault{i}", notes)
        home = make_home(base / f"home{i}")
        build_index(vault, home / "data", embedder, config_dir=home / "config")
        out[name] = (home, vault)
    return out


@asynccontextmanager
async def session(home: Path, vault: Path, client: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=cairn_executable(), args=["mcp", "--vault", str(vault), "--client", client, *TOOLS], env=cairn_env(home)
    )
    with open(home / "mcp.stderr", "a", encoding="utf-8") as errlog:
        async with Client(
            stdio_client(params, errlog=errlog),
            mode="legacy",
            read_timeout_seconds=CALL_TIMEOUT_S,
            client_info=types.Implementation(name="test", version="1.0"),
        ) as c:
            yield c


def _untimed(value: Any) -> Any:
    """``value`` without the keys that hold a time (``elapsedMs``; ``indexedAt``: when each vault was indexed)."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in ("elapsedMs", "indexedAt")}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


async def collect(home_vault: tuple[Path, Path], client: str, related: tuple[str, ...] = ()) -> dict[str, Any]:
    """query → the ``search_notes`` results; ``related:PATH`` → ``get_related_notes``' similar notes;
    ``ask:QUESTION`` → the ``ask`` answer (without its times); all over one ``cairn mcp`` session."""
    out: dict[str, Any] = {}
    async with session(*home_vault, client) as c:
        for q in QUERIES:
            res = await c.call_tool("search_notes", {"query": q, "limit": 10})
            assert not res.is_error, (q, res.content)
            out[q] = _untimed(res.structured_content["results"])
        for path in related:
            res = await c.call_tool("get_related_notes", {"path": path})
            assert not res.is_error, (path, res.content)
            out[f"related:{path}"] = res.structured_content["similar"]
        for question in QUESTIONS:
            res = await c.call_tool("ask", {"question": question})
            assert not res.is_error, (question, res.content)
            out[f"ask:{question}"] = _untimed(res.structured_content)
    return out


#: The sessions the tests read: (vault, client, the notes whose related notes are asked for).
SESSIONS = [
    ("public+withheld", NON_LOCAL, ("garden.md", "lease.md")),
    ("public", NON_LOCAL, ("garden.md", "lease.md")),
    ("linking+withheld", NON_LOCAL, tuple(LINKING)),
    ("linking as seen", NON_LOCAL, tuple(LINKING)),
    ("linking+withheld", LOCAL, ()),
]


@pytest.fixture(scope="module")
def results(vaults) -> dict[tuple[str, str], dict[str, Any]]:
    """(vault, client) → :func:`collect` of its session in :data:`SESSIONS`, each run once for the module: the
    sessions of one vault one after another, the vaults' side by side (each ``cairn mcp`` loads the model)."""

    async def of_vault(name: str) -> dict[tuple[str, str], dict[str, Any]]:
        return {
            (name, client): await collect(vaults[name], client, related) for n, client, related in SESSIONS if n == name
        }

    async def go() -> dict[tuple[str, str], dict[str, Any]]:
        parts = await asyncio.gather(*(of_vault(name) for name in dict.fromkeys(n for n, _, _ in SESSIONS)))
        return {key: value for part in parts for key, value in part.items()}

    return run(go())


def test_two_vaults_differing_only_in_withheld_notes_give_a_non_local_client_the_same_results(results):
    with_withheld = results["public+withheld", NON_LOCAL]
    without = results["public", NON_LOCAL]
    assert any(with_withheld[q] for q in QUERIES)  # not vacuous
    for key in with_withheld:
        assert with_withheld[key] == without[key], f"{key}:\n{with_withheld[key]}\n!=\n{without[key]}"


def test_a_link_naming_a_withheld_note_does_not_match_for_a_non_local_client(results):
    got = results["linking+withheld", NON_LOCAL]
    paths = {q: [h["filePath"] for h in got[q]] for q in QUERIES}
    for q in ("divorce lawyer", "hartmann", "divorce lawyer hartmann", "custody hearing lawyer"):
        assert not set(paths[q]) & set(LINKING), f"{q!r} matched a note only by a withheld note's name: {paths[q]}"
    assert "lease.md" in paths["divorce lawyer"]  # a public note holding the word itself still matches
    # each linking note is still found by its own words, and shown redacted
    for q, rel in [
        ("repot the basil", "weekly.md"),
        ("council tax letters", "embeds.md"),
        ("receipts bicycle", "meeting.md"),
        ("seed catalogue", "front.md"),
    ]:
        assert paths[q][:1] == [rel], (q, paths[q])
    shown = next(h for h in got["repot the basil"] if h["filePath"] == "weekly.md")
    assert "[withheld link]" in shown["snippet"] and "Hartmann" not in shown["snippet"]


def test_a_non_local_client_gets_what_the_vault_it_is_shown_would_give(results):
    got = results["linking+withheld", NON_LOCAL]  # the related notes of every LINKING note too
    seen = results["linking as seen", NON_LOCAL]
    for key in got:
        assert got[key] == seen[key], f"{key}:\n{got[key]}\n!=\n{seen[key]}"


def test_the_owners_local_client_still_finds_the_note_by_the_linked_name(results):
    got = results["linking+withheld", LOCAL]
    paths = [h["filePath"] for h in got["hartmann"]]
    assert "weekly.md" in paths and "People/Divorce lawyer Hartmann.md" in paths


@pytest.mark.parametrize("in_memory", [False, True], ids=["fts5", "in-memory"])
@pytest.mark.parametrize(("shown", "seen"), [("public+withheld", "public"), ("linking+withheld", "linking as seen")])
def test_each_terms_bm25_for_a_non_local_caller_is_fts5s_over_the_vault_it_is_shown(
    vaults, embedder, in_memory, shown, seen
):
    """Every word and two-word phrase of the notes: the withheld caller's (chunk, BM25) pairs in one vault are,
    bit for bit, FTS5's own in the vault it is shown (chunks compared by path and lines), whether the in-memory
    BM25 or FTS5 serves the index."""
    import re

    from cairn.app import Cairn
    from cairn.policy import Withhold

    def opened(name: str) -> Cairn:
        home, vault = vaults[name]
        cairn = open_cairn(vault, home / "data", embedder, config_dir=home / "config")
        if in_memory:
            assert cairn.query.keyword.terms.build()
        return cairn

    a, b = opened(shown), opened(seen)
    try:
        view = caller_of(a, Withhold(("personal",), ("Private",)))
        assert view.visible is not None
        lookup = view.keyword

        def keyed(store, ids) -> list[tuple[str, int | None]]:
            rows = store.chunk_rows(ids.tolist())
            return [(rows[c].path, rows[c].line_start) for c in ids.tolist()]

        words = sorted({w.lower() for t in {**PUBLIC, **LINKING}.values() for w in re.findall(r"[A-Za-z]+", t)})
        phrases = [f"{x} {y}" for t in PUBLIC.values() for x, y in re.findall(r"(\w+) (?=(\w+))", t)]
        for text in [*words, *phrases, "hartmann", "withheld link"]:
            got, want = lookup.term_matches(text), b.query.keyword.term_matches(text)
            assert keyed(a.store, got[0]) == keyed(b.store, want[0]), text
            assert got[1].tolist() == want[1].tolist(), text
    finally:
        a.close()
        b.close()
