"""cairn.index (the notes' text, the vectors, the lanes) on a small real vault in a temp folder, with the real model
and a real SQLite file."""

from __future__ import annotations

import os
import shutil

from cairn.store import Backlink
from support import embedders, index_vault
from support.cairns import open_cairn
from support.index_vault import indexed_paths, rows
from support.requests import search_request

vault, cairn = index_vault.vault, index_vault.cairn  # the fixtures


embedder = embedders.stand_in  # the fixture: the stand-in model, these tests only move data


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
    assert not cairn.query.search(search_request("proof the dough overnight in the fridge")).hits or all(
        h.file_path != "Sourdough.md"
        for h in cairn.query.search(search_request("proof the dough overnight in the fridge")).hits
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
    assert any(
        h.file_path == "Bad yaml.md"
        for h in cairn.query.search(search_request("badly formed note body searchable")).hits
    )
    (vault / "Latin1.md").write_text("Café crème, now in UTF-8.", encoding="utf-8")
    cairn.indexing.index()
    assert "Latin1.md" not in {e["filePath"] for e in cairn.indexing.stats()["errors"]}
    assert cairn.store.chunks_of_note("Latin1.md")


def test_keyword_search_works_before_vectors_are_filled(cairn):
    cairn.indexer.sync_text()
    assert cairn.indexing.stats()["vectors"] == 0
    hits = cairn.query.search(search_request("rye flour ferments")).hits
    assert hits and hits[0].file_path == "Flour.md"
    assert hits[0].cosine >= 0.35  # the floor is applied from vectors computed on the fly


def test_a_search_during_a_full_reindex_takes_candidate_vectors_from_the_embedding_cache(cairn):
    cairn.indexing.index()
    expected = [(h.file_path, h.symbol) for h in cairn.query.search(search_request("rye flour ferments")).hits]
    cairn.indexer.sync_text(full=True)  # every chunk rewritten: no vectors until the embed phase runs
    assert cairn.indexing.stats()["vectors"] == 0
    before = cairn.embedder.embeddings_computed
    hits = cairn.query.search(search_request("rye flour ferments")).hits  # cached result dropped: the store changed
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
    hits = cairn.query.search(search_request(question)).hits
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
    hits = cairn.query.search(search_request("flour")).hits
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
    assert cairn.query.search(
        search_request("rye flour ferments")
    ).hits  # vectors now held in memory by the query service
    p = vault / "Flour.md"
    p.write_text("Buckwheat groats make a nutty porridge. #baking\n", encoding="utf-8")
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10_000_000))
    cairn.indexing.index()
    hits = cairn.query.search(search_request("buckwheat porridge"), mode="dense").hits
    assert hits and hits[0].file_path == "Flour.md" and "Buckwheat" in hits[0].text
    assert all(
        "Rye flour" not in h.text for h in cairn.query.search(search_request("rye flour ferments", top_k=20)).hits
    )


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
        c = open_cairn(root, tmp_path / f"data-{batch_notes}", embedder)
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
    c = open_cairn(root, tmp_path / "data", embedder)
    try:
        report = c.indexer.sync_text()
        assert report.added == 150 and [p for p, _ in report.skipped] == [broken]
        reason = dict(report.skipped)[broken]
        assert reason.startswith("cannot parse:") and "shorten the title" in reason
        errors = {e["filePath"]: e for e in c.indexing.stats()["errors"]}
        assert errors[broken]["skipped"] and errors[broken]["reason"] == reason
        assert c.indexing.stats()["notes"] == 150
        for i in (0, 77, 149):
            assert c.query.search(search_request(f"pile{i}")).hits[0].file_path == f"Note {i:03d}.md"
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
