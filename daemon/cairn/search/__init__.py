"""The one query service (:class:`SearchService`) and what it returns.

Modules: ``service`` (the ranking), ``hits`` (results, snippets, query checks), ``withheld`` (the notes a caller
may not see), ``keyword`` (BM25), ``vectors`` (the in-memory vectors and their reloads), ``dense`` (exact dense
scores with an int8 first pass), ``cache`` (the store's epoch and the LRU cache), ``related`` (the notes similar
to one note, under the same cosine floor and withholding).
"""

from cairn.search.hits import Hit, SearchResult
from cairn.search.service import SearchService
from cairn.search.withheld import WithheldSet

__all__ = ["Hit", "SearchResult", "SearchService", "WithheldSet"]
