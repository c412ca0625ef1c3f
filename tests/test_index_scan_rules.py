"""What the index reads, by the scan's rules and the hints' alike: symlinks (never a withheld note under another path,
nothing outside the vault, no loop), folders named like notes, names equal in Unicode NFC or differing in case, a
vault folder that is gone."""

from __future__ import annotations

import os
import shutil
import unicodedata

import pytest

from cairn.errors import NotFoundError
from cairn.policy import Withhold
from support import embedders, index_vault
from support.index_vault import NOTES, indexed_paths
from support.requests import caller_of, search_request

vault, cairn = index_vault.vault, index_vault.cairn  # the fixtures


embedder = embedders.stand_in  # the fixture: the stand-in model, these tests only move data

# -- what is read: symlinks, folders named like notes, names equal in Unicode NFC (the scan's and the hints' rules)

NFC_NAME = unicodedata.normalize("NFC", "Résumé.md")
NFD_NAME = unicodedata.normalize("NFD", "Résumé.md")


def search_paths(cairn, query, withhold=None) -> set[str]:
    """The notes a keyword search finds (BM25: only notes holding a word of ``query``) for a caller withheld
    ``withhold`` (None: the owner)."""
    request = search_request(query, top_k=20)
    return {h.file_path for h in cairn.query.search(request, caller_of(cairn, withhold), mode="bm25").hits}


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
    assert cairn.library.list_notes(caller=caller_of(cairn, withhold))["total"] == 5
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
        assert (
            cairn.query.search(search_request("zqnfcword zqnfdword"), mode="bm25")
            .hits[0]
            .snippet.startswith("zqnfcword")
        )
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
        cairn.library.note("Flour.md", caller=caller_of(cairn, Withhold(("personal",), ("Private",))))
    assert "symlink" in info.value.message and "salary" not in info.value.message
