/**
 * The notice beside results drawn from an index that is still being embedded (the `coverage` of `GET /search`
 * and of the `done` event of `POST /ask`): "Still indexing: results may be incomplete".
 */

import { h } from "./dom";
import { count } from "./status";
import type { Coverage } from "./types";

export const INCOMPLETE_TEXT = "Still indexing: results may be incomplete";

/** The notice's detail (`12 of 3,879 notes are not yet searchable by meaning.`), or null when nothing is pending. */
export function coverageDetail(c: Coverage | undefined | null): string | null {
  if (!c || typeof c.pending !== "number" || c.pending <= 0) return null;
  const notes = typeof c.notes === "number" ? c.notes : c.pending;
  return `${count(c.pending)} of ${count(notes)} note${notes === 1 ? "" : "s"} ${c.pending === 1 ? "is" : "are"} not yet searchable by meaning, only by their words.`;
}

/** Append the notice to `parent` when `c` says notes are pending; returns it (or null when none was needed). */
export function renderCoverage(parent: HTMLElement, c: Coverage | undefined | null): HTMLElement | null {
  const detail = coverageDetail(c);
  if (detail === null) return null;
  const el = h("div", { cls: "cairn-coverage", role: "status" }, parent);
  h("strong", { cls: "cairn-coverage-title", text: `${INCOMPLETE_TEXT}.` }, el);
  h("span", { cls: "cairn-coverage-detail", text: ` ${detail}` }, el);
  return el;
}
