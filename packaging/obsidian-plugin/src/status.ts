/**
 * The one-line index status under the sidebar, from `GET /index/stats` and the `progress` events of
 * `GET /events` (e.g. "Indexing 812 / 3,879").
 */

import type { IndexStats, ProgressEvent } from "./types";

const PHASES: Record<string, string> = { scan: "Scanning", index: "Indexing", embed: "Embedding", pdf: "Reading PDFs" };

/** `1234` → `1,234` (en-US grouping, whatever the locale, so tests and screenshots agree). */
export function count(n: number): string {
  return Math.round(n).toLocaleString("en-US");
}

/** A progress event as the status line shows it: `Indexing 812 / 3,879`. */
export function progressLine(p: ProgressEvent): string {
  const phase = PHASES[p.phase] ?? p.phase.charAt(0).toUpperCase() + p.phase.slice(1);
  return `${phase} ${count(p.done)} / ${count(p.total)}`;
}

/** `nowS - thenS` seconds as `just now`, `5 min ago`, `3 h ago`, `2 days ago`. */
export function ago(thenS: number, nowS: number): string {
  const s = Math.max(0, nowS - thenS);
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  const d = Math.floor(s / 86400);
  return `${d} day${d === 1 ? "" : "s"} ago`;
}

/**
 * The stats as one line: `12 notes · 80 chunks indexed · updated 5 min ago`, with what is pending,
 * paused or failing appended. `nowS` is the current time in seconds since the epoch.
 */
export function statsLine(s: IndexStats, nowS: number = Date.now() / 1000): string {
  const parts = [`${count(s.notes)} note${s.notes === 1 ? "" : "s"}`, `${count(s.chunks)} chunks indexed`];
  if (s.pending > 0) parts.push(`${count(s.pending)} pending`);
  if (s.paused) parts.push("paused");
  if (s.errors && s.errors.length) parts.push(`${count(s.errors.length)} skipped`);
  parts.push(s.lastIngestedAt ? `updated ${ago(s.lastIngestedAt, nowS)}` : "never indexed");
  return parts.join(" · ");
}
