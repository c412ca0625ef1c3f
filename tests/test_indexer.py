"""cairn.index (the notes' text, the vectors, the lanes) on a small real vault in a temp folder, with the real model
and a real SQLite file."""

from __future__ import annotations

import os
import shutil
import unicodedata

import pytest
from tests.conftest import make_config

from cairn.app import Cairn
from cairn.errors import NotFoundError
from cairn.policy import Withhold
from cairn.store import Backlink

NOTES = {
    "Sourdough.md": "---\ntags: [baking, food/bread]\naliases: [Levain bread]\n---\n# Sourdough\n\n"
    "Proof the dough for 12 hours in the fridge before baking. Bake at 250 °C with steam.\n\n"
    "## Starter\n\nFeed the starter with equal weights of flour and water. See [[Flour]].\n",
    "Flour.md": "Rye flour ferments faster than wheat flour. #baking\n",
    "Garden/Tomatoes.md": "---\ntags: garden/vegetables\n---\n"
    "Water tomatoes deeply twice a week. Links to [[Missing note]].\n",
    "Empty.md": "",
    "Only front-matter.md": "---\ntags: [meta]\n---\n",
}


def indexed_paths(cairn: Cairn) -> set[str]:
    """The vault-relative paths of the indexed notes (skipped files left out)."""
    return {path for path, state in cairn.store.note_states().items() if state.status == "ok"}


@pytest.fixture
def vault(tmp_path):
    root = tmp_path / "vault"
    for rel, text in NOTES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    (root / ".obsidian").mkdir()
    (root / ".obsidian" / "workspace.md").write_text("ignored config note", encoding="utf-8")
    return root


@pytest.fixture
def cairn(vault, tmp_path, embedder):
    c = Cairn(make_config(vault, tmp_path / "data"), embedder=embedder)
    yield c
    c.close()


def rows(cairn, table):
    return cairn.store.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_first_index_then_nothing_to_do(cairn):
    report = cairn.indexing.index()
    assert (report.added, report.skipped) == (5, [])
    stats = cairn.indexing.stats()
    assert stats["notes"] == 5 and stats["pending"] == 0 and stats["vectors"] == stats["chunks"] > 0
    again = cairn.indexing.index()
    assert (again.added, again.updated, again.unchanged, again.texts_embedded) == (0, 0, 5, 0)


def test_ignored_folders_are_not_indexed(cairn):
    cairn.indexing.index()
    assert ".obsidian/workspace.md" not in indexed_paths(cairn)


def test_empty_and_front_matter_only_notes_have_metadata_but_no_chunks(cairn):
    cairn.indexing.index()
    assert cairn.store.chunks_of_note("Empty.md") == []
    assert cairn.store.chunks_of_note("Only front-matter.md") == []
    assert cairn.store.note_tags("Only front-matter.md") == ["meta"]


def test_editing_a_note_embeds_only_new_text(cairn, vault):
    cairn.indexing.index()
    p = vault / "Flour.md"
    p.write_text("Rye flour ferments faster than wheat flour. #baking\n\nSpelt needs less water.\n", encoding="utf-8")
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10_000_000))
    report = cairn.indexing.index()
    assert (report.updated, report.unchanged) == (1, 4)
    # The new sentence, and the chunk read whole (its whole-chunk vector); the title vector comes from the cache.
    assert report.texts_embedded == 2
    assert "Spelt" in cairn.store.chunks_of_note("Flour.md")[0].text


def test_moving_a_note_embeds_nothing_and_renaming_embeds_only_its_title(cairn, vault):
    cairn.indexing.index()
    (vault / "Bread").mkdir()
    shutil.move(vault / "Sourdough.md", vault / "Bread" / "Sourdough.md")
    moved = cairn.indexing.index()
    assert (moved.added, moved.deleted, moved.texts_embedded) == (1, 1, 0)
    shutil.move(vault / "Bread" / "Sourdough.md", vault / "Bread" / "Levain.md")
    renamed = cairn.indexing.index()
    # The new title, and each chunk read whole under it (the title leads its whole-chunk text); every sentence
    # vector came from the cache.
    assert renamed.texts_embedded == 1 + len(cairn.store.chunks_of_note("Bread/Levain.md"))
    assert "Sourdough.md" not in indexed_paths(cairn)


def test_deleting_a_note_removes_every_row_and_its_backlinks(cairn, vault):
    cairn.indexing.index()
    assert cairn.store.backlinks("Flour.md") == [Backlink(path="Sourdough.md", line=11)]
    before = {t: rows(cairn, t) for t in ("chunks", "chunk_vectors", "note_tags", "links")}
    (vault / "Sourdough.md").unlink()
    report = cairn.indexing.index()
    assert report.deleted == 1
    after = {t: rows(cairn, t) for t in ("chunks", "chunk_vectors", "note_tags", "links")}
    assert after["links"] == before["links"] - 1 and after["note_tags"] == before["note_tags"] - 2
    assert after["chunks"] == after["chunk_vectors"] < before["chunks"]
    assert cairn.store.backlinks("Flour.md") == []
    assert not cairn.query.search("proof the dough overnight in the fridge").hits or all(
        h.file_path != "Sourdough.md" for h in cairn.query.search("proof the dough overnight in the fridge").hits
    )


def test_a_link_resolves_once_its_target_appears(cairn, vault):
    cairn.indexing.index()
    links = cairn.store.links_of_note("Garden/Tomatoes.md")
    assert links[0].target_path is None
    (vault / "Missing note.md").write_text("Now it exists.", encoding="utf-8")
    cairn.indexing.index()
    assert cairn.store.links_of_note("Garden/Tomatoes.md")[0].target_path == "Missing note.md"


def test_broken_files_are_skipped_with_reasons_and_fixed_files_come_back(cairn, vault):
    (vault / "Binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (vault / "Latin1.md").write_bytes("Café crème".encode("latin-1"))
    (vault / "Bad yaml.md").write_text(
        "---\ntags: [a\n---\nThe body of the badly formed note is still searchable.\n", encoding="utf-8"
    )
    report = cairn.indexing.index()
    skipped = dict(report.skipped)
    assert set(skipped) == {"Binary.md", "Latin1.md"}
    errors = {e["filePath"]: e for e in cairn.indexing.stats()["errors"]}
    assert errors["Binary.md"]["skipped"] and "binary" in errors["Binary.md"]["reason"].lower()
    assert errors["Latin1.md"]["skipped"] and "utf-8" in errors["Latin1.md"]["reason"].lower()
    assert not errors["Bad yaml.md"]["skipped"] and "YAML" in errors["Bad yaml.md"]["reason"]
    assert any(h.file_path == "Bad yaml.md" for h in cairn.query.search("badly formed note body searchable").hits)
    (vault / "Latin1.md").write_text("Café crème, now in UTF-8.", encoding="utf-8")
    cairn.indexing.index()
    assert "Latin1.md" not in {e["filePath"] for e in cairn.indexing.stats()["errors"]}
    assert cairn.store.chunks_of_note("Latin1.md")


def test_keyword_search_works_before_vectors_are_filled(cairn):
    cairn.indexer.sync_text()
    assert cairn.indexing.stats()["vectors"] == 0
    hits = cairn.query.search("rye flour ferments").hits
    assert hits and hits[0].file_path == "Flour.md"
    assert hits[0].cosine >= 0.35  # the floor is applied from vectors computed on the fly


def test_a_search_during_a_full_reindex_takes_candidate_vectors_from_the_embedding_cache(cairn):
    cairn.indexing.index()
    expected = [(h.file_path, h.symbol) for h in cairn.query.search("rye flour ferments").hits]
    cairn.indexer.sync_text(full=True)  # every chunk rewritten: no vectors until the embed phase runs
    assert cairn.indexing.stats()["vectors"] == 0
    before = cairn.embedder.embeddings_computed
    hits = cairn.query.search("rye flour ferments").hits  # cached result dropped: the store changed
    assert cairn.embedder.embeddings_computed - before == 0  # the question's vector is cached; the rest too
    assert [(h.file_path, h.symbol) for h in hits] == expected


def test_a_keyword_ready_search_embeds_a_bounded_number_of_tokens(cairn, monkeypatch):
    cairn.indexer.sync_text()
    assert cairn.indexing.stats()["vectors"] == 0
    question = "rye flour ferments"
    cairn.query.SIMILARITY_EMBED_TOKENS = budget = 40  # Flour.md's sentence, title and whole-chunk text: ~30
    embedded: list[str] = []
    real_embed = cairn.embedder.embed
    monkeypatch.setattr(cairn.embedder, "embed", lambda texts, **kw: embedded.extend(texts) or real_embed(texts, **kw))
    hits = cairn.query.search(question).hits
    candidates = [t for t in embedded if t != question]
    tokens = sum(map(len, cairn.embedder.tokenizer.encode_for_model(candidates)))  # as the model reads them
    assert candidates and tokens <= budget  # some texts embedded now, within the budget (the other notes' are not)
    assert hits and hits[0].file_path == "Flour.md"  # the best keyword candidate comes first in the budget
    assert hits[0].cosine >= 0.35


def test_a_keyword_ready_search_gives_several_candidates_their_first_vector_within_the_budget(cairn, monkeypatch):
    """At keyword-ready, the budget buys each keyword candidate its tier-1 vector (its whole-chunk text, one model
    call): several candidates are ranked by meaning too, as the indexer's first pass would rank them."""
    cairn.indexer.sync_text()
    assert cairn.indexing.stats()["vectors"] == 0
    cairn.query.SIMILARITY_EMBED_TOKENS = 128
    calls: list[list[str]] = []
    real_embed = cairn.embedder.embed
    monkeypatch.setattr(
        cairn.embedder, "embed", lambda texts, **kw: calls.append(list(texts)) or real_embed(texts, **kw)
    )
    hits = cairn.query.search("flour").hits
    candidate_calls = [texts for texts in calls if texts != ["flour"]]
    assert len(candidate_calls) == 1, calls  # the candidates' texts in one model call, not one call per candidate
    embedded = candidate_calls[0]
    assert any(t.startswith("Flour") for t in embedded) and any(t.startswith("Sourdough") for t in embedded), embedded
    assert hits[0].file_path == "Flour.md" and hits[0].cosine >= 0.35


def test_a_stopped_run_leaves_whole_notes_and_the_next_run_finishes(cairn):
    calls = []

    def stop_after_two_notes() -> bool:
        calls.append(1)
        return cairn.store.stats().notes >= 2

    report = cairn.indexer.index(should_stop=stop_after_two_notes)
    assert report.stopped and cairn.indexing.stats()["notes"] == 2
    for path in indexed_paths(cairn):  # each written note is complete: chunks and FTS rows
        assert cairn.store.note_by_path(path).status == "ok"
    finish = cairn.indexing.index()
    assert (
        not finish.stopped
        and finish.added == 3
        and cairn.indexing.stats()["notes"] == 5
        and cairn.indexing.stats()["pending"] == 0
    )


def test_search_right_after_an_edit_sees_the_new_text_and_never_the_old(cairn, vault):
    cairn.indexing.index()
    assert cairn.query.search("rye flour ferments").hits  # vectors now held in memory by the query service
    p = vault / "Flour.md"
    p.write_text("Buckwheat groats make a nutty porridge. #baking\n", encoding="utf-8")
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10_000_000))
    cairn.indexing.index()
    hits = cairn.query.search("buckwheat porridge", mode="dense").hits
    assert hits and hits[0].file_path == "Flour.md" and "Buckwheat" in hits[0].text
    assert all("Rye flour" not in h.text for h in cairn.query.search("rye flour ferments", top_k=20).hits)


def test_hinted_paths_update_links_elsewhere_when_a_note_appears_or_its_aliases_change(cairn, vault):
    cairn.indexing.index()
    assert cairn.store.links_of_note("Garden/Tomatoes.md")[0].target_path is None
    (vault / "Missing note.md").write_text("Now it exists.", encoding="utf-8")
    report = cairn.indexer.index_paths({"Missing note.md"})
    assert report.added == 1
    assert cairn.store.links_of_note("Garden/Tomatoes.md")[0].target_path == "Missing note.md"
    (vault / "Missing note.md").unlink()
    (vault / "Other.md").write_text("---\naliases: [Missing note]\n---\nAn alias now.\n", encoding="utf-8")
    cairn.indexer.index_paths({"Missing note.md", "Other.md"})
    assert cairn.store.links_of_note("Garden/Tomatoes.md")[0].target_path == "Other.md"
    (vault / "Other.md").write_text("No alias any more.\n", encoding="utf-8")  # the alias dropped: the link breaks
    cairn.indexer.index_paths({"Other.md"})
    assert cairn.store.links_of_note("Garden/Tomatoes.md")[0].target_path is None
    assert cairn.indexer.reconcile_diff() == {"added": [], "changed": [], "deleted": []}


def test_hints_for_ignored_missing_or_outside_paths_do_nothing(cairn, vault):
    cairn.indexing.index()
    (vault / ".obsidian" / "new.md").write_text("hidden", encoding="utf-8")
    report = cairn.indexer.index_paths({".obsidian/new.md", "../outside.md", "/etc/passwd", "No such.md", "Garden"})
    assert (report.added, report.updated, report.deleted) == (0, 0, 0)


def test_removed_paths_are_reported_for_a_delete_and_a_folder_move_but_not_an_edit(cairn, vault):
    removed: list[str] = []
    cairn.writer.on_removed = removed.append
    cairn.indexing.index()
    assert removed == []
    (vault / "Flour.md").unlink()
    (vault / "Garden").rename(vault / "Allotment")
    with open(vault / "Sourdough.md", "a", encoding="utf-8") as fh:
        fh.write("\nScore the loaf before it goes in.\n")
    report = cairn.indexing.index()
    assert sorted(removed) == ["Flour.md", "Garden/Tomatoes.md"]
    assert (report.deleted, report.added, report.updated) == (2, 1, 1)
    removed.clear()
    (vault / "Allotment" / "Tomatoes.md").unlink()
    cairn.indexer.index_paths(["Allotment/Tomatoes.md"])  # a file-event hint takes the same path
    assert removed == ["Allotment/Tomatoes.md"]


def test_notes_written_in_small_batches_resolve_alias_links_to_notes_of_later_batches(tmp_path, embedder, monkeypatch):
    """Memory bound of the text phase: notes are parsed and written a batch at a time; a link to an alias
    defined by a note of a later batch still resolves once the run ends, as in one big batch."""
    import cairn.index.text_run as text_run

    root = tmp_path / "vault"
    root.mkdir()
    for i in range(7):  # sorted order: "A0".."A6" link to the alias of "Z target", written last
        (root / f"A{i}.md").write_text(
            f"Note {i} points to [[Far away]] and to [[A{(i + 1) % 7}]].\n", encoding="utf-8"
        )
    (root / "Z target.md").write_text(
        "---\naliases: [Far away]\n---\nThe target of every alias link.\n", encoding="utf-8"
    )
    results = {}
    for batch_notes in (3, 1000):
        monkeypatch.setattr(text_run, "BATCH_NOTES", batch_notes)
        c = Cairn(make_config(root, tmp_path / f"data-{batch_notes}"), embedder=embedder)
        try:
            report = c.indexer.sync_text()
            assert report.added == 8 and not report.skipped
            results[batch_notes] = sorted(c.store.iter_links())
            assert [b.path for b in c.store.backlinks("Z target.md")] == [f"A{i}.md" for i in range(7)]
        finally:
            c.close()
    small = [(src, raw, target) for _n, _o, src, raw, target in results[3]]
    assert ("A0.md", "Far away", "Z target.md") in small
    assert small == [(src, raw, target) for _n, _o, src, raw, target in results[1000]]


def test_a_note_that_cannot_be_parsed_is_skipped_with_its_reason_and_the_rest_of_its_batch_is_indexed(
    tmp_path, embedder
):
    """A batch is written in one transaction, yet one broken note costs only itself."""
    root = tmp_path / "vault"
    root.mkdir()
    for i in range(150):  # enough for the parse workers; the broken note sorts first, into the first batch
        (root / f"Note {i:03d}.md").write_text(f"Compost heap {i}: turn it weekly, pile{i} stays warm.\n")
    broken = "!" * 200 + ".md"  # a title of 200 tokens leaves no room for this text in a 256-token chunk
    (root / broken).write_text("This text is never indexed: its title is too long. " * 12, encoding="utf-8")
    c = Cairn(make_config(root, tmp_path / "data"), embedder=embedder)
    try:
        report = c.indexer.sync_text()
        assert report.added == 150 and [p for p, _ in report.skipped] == [broken]
        reason = dict(report.skipped)[broken]
        assert reason.startswith("cannot parse:") and "shorten the title" in reason
        errors = {e["filePath"]: e for e in c.indexing.stats()["errors"]}
        assert errors[broken]["skipped"] and errors[broken]["reason"] == reason
        assert c.indexing.stats()["notes"] == 150
        for i in (0, 77, 149):
            assert c.query.search(f"pile{i}").hits[0].file_path == f"Note {i:03d}.md"
    finally:
        c.close()


def _age_cache(cairn, days):
    with cairn.store.conn as c:
        c.execute("UPDATE embedding_cache SET created_at = created_at - ?", (days * 86400,))


def _edit(path, text):
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10_000_000))


def test_deleted_text_keeps_its_cached_vector_for_the_grace_period_then_it_is_pruned(cairn, vault):
    cairn.indexing.index()
    flour = vault / "Flour.md"
    original = flour.read_text(encoding="utf-8")
    _edit(flour, "Spelt needs less water. #baking\n")
    assert cairn.indexing.index().texts_embedded == 2  # the new sentence, and the chunk read whole
    _edit(flour, original)  # edited back within the grace period: nothing is embedded again
    back = cairn.indexing.index()
    assert (back.texts_embedded, back.cache_pruned) == (0, 0)

    _edit(flour, "Spelt needs less water. #baking\n")
    cairn.indexing.index()
    _age_cache(cairn, 31)
    report = (
        cairn.indexing.index()
    )  # the rye sentence and its chunk read whole are in no note now and older than 30 days
    assert report.cache_pruned == 2 and report.to_json()["cachePruned"] == 2
    _edit(flour, original)
    assert cairn.indexing.index().texts_embedded == 2  # they had to be embedded again


def test_pruning_keeps_every_vector_the_vault_still_uses_and_drops_other_models_rows(cairn, vault):
    cairn.indexing.index()
    with cairn.store.conn as c:
        c.execute(
            "INSERT INTO embedding_cache(content_hash, model_id, vector, created_at) "
            "SELECT content_hash, 'other-model@0', vector, created_at FROM embedding_cache"
        )
    kept = rows(cairn, "embedding_cache") // 2
    _age_cache(cairn, 31)
    report = cairn.indexing.index()
    assert report.cache_pruned == kept  # exactly the other model's copies
    assert (
        cairn.store.conn.execute(
            "SELECT count(*) FROM embedding_cache WHERE model_id != ?", (cairn.embedder.model_id,)
        ).fetchone()[0]
        == 0
    )
    # Every sentence and every title the notes use is still cached: re-reading the vault embeds nothing.
    with cairn.store.conn as c:
        c.execute("DELETE FROM chunk_vectors")
        c.execute("UPDATE chunks SET embedded = 0")
    assert cairn.indexing.index(full=True).texts_embedded == 0
    assert cairn.indexing.stats()["pending"] == 0


# -- what is read: symlinks, folders named like notes, names equal in Unicode NFC (the scan's and the hints' rules)

NFC_NAME = unicodedata.normalize("NFC", "Résumé.md")
NFD_NAME = unicodedata.normalize("NFD", "Résumé.md")


def search_paths(cairn, query, **kw) -> set[str]:
    """The notes a keyword search finds (BM25: only notes holding a word of ``query``)."""
    return {h.file_path for h in cairn.query.search(query, top_k=20, mode="bm25", **kw).hits}


@pytest.mark.parametrize("how", ["index", "hints"])
def test_a_symlink_to_a_withheld_folder_or_note_never_serves_its_notes_under_another_path(cairn, vault, how):
    (vault / "Private").mkdir()
    (vault / "Private" / "salary.md").write_text("# Salary\nzqprivword salary negotiation notes.\n", encoding="utf-8")
    cairn.indexing.index()
    os.symlink("Private", vault / "Attic")  # sorts before Private: used to take the notes as Attic/salary.md
    os.symlink("Private/salary.md", vault / "zz-alias.md")
    if how == "index":
        report = cairn.indexing.index()
    else:  # what the watcher hands over when the links appear
        report = cairn.indexer.index_paths({"Attic", "zz-alias.md", "Attic/salary.md"})
    assert (report.added, report.updated, report.skipped) == (0, 0, [])
    assert "Private/salary.md" in indexed_paths(cairn)
    assert not {"Attic/salary.md", "zz-alias.md"} & indexed_paths(cairn)
    withhold = Withhold(("personal",), ("Private",))
    assert search_paths(cairn, "zqprivword salary negotiation") == {"Private/salary.md"}  # the owner
    assert not search_paths(cairn, "zqprivword salary negotiation", withhold=withhold)
    assert cairn.library.list_notes(withhold=withhold)["total"] == 5
    assert cairn.indexer.reconcile_diff() == {"added": [], "changed": [], "deleted": []}


@pytest.mark.parametrize("how", ["index", "hints"])
def test_a_folder_symlink_leading_outside_the_vault_or_looping_indexes_nothing(cairn, vault, tmp_path, how):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("zqoutsideword lives outside the vault\n", encoding="utf-8")
    cairn.indexing.index()
    os.symlink(outside, vault / "ext")
    os.symlink(outside / "secret.md", vault / "out.md")
    os.symlink("..", vault / "Garden" / "again")
    if how == "index":
        report = cairn.indexing.index()
    else:
        report = cairn.indexer.index_paths({"ext", "out.md", "Garden/again", "ext/secret.md"})
    assert (report.added, report.updated) == (0, 0)
    assert indexed_paths(cairn) == set(NOTES)
    assert not search_paths(cairn, "zqoutsideword")


def test_renaming_or_moving_away_a_folder_named_like_a_note_updates_its_notes_at_once(cairn, vault, tmp_path):
    (vault / "Projects.md" / "deep").mkdir(parents=True)
    (vault / "Projects.md" / "plan.md").write_text("zqplanword alpha plan\n", encoding="utf-8")
    (vault / "Projects.md" / "deep" / "b.md").write_text("zqdeepword beta\n", encoding="utf-8")
    cairn.indexing.index()
    (vault / "Projects.md").rename(vault / "Projects")
    report = cairn.indexer.index_paths({"Projects.md", "Projects"})  # the watcher's hints for a rename
    assert (report.deleted, report.added) == (2, 2)
    assert search_paths(cairn, "zqplanword") == {"Projects/plan.md"}
    (vault / "Projects").rename(vault / "Projects.md")
    cairn.indexer.index_paths({"Projects.md", "Projects"})
    assert search_paths(cairn, "zqdeepword") == {"Projects.md/deep/b.md"}
    (vault / "Projects.md").rename(tmp_path / "gone")
    report = cairn.indexer.index_paths({"Projects.md"})
    assert report.deleted == 2
    assert indexed_paths(cairn) == set(NOTES)
    assert cairn.indexer.reconcile_diff() == {"added": [], "changed": [], "deleted": []}


def test_a_file_replacing_a_folder_of_the_same_name_drops_the_folders_notes(cairn, vault):
    cairn.indexing.index()
    shutil.rmtree(vault / "Garden")
    (vault / "Garden").write_text("now a file", encoding="utf-8")
    report = cairn.indexer.index_paths({"Garden"})
    assert report.deleted == 1 and "Garden/Tomatoes.md" not in indexed_paths(cairn)


def test_two_files_named_alike_in_nfc_index_one_report_the_other_and_stay_stable(cairn, vault):
    (vault / NFD_NAME).write_text("zqnfdword decomposed\n", encoding="utf-8")
    (vault / NFC_NAME).write_text("zqnfcword composed\n", encoding="utf-8")
    first = cairn.indexing.index()
    assert first.added == 6 and [p for p, _r in first.skipped] == [NFD_NAME]
    reason = dict(first.skipped)[NFD_NAME]
    assert repr(NFC_NAME) in reason and "rename or delete one" in reason
    errors = [e for e in cairn.indexing.stats()["errors"] if e["skipped"]]
    assert errors == [{"filePath": NFD_NAME, "reason": reason, "skipped": True}]
    for _ in range(2):  # stable: nothing re-read, the same note found
        again = cairn.indexing.index()
        assert (again.added, again.updated, again.deleted, again.unchanged) == (0, 0, 0, 7)
        assert search_paths(cairn, "zqnfcword zqnfdword") == {NFC_NAME}
        assert cairn.query.search("zqnfcword zqnfdword", mode="bm25").hits[0].snippet.startswith("zqnfcword")
    assert cairn.indexer.reconcile_diff() == {"added": [], "changed": [], "deleted": []}
    assert cairn.indexer.index_paths({NFC_NAME}).updated == 0  # a hint (NFC, as the watcher gives) agrees
    # The indexed one goes: the other one is indexed under the NFC path and its skip record goes.
    (vault / NFC_NAME).unlink()
    report = cairn.indexer.index_paths({NFC_NAME})
    assert report.updated == 1 and report.deleted == 1
    assert search_paths(cairn, "zqnfcword zqnfdword") == {NFC_NAME}
    assert not [e for e in cairn.indexing.stats()["errors"] if e["skipped"]]
    assert cairn.indexer.reconcile_diff() == {"added": [], "changed": [], "deleted": []}


def test_notes_whose_names_differ_only_in_case_are_two_notes(cairn, vault):
    (vault / "Case.md").write_text("zqupperword\n", encoding="utf-8")
    try:
        (vault / "case.md").write_text("zqlowerword\n", encoding="utf-8")
    except OSError:
        pytest.skip("case-insensitive file system")
    if len(os.listdir(vault)) < 7:
        pytest.skip("case-insensitive file system")
    report = cairn.indexing.index()
    assert report.added == 7 and report.skipped == []
    assert search_paths(cairn, "zqupperword") == {"Case.md"} and search_paths(cairn, "zqlowerword") == {"case.md"}


def test_hints_while_the_vault_folder_is_gone_raise_and_delete_nothing(cairn, vault, tmp_path):
    cairn.indexing.index()
    vault.rename(tmp_path / "unmounted")
    with pytest.raises(FileNotFoundError, match="cannot be opened"):
        cairn.indexer.index_paths({"Garden", "Flour.md"})
    (tmp_path / "unmounted").rename(vault)
    assert indexed_paths(cairn) == set(NOTES)


def test_a_note_replaced_by_a_symlink_to_a_withheld_note_is_not_served_before_it_is_reindexed(cairn, vault):
    (vault / "Private").mkdir()
    (vault / "Private" / "salary.md").write_text("zqprivword salary negotiation\n", encoding="utf-8")
    cairn.indexing.index()
    (vault / "Flour.md").unlink()  # e.g. while indexing is paused: the index still lists Flour.md
    os.symlink("Private/salary.md", vault / "Flour.md")
    with pytest.raises(NotFoundError) as info:
        cairn.library.note("Flour.md", withhold=Withhold(("personal",), ("Private",)))
    assert "symlink" in info.value.message and "salary" not in info.value.message


def test_an_index_made_by_another_note_parser_re_reads_every_note_once_and_embeds_nothing(cairn):
    cairn.indexing.index()
    with cairn.store.conn as c:  # what an index written before the parser changed holds
        c.execute("UPDATE meta SET value='notes-v1' WHERE key='text_recipe'")
    again = cairn.indexing.index()
    # every note re-parsed (its chunks written again), but no note changed; vectors from the cache
    assert (again.updated, again.unchanged, again.texts_embedded) == (0, 5, 0)
    assert again.chunks_written == cairn.store.stats().chunks
    assert (
        cairn.store.get_meta("text_recipe").startswith("notes-v") and cairn.store.get_meta("text_recipe") != "notes-v1"
    )
    third = cairn.indexing.index()
    assert (third.unchanged, third.updated, third.chunks_written) == (5, 0, 0)


def _count_walks(monkeypatch) -> list[int]:
    import cairn.index.links as links_module
    import cairn.index.writer as writer_module

    walks = [0]
    real = writer_module.list_all_files

    def counting(*args, **kwargs):
        walks[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(writer_module, "list_all_files", counting)
    monkeypatch.setattr(links_module, "list_all_files", counting)
    return walks


def _append(vault, rel: str, extra: str, *, atomic: bool = False) -> None:
    path = vault / rel
    text = path.read_text(encoding="utf-8") + extra
    if atomic:  # as many editors save: a temporary file renamed over the note
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    else:
        path.write_text(text, encoding="utf-8")


def test_saving_a_note_again_resolves_its_links_without_walking_the_whole_vault(cairn, vault, monkeypatch):
    """The file list links resolve against is kept between file-event batches while no hint can have changed it
    (walking the vault and rebuilding the resolver is most of a save's cost on a large vault)."""
    cairn.indexing.index()
    walks = _count_walks(monkeypatch)
    _append(vault, "Sourdough.md", "\nAlso see [[Flour]] and [[Garden/Tomatoes]].\n")
    cairn.indexer.index_paths({"Sourdough.md"})
    first = walks[0]
    _append(vault, "Sourdough.md", "\nAnd [[Levain bread]] once more.\n", atomic=True)
    cairn.indexer.index_paths({"Sourdough.md", "Sourdough.md.tmp"})
    _append(vault, "Flour.md", "\nGoes into [[Sourdough]].\n")
    cairn.indexer.index_paths({"Flour.md"})
    assert walks[0] == first <= 1  # the edits did not walk the vault again
    targets = [link.target_path for link in cairn.store.links_of_note("Sourdough.md")]
    assert targets == ["Flour.md", "Flour.md", "Garden/Tomatoes.md", "Sourdough.md"]
    assert cairn.store.links_of_note("Flour.md")[0].target_path == "Sourdough.md"


def test_an_attachment_or_folder_that_comes_or_goes_is_seen_by_the_next_save(cairn, vault, monkeypatch):
    cairn.indexing.index()
    _append(vault, "Flour.md", "\n![[crumb.png]] ![[Pantry/jar.jpg]]\n")
    cairn.indexer.index_paths({"Flour.md"})
    assert [link.target_path for link in cairn.store.links_of_note("Flour.md")] == [None, None]
    (vault / "crumb.png").write_bytes(b"\x89PNG")  # an image pasted: its event comes with the note's
    _append(vault, "Flour.md", "\nA crumb shot.\n")
    cairn.indexer.index_paths({"crumb.png", "Flour.md"})
    assert [link.target_path for link in cairn.store.links_of_note("Flour.md")] == ["crumb.png", None]
    (vault / "Pantry").mkdir()
    (vault / "Pantry" / "jar.jpg").write_bytes(b"\xff\xd8")
    cairn.indexer.index_paths({"Pantry"})  # a folder's event (moved in with its files)
    _append(vault, "Flour.md", "\nThe jar.\n")
    cairn.indexer.index_paths({"Flour.md"})
    assert [link.target_path for link in cairn.store.links_of_note("Flour.md")] == ["crumb.png", "Pantry/jar.jpg"]
    shutil.rmtree(vault / "Pantry")
    (vault / "crumb.png").unlink()
    cairn.indexer.index_paths({"Pantry", "crumb.png"})
    _append(vault, "Flour.md", "\nGone again.\n")
    cairn.indexer.index_paths({"Flour.md"})
    assert [link.target_path for link in cairn.store.links_of_note("Flour.md")] == [None, None]


def test_aliases_added_or_dropped_by_a_save_resolve_in_the_next_ones(cairn, vault):
    cairn.indexing.index()
    _append(vault, "Flour.md", "\nSee [[Rye notes]].\n")
    cairn.indexer.index_paths({"Flour.md"})
    assert cairn.store.links_of_note("Flour.md")[0].target_path is None
    (vault / "Garden" / "Tomatoes.md").write_text(
        "---\naliases: [Rye notes]\n---\nTomatoes and rye.\n", encoding="utf-8"
    )
    cairn.indexer.index_paths({"Garden/Tomatoes.md"})
    assert cairn.store.links_of_note("Flour.md")[0].target_path == "Garden/Tomatoes.md"
    _append(vault, "Sourdough.md", "\nLike [[Rye notes]].\n")
    cairn.indexer.index_paths({"Sourdough.md"})
    assert cairn.store.links_of_note("Sourdough.md")[-1].target_path == "Garden/Tomatoes.md"
    (vault / "Garden" / "Tomatoes.md").write_text("No alias now.\n", encoding="utf-8")
    cairn.indexer.index_paths({"Garden/Tomatoes.md"})
    _append(vault, "Sourdough.md", "\nStill [[Rye notes]]?\n")
    cairn.indexer.index_paths({"Sourdough.md"})
    assert [link.target_path for link in cairn.store.links_of_note("Sourdough.md")][-2:] == [None, None]
    assert cairn.indexer.reconcile_diff() == {"added": [], "changed": [], "deleted": []}


def test_links_follow_an_attachment_that_arrives_later_and_a_note_that_becomes_unreadable(cairn, vault):
    """A hinted batch that adds, removes or moves a file re-resolves links elsewhere (an image pasted after the
    note linking to it was saved), and a note skipped as unreadable no longer answers to its aliases — the stored
    links are what a full index of the vault would store."""
    cairn.indexing.index()
    _append(vault, "Flour.md", "\n![[crumb.png]] and [[Levain bread]]\n")
    cairn.indexer.index_paths({"Flour.md"})
    assert [link.target_path for link in cairn.store.links_of_note("Flour.md")] == [None, "Sourdough.md"]
    (vault / "crumb.png").write_bytes(b"\x89PNG")
    cairn.indexer.index_paths({"crumb.png"})  # the image's own, later batch
    assert [link.target_path for link in cairn.store.links_of_note("Flour.md")] == ["crumb.png", "Sourdough.md"]
    (vault / "Pics").mkdir()
    os.replace(vault / "crumb.png", vault / "Pics" / "crumb.png")  # moved into a folder
    cairn.indexer.index_paths({"crumb.png", "Pics"})
    assert cairn.store.links_of_note("Flour.md")[0].target_path == "Pics/crumb.png"
    (vault / "Sourdough.md").write_bytes(b"---\naliases: [Levain bread]\n---\n\xff\xfe not UTF-8\n")
    cairn.indexer.index_paths({"Sourdough.md"})
    assert cairn.store.links_of_note("Flour.md")[1].target_path is None  # the alias went with the note's text
    stored = {p: [link.target_path for link in cairn.store.links_of_note(p)] for p in indexed_paths(cairn)}
    cairn.writer.reresolve_links()  # what the whole vault says now
    assert stored == {p: [link.target_path for link in cairn.store.links_of_note(p)] for p in indexed_paths(cairn)}


def test_an_attachment_added_while_the_daemon_was_not_running_resolves_links_at_the_next_start(cairn, vault):
    cairn.indexing.index()
    _append(vault, "Flour.md", "\n![[crumb.png]]\n")
    cairn.indexing.index()
    assert cairn.store.links_of_note("Flour.md")[0].target_path is None
    (vault / "crumb.png").write_bytes(b"\x89PNG")  # no file event: nothing watched
    report = cairn.indexing.index()  # the start-up run: no note changed
    assert (report.added, report.updated, report.deleted) == (0, 0, 0)
    assert cairn.store.links_of_note("Flour.md")[0].target_path == "crumb.png"
    (vault / "crumb.png").unlink()
    cairn.indexing.index()
    assert cairn.store.links_of_note("Flour.md")[0].target_path is None
