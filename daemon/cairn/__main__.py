"""`python -m cairn` → the CLI."""

from cairn.cli import main

raise SystemExit(main())
