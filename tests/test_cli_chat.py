"""``cairn ask --chat``: follow-up questions in the terminal, each asked with the conversation so far (the real
console script on a copy of the sample vault, no language model: answers from the notes' own sentences)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from support.cli import NOT_FOUND, TIMEOUT_S, cairn_env, cairn_executable, run_cairn, run_json
from support.vaults import SAMPLE_VAULT

pytestmark = pytest.mark.slow  # a `cairn` subprocess per call

FIRST = "How do I make tomato sauce?"
FOLLOW_UP = "How long does it keep?"


def chat(home: Path, vault: Path, *flags: str, typed: str = "") -> subprocess.CompletedProcess:
    """``cairn ask FIRST --chat`` with ``typed`` as what the user types (stdin)."""
    return subprocess.run(
        [cairn_executable(), "ask", FIRST, "--chat", *flags, "--vault", str(vault)],
        env=cairn_env(home),
        input=typed,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, Path]:
    """(home, vault): a copy of the sample vault, indexed."""
    home = tmp_path_factory.mktemp("chat-home")
    vault = tmp_path_factory.mktemp("chat") / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    run_json(home, "index", "--vault", str(vault), "--json")
    return home, vault


def test_a_follow_up_typed_after_an_answer_is_asked_with_the_question_before(sample):
    home, vault = sample
    alone = run_cairn(home, "ask", FOLLOW_UP, "--vault", str(vault))
    assert alone.stdout.startswith(NOT_FOUND)  # "it" is nothing without the question before

    talk = chat(home, vault, typed=f"{FOLLOW_UP}\n\n")
    assert talk.returncode == 0, talk.stderr
    first, follow_up = talk.stdout.split(f"> {FOLLOW_UP}", 1)
    assert "Kitchen/Tomato sauce.md" in first
    assert "Sealed jars keep for a year" in follow_up
    assert "Kitchen/Tomato sauce.md" in follow_up
    assert NOT_FOUND not in follow_up


def test_chat_ends_at_an_empty_line_and_refuses_json(sample):
    home, vault = sample
    talk = chat(home, vault, typed="\nHow deep do I plant garlic?\n")
    assert talk.returncode == 0, talk.stderr
    assert "Kitchen/Tomato sauce.md" in talk.stdout
    assert "> How deep" not in talk.stdout  # the empty line ended the conversation before the next question
    refused = chat(home, vault, "--json")
    assert refused.returncode == 2
    assert "--chat" in refused.stderr and refused.stdout == ""
