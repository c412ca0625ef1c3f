"""``cairn serve`` as a real subprocess, spoken to with a real HTTP client (docs/design.md, "Interfaces" → HTTP).

The daemon runs on port 0 (a free port) with its own CAIRN_DATA_DIR / CAIRN_CONFIG_DIR /
CAIRN_LOG_DIR and CAIRN_KEYRING=file; it advertises its URL in ``<data dir>/service.json``,
which the tests poll with a deadline. The token comes from ``cairn token`` run with the same
environment. The last test stops the daemon with SIGINT; the fixture kills it whatever happens.
"""

from __future__ import annotations

import json
import signal
import subprocess
from typing import Any

import pytest

from support.cli import cairn_executable
from support.daemons import INDEX_DEADLINE_S, NOTES, Daemon, parse_sse, running_daemon, stop
from support.vaults import write_vault
from support.waits import wait_until

pytestmark = pytest.mark.e2e  # `cairn serve` as a subprocess, spoken to over HTTP

NOT_FOUND = "I couldn't find this in your indexed notes."


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    home = tmp_path_factory.mktemp("daemon-home")
    with running_daemon(home, write_vault(home / "vault", NOTES)) as d:
        yield d


@pytest.fixture(scope="module")
def indexed(daemon):
    """The daemon once its first index is complete (keyword rows and vectors)."""

    def done():
        status, stats = daemon.get_json("/index/stats", token=daemon.token)
        assert status == 200, stats
        return stats if stats["pending"] == 0 and not stats["indexing"] and stats["notes"] == len(NOTES) else None

    return wait_until("the first index", done, INDEX_DEADLINE_S, proc=daemon.proc, log=daemon.home / "serve.stderr")


# -- start-up ----------------------------------------------------------------------------


def test_the_daemon_listens_on_loopback_and_says_where(daemon):
    assert daemon.url.startswith("http://127.0.0.1:")
    assert daemon.port and daemon.port != 0
    assert f"at {daemon.url}" in daemon.stderr()
    info = json.loads(daemon.service_file.read_text(encoding="utf-8"))
    assert daemon.token not in json.dumps(info)  # service.json never holds the token


def test_health_answers_without_a_token(daemon):
    status, body = daemon.get_json("/health")
    assert status == 200
    assert body["status"] == "ok"
    assert body["store"]["ok"] is True and body["embedder"]["ok"] is True
    assert body["llm"] == {"configured": False, "reachable": False, "remote": False}


@pytest.mark.parametrize("token", [None, "wrong-token-" + "x" * 32])
def test_ask_without_the_right_token_is_401_with_the_json_error_shape(daemon, token):
    status, headers, raw = daemon.request(
        "POST", "/ask", body={"question": "How often do I inspect the hives?"}, token=token
    )
    assert status == 401
    assert headers["content-type"].startswith("application/json")
    body = json.loads(raw)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == "unauthorized"
    assert daemon.token not in raw.decode()


@pytest.mark.parametrize("path", ["/search?q=honey", "/index/stats"])
def test_other_routes_need_the_token_too(daemon, path):
    status, _, raw = daemon.request("GET", path)
    assert status == 401
    assert json.loads(raw)["error"]["code"] == "unauthorized"


def test_the_token_from_cairn_token_is_the_daemons(daemon):
    status, _ = daemon.get_json("/index/stats", token=daemon.token)
    assert status == 200


# -- once indexed ------------------------------------------------------------------------


def test_index_stats_shows_the_vault_indexed(daemon, indexed):
    status, stats = daemon.get_json("/index/stats", token=daemon.token)
    assert status == 200
    assert stats["notes"] == len(NOTES)
    assert stats["chunks"] >= len(NOTES)
    assert stats["vectors"] >= stats["chunks"]
    assert stats["pending"] == 0 and stats["indexing"] is False
    assert isinstance(stats["lastIngestedAt"], (int, float))
    assert stats["errors"] == []


def ask(daemon: Daemon, body: dict) -> list[tuple[str, Any]]:
    status, headers, raw = daemon.request("POST", "/ask", body=body, token=daemon.token)
    assert status == 200, raw
    assert headers["content-type"].startswith("text/event-stream")
    return parse_sse(raw)


def assert_token_sources_done(events: list[tuple[str, Any]]) -> tuple[str, list, dict]:
    """``token``… then exactly one ``sources`` then ``done`` (last); returns (text, sources, done)."""
    names = [name for name, _ in events]
    assert names.count("sources") == 1, names
    assert names.count("done") == 1 and names[-1] == "done", names
    i = names.index("sources")
    assert names[i + 1] == "done", names
    assert set(names[:i]) == {"token"}, names
    text = "".join(data["text"] for name, data in events if name == "token")
    return text, events[i][1], events[-1][1]


def test_ask_streams_tokens_then_sources_then_done(daemon, indexed):
    events = ask(daemon, {"question": "How often do I inspect the hives?"})
    text, sources, done = assert_token_sources_done(events)
    assert "nine days" in text
    assert sources, "an in-vault question came back without sources"
    assert [s["n"] for s in sources] == list(range(1, len(sources) + 1))
    for s in sources:
        assert {"n", "filePath", "symbol", "score", "snippet"} <= set(s)
    assert sources[0]["filePath"] == "Projects/Beekeeping.md"
    assert "[1]" in text
    assert done["notFound"] is False and isinstance(done["grounded"], bool)
    assert isinstance(done["elapsedMs"], (int, float)) and done["elapsedMs"] >= 0


def test_ask_off_topic_streams_the_not_found_answer_and_no_sources(daemon, indexed):
    events = ask(daemon, {"question": "What is the capital of France?"})
    text, sources, done = assert_token_sources_done(events)
    assert text == NOT_FOUND
    assert sources == []
    assert done["notFound"] is True and done["grounded"] is False


def test_ask_with_a_tag_scope_keeps_to_it(daemon, indexed):
    events = ask(daemon, {"question": "What tyre pressure does the touring bike need?", "tags": ["house"]})
    _, sources, _ = assert_token_sources_done(events)
    assert all(s["filePath"] == "Home/Boiler.md" for s in sources), sources


def test_search_returns_ranked_results(daemon, indexed):
    status, body = daemon.get_json("/search", token=daemon.token, params={"q": "boiler pressure", "topK": 3})
    assert status == 200
    results = body["results"]
    assert results and len(results) <= 3
    assert results[0]["filePath"] == "Home/Boiler.md"
    assert results[0]["tags"] == ["house"]
    assert "1.3 bar" in results[0]["snippet"]
    for r in results:
        assert {"filePath", "symbol", "score", "snippet", "tags"} <= set(r)


def test_search_tag_and_folder_scopes(daemon, indexed):
    _, body = daemon.get_json("/search", token=daemon.token, params=[("q", "tyre pressure"), ("tag", "bikes")])
    assert [r["filePath"] for r in body["results"]] == ["Bikes/Touring bike.md"]
    _, body = daemon.get_json("/search", token=daemon.token, params={"q": "tyre pressure", "folder": "Home"})
    assert all(r["filePath"].startswith("Home/") for r in body["results"])


def test_search_bad_input_is_400_with_the_json_error_shape(daemon, indexed):
    status, body = daemon.get_json("/search", token=daemon.token, params={"q": "x", "topK": "0"})
    assert status == 400
    assert body["error"]["code"] == "bad_request" and body["error"]["message"]


def test_cairn_status_sees_the_running_daemon(daemon, indexed):
    proc = subprocess.run(
        [cairn_executable(), "status", "--vault", str(daemon.vault), "--json"],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["daemon"] == {"running": True, "url": daemon.url, "pid": daemon.proc.pid}
    assert out["notes"] == len(NOTES)


# -- shutdown (keep last: it stops the module's daemon) ---------------------------------


def test_sigint_stops_the_daemon_cleanly(daemon, indexed):
    assert daemon.service_file.exists()
    code = stop(daemon, signal.SIGINT)
    assert code == 0, daemon.stderr()[-4000:]
    assert not daemon.service_file.exists()
    assert daemon.stdout() == ""  # logs and messages go to stderr only
    assert "Traceback" not in daemon.stderr()


def test_sigterm_while_indexing_stops_within_the_deadline(tmp_path):
    """Shutdown does not wait for a long first index: indexing stops between notes / batches."""
    notes = {
        f"Bulk/Note {i:03d}.md": f"# Note {i}\n\n"
        + "\n\n".join(
            f"## Part {j}\n\n" + " ".join(f"word{(i * 7 + j * 13 + k) % 997}" for k in range(150)) for j in range(3)
        )
        for i in range(300)
    }
    with running_daemon(tmp_path, write_vault(tmp_path / "vault", notes)) as daemon:
        _, stats = daemon.get_json("/index/stats", token=daemon.token)
        assert stats["indexing"] is True, stats  # else this test would not test a stop during indexing
        code = stop(daemon, signal.SIGTERM)
        assert code == 0, daemon.stderr()[-4000:]
        assert not daemon.service_file.exists()
        assert "Traceback" not in daemon.stderr()
