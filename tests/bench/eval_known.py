"""Known-item checks generated from a vault's own index (no hand labels), each with a fixed seed.

- **rare terms**: words whose FTS5 token occurs in 1–3 notes (document frequency counted per note over each
  chunk's text, heading path and title, tokenized by the index's own FTS5 tokenizer: Porter over unicode61).
  Skipped: words shorter than :data:`MIN_WORD` characters, pure numbers, and words the query parser does not
  keep whole (:func:`cairn.ranking.query_terms` drops stopwords, splits at hyphens and apostrophes). Up to
  :data:`RARE_TERMS` terms are sampled; each term is searched as the word that spells it most often in the vault
  (ties: alphabetical), and counts when a note containing it is in the top 3 notes.
- **titles**: every note whose title has >= 2 words (whitespace-separated, with a letter or digit) is searched
  with one word dropped (the word picked with the seed); it counts when that note is in the top 3. Misses whose
  remaining words (as FTS5 tokens) are all in the titles of >= 3 other notes are counted apart: no ranking can
  single the note out from those words alone.
- **links**: for notes with >= 3 resolved outgoing links to other indexed notes, the similar notes of
  :func:`cairn.search.related.similar_notes` (the library's ``similar``: chunk vectors only, the link graph is not
  read) against a baseline ranking every note by the cosine of note-mean vectors (the normalised mean of each
  note's chunk vectors). Per note: precision@10 (share of the top 10 that the note links to) and recall@10
  (share of its linked notes in the top 10, out of at most 10).

Searches go through ``SearchService.retrieve`` (hybrid, one chunk per note, the default purpose).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import apsw
import numpy as np

from cairn.errors import BadRequestError
from cairn.search import SearchService, similar_notes
from cairn.search.query import query_terms
from cairn.store import Store
from cairn.store.schema import FTS_TOKENIZER

RARE_TERMS = 300
MAX_NOTE_DF = 3
MIN_WORD = 4
TOP = 3
SIMILAR_TOP = 10
MIN_LINKS = 3
SEED = 20261201


@dataclass
class Check:
    """One known-item check: a 1.0 / 0.0 (or share) per item, the first few misses, and item counts."""

    name: str
    values: list[float] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)
    #: how many items were eligible, and how many were skipped and why
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, value: float, miss: str) -> None:
        self.values.append(value)
        if value < 1.0 and len(self.misses) < 20:
            self.misses.append(miss)


def top_notes(query: SearchService, text: str, top: int = TOP) -> list[str]:
    """The first ``top`` notes hybrid search returns for ``text`` ([] for a query the service refuses)."""
    try:
        hits, _ = query.retrieve(text, top_k=top, mode="hybrid", per_note=1)
    except BadRequestError:
        return []
    return [h.file_path for h in hits]


@dataclass(frozen=True)
class Vocabulary:
    """Per FTS5 token: the notes holding it, and how often each surface word spelled it."""

    notes: dict[str, set[str]]
    spellings: dict[str, Counter[str]]

    @classmethod
    def of(cls, store: Store) -> Vocabulary:
        """Tokenize every chunk's text, heading path and title (as ``chunks_fts`` does) with offsets."""
        tok = store.conn.fts5_tokenizer(FTS_TOKENIZER[0], list(FTS_TOKENIZER[1:]))
        notes: dict[str, set[str]] = defaultdict(set)
        spellings: dict[str, Counter[str]] = defaultdict(Counter)
        rows = store.conn.execute(
            "SELECT n.path, c.text || char(10) || c.symbol || char(10) || n.title FROM chunks c "
            "JOIN notes n ON n.id = c.note_id ORDER BY c.id"
        )
        for path, text in rows:
            raw = text.encode("utf-8")
            for start, end, *tokens in tok(raw, apsw.FTS5_TOKENIZE_DOCUMENT, None, include_colocated=False):
                token = tokens[0]
                notes[token].add(path)
                spellings[token][raw[start:end].decode("utf-8", "replace")] += 1
        return cls(dict(notes), dict(spellings))


def rare_terms(
    vocab: Vocabulary, n: int = RARE_TERMS, seed: int = SEED
) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """Up to ``n`` (token, query word) pairs sampled from the tokens held by 1..MAX_NOTE_DF notes, and the counts
    of eligible rare tokens and of those skipped per reason (module docstring)."""
    skipped: Counter[str] = Counter()
    candidates: list[tuple[str, str]] = []
    for token in sorted(vocab.notes):
        if not 1 <= len(vocab.notes[token]) <= MAX_NOTE_DF:
            continue
        word = min(vocab.spellings[token].items(), key=lambda kv: (-kv[1], kv[0]))[0]
        if word.isdigit():
            skipped["pure number"] += 1
        elif len(word) < MIN_WORD:
            skipped[f"shorter than {MIN_WORD}"] += 1
        elif query_terms(word) != [word.lower()]:
            skipped["not kept whole by the query parser"] += 1
        else:
            candidates.append((token, word))
    rng = random.Random(seed)
    counts = {"rare words eligible": len(candidates)} | {f"skipped ({why})": k for why, k in sorted(skipped.items())}
    return rng.sample(candidates, min(n, len(candidates))), counts


def check_rare_terms(store: Store, query: SearchService, seed: int = SEED, vocab: Vocabulary | None = None) -> Check:
    """Share of sampled rare terms with a note containing them in the top 3 (``vocab``: the store's, if read)."""
    vocab = vocab or Vocabulary.of(store)
    sample, counts = rare_terms(vocab, seed=seed)
    check = Check("rare term top-3", counts=counts)
    for token, word in sample:
        found = top_notes(query, word)
        hit = any(p in vocab.notes[token] for p in found)
        check.add(1.0 if hit else 0.0, f"{word!r} in {sorted(vocab.notes[token])[:2]} -> {found}")
    return check


def title_words(title: str) -> list[str]:
    """The whitespace-separated words of a title that hold a letter or a digit."""
    return [w for w in title.split() if any(ch.isalnum() for ch in w)]


def check_titles(store: Store, query: SearchService, seed: int = SEED) -> Check:
    """Share of notes (titles of >= 2 words) found in the top 3 when searched by the title minus one word."""
    rng = random.Random(seed)
    check = Check("title minus a word top-3")
    rows = store.conn.execute(
        "SELECT n.path, n.title FROM notes n WHERE EXISTS (SELECT 1 FROM chunks c WHERE c.note_id = n.id) "
        "ORDER BY n.path"
    ).fetchall()
    titles = [(set(store.fts_tokens(t)), p) for p, t in rows]
    tokens_of = {p: tokens for tokens, p in titles}
    short = ambiguous = tied = tied_misses = 0
    for path, title in rows:
        words = title_words(title)
        if len(words) < 2:
            short += 1
            continue
        drop = rng.randrange(len(words))
        kept = [w for i, w in enumerate(words) if i != drop]
        found = top_notes(query, " ".join(kept))
        check.add(1.0 if path in found else 0.0, f"{' '.join(kept)!r} for {path} -> {found}")
        words_left = set(store.fts_tokens(" ".join(kept)))
        holding = [tokens for tokens, p in titles if p != path and words_left <= tokens]
        ambiguous += path not in found and len(holding) >= TOP
        closest = sum(1 for tokens in holding if len(tokens - words_left) <= len(tokens_of[path] - words_left))
        tied += closest >= TOP
        tied_misses += path not in found and closest >= TOP
    check.counts["skipped (title of one word)"] = short
    check.counts[f"misses whose remaining words are in >= {TOP} other titles"] = ambiguous
    # Diagnostic: items no title evidence can single out (the bound of a names signal on this check).
    closer = f">= {TOP} other titles hold the remaining words with no more other words"
    check.counts[f"items where {closer}"] = tied
    check.counts[f"misses where {closer}"] = tied_misses
    return check


def resolved_links(store: Store) -> dict[str, set[str]]:
    """Vault-relative path → the other indexed notes it links to (resolved links, embeds included)."""
    rows = store.conn.execute(
        "SELECT DISTINCT n.path, l.target_path FROM links l JOIN notes n ON n.id = l.note_id "
        "JOIN notes t ON t.path = l.target_path "
        "WHERE l.target_path != n.path AND EXISTS (SELECT 1 FROM chunks c WHERE c.note_id = t.id)"
    )
    out: dict[str, set[str]] = defaultdict(set)
    for path, target in rows:
        out[path].add(target)
    return dict(out)


def note_mean_vectors(store: Store) -> tuple[list[str], np.ndarray]:
    """Paths (sorted) and their note-mean vectors ((n, 384) float32, L2-normalised; zero rows for none)."""
    rows = store.conn.execute("SELECT c.id, n.path FROM chunks c JOIN notes n ON n.id = c.note_id").fetchall()
    vectors = store.vectors([cid for cid, _ in rows])
    by_note: dict[str, list[np.ndarray]] = defaultdict(list)
    for cid, path in rows:
        if cid in vectors:
            by_note[path].append(vectors[cid])
    paths = sorted(by_note)
    means = np.stack([np.mean(by_note[p], axis=0) for p in paths]).astype(np.float32)
    norms = np.linalg.norm(means, axis=1, keepdims=True)
    return paths, np.where(norms > 0, means / np.maximum(norms, 1e-12), 0.0).astype(np.float32)


def _link_scores(linked: set[str], ranked: list[str]) -> tuple[float, float]:
    """(precision@10, recall@10 out of at most 10) of ``ranked`` against the linked notes."""
    found = len(linked & set(ranked[:SIMILAR_TOP]))
    return found / SIMILAR_TOP, found / min(len(linked), SIMILAR_TOP)


def check_links(store: Store) -> dict[str, Check]:
    """Link prediction by ``similar`` and by the note-mean baseline: precision@10 and recall@10 per note."""
    links = {p: t for p, t in resolved_links(store).items() if len(t) >= MIN_LINKS}
    paths, means = note_mean_vectors(store)
    row_of = {p: i for i, p in enumerate(paths)}
    checks = {
        name: Check(name)
        for name in ("similar precision@10", "similar recall@10", "note-mean precision@10", "note-mean recall@10")
    }
    rankers: dict[str, Callable[[str], list[str]]] = {
        "similar": lambda p: [s["filePath"] for s in similar_notes(store, p, SIMILAR_TOP)],
        "note-mean": lambda p: _nearest_means(p, paths, means, row_of),
    }
    for path in sorted(links):
        if path not in row_of:
            continue
        for name, rank in rankers.items():
            ranked = rank(path)
            precision, recall = _link_scores(links[path], ranked)
            checks[f"{name} precision@10"].add(precision, "")
            checks[f"{name} recall@10"].add(recall, "")
    for check in checks.values():
        check.misses.clear()
        check.counts[f"skipped (notes with < {MIN_LINKS} resolved links)"] = len(row_of) - len(check.values)
    return checks


def _nearest_means(path: str, paths: list[str], means: np.ndarray, row_of: dict[str, int]) -> list[str]:
    scores = means @ means[row_of[path]]
    scores[row_of[path]] = -np.inf
    order = np.lexsort((np.arange(len(paths)), -scores))[:SIMILAR_TOP]
    return [paths[i] for i in order]
