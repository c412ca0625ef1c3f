"""How much of the index a result is drawn from (:class:`~cairn.contract.IndexCoverage`), per caller.

While the first index runs, the notes' words are searchable long before their vectors are written: a search then
ranks the keyword candidates (and the few it embeds at once) but cannot find a not-yet-embedded note by meaning.
Each search and ask result says so with its coverage. The counts leave out the notes withheld from the caller
(its :class:`~cairn.search.view.CallerView`), so a client not declared local learns nothing of them; they are kept
per store epoch, so a search of an unchanged index reads nothing.
"""

from __future__ import annotations

from cairn.contract import IndexCoverage
from cairn.search.cache import EpochLRU, StoreEpoch
from cairn.search.view import CallerView
from cairn.store import Store
from cairn.store.reads import coverage_counts


class IndexedCounts:
    """:meth:`now`: the coverage a caller sees; thread-safe (the store and the cache are)."""

    #: Withholding rules kept at once (one per policy client kind in practice).
    CACHE_MAX = 16

    def __init__(self, store: Store, epoch: StoreEpoch) -> None:
        self.store = store
        self.epoch = epoch
        self._cache: EpochLRU[tuple | None, IndexCoverage] = EpochLRU(self.CACHE_MAX)

    def now(self, view: CallerView) -> IndexCoverage:
        """The notes indexed and those still waiting for vectors, without the notes withheld from ``view``'s caller."""
        key = view.key
        epoch = self.epoch.now()
        cached = self._cache.get(key, epoch)
        if cached is not None:
            return cached
        notes, pending, refining = coverage_counts(self.store, view.withheld.notes)
        found = IndexCoverage(notes=notes, pending=min(pending, notes), refining=max(0, refining))
        if self.epoch.value == epoch:  # nothing committed meanwhile
            self._cache.put(key, found, epoch)
        return found
