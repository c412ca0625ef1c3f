"""What the tests build and share, one module per thing built. Test modules import from here (``from
support.cli import run_cairn``; pytest puts ``tests/`` on ``sys.path``) and never from one another; fixtures
stay in ``conftest.py``. ``conftest.py`` registers this package for pytest's assertion rewriting, so an
``assert`` in a helper reports its values as one in a test does.

- ``vaults``: where the test vaults are (sample, canary, the shared real vaults), small vaults written for a test;
- ``cairns``: a Cairn's configuration, a Cairn indexed, the services the daemon wires over it;
  ``half_embedded``: an index caught half-embedded;
- ``waits``: a coroutine run to completion, a condition waited for with a deadline;
- ``cli``: the ``cairn`` console script in a subprocess and its environment;
- ``daemons``: ``cairn serve`` as a subprocess and an HTTP client for it; ``spawned``: one in a process group
  of its own, killed with ``kill -9``;
- ``http_client``: the real HTTP app on 127.0.0.1 and a real client, the SSE body parsed;
  ``stand_ins``: small real stand-ins for the services an edge calls;
- ``mcp_client``: the MCP tests' policy and home, the SDK's client, an in-process MCP HTTP server, leak checks;
- ``llm_stub``: a local OpenAI-compatible streaming stub and the HTTP app answering with it;
- ``policies``: MCP policies the tests write; ``policy_homes``: an owner's home with a policy and an indexed
  vault, one ``cairn mcp`` call;
- ``plugin_build``: the Obsidian plugin built with npm; ``plugin_page``: it on its harness page in Chromium;
- ``tray``: a private Xvfb display, a minimal system-tray manager, the daemon with its tray;
- ``pdfgen``: small PDFs with known content; ``pdf_worker_hooks``: hooks run inside the PDF worker;
- ``store_rows``: note and chunk records for a store; ``keyword_checks``: the in-memory BM25 against FTS5's;
- ``built_wheel``: the wheel ``make wheel`` builds.
"""
