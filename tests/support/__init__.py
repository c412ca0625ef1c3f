"""What the tests build and share, one module per thing built.

How to use it:

- Import from here (``from support.cli import run_cairn``; pytest puts ``tests/`` on ``sys.path``), never from a test
  module or ``conftest`` (``tests/test_test_suite.py`` fails on such an import). Something a second test module
  needs moves here, into the module for what it builds, or a new one (add it to the list below).
- Plain functions and classes go here; fixtures used everywhere stay in ``conftest.py`` (``embedder``,
  ``hash_embedder``, ``sample_cairn``, ``fresh_cairn``, ``vault_copy``, ...). A fixture shared by a few modules is
  defined here and taken by assignment in each (``xvfb = tray_harness.xvfb``, ``embedder = embedders.stand_in``).
- A Cairn is built with :func:`support.cairns.open_cairn` / ``opened_cairn`` / ``build_index``; a request with
  :mod:`support.requests` (parsed as an edge parses it) and served as the caller of ``caller_of``.
- ``conftest.py`` registers this package for pytest's assertion rewriting, so an ``assert`` in a helper reports
  its values as one in a test does.

The modules:

- ``vaults``: where the test vaults are (sample, canary, the shared real vaults), small vaults written for a test;
  ``index_vault``: a small vault of every kind of note and a Cairn over it; ``watched_vault``: a slice of the help
  vault under a real watcher; ``links``: parsed links written briefly;
- ``cairns``: a Cairn's configuration, a Cairn opened or indexed, the services the daemon wires over it;
  ``half_embedded``: an index caught half-embedded; ``store_rows``: note and chunk records for a store;
- ``embedders``: the stand-in embedding model for tests that only move data (the real one where ranking matters);
- ``requests``: search and ask requests parsed by the edge contract, a caller's view; ``answers``: an answer
  through the one ask path without a model;
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
- ``tray``: a private Xvfb display, a minimal system-tray manager, a D-Bus session bus, the system's PyGObject, the
  daemon with its tray;
- ``pdfgen``: small PDFs with known content; ``pdf_worker_hooks``: hooks run inside the PDF worker;
- ``keyword_checks``: the in-memory BM25 against FTS5's; ``markdown_oracle``: markdown-it-py, the parser the
  shipped one is checked against;
- ``built_wheel``: the wheel ``make wheel`` builds.
"""
