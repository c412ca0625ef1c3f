"""What the tests build and share, one module per thing built. Test modules import from here (``from
support.cli import run_cairn``; pytest puts ``tests/`` on ``sys.path``) and never from one another; fixtures
stay in ``conftest.py``. ``conftest.py`` registers this package for pytest's assertion rewriting, so an
``assert`` in a helper reports its values as one in a test does.

- ``waits``: a coroutine run to completion, a condition waited for with a deadline;
- ``cli``: the ``cairn`` console script in a subprocess and its environment;
- ``tray``: a private Xvfb display, a minimal system-tray manager, the daemon with its tray;
- ``policy_homes``: an owner's home with an MCP policy and an indexed vault, one ``cairn mcp`` call;
- ``pdfgen``: small PDFs with known content; ``pdf_worker_hooks``: hooks run inside the PDF worker;
- ``built_wheel``: the wheel ``make wheel`` builds.
"""
