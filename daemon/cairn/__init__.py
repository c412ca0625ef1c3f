"""Cairn: a local companion daemon for an Obsidian vault.

The packages, their layers and the flow of a question: docs/architecture.md.
``__version__`` is the one version source (pyproject.toml reads it).
"""

__version__ = "0.1.0"
