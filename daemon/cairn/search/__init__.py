"""The one query service (:class:`SearchService`), the caller's view it serves (:class:`CallerView`) and what it
returns. Outside this package, import these names from ``cairn.search`` only (``tests/test_layers.py`` checks it).

Modules: ``service`` (the entry points and the ranking pipeline), ``pipeline`` (the values between its steps),
``query`` (a request's text parsed once), ``view`` (what one caller may see: the one place the withheld set is read),
``visible`` (BM25 and redacted rows as a caller not declared local sees them), ``withheld``, ``keyword`` (BM25),
``vocabulary`` (prefix and typo expansion), ``lexical`` (Obsidian's syntax matched, coverage tiers), ``literal``
(the words as typed, punctuation included), ``syntax``,
``names``, ``vectors`` and ``dense`` (the in-memory vectors, exact dense scores with an int8 first pass), ``stored``,
``fusion``, ``hits`` (results, snippets), ``cache`` (the store's epoch and the LRU cache), ``indexed``
(coverage counts), ``related`` (notes similar to one note), ``memory`` (the search side's share of the daemon's),
``recent`` (the notes a search without words lists).
"""

from cairn.search.cache import EpochLRU
from cairn.search.hits import Hit, SearchResult
from cairn.search.memory import search_parts
from cairn.search.pipeline import Ranked
from cairn.search.query import Query
from cairn.search.related import similar_notes
from cairn.search.service import SearchService
from cairn.search.view import CallerView, Views
from cairn.search.withheld import WithheldSet

__all__ = [
    "CallerView",
    "EpochLRU",
    "Hit",
    "Query",
    "Ranked",
    "SearchResult",
    "SearchService",
    "Views",
    "WithheldSet",
    "search_parts",
    "similar_notes",
]
