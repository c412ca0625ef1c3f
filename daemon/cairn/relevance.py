"""How relevant a hit reads to a person: one label from its cosine and which of the query's words it holds.

The fused ranking score (RRF) only orders hits: its value means nothing to a reader (a top hit scores about
``1/61``). The CLI, the plugin and the JSON views (``relevance`` next to ``score``) show this label instead:

- ``strong``: the passage is about what was asked;
- ``good``: close in meaning, often the answer or next to it; also the first hit of a ranking that is nearly
  that close and holds at least half of the query's terms (:data:`LEAD_COSINE`, :data:`LEAD_MATCHED`): the
  passage both the meaning and the words point to;
- ``keyword``: the passage holds every word of the query as typed (case aside, punctuation included: ``C++``,
  ``.obsidian``) but is not close in meaning: a real match for a name, a code or a rare word the embedding model
  does not know;
- ``similar``: it (or its note) holds every word of the query as the keyword index matches them, but some only
  in another form: another ending (``copy`` for ``copying``), a longer word it begins, a near spelling (``kind``
  for ``kindle``);
- ``weak``: loosely related.

Calibration: the cosines of the top-10 search hits of the dev-set questions (both dev files, each hit marked
relevant or not by the question's relevant notes, off-corpus questions' hits never relevant), k-fold by question.
:data:`STRONG_COSINE` is the lowest cosine above which a hit is relevant at least half the time;
:data:`GOOD_COSINE` the lowest above which relevant hits outnumber the hits of off-corpus questions in every
cosine band; the first-hit rule meets that same test (on questions, relevant first hits with :data:`LEAD_COSINE`
<= cosine < :data:`GOOD_COSINE` holding :data:`LEAD_MATCHED` of the terms outnumber off-corpus ones). All sit above
the contract's 0.35 answer floor (:data:`cairn.config.COSINE_FLOOR`), which says what may be used at all, not how
good it is. ``tests/bench/calibrate_relevance.py`` recomputes them.
"""

from __future__ import annotations

#: Every label, best first (the JSON views and ``openapi.json`` publish this set).
RELEVANCE_LABELS = ("strong", "good", "keyword", "similar", "weak")

#: Cosine similarity (to the query) from which a hit is ``strong``.
STRONG_COSINE = 0.72
#: Cosine similarity from which a hit is ``good``.
GOOD_COSINE = 0.57
#: Cosine similarity from which the first hit of a ranking holding :data:`LEAD_MATCHED` of the terms is ``good``.
LEAD_COSINE = 0.45
#: The share of the query's terms the first hit holds for :data:`LEAD_COSINE` to apply.
LEAD_MATCHED = 0.5

#: What each label reads as after a hit (CLI; the plugin has the same words).
RELEVANCE_TEXT = {
    "strong": "strong match",
    "good": "good match",
    "keyword": "exact words",
    "similar": "similar words",
    "weak": "weak match",
}


def relevance(cosine: float, matched: float = 0.0, exact: float = 0.0, *, first: bool = False) -> str:
    """The label of a hit (one of :data:`RELEVANCE_LABELS`) from its ``cosine`` similarity to the query
    (-1..1), ``matched``, the share of the query's terms it holds as the keyword index matches them (0..1; 0 when
    unknown, e.g. similar notes), ``exact``, the share of the query's words the passage holds as typed (0..1), and
    ``first``: the hit ranked first for its query.

    Words only lift a hit that is not close in meaning: a passage close in meaning keeps its cosine's label
    whether or not it repeats the words."""
    if cosine >= STRONG_COSINE:
        return "strong"
    if cosine >= GOOD_COSINE or (first and cosine >= LEAD_COSINE and matched >= LEAD_MATCHED):
        return "good"
    if exact >= 1.0:
        return "keyword"
    if matched >= 1.0:
        return "similar"
    return "weak"
