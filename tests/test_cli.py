"""The real ``cairn`` console script, run in subprocesses (docs/design.md, "Interfaces" → CLI).

Every run gets its own CAIRN_DATA_DIR / CAIRN_CONFIG_DIR / CAIRN_LOG_DIR under a temp dir
and CAIRN_KEYRING=file, so nothing touches the user's real folders or keyring. The vault
is a handful of notes written here, each holding a specific fact; the sample vault
(examples/vault) gets a few of the questions of examples/questions.md when it exists.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.config import WEAK_ANSWER_LEAD
from support.cli import NOT_FOUND, TIMEOUT_S, _serve_and_wait, cairn_env, cairn_executable, run_cairn, run_json

pytestmark = pytest.mark.slow  # a `cairn` subprocess per call (1-4 s each)

REPO = Path(__file__).resolve().parents[1]
SAMPLE_VAULT = REPO / "examples" / "vault"

SEARCH_KEYS = {"filePath", "symbol", "score", "snippet", "tags"}
SOURCE_KEYS = {"n", "filePath", "symbol", "score", "snippet"}

NOTES = {
    "Projects/Beekeeping.md": """---
tags: [bees, hobby]
---
# Beekeeping

## Hive inspection

I inspect the hives every nine days in summer, looking for queen cells.
The smoker burns dried lavender stalks.

## Honey harvest

The first honey harvest is in late July; each super yields about 11 kg of honey.
""",
    "Home/Boiler.md": """---
tags: [house]
---
# Boiler

The boiler pressure should sit at 1.3 bar when the system is cold.
The annual boiler service is booked with Mr. Haddad every March.
""",
    "Home/Car.md": """---
tags: [house/car]
---
# Car

Tyre pressure for the car: 2.4 bar front and rear, checked at the petrol station monthly.
""",
    "Bikes/Touring bike.md": """# Touring bike

#bikes

Tyre pressure for the touring bike: 65 psi front, 75 psi rear.
The chain is waxed every 300 km.
""",
}


def citations(answer: str) -> list[int]:
    """The citation numbers ``[n]`` in the answer body (before the trailing ``Sources:`` list, if any)."""
    body = answer.split("\n\nSources:\n", 1)[0]
    return [int(n) for n in re.findall(r"\[(\d+)\]", body)]


def assert_answer_shape(out: dict) -> None:
    assert {"answer", "grounded", "notFound", "sources"} <= set(out)
    assert isinstance(out["answer"], str) and isinstance(out["grounded"], bool) and isinstance(out["notFound"], bool)
    for s in out["sources"]:
        assert SOURCE_KEYS <= set(s), s
        assert ("lines" in s) != ("page" in s), s
    assert [s["n"] for s in out["sources"]] == list(range(1, len(out["sources"]) + 1))
    listed = {s["n"] for s in out["sources"]}
    cited = set(re.findall(r"\[(\d+)\]", out["answer"]))
    assert {int(n) for n in cited} <= listed, f"the answer cites {sorted(cited)} but lists sources {sorted(listed)}"


# -- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli-home")


@pytest.fixture(scope="module")
def vault(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli-vault")
    for rel, text in NOTES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / ".obsidian").mkdir()
    (root / ".obsidian" / "app.json").write_text("{}", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def first_index(home, vault) -> dict:
    """The report of the first ``cairn index --json`` of the vault (a fresh data folder)."""
    return run_json(home, "index", "--vault", str(vault), "--json")


# -- index ------------------------------------------------------------------------------


def test_index_json_reports_every_note_added_and_embedded(first_index):
    assert first_index["scanned"] == len(NOTES)
    assert first_index["added"] == len(NOTES)
    assert first_index["updated"] == first_index["deleted"] == 0
    assert first_index["skipped"] == []
    assert first_index["textsEmbedded"] > 0
    stats = first_index["stats"]
    assert stats["notes"] == len(NOTES)
    assert stats["chunks"] >= len(NOTES)
    assert stats["pending"] == 0
    assert stats["vectors"] >= stats["chunks"] > 0


def test_a_second_index_run_embeds_nothing(home, vault, first_index):
    again = run_json(home, "index", "--vault", str(vault), "--json")
    assert again["textsEmbedded"] == 0
    assert again["added"] == again["updated"] == again["deleted"] == 0
    assert again["unchanged"] == len(NOTES)
    assert again["stats"] == first_index["stats"]


def test_index_without_json_prints_a_human_summary(home, vault, first_index):
    proc = run_cairn(home, "--vault", str(vault), "index")  # global option before the command works too
    assert f"{len(NOTES)} files scanned" in proc.stdout
    assert "0 texts embedded" in proc.stdout


# -- search -----------------------------------------------------------------------------


def test_search_json_has_the_documented_shape_and_finds_the_note(home, vault, first_index):
    out = run_json(home, "search", "boiler pressure", "--vault", str(vault), "--json")
    assert set(out) >= {"results"}
    results = out["results"]
    assert results, "an in-vault query found nothing"
    for r in results:
        assert SEARCH_KEYS <= set(r), r
        assert isinstance(r["score"], float) and isinstance(r["tags"], list) and isinstance(r["snippet"], str)
        assert isinstance(r["lines"], list) and len(r["lines"]) == 2 and r["lines"][0] <= r["lines"][1]
    top = results[0]
    assert top["filePath"] == "Home/Boiler.md"
    assert top["tags"] == ["house"]
    assert "1.3 bar" in top["snippet"]
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)


def test_search_finds_every_note_on_the_topic_and_top_k_limits_them(home, vault, first_index):
    out = run_json(home, "search", "tyre pressure", "--vault", str(vault), "--json")
    assert {"Bikes/Touring bike.md", "Home/Car.md"} <= {r["filePath"] for r in out["results"]}
    out = run_json(home, "search", "tyre pressure", "--vault", str(vault), "--top-k", "1", "--json")
    assert len(out["results"]) == 1


@pytest.mark.parametrize(
    "tag, expected",
    [
        ("bikes", "Bikes/Touring bike.md"),  # an inline #tag
        ("house", "Home/Car.md"),  # the note is tagged house/car: nested tags match their parent scope
        ("house/car", "Home/Car.md"),
    ],
)
def test_search_tag_scopes_to_notes_with_that_tag(home, vault, first_index, tag, expected):
    out = run_json(home, "search", "tyre pressure", "--vault", str(vault), "--tag", tag, "--json")
    assert out["results"] and out["results"][0]["filePath"] == expected
    for r in out["results"]:
        assert any(t == tag or t.startswith(tag + "/") for t in r["tags"]), r


def test_search_tag_scope_can_leave_nothing(home, vault, first_index):
    out = run_json(home, "search", "tyre pressure", "--vault", str(vault), "--tag", "bees", "--json")
    assert out["results"] == []


def test_search_repeated_tags_mean_any_of_them(home, vault, first_index):
    out = run_json(home, "search", "tyre pressure", "--vault", str(vault), "--tag", "bees", "--tag", "bikes", "--json")
    assert [r["filePath"] for r in out["results"]] == ["Bikes/Touring bike.md"]


@pytest.mark.parametrize("folder, expected", [("Home", "Home/Car.md"), ("Bikes", "Bikes/Touring bike.md")])
def test_search_folder_scopes_to_that_folder(home, vault, first_index, folder, expected):
    out = run_json(home, "search", "tyre pressure", "--vault", str(vault), "--folder", folder, "--json")
    assert out["results"] and out["results"][0]["filePath"] == expected
    assert all(r["filePath"].startswith(folder + "/") for r in out["results"]), out["results"]


# -- ask --------------------------------------------------------------------------------


def test_ask_json_cites_the_note_that_holds_the_answer(home, vault, first_index):
    out = run_json(home, "ask", "How often do I inspect the hives?", "--vault", str(vault), "--json")
    assert_answer_shape(out)
    assert out["notFound"] is False
    assert out["sources"], "an in-vault question has no sources"
    cited = citations(out["answer"])
    assert cited, f"the answer cites nothing: {out['answer']!r}"
    first = next(s for s in out["sources"] if s["n"] == cited[0])
    assert first["filePath"] == "Projects/Beekeeping.md"
    assert "nine days" in first["snippet"]
    assert "nine days" in out["answer"]


def test_ask_without_json_prints_the_answer_with_citations(home, vault, first_index):
    proc = run_cairn(home, "ask", "What tyre pressure does the touring bike need?", "--vault", str(vault))
    assert "65 psi" in proc.stdout
    assert re.search(r"\[\d+\]", proc.stdout)
    assert "Bikes/Touring bike.md" in proc.stdout


def test_ask_off_topic_question_is_not_found_with_the_fixed_text(home, vault, first_index):
    out = run_json(home, "ask", "What is the capital of France?", "--vault", str(vault), "--json")
    assert_answer_shape(out)
    assert out["notFound"] is True
    assert out["grounded"] is False
    assert out["answer"] == NOT_FOUND
    assert out["sources"] == []


def test_ask_tag_scope_outside_the_answer_is_not_found(home, vault, first_index):
    out = run_json(
        home, "ask", "What tyre pressure does the touring bike need?", "--vault", str(vault), "--tag", "bees", "--json"
    )
    assert all(s["filePath"] == "Projects/Beekeeping.md" for s in out["sources"]), out["sources"]
    assert "65 psi" not in out["answer"]


# -- status -----------------------------------------------------------------------------


def test_status_json_reports_counts_and_no_daemon(home, vault, first_index):
    out = run_json(home, "status", "--vault", str(vault), "--json")
    assert out["vault"] == str(vault.resolve())
    assert out["notes"] == len(NOTES)
    assert out["chunks"] == first_index["stats"]["chunks"]
    assert out["vectors"] == first_index["stats"]["vectors"]
    assert out["pending"] == 0
    assert isinstance(out["lastIngestedAt"], (int, float))
    assert out["daemon"] == {"running": False}


def test_a_second_index_run_still_names_the_files_it_cannot_index(tmp_path):
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "ok.md").write_text("# ok\n\nfine\n", encoding="utf-8")
    (vault / "bad.md").write_bytes(b"# bad\n\ncaf\xe9 au lait\n")  # Latin-1, not UTF-8
    first = run_cairn(tmp_path / "home", "index", "--vault", str(vault))
    again = run_cairn(tmp_path / "home", "index", "--vault", str(vault))
    assert "skipped bad.md:" in first.stdout
    assert "0 skipped" in again.stdout and "skipped bad.md:" in again.stdout  # nothing new, but still not indexed


def test_status_of_a_never_indexed_vault_is_all_zero(tmp_path):
    (tmp_path / "empty-vault").mkdir()
    out = run_json(tmp_path / "home", "status", "--vault", str(tmp_path / "empty-vault"), "--json")
    assert (out["notes"], out["chunks"], out["vectors"], out["pending"]) == (0, 0, 0, 0)
    assert (out["pdfs"], out["skipped"], out["errors"]) == (0, 0, [])
    assert out["daemon"]["running"] is False
    text = run_cairn(tmp_path / "home", "status", "--vault", str(tmp_path / "empty-vault"))
    assert text.returncode == 0, text.stderr
    assert "Updated:  never" in text.stdout and "Skipped:  none" in text.stdout


def test_output_into_a_closed_pipe_is_not_an_error(tmp_path):
    # `cairn … | head -1`: the reader leaves early; Python then raises BrokenPipeError on the write.
    (tmp_path / "empty-vault").mkdir()
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [cairn_executable(), "status", "--vault", str(tmp_path / "empty-vault"), "--json"],
            env=cairn_env(tmp_path / "home"),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT_S,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 0, proc.stderr
    assert "Error" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


# -- token ------------------------------------------------------------------------------


def test_token_is_stable_and_rotate_changes_it(tmp_path):
    home = tmp_path / "home"
    vault = tmp_path / "vault"
    vault.mkdir()
    first = run_cairn(home, "token", "--vault", str(vault))
    assert re.fullmatch(r"[A-Za-z0-9_-]{20,}\n", first.stdout), first.stdout
    token = first.stdout.strip()
    assert token not in first.stderr  # never logged
    assert run_cairn(home, "token", "--vault", str(vault)).stdout.strip() == token
    rotated = run_cairn(home, "token", "--vault", str(vault), "--rotate").stdout.strip()
    assert re.fullmatch(r"[A-Za-z0-9_-]{20,}", rotated)
    assert rotated != token
    assert run_cairn(home, "token", "--vault", str(vault)).stdout.strip() == rotated


def test_token_without_a_vault_says_each_vault_has_its_own(tmp_path):
    proc = run_cairn(tmp_path / "home", "token", check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "Each vault has its own API token: pass --vault PATH" in proc.stderr and "plugin install" in proc.stderr


# -- exit codes and streams -------------------------------------------------------------


def test_a_missing_vault_folder_exits_1_with_an_error_on_stderr(tmp_path):
    missing = tmp_path / "no-such-vault"
    for args in (("index", "--json"), ("search", "x", "--json"), ("ask", "x", "--json"), ("status", "--json")):
        proc = run_cairn(tmp_path / "home", *args, "--vault", str(missing), check=False)
        assert proc.returncode == 1, (args, proc.stderr)
        assert proc.stdout == ""
        assert proc.stderr.startswith("Error: "), proc.stderr
        assert str(missing) in proc.stderr
        assert "Traceback" not in proc.stderr


def test_no_vault_at_all_exits_1_and_says_how_to_give_one(tmp_path):
    proc = run_cairn(tmp_path / "home", "search", "x", check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: ") and "--vault" in proc.stderr


def test_a_corrupt_index_exits_1_with_an_error_saying_what_to_do(tmp_path, vault):
    home = tmp_path / "home"
    db = Path(run_json(home, "status", "--vault", str(vault), "--json")["database"])
    db.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # private, as Cairn makes them: the error alone
    db.write_bytes(b"this is not a SQLite database" * 200)
    db.chmod(0o600)
    proc = run_cairn(home, "search", "boiler", "--vault", str(vault), "--json", check=False)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith("Error: ") and str(db) in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("frobnicate",),
        ("ask",),
        ("search", "two", "queries"),  # no QUERY is the recent notes; two are a usage error
        ("ask", "--json"),
        ("search", "x", "--top-k", "many"),
        ("search", "x", "--top-k", "0"),
        ("search", "x", "--top-k", "51"),
        ("search", "x", "--no-such-flag"),
        ("token", "--rotate", "extra"),
    ],
    ids=lambda a: " ".join(a) or "no-command",
)
def test_bad_usage_exits_2_with_usage_on_stderr(tmp_path, args):
    proc = run_cairn(tmp_path / "home", *args, check=False)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert "usage: cairn" in proc.stderr


def test_json_stdout_stays_pure_when_debug_logging_is_on(home, vault, first_index):
    proc = run_cairn(home, "--debug", "search", "honey", "--vault", str(vault), "--json")
    json.loads(proc.stdout)
    assert "DEBUG" not in proc.stdout and "INFO" not in proc.stdout


# -- the sample vault -------------------------------------------------------------------

SAMPLE_QUESTIONS = [
    ("How long do I proof the sourdough in the fridge?", "Kitchen/Sourdough.md", "12 to 16 hours"),
    ("When should I plant garlic, and how deep?", "Garden/Garlic.md", "5 cm"),
    ("How much lemon juice goes into each jar of tomato sauce?", "Kitchen/Tomato sauce.md", "tablespoon"),
]


@pytest.fixture(scope="module")
def sample_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("cli-sample-home")
    report = run_json(home, "index", "--vault", str(SAMPLE_VAULT), "--json")
    assert report["stats"]["notes"] > 0 and report["stats"]["pending"] == 0
    return home


_sample_answers: dict[tuple[Path, str], dict] = {}


def sample_ask(home: Path, question: str) -> dict:
    """``cairn ask QUESTION --json`` on the sample vault, run once per question."""
    if (home, question) not in _sample_answers:
        _sample_answers[home, question] = run_json(home, "ask", question, "--vault", str(SAMPLE_VAULT), "--json")
    return _sample_answers[home, question]


@pytest.mark.parametrize("question, note, fact", SAMPLE_QUESTIONS, ids=[n for _, n, _ in SAMPLE_QUESTIONS])
def test_ask_the_sample_vault_cites_the_right_note(sample_home, question, note, fact):
    out = sample_ask(sample_home, question)
    assert_answer_shape(out)
    assert out["notFound"] is False
    cited = citations(out["answer"])
    assert cited, out["answer"]
    cited_paths = {s["filePath"] for s in out["sources"] if s["n"] in cited}
    assert note in cited_paths, (note, cited_paths, out["answer"])
    assert any(fact in s["snippet"] for s in out["sources"] if s["filePath"] == note), out["sources"]


@pytest.mark.parametrize("question, note, fact", SAMPLE_QUESTIONS, ids=[n for _, n, _ in SAMPLE_QUESTIONS])
def test_ask_the_sample_vault_answer_states_the_fact(sample_home, question, note, fact):
    """The answer text itself (extractive without a model) carries the fact examples/questions.md lists."""
    out = sample_ask(sample_home, question)
    body = out["answer"].split("\n\nSources:\n", 1)[0]
    assert fact in body, out["answer"]


def test_search_shows_how_relevant_each_hit_is_in_words_not_the_fused_score(sample_home):
    """Each result line ends with its relevance ("strong match", ..., "exact words" for a passage that holds the
    query's words without being close in meaning); the raw RRF score and cosine stay in ``--json``."""
    proc = run_cairn(
        sample_home, "search", "How do I feed my sourdough starter?", "--vault", str(SAMPLE_VAULT), "--top-k", "4"
    )
    results = [line for line in proc.stdout.splitlines() if re.match(r"\d+\. ", line)]
    assert len(results) == 4, proc.stdout
    assert results[0].startswith("1. Kitchen/Sourdough") and results[0].endswith(", strong match)"), results[0]
    labels = r"(strong match|good match|weak match|exact words|similar words)\)$"
    assert all(re.search(labels, line) for line in results), results
    assert "score" not in proc.stdout and "cos " not in proc.stdout
    rare = run_cairn(sample_home, "search", "hooch", "--vault", str(SAMPLE_VAULT), "--top-k", "3").stdout
    assert rare.startswith("1. Kitchen/Sourdough starter.md") and "exact words)" in rare.splitlines()[0], rare


def test_ask_lists_the_sources_it_cites_then_the_rest_under_also_retrieved(sample_home):
    """The extractive answer (no model) cites some of the passages it was chosen from: ``Sources:`` lists exactly
    those, ``Also retrieved:`` the others, each line with its relevance; ``--json`` marks them ``cited``."""
    question = "How do I feed my sourdough starter?"
    text = run_cairn(sample_home, "ask", question, "--vault", str(SAMPLE_VAULT)).stdout
    body, rest = text.split("\n\nSources:\n", 1)
    listed, also = rest.split("\n\nAlso retrieved:\n", 1)
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", body)}
    assert cited and {int(n) for n in re.findall(r"^\[(\d+)\]", listed, re.M)} == cited, text
    also_n = {int(n) for n in re.findall(r"^\[(\d+)\]", also, re.M)}
    assert also_n and not also_n & cited, text
    assert all(
        line.endswith(("match", "exact words", "similar words")) for line in re.findall(r"^\[\d+\].*$", rest, re.M)
    ), text
    out = sample_ask(sample_home, question)
    assert {s["n"] for s in out["sources"] if s["cited"]} == cited
    assert {s["n"] for s in out["sources"] if not s["cited"]} == also_n


def test_ask_json_answer_is_the_answer_alone_and_the_plain_output_adds_the_list(sample_home):
    """``--json``'s ``answer`` holds no sources list (its ``sources`` do); the plain output prints that same answer,
    then the list."""
    question = "How do I feed my sourdough starter?"
    text = run_cairn(sample_home, "ask", question, "--vault", str(SAMPLE_VAULT)).stdout
    out = sample_ask(sample_home, question)
    assert "Sources:" not in out["answer"] and "Also retrieved:" not in out["answer"], out["answer"]
    assert text.startswith(out["answer"] + "\n\nSources:\n[")


def test_ask_the_sample_vault_off_topic_is_not_found(sample_home):
    out = run_json(sample_home, "ask", "What is the capital of France?", "--vault", str(SAMPLE_VAULT), "--json")
    assert (out["notFound"], out["answer"], out["sources"]) == (True, NOT_FOUND, [])


def test_ask_with_weak_evidence_says_so_and_cites_the_closest_passages(sample_home):
    """Passages on the topic that do not clearly answer (the Pests note knows slugs, not lettuce): the answer says so,
    then cites the closest passages; ``--json`` says ``weak``."""
    question = "How do I stop slugs eating my lettuce?"
    text = run_cairn(sample_home, "ask", question, "--vault", str(SAMPLE_VAULT)).stdout
    assert text.startswith(WEAK_ANSWER_LEAD) and "\n\nSources:\n[" in text, text
    assert "Garden/Pests and problems.md" in text and "The evidence was weak" in text, text
    out = sample_ask(sample_home, question)
    assert (out["weak"], out["notFound"], out["grounded"]) == (True, False, False) and out["sources"]


def test_the_sample_vault_is_never_written(sample_home):
    before = {p: p.stat().st_mtime_ns for p in SAMPLE_VAULT.rglob("*")}
    run_json(sample_home, "index", "--vault", str(SAMPLE_VAULT), "--full", "--json")
    assert {p: p.stat().st_mtime_ns for p in SAMPLE_VAULT.rglob("*")} == before


# -- one writer per index: `cairn index` beside a running daemon ---------------------------------


def test_index_while_a_daemon_serves_the_index_exits_1_naming_the_daemon_and_the_daemon_keeps_serving(tmp_path):
    import signal
    import urllib.request

    home, vault = tmp_path / "home", tmp_path / "vault"
    for rel, text in NOTES.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(text, encoding="utf-8")
    proc, url = _serve_and_wait(home, vault)
    try:
        refused = run_cairn(home, "index", "--vault", str(vault), "--json", check=False)
        assert refused.returncode == 1 and refused.stdout == ""
        err = refused.stderr
        assert err.startswith("Error: ") and err.count("\n") == 1, err
        assert f"pid {proc.pid}" in err and url in err, err  # the daemon, named from the lock and service.json
        assert "POST /index/reindex" in err and "tray" in err and f"kill {proc.pid}" in err, err
        # A search meanwhile only reads (the daemon is the writer) and still answers.
        assert run_cairn(home, "search", "hive inspection", "--vault", str(vault), "--json").returncode == 0
        with urllib.request.urlopen(url + "/health", timeout=30) as resp:  # the daemon is untouched
            assert resp.status == 200
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    after = run_json(home, "index", "--vault", str(vault), "--json")  # the daemon is gone: index runs
    assert after["stats"]["notes"] == len(NOTES) and after["stats"]["pending"] == 0


def test_serve_or_index_while_a_cairn_index_run_writes_the_index_exits_1_saying_to_wait(tmp_path):
    from cairn.config import load_config
    from cairn.store.recovery import InstanceLock, instance_lock_path

    home, vault = tmp_path / "home", tmp_path / "vault"
    vault.mkdir()
    (vault / "Note.md").write_text("A note.\n", encoding="utf-8")
    config = load_config({"vault": str(vault), "data_dir": str(home / "data")}, env={})
    with InstanceLock(instance_lock_path(config.db_path), role="index"):  # as a running `cairn index` holds it
        for args in (("serve", "--port", "0", "--no-tray"), ("index",)):
            proc = run_cairn(home, *args, "--vault", str(vault), check=False)
            assert proc.returncode == 1, (args, proc.stderr)
            assert f"A `cairn index` run (pid {os.getpid()}) is indexing" in proc.stderr, proc.stderr
            assert f"wait for it to finish, then run `cairn {args[0]}` again" in proc.stderr, proc.stderr
    assert not config.db_path.exists()  # neither opened the index while it was held


def test_the_token_hint_printed_by_serve_names_a_cairn_that_runs(monkeypatch):
    # `make run` starts .venv/bin/cairn, which is usually not on PATH: the hint must say where it is.
    from cairn.cli import _cairn_command

    exe = Path(cairn_executable()).resolve()
    monkeypatch.setattr(sys, "argv", [str(exe), "serve"])
    monkeypatch.setenv("PATH", "/nonexistent")
    assert _cairn_command() == str(exe)
    assert subprocess.run([_cairn_command(), "--help"], capture_output=True, timeout=TIMEOUT_S).returncode == 0
    monkeypatch.setenv("PATH", str(exe.parent))
    assert _cairn_command() == "cairn"
