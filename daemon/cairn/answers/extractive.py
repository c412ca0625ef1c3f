"""The extractive answer: the sources' sentences that best answer a question, each followed by its ``[n]`` (the
sources themselves travel apart, marked ``cited`` or not). Built when there is no model, or the model fails or says
nothing; ``grounded: false``."""

from __future__ import annotations

from collections.abc import Sequence

from cairn.answers.events import Source
from cairn.embedding import VectorCache, content_hash, title_hash
from cairn.notes import strip_block_ids
from cairn.prompt import Sentence, candidate_sentences, extractive_body, pick_sentences, token_overlap
from cairn.search import EpochLRU, Query

#: Marks a title's key in the similarity table (a title may read like a sentence).
_TITLE = "\x1ftitle"


class ExtractiveAnswers:
    """Extractive answers (module docstring), kept in memory (LRU, :attr:`MAX_ITEMS`) by question and sources:
    the text depends on nothing else. Thread-safe.

    The sentences and titles of indexed chunks were embedded by the indexer with these very texts
    (:func:`cairn.embedding.embedding_texts` uses the same :func:`~cairn.prompt.candidate_sentences`): their
    vectors are read from the store's embedding cache, so an answer over indexed notes embeds nothing but the
    question. Only a sentence changed since (a redacted link, a chunk not embedded yet) is embedded."""

    #: Weight of the source note's title cosine added to each sentence's own cosine: the title carries the
    #: subject a sentence often leaves out ("Garlic" for "Plant cloves in October, 5 cm deep"). Tuned on the dev
    #: set's in-corpus questions.
    TITLE_PRIOR = 0.3
    MAX_ITEMS = 256

    def __init__(self, vectors: VectorCache) -> None:
        self.vectors = vectors
        self._texts: EpochLRU[tuple, tuple[str, frozenset[int]]] = EpochLRU(self.MAX_ITEMS)

    def answer(self, question: Query | str, sources: Sequence[Source]) -> str:
        """The answer's text: :meth:`answer_cited`'s text."""
        return self.answer_cited(question, sources)[0]

    def answer_cited(self, question: Query | str, sources: Sequence[Source]) -> tuple[str, frozenset[int]]:
        """(the answer's text, the numbers ``n`` of the sources it cites). Pick the sentences that best answer
        ``question``: each candidate sentence's cosine similarity to the question plus TITLE_PRIOR × its note
        title's, plus a keyword-overlap bonus (sentence read with its title and heading) and a small prior for
        better-ranked sources. When no sentence is picked the text says the passages look relevant, and all
        count as cited."""
        query = question if isinstance(question, Query) else Query.parse(question)
        key = (
            query.text,
            tuple(
                (s.n, s.hit.title, s.hit.file_path, s.hit.symbol, s.hit.text, s.hit.lines, s.hit.page) for s in sources
            ),
        )
        held = self._texts.get(key)
        if held is None:
            held = self._compose(query, sources)
            self._texts.put(key, held)
        return held

    def _compose(self, query: Query, sources: Sequence[Source]) -> tuple[str, frozenset[int]]:
        candidates = self._candidates(sources)
        picked = pick_sentences(self._scored(query, candidates)) if candidates else []
        cited = frozenset(s.n for s in picked) or frozenset(s.n for s in sources)
        return extractive_body(picked), cited

    @staticmethod
    def _candidates(sources: Sequence[Source]) -> list[tuple[int, int, str, str, str, str]]:
        """(n, position, sentence as quoted — block-id markers left out —, sentence in its context, the text the
        indexer embedded, title)."""
        out: list[tuple[int, int, str, str, str, str]] = []
        for s in sources:
            context = " › ".join(p for p in (s.hit.title, s.hit.symbol) if p)
            quoted = candidate_sentences(s.hit.text, attach_code=True)[:40]
            # The same sentences without a code block appended to "…:" — the texts the indexer embedded.
            plain = candidate_sentences(s.hit.text)[:40]
            if len(plain) != len(quoted):
                plain = quoted
            for pos, (raw, embedded) in enumerate(zip(quoted, plain)):
                sent = strip_block_ids(raw)  # quoted without its ``^blockid``; scored on what the indexer embedded
                out.append((s.n, pos, sent, f"{context}: {sent}", embedded, s.hit.title))
        return out

    def _scored(self, query: Query, candidates: list[tuple[int, int, str, str, str, str]]) -> list[Sentence]:
        qvec = self.vectors.embed([query.text])[0]
        sentences = list(dict.fromkeys(c[4] for c in candidates))
        titles = list(dict.fromkeys(c[5] for c in candidates))
        vecs = self.vectors.stored_or_embedded(
            [*sentences, *titles], [*map(content_hash, sentences), *map(title_hash, titles)]
        )
        sim = dict(zip([*sentences, *((_TITLE, t) for t in titles)], (vecs @ qvec).tolist()))
        terms = query.terms
        return [
            Sentence(
                n=n,
                position=pos,
                text=text,
                score=sim[embedded]
                + self.TITLE_PRIOR * sim[(_TITLE, title)]
                + 0.15 * token_overlap(terms, in_context)
                - 0.01 * (n - 1),
            )
            for n, pos, text, in_context, embedded, title in candidates
        ]
