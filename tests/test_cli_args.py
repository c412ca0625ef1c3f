"""Where ``cairn``'s options may go: ``--vault`` (and every other option) before or after the command, and also
after a positional given after ``--`` (how a query that starts with ``-`` is typed: ``cairn search -- -tomato
--vault V``). And what ``cairn search`` / ``cairn ask`` say when they index a vault first: the progress
``cairn index`` shows, not a silent wait."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn.cli.parser import build_parser, parse_args
from support.cli import run_cairn


def _parse(*argv: str):
    return parse_args(build_parser(), list(argv))


@pytest.mark.parametrize(
    "argv",
    [
        ("search", "--vault", "V", "--", "-tomato"),
        ("--vault", "V", "search", "--", "-tomato"),
        ("search", "--", "-tomato", "--vault", "V"),
        ("search", "--", "-tomato", "--vault=V"),
    ],
)
def test_a_query_after_double_dash_takes_the_vault_before_or_after_it(argv):
    args = _parse(*argv)
    assert (args.command, args.text, args.vault) == ("search", "-tomato", "V")


def test_options_of_the_command_may_follow_the_query_after_double_dash_too():
    args = _parse("search", "--", "-tomato", "--json", "--top-k", "3", "--tag", "garden", "--vault", "V")
    assert (args.text, args.json, args.top_k, args.tag, args.vault) == ("-tomato", True, 3, ["garden"], "V")
    args = _parse("ask", "--", "-x?", "--vault", "V", "--json")
    assert (args.command, args.text, args.json) == ("ask", "-x?", True)
    # The word right after `--` is the query whatever it looks like; options only after it.
    args = _parse("search", "--", "--json", "--vault", "V")
    assert (args.text, args.json, args.vault) == ("--json", False, "V")
    # Nested commands count their own positionals.
    args = _parse("policy", "check", "--", "-odd.yaml", "--vault", "V")
    assert (args.file, args.vault) == ("-odd.yaml", "V")
    args = _parse("mcp", "token", "--", "-agent", "--rotate")
    assert (args.name, args.rotate) == ("-agent", True)


def test_a_second_word_after_the_query_is_still_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        _parse("search", "--", "-tomato", "garden")
    assert exc.value.code == 2 and "unrecognized arguments: garden" in capsys.readouterr().err


def _vault(root: Path) -> Path:
    vault = root / "vault"
    (vault / "Garden").mkdir(parents=True)
    (vault / "Garden" / "Garlic.md").write_text("# Garlic\n\nPlant garlic cloves 5 cm deep in October.\n")
    (vault / "Boiler.md").write_text("# Boiler\n\nThe boiler pressure sits at 1.3 bar when cold.\n")
    return vault


@pytest.mark.slow  # `cairn` subprocesses, each indexing a vault
def test_search_with_a_dash_query_and_the_vault_after_it_indexes_first_showing_progress(tmp_path):
    vault = _vault(tmp_path)
    proc = run_cairn(tmp_path / "home", "search", "--", "-garlic", "--vault", str(vault), "--json", check=False)
    assert proc.returncode == 0, proc.stderr
    paths = [hit["filePath"] for hit in json.loads(proc.stdout)["results"]]
    assert "Garden/Garlic.md" not in paths and paths, paths  # every note without the word
    # The vault was not indexed yet: the same progress lines as `cairn index`, on stderr.
    assert f"Indexing {vault.resolve()} first" in proc.stderr, proc.stderr
    for line in ("reading notes: 2 / 2, done in", "embedding passages: 2 / 2, done in"):
        assert line in proc.stderr, proc.stderr
    indexed = run_cairn(tmp_path / "again", "index", "--vault", str(vault))
    assert [ln.split(",")[0] for ln in indexed.stderr.splitlines()] == [
        ln.split(",")[0] for ln in proc.stderr.splitlines()[1:]
    ]
    # Once indexed, nothing more is said.
    again = run_cairn(tmp_path / "home", "search", "--vault", str(vault), "--", "-garlic", "--json")
    assert again.stderr == "" and json.loads(again.stdout)["results"]


@pytest.mark.slow
def test_ask_on_a_vault_not_yet_indexed_shows_the_indexing_progress(tmp_path):
    vault = _vault(tmp_path)
    proc = run_cairn(tmp_path / "home", "ask", "How deep do I plant garlic?", "--vault", str(vault))
    assert "5 cm" in proc.stdout
    assert f"Indexing {vault.resolve()} first" in proc.stderr and "reading notes: 2 / 2" in proc.stderr, proc.stderr
