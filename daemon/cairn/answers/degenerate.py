"""Is a model's answer unusable? A small model can write citations and no words (``1. [2] 2. [3] 4. [5]``), or
sentences whose words come from nowhere in the passages it cites. Such an answer is replaced by the extractive one
(:mod:`cairn.answers.service`), and the reason is said.

:func:`unusable_reason` judges a complete answer's text against the passages the model was given:

- **no sentence**: not one word outside the citations, list numbers, punctuation and, besides function words and
  words about the context, the names of the passages' notes (``1. [2] Kitchen/Sourdough 2. [3] Kitchen/Meal plan``,
  ``The answer is: [1]. Harvest [2] Garden``: the sources listed, nothing said);
- **unsupported**: of the answer's *claim words* (words of 3+ letters that are neither function words nor words of
  the question), at least :data:`MIN_CLAIM_WORDS` are there and fewer than :data:`MIN_SUPPORT` of them occur in the
  passages the answer cites (in any passage given, when it cites none). Words are compared by a 5-letter prefix
  (``planting`` ~ ``plants``, ``tomatoes`` ~ ``tomato``), case-folded;
- **no supported sentence** (given the sentence check, :mod:`cairn.answers.grounding`): not one of its sentences
  is supported by a passage it cites — it cites none (the steps of a procedure written from nowhere), or what it
  cites does not say what it says.

Without the sentence check, an answer that says the passages do not hold the answer uses few claim words and stays
as it is; with it, such an answer supports nothing and the answer built from the passages replaces it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from cairn.answers.grounding import Grounding
from cairn.prompt import CITATION, cited_numbers
from cairn.ranking import STOPWORDS

#: Claim words needed before their support is judged (a short answer is not judged on two words).
MIN_CLAIM_WORDS = 3
#: The share of claim words that must occur in the cited passages.
MIN_SUPPORT = 0.5

_WORD = re.compile(r"[^\W\d_]{2,}(?:['’][^\W\d_]+)?")
#: Words a model writes about its context rather than from it.
_ABOUT_CONTEXT = frozenset("passage passages context note notes source sources according answer question".split())


def _stem(word: str) -> str:
    return word[:5]


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(CITATION.sub(" ", text))]


def _claim_words(text: str, question: str) -> list[str]:
    asked = {_stem(w) for w in _words(question)}
    return [
        w
        for w in _words(text)
        if len(w) >= 3 and w not in STOPWORDS and w not in _ABOUT_CONTEXT and _stem(w) not in asked
    ]


def unusable_reason(
    text: str,
    question: str,
    passages: Mapping[int, str],
    names: Iterable[str] = (),
    grounding: Grounding | None = None,
) -> str | None:
    """Why the model's complete answer ``text`` cannot be shown, or ``None`` when it can. ``passages``: ``{n: the
    passage's text}`` for each ``[n]`` the model was given (its title and heading path may be part of the text);
    ``names``: what names those passages in the prompt (vault-relative paths, titles, heading paths), whose words
    with function words make no sentence; ``grounding``: the sentence check of ``text``, when made. The reason is a
    phrase for people ("it has no sentence, only citations")."""
    named = {w.lower() for name in names for w in _WORD.findall(name)}
    words = _words(text)
    if not words:
        return "it has no sentence, only citations" if CITATION.search(text) else "it has no sentence"
    if all(w in named or w in STOPWORDS or w in _ABOUT_CONTEXT for w in words):
        return "it has no sentence, only citations and the names of notes"
    claims = _claim_words(text, question)
    if len(claims) >= MIN_CLAIM_WORDS:
        cited = set(cited_numbers(text)) & passages.keys()
        pool = " ".join(passages[n] for n in sorted(cited or passages.keys()))
        known = {_stem(w) for w in _words(pool)}
        supported = sum(1 for w in claims if _stem(w) in known)
        if supported / len(claims) < MIN_SUPPORT:
            where = "the passages it cites" if cited else "the passages it was given"
            return f"most of its words ({len(claims) - supported} of {len(claims)}) are not in {where}"
    if grounding is None or grounding.anchored:
        return None
    if not grounding.cites_anything:
        return "none of its sentences cites a passage"
    return "no passage it cites says what it says"
