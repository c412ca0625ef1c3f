"""schemathesis against the live daemon: every operation of the OpenAPI document is fuzzed, and no
answer may be a 5xx or break the document.

The daemon is the real one (:func:`cairn.app.run_daemon`: store, ONNX model, answer service without an
LLM, library, watcher, events; MCP over HTTP off, it has its own tests) on 127.0.0.1 (port 0), in a
thread with its own event loop, over a private copy of the sample vault and its own data folder — the
fuzzed ``POST /index/reindex`` and ``/index/pause`` touch nothing another test uses. Requests carry the
token and go to ``127.0.0.1:<port>`` (a correct Host).

The schema is the repository's ``daemon/cairn/openapi.json`` (loaded at import: schemathesis' lazy
``from_fixture`` loader does not work with pytest 9.2), and a test proves the daemon serves exactly
that document, and only with the token. Checks on every response: no 5xx; status code, content type,
headers and body (JSON, and each SSE event of ``/ask`` and ``/events``) as documented; schema-violating
requests refused; schema-valid requests accepted (but where a tag scope is involved, see the test).
The document's examples (``Garden/Garlic.md``, a garlic question) are sent too, so real hits, notes and
sources are checked, and ``/events`` is read while a note is added and removed.

A short, fixed-seed profile runs in ``make test`` (:data:`EXAMPLES` cases per operation and phase, the
same every run); ``make fuzz`` runs the same with ``CAIRN_FUZZ_EXAMPLES`` (500 there) and
``CAIRN_FUZZ_SEED`` to explore further.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from support.cairns import build_index, make_config
from support.vaults import REPO, SAMPLE_VAULT

# Installed by make test ([test]), not by make check, which leaves this slow module out anyway.
schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed (make test-venv installs it)")
import requests  # noqa: E402  (a dependency of schemathesis)
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

pytestmark = pytest.mark.slow  # schemathesis cases against a live daemon

#: Generated cases per operation (and per phase); small in ``make test``, large in ``make fuzz``.
EXAMPLES = int(os.environ.get("CAIRN_FUZZ_EXAMPLES", "12"))
#: Seed of every generated case (schemathesis derives one per operation from it): same seed, same cases.
SEED = int(os.environ.get("CAIRN_FUZZ_SEED", "20261130"))
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
REQUEST_TIMEOUT_S = 30
EVENTS_READ_S = 1.0
#: Indexing runs on the watcher's low-priority (nice 10) thread: on a loaded machine a change can take
#: a while to be indexed; it is normally well under a second.
EVENT_WAIT_S = 120
EVENTS_SCENARIO_S = 2 * EVENT_WAIT_S + 30
#: Operations that take a tag scope (see the test).
TAG_SCOPED = frozenset({"/search", "/ask"})


@dataclass
class LiveDaemon:
    url: str
    token: str
    vault: Path

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture(scope="module")
def live_daemon(tmp_path_factory, embedder):
    """``run_daemon`` on port 0 over a private, pre-indexed copy of the sample vault; stopped after the module."""
    from cairn.app import run_daemon
    from cairn.secrets import get_or_create_token

    home = tmp_path_factory.mktemp("fuzz")
    vault = home / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    # The plugin API alone: MCP has its own port and tests (test_mcp_http).
    config = make_config(vault, home / "data").replace(port=0, mcp_http=False)
    # index first with the session's model: the daemon's start-up run is a no-op
    build_index(vault, home / "data", embedder, port=0, mcp_http=False)
    token = get_or_create_token(config)

    ready = threading.Event()
    box: dict[str, object] = {}

    async def main() -> None:
        stop = asyncio.Event()
        box["stop"] = (asyncio.get_running_loop(), stop)

        def on_ready(url: str) -> None:
            box["url"] = url
            ready.set()

        await run_daemon(config, ready=on_ready, stop=stop)

    def thread_main() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to the test through box
            box["error"] = exc
        finally:
            ready.set()

    thread = threading.Thread(target=thread_main, name="cairn-fuzz-daemon", daemon=True)
    thread.start()
    assert ready.wait(START_TIMEOUT_S), "the daemon did not start listening in time"
    if "error" in box:
        raise AssertionError(f"the daemon failed to start: {box['error']!r}")
    try:
        yield LiveDaemon(url=str(box["url"]), token=token, vault=vault)
    finally:
        loop, stop = box["stop"]
        loop.call_soon_threadsafe(stop.set)
        thread.join(STOP_TIMEOUT_S)
        assert not thread.is_alive(), "the daemon did not stop in time"
        assert "error" not in box, f"the daemon ended with {box['error']!r}"


#: The document under test, as shipped in the package (the test below proves the daemon serves exactly this).
OPENAPI = REPO / "daemon" / "cairn" / "openapi.json"
schema = schemathesis.openapi.from_path(
    OPENAPI,
    config=schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "request-timeout": REQUEST_TIMEOUT_S,
            "generation": {"max-examples": EXAMPLES},
            "checks": {
                # Auth is proven route by route in test_http_routes; probing it here would also trip the
                # bad-token throttle (429) and starve the rest of the run.
                "ignored_auth": {"enabled": False},
            },
        }
    ),
)


def test_the_served_openapi_document_is_the_one_in_the_repository_and_needs_the_token(live_daemon):
    shipped = json.loads(OPENAPI.read_text(encoding="utf-8"))
    resp = requests.get(live_daemon.url + "/openapi.json", headers=live_daemon.auth, timeout=REQUEST_TIMEOUT_S)
    assert resp.status_code == 200
    assert resp.json() == shipped
    assert requests.get(live_daemon.url + "/openapi.json", timeout=REQUEST_TIMEOUT_S).status_code == 401


def documented(path: str, method: str, status: int, content_type: str, content: bytes, url: str) -> None:
    """Validate a response read by hand against the document (all of schemathesis' response checks)."""
    case = schema[path][method].Case()
    request = requests.Request(method, url).prepare()
    response = schemathesis.Response(
        status_code=status,
        headers={"content-type": [content_type]},
        content=content,
        request=request,
        elapsed=0.0,
        message="OK",
        encoding="utf-8",
        http_version="1.1",
        verify=True,
    )
    case.validate_response(response)


def test_index_events_as_a_note_is_added_and_removed_are_the_documented_events(live_daemon):
    note = live_daemon.vault / "Garden" / "Fuzz events.md"

    async def scenario() -> tuple[str, bytes, list[str]]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=EVENTS_SCENARIO_S)) as session:
            async with session.post(live_daemon.url + "/index/resume", headers=live_daemon.auth) as resp:
                assert resp.status == 200, await resp.text()
            async with session.get(live_daemon.url + "/events", headers=live_daemon.auth) as stream:
                assert stream.status == 200
                raw, names = bytearray(), []

                async def until(name: str, wanted) -> None:
                    """Read whole events until one called ``name`` whose data satisfies ``wanted``."""
                    try:
                        await asyncio.wait_for(read_until(name, wanted), EVENT_WAIT_S)
                    except TimeoutError:
                        raise AssertionError(f"no such {name!r} event within {EVENT_WAIT_S} s; got {names}") from None

                async def read_until(name: str, wanted) -> None:
                    event, data = None, None
                    while True:
                        line = await stream.content.readline()
                        assert line, f"the event stream ended before the {name!r} event; got {names}"
                        raw.extend(line)
                        if line.startswith(b"event:"):
                            event = line[6:].strip().decode()
                        elif line.startswith(b"data:"):
                            data = json.loads(line[5:])
                        elif line.strip() == b"" and event is not None:
                            names.append(event)
                            if event == name and wanted(data):
                                return
                            event, data = None, None

                assert await stream.content.readline() == b": connected\n"  # subscribed: nothing is missed now
                await stream.content.readline()
                rel = "Garden/Fuzz events.md"
                note.write_text(
                    "# Fuzz events\n\nA note that comes and goes while /events is read.\n", encoding="utf-8"
                )
                async with session.post(
                    live_daemon.url + "/index/reindex", json={"path": rel}, headers=live_daemon.auth
                ) as resp:
                    assert resp.status == 202, await resp.text()
                # (the resume above may end a reconcile first: wait for the run that added the note)
                await until("indexed", lambda d: d["added"] >= 1)
                note.unlink()
                async with session.post(
                    live_daemon.url + "/index/reindex", json={"path": rel}, headers=live_daemon.auth
                ) as resp:
                    assert resp.status == 202, await resp.text()
                await until("removed", lambda d: d["filePath"] == rel)
                return stream.headers["Content-Type"], bytes(raw), names

    content_type, raw, names = asyncio.run(asyncio.wait_for(scenario(), EVENTS_SCENARIO_S))
    assert "indexed" in names and "removed" in names
    documented("/events", "GET", 200, content_type, raw, live_daemon.url + "/events")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
def test_every_operation_answers_fuzzed_requests_without_5xx_and_as_documented(case, live_daemon):
    # GET /events never ends by itself: read what it sends for a moment (the stream is cut, then validated).
    timeout = EVENTS_READ_S if case.path == "/events" else REQUEST_TIMEOUT_S
    # A tag is valid by Obsidian's rules over Unicode categories (no punctuation, not only digits), which the
    # document states in words: no JSON Schema regex says it the same way in Python and in the validator.
    # So a generated "valid" tag may rightly be refused (400) there: schema-valid data is not required to pass.
    excluded = [positive_data_acceptance] if case.path in TAG_SCOPED else []
    case.call_and_validate(
        base_url=live_daemon.url, headers=live_daemon.auth, timeout=timeout, excluded_checks=excluded
    )
