"""Where ``cairn``'s options may go: ``--vault`` (and every other option) before or after the command, and also
after a positional given after ``--`` (how a query that starts with ``-`` is typed: ``cairn search -- -tomato
--vault V``)."""

from __future__ import annotations

import pytest

from cairn.cli.parser import build_parser, parse_args


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
