"""The side of Cairn that keeps the index: the vault's notes and PDFs brought into the store, incrementally, while the
daemon serves it. Imported from outside through these names only; docs/architecture.md ("The flow of a save") walks
a save through the modules, each importing only those below it:

    service   the controls the edges call (stats, health, re-index, pause), the lanes built at construction
    lanes     when work runs: the whole-vault runs and their retry, the save lane, the bulk lane, the PDF lane
    watch     file events → hints (watchfiles), what is due applied on the save lane's thread
    pdfs      a PDF run: attachments page by page
    notes     a notes' text run: scan, compare, delete, write (text_run), links
    text_run  one text run's batches, through the writer
    vectors   the chunks' vectors: the recipe, the pending ones in tiers, a save's, cache pruning
    writer    the store behind one write lock: delete, record skipped, re-resolve links
    links     what links resolve against (the file list, the aliases)
    hints     the changed paths waiting, debounced; pause; places to look at again
    prepare   a note or a PDF page cut into chunk records (pure)
    report    a run's report, the places kept, the JSON of stats, events and health
"""

from cairn.index.hints import Hints
from cairn.index.lanes import lower_thread_priority
from cairn.index.notes import NoteIndexer
from cairn.index.pdfs import PdfIndexer
from cairn.index.prepare import CHUNK_MAX_TOKENS, CHUNK_OVERLAP_TOKENS, PreparedNote, prepare_note
from cairn.index.report import IndexReport, index_stats_json
from cairn.index.service import IndexService
from cairn.index.vectors import ChunkVectors
from cairn.index.watch import VaultWatcher
from cairn.index.writer import IndexWriter

__all__ = [
    "CHUNK_MAX_TOKENS",
    "CHUNK_OVERLAP_TOKENS",
    "ChunkVectors",
    "Hints",
    "IndexReport",
    "IndexService",
    "IndexWriter",
    "NoteIndexer",
    "PdfIndexer",
    "PreparedNote",
    "VaultWatcher",
    "index_stats_json",
    "lower_thread_priority",
    "prepare_note",
]
