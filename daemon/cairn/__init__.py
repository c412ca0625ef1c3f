"""Cairn: a local companion daemon for an Obsidian vault.

Layers (see DESIGN.md): 0 pure core (errors, config, notes, chunking, ranking,
prompt) < 1 resources (store, embedder, vault, secrets) < 2 use cases (indexer,
query) < 3 adapters (http, mcp_server) < 4 composition (app, cli).
"""

__version__ = "0.1.0"
