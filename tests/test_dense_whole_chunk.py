"""A chunk's vector reads the passage as one text: the whole-chunk vector (note title, heading path and text embedded
together) blended with the mean of its sentence vectors and its title's (cairn.embedding). Real store, real model,
real indexer and query service."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from cairn.embedding import (
    chunk_vector,
    embedding_texts,
    whole_chunk_hash,
    whole_chunk_text,
)
from support.cairns import open_cairn

#: Notes whose one passage answers a question only when read as a whole: no single sentence says it, while other
#: notes each have one sentence on one of the question's words.
NOTES = {
    "Home/Energy.md": "Seal the gaps around windows and doors. Close curtains at dusk. Turn the thermostat down one "
    "degree and wear a jumper.\n",
    "Home/House.md": "The house was built in 1932 and has three bedrooms.\n",
    "Home/Heating bill.md": "The heating bill arrived today.\n",
    "Home/Warm drinks.md": "A warm drink in the evening helps me sleep.\n",
    "Cycling/November.md": "Swap the tyres for studded ones. Fit mudguards and bright lights front and back. Oil the "
    "chain every week because of the salt on the roads.\n",
    "Cycling/Winter.md": "Winter is the coldest season of the year. Days are short and nights are long.\n",
    "Cycling/Bike shop.md": "The bike shop on Main Street sells helmets and bells.\n",
}


@pytest.fixture
def passages(tmp_path, embedder):
    vault = tmp_path / "vault"
    for path, text in NOTES.items():
        (vault / path).parent.mkdir(parents=True, exist_ok=True)
        (vault / path).write_text(text, encoding="utf-8")
    cairn = open_cairn(vault, tmp_path / "data", embedder)
    cairn.indexing.index()
    yield cairn
    cairn.close()


@pytest.mark.parametrize(
    ("question", "note"),
    [
        ("how to keep the house warm while spending less on heating", "Home/Energy.md"),
        ("how do I get my bike ready for winter riding?", "Cycling/November.md"),
    ],
)
def test_a_paraphrased_question_finds_the_note_whose_whole_passage_answers_it(passages, question, note):
    dense, _ = passages.query.retrieve(question, top_k=3, mode="dense", per_note=1)
    assert dense[0].file_path == note, [h.file_path for h in dense]


def _reference_vectors(cairn, embedder) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Every chunk's (chunk vector, sentence vectors) made from scratch with the model: the recipe, brute force."""
    out = {}
    rows = cairn.store.conn.execute(
        "SELECT c.id, n.title, c.symbol, c.text, c.kind FROM chunks c JOIN notes n ON n.id = c.note_id"
    ).fetchall()
    for cid, title, symbol, text, kind in rows:
        units = embedding_texts(symbol, text, kind)
        sentences = embedder.embed(units)
        title_vec, whole_vec = embedder.embed([title, whole_chunk_text(title, symbol, units)])
        out[cid] = (chunk_vector(sentences, title_vec, whole_vec), sentences)
    return out


def test_hit_cosines_and_dense_ranking_are_those_of_float32_brute_force_over_the_recipe(sample_cairn, embedder):
    reference = _reference_vectors(sample_cairn, embedder)
    service = sample_cairn.query
    weight = service.sentence_weight
    for question in ("how long does the dough rise", "when to plant garlic", "a present for my sister"):
        q = embedder.embed([question])[0]
        cosine = {c: max(float(v @ q), float((s @ q).max())) for c, (v, s) in reference.items()}
        dense = {
            c: max(float(v @ q), weight * float((s @ q).max()))
            for c, (v, s) in reference.items()
            if max(float(v @ q), service.FLOOR_SENTENCE_WEIGHT * float((s @ q).max())) >= service.floor
        }
        hits, _ = service.retrieve(question, top_k=5, mode="dense", per_note=5)
        assert [h.chunk_id for h in hits] == sorted(dense, key=lambda c: (-dense[c], c))[:5]
        for h in hits:
            assert h.cosine == pytest.approx(cosine[h.chunk_id], abs=1e-5)


OLD_RECIPE_UNITS = "units=sentences-v1|title_weight=0.5"  # the recipe before whole-chunk vectors


@pytest.mark.slow  # indexes the sample vault, re-embeds its whole chunks, embeds them once more to compare
def test_an_index_made_with_the_previous_recipe_re_makes_its_vectors_once(fresh_cairn, embedder, caplog):
    fresh_cairn.indexing.index()
    store = fresh_cairn.store
    # The index as the previous recipe left it: its recipe id, no whole-chunk vector in the embedding cache.
    store.set_meta("vector_recipe", f"{embedder.model_id}|{OLD_RECIPE_UNITS}")
    pairs = store.chunk_title_hashes()
    with store.conn as c:
        c.executemany(
            "DELETE FROM embedding_cache WHERE content_hash = ?", [(whole_chunk_hash(t, h),) for t, h in pairs]
        )
    n_chunks = store.stats().chunks
    with caplog.at_level(logging.INFO, logger="cairn.index.vectors"):
        upgraded = open_cairn(fresh_cairn.config.vault, fresh_cairn.config.data_dir, embedder)
        try:
            report = upgraded.indexing.index()
            again = upgraded.indexing.index()
        finally:
            upgraded.close()
    changed = [r for r in caplog.records if "vector recipe changed" in r.getMessage()]
    assert len(changed) == 1
    assert report.vectors_written == n_chunks
    # Only the whole chunks go through the model; sentences and titles come from the embedding cache.
    assert report.texts_embedded == len(pairs)
    assert again.vectors_written == 0 and again.texts_embedded == 0
    reference = _reference_vectors(fresh_cairn, embedder)
    stored = store.vectors(list(reference))
    for cid, (vec, _) in reference.items():
        np.testing.assert_allclose(stored[cid], vec, atol=1e-5)


FOOTER = (
    "# This note in GitHub\n\n"
    '<span class="git-footer">[Edit In GitHub](https://github.com/obsidian-community/obsidian-hub/edit/main/'
    '01%20-%20Community/People/Some%20person.md "git-hub-edit-note") | [Copy this note](https://raw.'
    "githubusercontent.com/obsidian-community/obsidian-hub/main/01%20-%20Community/People/Some%20person.md "
    '"git-hub-copy-note") | [Download this vault](https://github.com/obsidian-community/obsidian-hub/archive/'
    'refs/heads/main.zip "git-hub-download-vault") </span>\n'
)


def test_the_whole_chunk_text_reads_the_cleaned_passage_not_link_targets_or_html(tmp_path, embedder):
    """A footer of links, as thousands of obsidian-hub notes end: the model reads its words, not its URLs."""
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Some person.md").write_text("Some person writes plugins.\n\n" + FOOTER, encoding="utf-8")
    cairn = open_cairn(vault, tmp_path / "data", embedder)
    try:
        cairn.indexing.index()
        rows = cairn.store.conn.execute(
            "SELECT n.title, c.symbol, c.text, c.kind FROM chunks c JOIN notes n ON n.id = c.note_id"
        ).fetchall()
    finally:
        cairn.close()
    footer = [r for r in rows if "git-footer" in r[2]]
    assert footer, rows
    title, symbol, text, kind = footer[0]
    whole = whole_chunk_text(title, symbol, embedding_texts(symbol, text, kind))
    assert "Edit In GitHub" in whole and "Download this vault" in whole
    assert "https://" not in whole and "git-footer" not in whole and "%20" not in whole
    assert embedder.tokenizer.count_tokens(whole) < embedder.tokenizer.count_tokens(text) / 3
