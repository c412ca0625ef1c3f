"""Exact words under withholding: the literal ranking reads only what the caller is shown (a withheld note's name in a
heading path is masked), so two vaults that look the same to the caller rank the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.policy import Withhold
from support.cairns import open_cairn
from support.requests import caller_of, search_request

W = Withhold(("personal",))


def _vault(root: Path, secret: str) -> Path:
    files = {
        f"Projects/{secret}.md": f"---\ntags: [personal]\n---\n# {secret}\n\nSecret codename notes about the launch.\n",
        "Work/Visit.md": (
            f"# Visit\n\n## Review of [[{secret}]]\n\nThe kestrel 7 budget was discussed at length with the team.\n"
        ),
        "Work/Other.md": (
            "# Other\n\n## Review of budgets\n\nThe kestrel 7 budget, the kestrel 7 plan and the kestrel 7 team "
            "were discussed.\n"
        ),
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def two(tmp_path_factory, embedder):

    out = {}
    for secret in ("Kestrel-7", "Kestrel-8"):
        vault = _vault(tmp_path_factory.mktemp("v" + secret), secret)
        c = open_cairn(vault, tmp_path_factory.mktemp("d" + secret), embedder)
        c.indexing.index()
        out[secret] = c
    yield out
    for c in out.values():
        c.close()


def test_two_vaults_the_caller_sees_identically_rank_the_same(two):
    shown = {}
    for secret, c in two.items():
        c.query.search(search_request("kestrel-7", top_k=8), caller_of(c, W))  # warms the redacted rows' vectors
        c.query.visible.wait(60)
        hits = c.query.search(search_request("kestrel-7 ", top_k=8), caller_of(c, W)).hits
        shown[secret] = [(h.file_path, h.symbol, h.text) for h in hits]
        print(secret, [(h.file_path, h.symbol, round(h.score, 4)) for h in hits])
    # what the caller is shown, as a set, is identical in both vaults
    assert sorted(shown["Kestrel-7"]) == sorted(shown["Kestrel-8"])
    # ... so the order must be too
    assert [s[0] for s in shown["Kestrel-7"]] == [s[0] for s in shown["Kestrel-8"]]


def test_literal_counts_only_what_the_caller_is_shown(two):
    from cairn.search.literal import fold, literal_count
    from cairn.search.literal_rank import find_literals
    from cairn.search.syntax import Word

    c = two["Kestrel-7"]
    svc = c.query
    view = svc.views.of(W)
    lit = find_literals(svc.store, svc.keyword, svc.note_maps.get(), [(Word("kestrel-7"), "kestrel-7")], None, view)
    for cid in lit.counts:
        red = view.visible.redacted.get(cid) if view.visible else None
        if red is not None:
            shown = f"{red.row.title}\n{red.symbol}\n{red.text}"
            assert literal_count(fold(shown), "kestrel-7"), ("counted from text the caller is not shown", shown)
