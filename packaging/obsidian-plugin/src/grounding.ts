/**
 * Marking a model's unsupported sentences: the `done` event lists the sentences of the answer that no passage they
 * cite supports (`unsupported: [{text, cites}]`, each `text` exactly as it stands in the answer, in order). Before
 * the answer is rendered, a marker character goes after each of them in the Markdown; once rendered, each marker
 * becomes a ⚠ badge whose tooltip says why. The marker is a private-use character, which Markdown leaves as text.
 */

import { h } from "./dom";
import type { UnsupportedSentence } from "./types";

const MARK = "\uE000";

/**
 * `text` with a marker after each sentence of `unsupported`, found in order (one not found is left unmarked), and
 * the sentences marked, in order.
 */
export function withMarks(text: string, unsupported: readonly UnsupportedSentence[]): { text: string; marked: UnsupportedSentence[] } {
  let out = "";
  let at = 0;
  const marked: UnsupportedSentence[] = [];
  for (const s of unsupported) {
    const found = s.text ? text.indexOf(s.text, at) : -1;
    if (found < 0) continue;
    const end = found + s.text.length;
    out += text.slice(at, end) + MARK;
    at = end;
    marked.push(s);
  }
  return { text: out + text.slice(at), marked };
}

/** Why a sentence is marked, in words. */
export function unsupportedReason(s: UnsupportedSentence): string {
  if (!s.cites.length) return "This sentence cites no passage: it may not come from your notes.";
  const cited = s.cites.map((n) => `[${n}]`).join("");
  return `The passage it cites (${cited}) does not say this: it may not come from your notes.`;
}

/**
 * Replace each marker in the text of `root` with a ⚠ badge (`span.cairn-unsupported`, its tooltip from `marked`,
 * the sentences {@link withMarks} marked, in order). Returns the badges made.
 */
export function placeMarks(root: HTMLElement, marked: readonly UnsupportedSentence[]): HTMLElement[] {
  const texts: Text[] = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if ((n.nodeValue ?? "").includes(MARK)) texts.push(n as Text);
  }
  const badges: HTMLElement[] = [];
  for (const node of texts) {
    const parts = (node.nodeValue ?? "").split(MARK);
    const frag = document.createDocumentFragment();
    parts.forEach((part, i) => {
      if (i > 0) {
        const s = marked[badges.length];
        const why = s ? unsupportedReason(s) : "Not supported by the passages it cites.";
        const badge = h("span", { cls: "cairn-unsupported", text: "⚠", title: why, "aria-label": why });
        badges.push(badge);
        frag.appendChild(badge);
      }
      if (part) frag.appendChild(document.createTextNode(part));
    });
    node.parentNode?.replaceChild(frag, node);
  }
  return badges;
}
