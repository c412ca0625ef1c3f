#!/usr/bin/env python3
"""Extractive answers sentence by sentence: the share of answer sentences that are complete and relevant.

QUESTIONS (JSONL: id, vault, question; ``vault`` is a folder name under ``$CAIRN_SHARED/vaults`` or ``examples``
for the repo's examples/vault) go through the real ask path without a model (``AnswerService.answer``, as
``cairn ask`` answers them). Each answer is cut into its sentences: the text before each citation ``[n]`` is a run
quoted from source ``n``, cut at sentence ends and line breaks. Each sentence is judged against the question and
against the raw markdown of the source it cites, with rules that read only the text (none of Cairn's code):

**complete**, all of:

- it starts like a sentence: a capital letter, a digit, a quote, a bracket or a backtick (not a lowercase
  fragment cut from the middle of a line);
- it ends with ``.``, ``!``, ``?``, ``:`` or ``…`` — or it is a list item or table row kept as such (shown on a line
  of its own starting ``- ``, or equal to one list item or table row of the source);
- no link gap: no space before ``,``, ``.``, ``;`` or ``:`` and no doubled space (a link whose display text was lost);
- no markdown left: no ``[[``, ``]]``, ``**``, ``> [!``;
- nothing glued: it does not start with the title of a callout, a heading, or a bold line of the source followed by
  more text;
- no dangling back-reference: a sentence opening with a word that refers back (This, These, That, Those, It, Its,
  They, Their, Such, However, Otherwise, Instead, Yes, No) is the first of its quoted run only if the source holds
  nothing before it in its paragraph (so the antecedent would be missing).

**relevant**, both of:

- it shares a content word with the question (stop words and question words left out; words compared by their
  first five letters after stripping -ing/-ed/-es/-s), or it is in the same quoted run as a sentence that does;
- it is not from an unrelated FAQ entry: when the source line it comes from follows a question line (a bold line or
  heading ending in ``?``, or a ``Q:`` line), that question shares a content word with the question.

Where the word rule misjudges relevance (a sentence sharing "subscription" with a refund question while it answers
another FAQ entry's question), a hand judgement in JUDGEMENTS (JSONL: id, starts — the sentence's first words —,
relevant, why) decides instead; the sentence's flags then show ``hand``.

Prints one line per sentence with its verdicts (``C`` complete, ``R`` relevant, then the failed rules), then a table
per vault and overall. Progress on stderr.

Usage: eval_extractive.py [QUESTIONS.jsonl] [--judgements FILE] [--data-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "daemon"))

from cairn.answers import AnswerService  # noqa: E402
from cairn.app import Cairn  # noqa: E402
from cairn.config import load_config  # noqa: E402
from cairn.contract import AskRequest  # noqa: E402

STOP = set(
    """a an the and or but if of to in on at by for with from into onto about as is are was were be been being do does
    did done doing have has had i me my mine we our you your it its this that these those there here what which who whom
    whose when where why how can could should would will shall may might must not no yes so than then too very just
    also any some all each every more most other such only own same get got make use using used one want way""".split()
)
BACKREF = re.compile(r"^(?:This|These|That|Those|It|Its|They|Their|Such|However|Otherwise|Instead|Yes|No)\b")
CITE_RUN = re.compile(r"\s*\[(\d{1,3})\]")
SENT_SPLIT = re.compile(r"(?<=[.!?…])\s+(?=[\"'(\[`]?[A-Z0-9])|\n+")
START_OK = re.compile(r"^[\"'“(\[`*0-9A-Z]")
END_OK = re.compile(r"[.!?:…][\"')\]`”]*$")
GAP = re.compile(r"\s[,.;:](?:\s|$)|\S {2,}\S|\(\s*\)")
MARKUP = re.compile(r"\[\[|\]\]|\*\*|>\s*\[!|(?:^|\s)#[A-Za-z][\w/-]*\s*$")
CODE_SPAN = re.compile(r"`[^`]*`")
TITLE_LINE = re.compile(r"^\s*(?:>\s*)*(?:\[![\w-]+\][-+]?\s*(.+)|#{1,6}\s+(.+)|\*\*([^*]+)\*\*\s*)$")
QUESTION_LINE = re.compile(r"^\s*(?:\*\*[^*]+\?\*\*\s*$|#{1,6}\s+.+\?\s*$|Q:|(?:>\s*)*\[![\w-]+\][-+]?\s*.+\?\s*$)")
LIST_LINE = re.compile(r"^\s*(?:>\s*)*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?(.+)$")


def stem(word: str) -> str:
    w = word.lower()
    for suffix in ("ing", "ed", "es", "s"):
        if len(w) > len(suffix) + 3 and w.endswith(suffix):
            w = w[: -len(suffix)]
            break
    return w[:5]


def content_stems(text: str) -> set[str]:
    return {stem(w) for w in re.findall(r"[A-Za-z][A-Za-z0-9'-]+", text) if w.lower() not in STOP and len(w) > 2}


def plain(text: str) -> str:
    """Letters and digits only, lowercase: to find an answer sentence in its source's markdown."""
    text = re.sub(r"\[\[([^\]|]*\|)?([^\]]*)\]\]", r"\2", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^a-z0-9]+", "", text.lower())


@dataclass
class Judged:
    qid: str
    vault: str
    n: int
    text: str
    complete: bool
    relevant: bool
    failed: list[str] = field(default_factory=list)


def source_lines(markdown: str) -> list[str]:
    return markdown.splitlines()


def locate(sentence: str, lines: Sequence[str]) -> int | None:
    """Index of the source line holding the sentence's start (None when not found)."""
    key = plain(sentence)[:40]
    if not key:
        return None
    for i, line in enumerate(lines):
        if key[:25] and key[:25] in plain(line):
            return i
    joined = [plain(line) for line in lines]
    for i in range(len(lines)):
        if key in "".join(joined[i : i + 4]):
            return i
    return None


def is_list_item(sentence: str, lines: Sequence[str]) -> bool:
    key = plain(sentence.removeprefix("- "))
    for line in lines:
        m = LIST_LINE.match(line)
        if m and plain(m.group(1)) == key:
            return True
        if line.strip().startswith("|") and key and key in plain(line):
            return True
    return False


def glued(sentence: str, lines: Sequence[str]) -> bool:
    """The sentence opens with a title line of the source (callout title, heading, bold line) run into the next
    sentence: the title, a space, then a capital letter."""
    words = sentence.split()
    for line in lines:
        m = TITLE_LINE.match(line)
        if not m:
            continue
        key = plain(next(g for g in m.groups() if g))
        for k in range(1, len(words)):
            head = plain(" ".join(words[:k]))
            if len(head) >= len(key):
                if head == key and words[k][:1].isupper():
                    return True
                break
    return False


def dangling(sentence: str, first_in_run: bool, lines: Sequence[str]) -> bool:
    """A back-reference opener with nothing before it in the answer, although its source paragraph has text before."""
    if not BACKREF.match(sentence) or not first_in_run:
        return False
    at = locate(sentence, lines)
    if at is None:
        return True
    line = lines[at]
    before_in_line = plain(line).find(plain(sentence)[:25]) > 0
    prev = lines[at - 1].strip() if at > 0 else ""
    return before_in_line or bool(prev and not prev.startswith("#"))


def unrelated_entry(sentence: str, lines: Sequence[str], question: set[str]) -> bool:
    at = locate(sentence, lines)
    if at is None:
        return False
    for line in reversed(lines[: at + 1]):
        if QUESTION_LINE.match(line):
            if plain(line).startswith(plain(sentence)[:25]):
                return False  # the sentence is the question line itself
            return not (content_stems(line) & question)
    return False


def runs(answer: str) -> list[tuple[int, list[str]]]:
    """(source n, the sentences quoted before its citation) in answer order."""
    out: list[tuple[int, list[str]]] = []
    pos = 0
    for m in CITE_RUN.finditer(answer):
        chunk = answer[pos : m.start()]
        pos = m.end()
        sentences = [s.strip() for s in SENT_SPLIT.split(chunk) if s and s.strip()]
        if sentences:
            out.append((int(m.group(1)), sentences))
    return out


def incomplete(sentence: str, first_in_run: bool, lines: Sequence[str]) -> list[str]:
    """The completeness rules (module docstring) the sentence fails."""
    failed = []
    bare = sentence.removeprefix("- ")
    if not START_OK.match(bare):
        failed.append("start")
    prose = CODE_SPAN.sub("`code`", sentence)  # code is quoted literally: its brackets are not markup
    ends_in_code = bool(re.search(r":\s*`code`$", prose))
    if not (END_OK.search(sentence) or ends_in_code or sentence.startswith("- ") or is_list_item(sentence, lines)):
        failed.append("end")
    if GAP.search(prose):
        failed.append("gap")
    if MARKUP.search(prose) or "```" in sentence:
        failed.append("markup")
    if glued(sentence, lines):
        failed.append("glued")
    if dangling(bare, first_in_run, lines):
        failed.append("dangling")
    return failed


def irrelevant(sentence: str, run_relevant: bool, lines: Sequence[str], question: set[str]) -> list[str]:
    """The relevance rules (module docstring) the sentence fails."""
    failed = []
    if not (content_stems(sentence) & question) and not run_relevant:
        failed.append("off-topic")
    if unrelated_entry(sentence.removeprefix("- "), lines, question):
        failed.append("other-faq-entry")
    return failed


def judge(
    qid: str, vault: str, question: str, answer: str, sources: dict[int, str], hand: Sequence[dict] = ()
) -> list[Judged]:
    q = content_stems(question)
    out: list[Judged] = []
    for n, sentences in runs(answer):
        lines = source_lines(sources.get(n, ""))
        run_relevant = any(content_stems(s) & q for s in sentences)
        for i, s in enumerate(sentences):
            failed = incomplete(s, i == 0, lines)
            complete = not failed
            off = irrelevant(s, run_relevant, lines, q)
            relevant = not off
            for h in hand:
                if h["id"] == qid and s.removeprefix("- ").startswith(h["starts"]):
                    relevant, off = bool(h["relevant"]), ["hand" if h["relevant"] else "hand:off-topic"]
            out.append(Judged(qid, vault, n, s, complete, relevant, failed + off))
    return out


def vault_path(name: str) -> Path:
    if name == "examples":
        return REPO / "examples" / "vault"
    shared = Path(os.environ.get("CAIRN_SHARED", REPO.parent / "shared"))
    return shared / "vaults" / name


async def ask_all(answers: AnswerService, questions: Sequence[dict]) -> list[tuple[dict, str, dict[int, str]]]:
    out = []
    for q in questions:
        answer = await answers.answer(AskRequest.parse({"question": q["question"]}))
        sources = {s.n: s.hit.text for s in answer.sources}
        out.append((q, answer.text, sources))
    return out


def table(judged: Sequence[Judged], answers: int) -> list[str]:
    rows = [
        "| vault | answers | sentences | complete | relevant | complete and relevant |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    groups = sorted({j.vault for j in judged})
    for name in [*groups, "all"]:
        js = [j for j in judged if name in ("all", j.vault)]
        if not js:
            continue
        c = sum(j.complete for j in js) / len(js)
        r = sum(j.relevant for j in js) / len(js)
        both = sum(j.complete and j.relevant for j in js) / len(js)
        count = answers if name == "all" else len({j.qid for j in js})
        rows.append(f"| {name} | {count} | {len(js)} | {c:.1%} | {r:.1%} | {both:.1%} |")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("questions", type=Path, nargs="?", default=Path(__file__).with_name("extractive_questions.jsonl"))
    ap.add_argument("--judgements", type=Path, default=Path(__file__).with_name("extractive_judgements.jsonl"))
    ap.add_argument("--data-dir", type=Path, default=REPO / ".eval-cache")
    ap.add_argument("--json", type=Path, help="write every judged sentence here")
    args = ap.parse_args(argv)
    questions = [json.loads(line) for line in args.questions.read_text(encoding="utf-8").splitlines() if line.strip()]
    hand = [json.loads(line) for line in args.judgements.read_text(encoding="utf-8").splitlines() if line.strip()]
    judged: list[Judged] = []
    answered = 0
    for name in dict.fromkeys(q["vault"] for q in questions):
        print(f"# {name}: indexing (incremental)", file=sys.stderr)
        config = load_config({"vault": str(vault_path(name)), "data_dir": str(args.data_dir)}, env={})
        cairn = Cairn(config)
        try:
            cairn.indexing.index()
            asked = asyncio.run(ask_all(AnswerService(cairn.query, None), [q for q in questions if q["vault"] == name]))
        finally:
            cairn.close()
        for q, text, sources in asked:
            answered += 1
            print(f"\n## {q['id']} {q['question']}\n{text}")
            for j in judge(q["id"], name, q["question"], text, sources, hand):
                judged.append(j)
                verdict = ("C" if j.complete else "-") + ("R" if j.relevant else "-")
                print(f"  {verdict} [{j.n}] {j.text[:110]!r} {' '.join(j.failed)}")
    print()
    print("\n".join(table(judged, answered)))
    fails: dict[str, int] = {}
    for j in judged:
        for f in j.failed:
            fails[f] = fails.get(f, 0) + 1
    print("\nfailed rules (sentences): " + ", ".join(f"{k} {v}" for k, v in sorted(fails.items())))
    if args.json:
        args.json.write_text(json.dumps([j.__dict__ for j in judged], indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
