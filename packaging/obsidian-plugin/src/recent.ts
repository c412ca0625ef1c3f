/**
 * The Search tab's first screen: the most recently modified notes, while the box holds nothing to search for
 * (`GET /search` without `q`; docs/design.md, "Contract" → Recent notes). Each note shows its title, its folder,
 * how long ago its file changed and its opening lines; a click opens it.
 */

import type { NoteTarget } from "./citations";
import { h } from "./dom";
import type { SearchHit } from "./types";

const MINUTE = 60;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/**
 * How long ago `modifiedAt` (unix seconds) was, seen at `nowMs` (milliseconds): `just now`, `5 min ago`,
 * `3 h ago`, `yesterday`, `4 days ago`, then the date (`2024-03-01`). A time ahead of `nowMs` (a clock set
 * differently, a file dated in the future) reads `just now`.
 */
export function modifiedAgo(modifiedAt: number, nowMs: number): string {
  const seconds = nowMs / 1000 - modifiedAt;
  if (seconds < MINUTE) return "just now";
  if (seconds < HOUR) return `${Math.floor(seconds / MINUTE)} min ago`;
  if (seconds < DAY) return `${Math.floor(seconds / HOUR)} h ago`;
  if (seconds < 2 * DAY) return "yesterday";
  if (seconds < 7 * DAY) return `${Math.floor(seconds / DAY)} days ago`;
  const d = new Date(modifiedAt * 1000);
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
}

/** A note's label: its title, else its file name without `.md`. */
function noteLabel(note: SearchHit): string {
  if (note.title) return note.title;
  const name = note.filePath.slice(note.filePath.lastIndexOf("/") + 1);
  return name.replace(/\.md$/i, "");
}

/** The note's opening lines as the snippet gives them, without a first heading that only repeats its title. */
export function openingLines(note: SearchHit): string {
  const text = note.snippet ?? "";
  const heading = /^#{1,6}\s+/.exec(text);
  if (!heading) return text;
  const rest = text.slice(heading[0].length);
  const title = noteLabel(note);
  return rest.startsWith(title) ? rest.slice(title.length).trimStart() : text;
}

/** `Garden/ · 5 min ago`: the note's folder (nothing at the vault's top) and how long ago it changed. */
export function recentMeta(note: SearchHit, nowMs: number): string {
  const folder = note.filePath.includes("/") ? note.filePath.slice(0, note.filePath.lastIndexOf("/") + 1) : "";
  const ago = typeof note.modifiedAt === "number" ? modifiedAgo(note.modifiedAt, nowMs) : "";
  return [folder, ago].filter(Boolean).join(" · ");
}

/**
 * Render the recent notes into `el` (emptied by the caller): a heading, then one item per note, newest first.
 * `scoped`: a tag scope is set (an empty list then says no note carries those tags). A click calls `open`.
 */
export function renderRecent(el: HTMLElement, notes: SearchHit[], open: (target: NoteTarget) => void, scoped: boolean, nowMs = Date.now()): void {
  h("div", { cls: "cairn-section-title cairn-recent-heading", text: "Recently modified" }, el);
  if (!notes.length) {
    h("div", { cls: "cairn-empty", text: scoped ? "No note carries the tags in the scope." : "No notes are indexed yet." }, el);
    return;
  }
  const list = h("div", { cls: "cairn-recent-list" }, el);
  for (const note of notes) {
    const item = h("div", { cls: "cairn-recent" }, list);
    const title = h("a", { cls: "cairn-recent-title", href: "#", text: noteLabel(note), title: note.filePath }, item);
    title.addEventListener("click", (ev) => {
      ev.preventDefault();
      open({ path: note.filePath });
    });
    h("div", { cls: "cairn-recent-meta", text: recentMeta(note, nowMs) }, item);
    const opening = openingLines(note);
    if (opening) h("div", { cls: "cairn-recent-snippet", text: opening }, item);
  }
}
