/**
 * Citation linking: find the `[n]` markers in answer text and say where each one leads.
 *
 * The daemon cites sources as `[n]` (docs/design.md, "Contract" → Prompt); `n` matches the `n` of one entry of the
 * `sources` event. A marker for a number with no source stays plain text. Text inside backticks is
 * code (`arr[0]`), never a citation; that is decided on the rendered DOM (code elements are skipped),
 * so this module only splits plain text.
 */

import type { AnswerSource, SearchHit } from "./types";

/** A piece of text: plain, or a citation of source `n` (with its original text, e.g. `[3]`). */
export type CitationPart = string | { n: number; text: string };

const CITATION_RE = /\[(\d{1,3})\]/g;

/**
 * Split `text` into plain strings and citations. Only numbers in `known` become citations (when
 * `known` is given); `[1][2]` gives two citations. Joining the parts' text gives `text` back.
 */
export function splitCitations(text: string, known?: ReadonlySet<number>): CitationPart[] {
  const parts: CitationPart[] = [];
  let last = 0;
  for (const m of text.matchAll(CITATION_RE)) {
    const n = Number(m[1]);
    const at = m.index ?? 0;
    if (n < 1 || (known && !known.has(n))) continue;
    // `[[1]]` is a wiki link, `[1](url)` a Markdown link: not citations.
    if (text[at - 1] === "[" || text[at + m[0].length] === "]" || text[at + m[0].length] === "(") continue;
    if (at > last) parts.push(text.slice(last, at));
    parts.push({ n, text: m[0] });
    last = at + m[0].length;
  }
  if (last < text.length) parts.push(text.slice(last));
  return parts;
}

/** Where a link opens: a vault path, a 0-based `line` to scroll to, or a `subpath` (`#Heading`, `#page=3`). */
export interface NoteTarget {
  path: string;
  line?: number;
  subpath?: string;
}

/**
 * Where a source or search hit opens: at its first line when the daemon gave lines (converted to
 * 0-based for the editor), at `#page=N` for a PDF page, else at its deepest heading.
 */
export function targetOf(item: Pick<AnswerSource | SearchHit, "filePath" | "symbol" | "lines" | "page">): NoteTarget {
  if (typeof item.page === "number" && item.page > 0) return { path: item.filePath, subpath: `#page=${item.page}` };
  if (Array.isArray(item.lines) && typeof item.lines[0] === "number" && item.lines[0] >= 1) {
    return { path: item.filePath, line: item.lines[0] - 1 };
  }
  const heading = headingOf(item.symbol);
  return heading ? { path: item.filePath, subpath: `#${heading}` } : { path: item.filePath };
}

/** The deepest heading of a symbol (`Tomatoes › Care` → `Care`); undefined for `page N` or empty. */
export function headingOf(symbol: string | undefined): string | undefined {
  if (!symbol || /^page \d+$/.test(symbol)) return undefined;
  const parts = symbol.split(" › ").map((s) => s.trim()).filter(Boolean);
  return parts.length ? parts[parts.length - 1] : undefined;
}

/** `filePath › symbol` as the sources list shows it (the symbol left out when empty). */
export function sourceLabel(item: { filePath: string; symbol?: string }): string {
  return item.symbol ? `${item.filePath} › ${item.symbol}` : item.filePath;
}

/** Where in the note: `lines 24–32`, `p. 3`, or empty. */
export function locationLabel(item: { lines?: [number, number]; page?: number }): string {
  if (typeof item.page === "number") return `p. ${item.page}`;
  if (Array.isArray(item.lines)) return item.lines[0] === item.lines[1] ? `line ${item.lines[0]}` : `lines ${item.lines[0]}–${item.lines[1]}`;
  return "";
}

/**
 * Split a snippet into plain and matched runs for highlighting: a run matches when it is one of the
 * query's words (case-insensitive, words of two letters or more). Joining the runs gives `snippet` back.
 */
export function highlightRuns(snippet: string, query: string): { text: string; match: boolean }[] {
  const words = Array.from(new Set(query.toLowerCase().match(/[\p{L}\p{N}]{2,}/gu) ?? []));
  if (!words.length) return [{ text: snippet, match: false }];
  const escaped = words.sort((a, b) => b.length - a.length).map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  const re = new RegExp(`(?<![\\p{L}\\p{N}])(${escaped.join("|")})`, "giu");
  const runs: { text: string; match: boolean }[] = [];
  let last = 0;
  for (const m of snippet.matchAll(re)) {
    const at = m.index ?? 0;
    if (at > last) runs.push({ text: snippet.slice(last, at), match: false });
    runs.push({ text: m[0], match: true });
    last = at + m[0].length;
  }
  if (last < snippet.length) runs.push({ text: snippet.slice(last), match: false });
  return runs;
}
