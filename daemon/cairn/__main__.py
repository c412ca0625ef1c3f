"""`python -m cairn` → the CLI."""

from cairn.cli import main

if __name__ == "__main__":  # guarded: spawned worker processes import this module as __mp_main__
    raise SystemExit(main())
