"""``max_note_bytes``: a value that is not a size (≤ 0, not a whole number) is a config error naming the key, like
every other key; and after the limit changes, the next whole scan reads again the notes skipped for size (as the
``pdf_*`` limits do for PDFs), so raising it as the skip message advises indexes them without ``--full``.

Real index (SQLite + the ONNX model) over a temp vault; the real ``cairn`` CLI for the config error.
"""

from __future__ import annotations

import pytest

from cairn.app import Cairn
from cairn.config import load_config
from cairn.errors import ConfigError
from support import embedders
from support.cairns import open_cairn
from support.cli import run_cairn
from support.requests import search_request

embedder = embedders.stand_in  # the fixture: the stand-in model, these tests only move data

BIG_WORD = "zqbigword"


def _vault(tmp_path):
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "big.md").write_text("# Big\n" + f"{BIG_WORD} is a sentence in a big note.\n" * 300, encoding="utf-8")
    (vault / "small.md").write_text("# Small\nsmall note\n", encoding="utf-8")
    return vault


def _skipped(cairn: Cairn) -> dict[str, str]:
    return {e["filePath"]: e["reason"] for e in cairn.indexing.stats()["errors"] if e["skipped"]}


@pytest.mark.parametrize("value", ["-1", "0", "5.5", "true", '"5MB"'])
def test_a_max_note_bytes_that_is_not_a_size_is_a_config_error(tmp_path, value):
    (tmp_path / "config.toml").write_text(f"max_note_bytes = {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(config_file=tmp_path / "config.toml", env={})
    assert "'max_note_bytes'" in err.value.message and str(tmp_path / "config.toml") in err.value.message


def test_cairn_index_refuses_a_negative_max_note_bytes_instead_of_skipping_every_note(tmp_path):
    vault = _vault(tmp_path)
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text("max_note_bytes = -1\n", encoding="utf-8")
    proc = run_cairn(home, "index", "--vault", str(vault), check=False)
    assert proc.returncode == 1 and "skipped" not in proc.stdout
    assert "'max_note_bytes'" in proc.stderr and "at least 1" in proc.stderr, proc.stderr


def test_whole_number_sizes_are_still_taken():
    assert load_config({"max_note_bytes": "20000000"}, env={}).max_note_bytes == 20_000_000
    assert load_config({"max_note_bytes": 6.0}, env={}).max_note_bytes == 6


def test_raising_max_note_bytes_reads_the_skipped_note_at_the_next_scan(tmp_path, embedder):
    vault, data = _vault(tmp_path), tmp_path / "data"
    size = (vault / "big.md").stat().st_size
    small = open_cairn(vault, data, embedder, max_note_bytes=size - 1)
    try:
        small.indexing.index()
        assert "raise max_note_bytes" in _skipped(small)["big.md"]
        assert not small.query.search(search_request(BIG_WORD)).hits
        again = small.indexing.index()
        assert (again.added, again.updated) == (0, 0), "same limit, same bytes: nothing read again"
    finally:
        small.close()
    raised = open_cairn(vault, data, embedder, max_note_bytes=size)  # config edited
    try:
        report = raised.indexing.index()
        assert report.added + report.updated == 1 and not report.skipped
        assert "big.md" not in _skipped(raised)
        assert raised.query.search(search_request(BIG_WORD)).hits[0].file_path == "big.md"
        assert raised.indexing.stats()["notes"] == 2
        after = raised.indexing.index()
        assert (after.added, after.updated, after.unchanged) == (0, 0, 2), "read once, not on every scan"
    finally:
        raised.close()
    lowered = open_cairn(vault, data, embedder, max_note_bytes=10)
    try:  # lowering it re-reads nothing already indexed (as for PDFs); a still-too-large note stays skipped once
        (vault / "huge.md").write_text("# Huge\n" + "words " * 50, encoding="utf-8")
        report = lowered.indexing.index()
        assert [p for p, _ in report.skipped] == ["huge.md"]
        assert "limit 10 bytes" in _skipped(lowered)["huge.md"]
        assert lowered.indexing.stats()["notes"] == 2  # big.md stays indexed
        again = lowered.indexing.index()
        assert (again.added, again.updated, again.skipped) == (0, 0, []) and "huge.md" in _skipped(lowered)
    finally:
        lowered.close()
