/**
 * A hit's relevance in words. The daemon labels every search hit, answer source and similar note with
 * `relevance` (daemon/cairn/relevance.py: from the passage's cosine to the query and whether it holds the
 * query's words); the raw `score` only orders results and is never shown.
 */

export type Relevance = "strong" | "good" | "keyword" | "similar" | "weak";

/** What each label reads as in the sidebar (the CLI uses the same words). */
export const RELEVANCE_TEXT: Record<Relevance, string> = {
  strong: "strong match",
  good: "good match",
  keyword: "exact words",
  similar: "similar words",
  weak: "weak match",
};

/** A longer explanation of each label (the tooltip). */
export const RELEVANCE_HINT: Record<Relevance, string> = {
  strong: "About what you asked",
  good: "Close in meaning to what you asked",
  keyword: "Holds every word you typed, though not close in meaning",
  similar: "Holds your words, some only in another form (another ending, a longer word, a near spelling)",
  weak: "Only loosely related",
};

function known(r: unknown): r is Relevance {
  return typeof r === "string" && Object.prototype.hasOwnProperty.call(RELEVANCE_TEXT, r);
}

/** The words for `relevance` ("strong match"), or "" when the daemon sent none or one this plugin does not know. */
export function relevanceText(relevance: unknown): string {
  return known(relevance) ? RELEVANCE_TEXT[relevance] : "";
}

/** The tooltip for `relevance`, or "". */
export function relevanceHint(relevance: unknown): string {
  return known(relevance) ? RELEVANCE_HINT[relevance] : "";
}

/**
 * An answer's sources split for display: the ones its text cites (`cited: true`), then the others it was given
 * ("Also retrieved"), each in the daemon's order. A daemon that does not mark `cited`, or an answer that marks
 * none, puts every source in `cited` (all of them are what the answer stands on).
 */
export function groupSources<T extends { cited?: boolean }>(sources: readonly T[]): { cited: T[]; also: T[] } {
  if (!sources.some((s) => s.cited === true)) return { cited: [...sources], also: [] };
  return { cited: sources.filter((s) => s.cited === true), also: sources.filter((s) => s.cited !== true) };
}
